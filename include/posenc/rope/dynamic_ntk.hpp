#pragma once
// Dynamic NTK (emozilla, 2023; HF rope_type "dynamic"): NTK-aware scaling whose base follows the
// current sequence length L: base' = base · (factor·L/L₀ − (factor − 1))^(d/(d−2)) for L > L₀, and
// exactly the default table for L ≤ L₀.
//
// A pure function of (parameters, L). HF's module instead caches the largest L it has seen and keeps
// using that base until a call with L < L₀ resets it, so its answer for a given L depends on earlier
// calls. We deliberately do not copy that state: the same inputs always give the same table. An
// engine that wants HF's exact behaviour passes the cached length as `seq_len`.

#include "posenc/rope/ntk_aware.hpp"

namespace posenc {

struct dynamic_ntk {
    static constexpr std::string_view rope_type = "dynamic";
    static constexpr bool depends_on_seq_len = true;

    double base = 10000.0;
    double factor = 1.0;
    std::int64_t original_max_position = 0;  ///< L₀, required (HF max_position_embeddings)

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
        detail::require_length(original_max_position, "original_max_position");
    }

    /// The base used at sequence length `seq_len` (0 = unknown, treated as L₀).
    [[nodiscard]] double effective_base(std::size_t rotary_dim, std::int64_t seq_len) const {
        validate();
        // The exponent d/(d−2) needs d > 2 at every length, not only above L₀: HF evaluates it at
        // init (seq_len = max_position_embeddings) and fails for d = 2 whatever the length.
        detail::require(rotary_dim > 2, "rotary_dim", rotary_dim, "NTK scaling needs rotary_dim > 2 (exponent d/(d-2))");
        if (seq_len <= original_max_position) return base;
        const double ratio = factor * static_cast<double>(seq_len) / static_cast<double>(original_max_position);
        return detail::ntk_base(base, ratio - (factor - 1.0), rotary_dim, "seq_len",
                                detail::to_text(seq_len) + " (with factor " + detail::to_text(factor) + ")");
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t seq_len = 0) const {
        detail::require_rotary_dim(rotary_dim);
        detail::require(seq_len >= 0, "seq_len", seq_len, "must be >= 0");
        return detail::checked_frequencies({detail::default_inv_freq(effective_base(rotary_dim, seq_len), rotary_dim), 1.0},
                                          "factor", factor);
    }
};

}  // namespace posenc
