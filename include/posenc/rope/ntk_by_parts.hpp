#pragma once
// NTK-by-parts (Peng et al., YaRN paper §3.2). Pair i has wavelength λᵢ = 2π/θᵢ and makes
// r = L₀/λᵢ turns over the original context. With the ramp γ(r) = clamp((r − α)/(β − α), 0, 1):
//     θᵢ' = (1 − γ)·θᵢ/s + γ·θᵢ
// so pairs that turn fewer than α times are interpolated like PI, pairs that turn more than β times
// are left alone (extrapolated), and the ones between are blended. No amplitude change.
//
// This is the paper's formula, a ramp linear in r. HF's "yarn" instead ramps linearly in the pair
// index between the (floored/ceiled) correction dimensions of β_fast and β_slow; the two agree at the
// ends of the ramp but not inside it. Use `yarn` with attention_factor = 1 for HF's blend.

#include <algorithm>

#include "posenc/rope/frequencies.hpp"

namespace posenc {

struct ntk_by_parts {
    static constexpr std::string_view rope_type = "ntk_by_parts";

    double base = 10000.0;
    double factor = 1.0;
    std::int64_t original_max_position = 0;     ///< L₀, required
    double alpha = 1.0;                          ///< below α turns: interpolate
    double beta = 32.0;                          ///< above β turns: extrapolate

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
        detail::require_length(original_max_position, "original_max_position");
        detail::require(std::isfinite(alpha) && alpha >= 0.0, "alpha", alpha, "must be finite and >= 0");
        detail::require(std::isfinite(beta) && beta > alpha, "beta", beta,
                        "must be finite and > alpha = " + detail::to_text(alpha));
    }

    /// Per pair, the weight w of the interpolated frequency: θ' = w·θ/s + (1 − w)·θ, w = 1 − γ(r).
    [[nodiscard]] std::vector<double> interpolation(std::size_t rotary_dim) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        const auto inv = detail::default_inv_freq(base, rotary_dim);
        std::vector<double> w(inv.size());
        for (std::size_t i = 0; i < inv.size(); ++i) {
            const double turns = static_cast<double>(original_max_position) / detail::wavelength(inv[i]);
            w[i] = 1.0 - std::clamp((turns - alpha) / (beta - alpha), 0.0, 1.0);
        }
        return w;
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t /*seq_len*/ = 0) const {
        return detail::checked_frequencies(
            {detail::blend(detail::default_inv_freq(base, rotary_dim), interpolation(rotary_dim), factor), 1.0}, "factor",
            factor);
    }
};

}  // namespace posenc
