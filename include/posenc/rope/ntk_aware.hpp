#pragma once
// Static NTK-aware scaling (bloc97, 2023): a larger base, base' = base · factor^(d/(d−2)) with
// d = rotary_dim, chosen so that the lowest frequency is interpolated by exactly `factor` while the
// highest is left alone. No amplitude change.

#include "posenc/rope/frequencies.hpp"

namespace posenc {

namespace detail {
/// base·scale^(d/(d−2)); `key` = `value` is the parameter named when the result is unusable.
inline double ntk_base(double base, double scale, std::size_t rotary_dim, std::string_view key, const std::string& value) {
    require(rotary_dim > 2, "rotary_dim", rotary_dim, "NTK scaling needs rotary_dim > 2 (exponent d/(d-2))");
    const double d = static_cast<double>(rotary_dim);
    const double b = base * std::pow(scale, d / (d - 2.0));
    // A non-finite base would make every inverse frequency but the first 0.
    if (!(std::isfinite(b) && b > 1.0))
        throw config_error(key, value, "makes the NTK base " + to_text(b) + " (must be finite and > 1)");
    return b;
}
}  // namespace detail

struct ntk_aware {
    static constexpr std::string_view rope_type = "ntk_aware";

    double base = 10000.0;
    double factor = 1.0;

    void validate() const {
        detail::require_base(base);
        detail::require_factor(factor);
    }

    /// The enlarged base this schedule uses for a given rotary width.
    [[nodiscard]] double effective_base(std::size_t rotary_dim) const {
        validate();
        return detail::ntk_base(base, factor, rotary_dim, "factor", detail::to_text(factor));
    }

    [[nodiscard]] rope_frequencies frequencies(std::size_t rotary_dim, std::int64_t /*seq_len*/ = 0) const {
        detail::require_rotary_dim(rotary_dim);
        return detail::checked_frequencies({detail::default_inv_freq(effective_base(rotary_dim), rotary_dim), 1.0},
                                          "factor", factor);
    }
};

}  // namespace posenc
