#pragma once
// Position Interpolation (Chen et al. 2023): positions divided by `factor`, i.e. every inverse
// frequency divided by it. HF rope_type "linear".

#include "posenc/rope/frequencies.hpp"

namespace posenc {

struct linear {
    static constexpr std::string_view rope_type = "linear";

    double base = 10000.0;
    double factor = 1.0;

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t /*seq_len*/ = 0) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        auto inv = detail::default_inv_freq(base, rotary_dim);
        for (double& f : inv) f /= factor;
        return detail::checked_frequencies({std::move(inv), 1.0}, "factor", factor);
    }

    [[nodiscard]] std::vector<double> interpolation(std::size_t rotary_dim) const {
        return std::vector<double>(rotary_dim / 2, 1.0);
    }
};

}  // namespace posenc
