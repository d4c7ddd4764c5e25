#pragma once
// The RoPE paper's schedule: inv_freq[i] = base^(-2i/rotary_dim). ABF ("adjusted base frequency",
// Llama-3's 500000, Qwen's 1e6) is this schedule with a larger base.

#include "posenc/rope/frequencies.hpp"

namespace posenc {

struct default_rope {
    static constexpr std::string_view rope_type = "default";

    double base = 10000.0;  ///< HF rope_theta

    void validate() const { detail::require_base(base); }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t /*seq_len*/ = 0) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        return detail::checked_frequencies({detail::default_inv_freq(base, rotary_dim), 1.0}, "base", base);
    }

    [[nodiscard]] std::vector<double> interpolation(std::size_t rotary_dim) const {
        return std::vector<double>(rotary_dim / 2, 0.0);
    }
};

}  // namespace posenc
