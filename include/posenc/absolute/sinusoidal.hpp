#pragma once
// Sinusoidal absolute position embeddings, added to the token embeddings before the first layer.
//
//   posenc::sinusoidal pe{.d_model = 512};                      // the paper's interleaved form
//   pe.add_to(embeddings, posenc::position_ids::consecutive(0, tokens));  // [tokens, 512], in place
//   std::vector<float> row = pe.row(1000);                      // any position, on the fly
//
// Two forms:
//   interleaved (Vaswani et al. 2017; HF DistilBERT's _create_sinusoidal_embeddings):
//     PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i), ω_i = base^(−2i/d). Odd d: the last column is
//     the sine of pair (d−1)/2, as DistilBERT's construction gives.
//   concatenated (tensor2tensor get_timing_signal_1d, fairseq SinusoidalPositionalEmbedding):
//     half = ⌊d/2⌋, ω_i = exp(−i·ln(base)/(half − 1)), PE[p, i] = sin(p·ω_i), PE[p, half + i] = cos(p·ω_i);
//     odd d gets a trailing zero column. Note half − 1, not half, in the denominator, so the last
//     frequency is exactly 1/base. With d = 2 or 3 (half = 1) the single frequency is 1, as in
//     tensor2tensor (fairseq divides by zero there).
//     fairseq's module looks up row padding_idx + 1 + t for token t: pass those positions if you need
//     its numbering.
// Angles p·ω_i are formed in double and reduced to [−π, π] in double (as rotary angles are), then
// cos/sin in double, rounded once to float. fairseq itself forms p·ω_i in float32, which is off by
// 1e-5 to 1e-3 at positions 1000–20000.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/detail/angles.hpp"

namespace posenc {

enum class sinusoidal_form { interleaved, concatenated };

[[nodiscard]] constexpr std::string_view to_string(sinusoidal_form f) noexcept {
    return f == sinusoidal_form::interleaved ? "interleaved" : "concatenated";
}

struct sinusoidal {
    static constexpr std::string_view name = "sinusoidal";

    std::size_t d_model = 0;                             ///< embedding width (HF d_model / dim / hidden_size)
    sinusoidal_form form = sinusoidal_form::interleaved;
    double base = 10000.0;                               ///< the paper's 10000 (tensor2tensor max_timescale)

    void validate() const {
        detail::require(d_model > 0, "d_model", d_model, "must be > 0");
        detail::require(form == sinusoidal_form::interleaved || d_model >= 2, "d_model", d_model,
                        "must be >= 2 for the concatenated form (one sin and one cos column)");
        detail::require(std::isfinite(base) && base > 1.0, "base", base, "must be finite and > 1");
    }

    /// Number of distinct frequencies: ⌈d/2⌉ interleaved, ⌊d/2⌋ concatenated.
    [[nodiscard]] std::size_t frequency_count() const noexcept {
        return form == sinusoidal_form::interleaved ? (d_model + 1) / 2 : d_model / 2;
    }

    /// ω_i for i < frequency_count(), in double.
    [[nodiscard]] std::vector<double> frequencies() const {
        validate();
        const std::size_t n = frequency_count();
        std::vector<double> w(n);
        if (form == sinusoidal_form::interleaved) {
            for (std::size_t i = 0; i < n; ++i)
                w[i] = std::pow(base, -static_cast<double>(2 * i) / static_cast<double>(d_model));
        } else {
            const double step = std::log(base) / static_cast<double>(n > 1 ? n - 1 : 1);
            for (std::size_t i = 0; i < n; ++i) w[i] = std::exp(-static_cast<double>(i) * step);
        }
        return w;
    }

    /// The embedding of `position` (any integer, negative included) into out[0..d_model).
    void row(std::int64_t position, std::span<float> out) const {
        check_width(out.size(), "row");
        const auto w = frequencies();
        std::vector<double> pe(d_model);
        row_double(w, position, pe.data());
        for (std::size_t j = 0; j < d_model; ++j) out[j] = static_cast<float>(pe[j]);
    }

    [[nodiscard]] std::vector<float> row(std::int64_t position) const {
        validate();
        std::vector<float> out(d_model);
        row(position, out);
        return out;
    }

    /// Rows for `positions`, [positions.size(), d_model] row-major.
    [[nodiscard]] std::vector<float> table(const position_ids& positions) const {
        const auto w = frequencies();
        std::vector<float> out(detail::checked_mul(positions.size(), d_model, "sinusoidal table size"));
        std::vector<double> pe(d_model);
        for (std::size_t t = 0; t < positions.size(); ++t) {
            row_double(w, positions[t], pe.data());
            float* dst = out.data() + t * d_model;
            for (std::size_t j = 0; j < d_model; ++j) dst[j] = static_cast<float>(pe[j]);
        }
        return out;
    }

    /// Rows for positions 0..count-1.
    [[nodiscard]] std::vector<float> table(std::size_t count) const {
        return table(position_ids::consecutive(0, count));
    }

    /// embeddings[t, :] += PE[positions[t], :] in place, for the rows of d_model floats starting at
    /// t·row_stride (row_stride 0 means d_model). Each sum is formed in double and rounded once; the add
    /// is a straight loop over the row. Checked before anything is written: the rows must fit in
    /// `embeddings` and row_stride must be ≥ d_model.
    void add_to(std::span<float> embeddings, const position_ids& positions, std::size_t row_stride = 0) const {
        const auto w = frequencies();
        const std::size_t stride = row_stride ? row_stride : d_model;
        if (stride < d_model)
            throw config_error("row_stride", detail::to_text(stride),
                               "must be >= d_model = " + detail::to_text(d_model) + " (rows would overlap)");
        const std::size_t tokens = positions.size();
        if (tokens == 0) return;
        const std::size_t extent = detail::checked_extent(tokens, stride, d_model, "embeddings extent");
        if (extent > embeddings.size())
            throw range_error("posenc: " + detail::to_text(tokens) + " rows of d_model = " + detail::to_text(d_model) +
                              " at stride " + detail::to_text(stride) + " need " + detail::to_text(extent) +
                              " elements but the buffer holds " + detail::to_text(embeddings.size()));
        std::vector<double> pe(d_model);
        for (std::size_t t = 0; t < tokens; ++t) {
            row_double(w, positions[t], pe.data());
            float* e = embeddings.data() + t * stride;
            const double* add = pe.data();
            for (std::size_t j = 0; j < d_model; ++j) e[j] = static_cast<float>(e[j] + add[j]);
        }
    }

private:
    void check_width(std::size_t size, std::string_view what) const {
        validate();
        if (size != d_model)
            throw config_error(std::string(what) + ".size", detail::to_text(size),
                               "must equal d_model = " + detail::to_text(d_model));
    }

    /// One row in double, from the frequencies w.
    void row_double(const std::vector<double>& w, std::int64_t position, double* out) const noexcept {
        const double p = static_cast<double>(position);
        const std::size_t n = w.size();
        if (form == sinusoidal_form::interleaved) {
            for (std::size_t i = 0; i < n; ++i) {
                const double a = detail::reduce_angle(p * w[i]);
                out[2 * i] = std::sin(a);
                if (2 * i + 1 < d_model) out[2 * i + 1] = std::cos(a);
            }
        } else {
            for (std::size_t i = 0; i < n; ++i) {
                const double a = detail::reduce_angle(p * w[i]);
                out[i] = std::sin(a);
                out[n + i] = std::cos(a);
            }
            if (d_model % 2 == 1) out[d_model - 1] = 0.0;
        }
    }
};

}  // namespace posenc
