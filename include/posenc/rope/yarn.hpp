#pragma once
// YaRN (Peng et al. 2023) as HF transformers' current `_compute_yarn_parameters` computes it:
// NTK-by-parts with a ramp linear in the pair index between the correction dimensions of
// beta_fast and beta_slow, plus a cos/sin amplitude ("attention temperature") 0.1·ln(s) + 1.
//
// `factor` is authoritative: it is never replaced by max_position_embeddings / original (the
// behaviour HF shipped before PR #40320 that turned some Qwen configs into plain RoPE).

#include <algorithm>
#include <optional>

#include "posenc/rope/frequencies.hpp"

namespace posenc {

namespace detail {
/// DeepSeek's yarn_get_mscale: 0.1·m·ln(s) + 1 for s > 1, else 1.
inline double yarn_mscale(double scale, double m = 1.0) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}
}  // namespace detail

struct yarn {
    static constexpr std::string_view rope_type = "yarn";

    double base = 10000.0;
    double factor = 1.0;
    std::int64_t original_max_position = 0;  ///< L₀, required (HF original_max_position_embeddings)
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    bool truncate = true;  ///< floor/ceil the correction range (gpt-oss sets false)
    std::optional<double> attention_factor = std::nullopt;  ///< overrides the computed amplitude when set
    std::optional<double> mscale = std::nullopt;            ///< DeepSeek: amplitude numerator 0.1·mscale·ln s + 1
    std::optional<double> mscale_all_dim = std::nullopt;    ///< DeepSeek: amplitude denominator, and softmax scale²

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
        detail::require_length(original_max_position, "original_max_position");
        detail::require(std::isfinite(beta_slow) && beta_slow > 0.0, "beta_slow", beta_slow, "must be finite and > 0");
        // beta_fast == beta_slow is accepted as HF does (the ramp then has width 0 or 1, and HF's
        // +0.001 keeps it finite); HF only warns for beta_fast < beta_slow, posenc rejects it.
        detail::require(std::isfinite(beta_fast) && beta_fast >= beta_slow, "beta_fast", beta_fast,
                        "must be >= beta_slow = " + detail::to_text(beta_slow));
        if (attention_factor)
            detail::require_amplitude(*attention_factor, "attention_factor");
        if (mscale) detail::require(std::isfinite(*mscale), "mscale", *mscale, "must be finite");
        if (mscale_all_dim)
            detail::require(std::isfinite(*mscale_all_dim), "mscale_all_dim", *mscale_all_dim, "must be finite");
        // The amplitude divides mscale's term by mscale_all_dim's and DeepSeek squares the latter:
        // both must stay finite and positive.
        if (!attention_factor) {
            const bool pair = mscale.value_or(0.0) != 0.0 && mscale_all_dim.value_or(0.0) != 0.0;
            const double a = pair ? detail::yarn_mscale(factor, *mscale) / detail::yarn_mscale(factor, *mscale_all_dim)
                                  : detail::yarn_mscale(factor);
            detail::require_amplitude(a, pair ? "mscale" : "factor");
        }
        if (mscale_all_dim.value_or(0.0) != 0.0) {
            const double m = detail::yarn_mscale(factor, *mscale_all_dim);
            detail::require(std::isnormal(m * m) && m > 0.0, "mscale_all_dim", *mscale_all_dim,
                            "makes the softmax scale multiplier mscale² non-finite or <= 0");
        }
    }

    /// The cos/sin amplitude. HF treats mscale / mscale_all_dim of 0 as absent (Python truthiness).
    [[nodiscard]] double amplitude() const {
        validate();
        if (attention_factor) return *attention_factor;
        if (mscale.value_or(0.0) != 0.0 && mscale_all_dim.value_or(0.0) != 0.0)
            return detail::yarn_mscale(factor, *mscale) / detail::yarn_mscale(factor, *mscale_all_dim);
        return detail::yarn_mscale(factor);
    }

    /// DeepSeek-V2/V3 multiply the softmax scale 1/√d by mscale(s, mscale_all_dim)² outside the rope
    /// code; 1 when mscale_all_dim is absent or 0.
    [[nodiscard]] double softmax_scale_multiplier() const {
        validate();
        if (mscale_all_dim.value_or(0.0) == 0.0) return 1.0;
        const double m = detail::yarn_mscale(factor, *mscale_all_dim);
        return m * m;
    }

    /// Per pair, the weight w of the interpolated frequency (HF's ramp): θ' = w·θ/s + (1 − w)·θ.
    [[nodiscard]] std::vector<double> interpolation(std::size_t rotary_dim) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        const double d = static_cast<double>(rotary_dim);
        // Pair index (in units of lanes, d·... / 2 ln base) that makes `turns` rotations over L₀.
        auto correction_dim = [&](double turns) {
            return d * std::log(static_cast<double>(original_max_position) / (turns * 2.0 * std::numbers::pi)) /
                   (2.0 * std::log(base));
        };
        double low = correction_dim(beta_fast);
        double high = correction_dim(beta_slow);
        if (truncate) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, d - 1.0);
        if (low == high) high += 0.001;  // HF: avoid a zero-width ramp
        std::vector<double> w(rotary_dim / 2);
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        return w;
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t /*seq_len*/ = 0) const {
        const auto w = interpolation(rotary_dim);
        std::vector<double> inv(w.size());
        for (std::size_t i = 0; i < inv.size(); ++i) {
            const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
            const double extrapolated = 1.0 / pos_freq;
            const double interpolated = 1.0 / (factor * pos_freq);
            inv[i] = interpolated * w[i] + extrapolated * (1.0 - w[i]);
        }
        return detail::checked_frequencies({std::move(inv), amplitude()}, "factor", factor);
    }
};

}  // namespace posenc
