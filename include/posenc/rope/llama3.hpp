#pragma once
// Llama-3.1 scaling (HF rope_type "llama3"): by wavelength λ against the original context L₀,
// pairs with λ < L₀/high_freq_factor keep their frequency, pairs with λ > L₀/low_freq_factor are
// divided by `factor`, and the band between is blended with s = (L₀/λ − low)/(high − low):
//     θ' = (1 − s)·θ/factor + s·θ.
// low == high (Llama-4 Scout: 1, 1) leaves no band: every pair is kept or divided.

#include "posenc/rope/frequencies.hpp"

namespace posenc {

struct llama3 {
    static constexpr std::string_view rope_type = "llama3";

    double base = 10000.0;
    double factor = 1.0;  ///< Llama-3.1: base 500000, factor 8, low 1, high 4, original 8192
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    std::int64_t original_max_position = 0;  ///< L₀, required (HF original_max_position_embeddings)

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
        detail::require_factor(low_freq_factor, "low_freq_factor");
        // Equal factors are Llama-4 Scout's (1, 1): the blended band is empty. HF only warns even for
        // high < low; posenc rejects that, where the band would be inverted.
        detail::require(std::isfinite(high_freq_factor) && high_freq_factor >= low_freq_factor, "high_freq_factor",
                        high_freq_factor, "must be >= low_freq_factor = " + detail::to_text(low_freq_factor));
        detail::require_length(original_max_position, "original_max_position");
    }

    /// Per pair, the weight w of the interpolated frequency: θ' = w·θ/factor + (1 − w)·θ.
    [[nodiscard]] std::vector<double> interpolation(std::size_t rotary_dim) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        const double L0 = static_cast<double>(original_max_position);
        const double low_freq_wavelen = L0 / low_freq_factor;
        const double high_freq_wavelen = L0 / high_freq_factor;
        const auto inv = detail::default_inv_freq(base, rotary_dim);
        std::vector<double> w(inv.size());
        for (std::size_t i = 0; i < inv.size(); ++i) {
            const double wavelen = detail::wavelength(inv[i]);
            if (wavelen < high_freq_wavelen)
                w[i] = 0.0;
            else if (wavelen > low_freq_wavelen)
                w[i] = 1.0;
            else if (high_freq_factor == low_freq_factor)
                // low == high and λ exactly L0/low: HF's is_medium_freq is true there and its
                // smooth factor is 0/0 = NaN (a NaN inv_freq); posenc keeps θ instead.
                w[i] = 0.0;
            else
                w[i] = 1.0 - (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
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
