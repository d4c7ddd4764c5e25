#pragma once
// LongRoPE (Ding et al. 2024; Phi-3, HF rope_type "longrope"): searched per-pair rescale factors,
// inv_freq[i] = 1 / (ext[i] · base^(2i/d)), with ext = long_factor when the current length is
// strictly greater than L₀ and short_factor otherwise (also when the length is unknown).
// Amplitude sqrt(1 + ln s / ln L₀) for s = factor > 1 unless attention_factor is given.

#include <optional>

#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/frequencies.hpp"

namespace posenc {

struct longrope {
    static constexpr std::string_view rope_type = "longrope";
    static constexpr bool depends_on_seq_len = true;

    double base = 10000.0;
    std::vector<double> short_factor{};  ///< rotary_dim/2 rescale factors, used for L ≤ L₀
    std::vector<double> long_factor{};  ///< rotary_dim/2 rescale factors, used for L > L₀
    std::int64_t original_max_position = 0;  ///< L₀, required
    double factor = 1.0;  ///< context extension s (Phi-3: max_position_embeddings / L₀); only sets the amplitude
    std::optional<double> attention_factor = std::nullopt;

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
        detail::require_length(original_max_position, "original_max_position");
        if (attention_factor)
            detail::require_amplitude(*attention_factor, "attention_factor");
        for (const auto* list : {&short_factor, &long_factor})
            for (double f : *list)
                detail::require_factor(f, list == &short_factor ? "short_factor" : "long_factor");
    }

    [[nodiscard]] double amplitude() const {
        validate();
        if (attention_factor) return *attention_factor;
        if (factor <= 1.0) return 1.0;
        return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max_position)));
    }

    [[nodiscard]] bool uses_long_factor(std::int64_t seq_len) const { return seq_len > original_max_position; }

    /// The rescale factors used at `seq_len`, checked against rotary_dim.
    [[nodiscard]] const std::vector<double>& rescale(std::size_t rotary_dim, std::int64_t seq_len) const POSENC_DETAIL_LIFETIMEBOUND {
        validate();
        detail::require_rotary_dim(rotary_dim);
        for (const auto* list : {&short_factor, &long_factor})
            detail::require(list->size() == rotary_dim / 2, list == &short_factor ? "short_factor" : "long_factor",
                            "list of length " + detail::to_text(list->size()),
                            "needs rotary_dim/2 = " + detail::to_text(rotary_dim / 2) + " entries");
        return uses_long_factor(seq_len) ? long_factor : short_factor;
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t seq_len = 0) const {
        const auto& ext = rescale(rotary_dim, seq_len);
        std::vector<double> inv(ext.size());
        for (std::size_t i = 0; i < inv.size(); ++i)
            inv[i] = 1.0 / (ext[i] * std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim)));
        if (const std::size_t i = detail::first_bad_inv_freq(inv); i < inv.size())
            throw config_error(uses_long_factor(seq_len) ? "long_factor" : "short_factor", detail::to_text(ext[i]),
                               "gives inverse frequency " + detail::to_text(inv[i]) + " at pair " + detail::to_text(i) +
                                   " (must be a normal double <= " + detail::to_text(detail::max_inv_freq) + ")");
        const double a = amplitude();
        detail::require_amplitude(a, attention_factor ? "attention_factor" : "factor");
        return {std::move(inv), a};
    }
};

}  // namespace posenc
