#pragma once
// The helpers every frequency schedule shares (validation, HF's inverse-frequency formula); what a
// schedule produces, rope_frequencies and rope_dims, lives in core/rope_frequencies.hpp.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/rope_frequencies.hpp"

namespace posenc {

namespace detail {

inline void require_rotary_dim(std::size_t rotary_dim) {
    require(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim", rotary_dim, "must be even and > 0");
}

inline void require_base(double base) {
    require(std::isfinite(base) && base > 1.0, "base", base, "must be finite and > 1 (HF rope_theta)");
}

/// A scale that divides or multiplies frequencies: finite, > 0 and not denormal (a denormal factor
/// overflows the division it feeds).
inline void require_factor(double factor, std::string_view key = "factor") {
    require(std::isnormal(factor) && factor > 0.0, key, factor, "must be finite, > 0 and not denormal");
}

/// The largest inverse frequency whose angle p·θ is finite for every int64 position p.
inline constexpr double max_inv_freq = std::numeric_limits<double>::max() / 0x1p64;

/// Index of the first inverse frequency outside [DBL_MIN, max_inv_freq] (NaN, inf, 0, denormal or so
/// large that an angle overflows); inv.size() when all are usable.
inline std::size_t first_bad_inv_freq(const std::vector<double>& inv) noexcept {
    for (std::size_t i = 0; i < inv.size(); ++i)
        if (!(inv[i] >= std::numeric_limits<double>::min() && inv[i] <= max_inv_freq)) return i;
    return inv.size();
}

/// The cos/sin amplitude lies in [2^-64, 2^64]: rotated values of any float input that is not itself
/// near overflow stay finite, and so does the inverse's 1/a² (every real schedule gives about 1–2).
inline void require_amplitude(double amplitude, std::string_view key) {
    require(amplitude >= 0x1p-64 && amplitude <= 0x1p64, key, amplitude,
            "gives a cos/sin amplitude outside [2^-64, 2^64]");
}

/// Every schedule's result passes here: usable inverse frequencies and amplitude, or a config_error
/// naming `key` (the parameter that drives them; `value` its value) — never inf/NaN in a table.
inline rope_frequencies checked_frequencies(rope_frequencies f, std::string_view key, double value) {
    if (const std::size_t i = first_bad_inv_freq(f.inv_freq); i < f.inv_freq.size())
        throw config_error(key, to_text(value),
                           "gives inverse frequency " + to_text(f.inv_freq[i]) + " at pair " + to_text(i) +
                               " (each must be a normal double <= " + to_text(max_inv_freq) +
                               ", so that every angle is finite)");
    require_amplitude(f.attention_factor, "attention_factor");
    return f;
}

/// Frequencies handed in by the caller (rotary, cos_sin_table): the same conditions, named as such.
inline void require_usable(const rope_frequencies& f) {
    if (const std::size_t i = first_bad_inv_freq(f.inv_freq); i < f.inv_freq.size())
        throw config_error("inv_freq[" + to_text(i) + "]", to_text(f.inv_freq[i]),
                           "must be a normal double <= " + to_text(max_inv_freq) + " (so that every angle is finite)");
    require_amplitude(f.attention_factor, "attention_factor");
}

inline void require_length(std::int64_t length, std::string_view key) {
    require(length > 0, key, length, "must be > 0 (the context length the model was trained with; no default)");
}

/// base^(-2i/d) for i < d/2, as 1 / base^(2i/d) (HF's expression, evaluated in double).
inline std::vector<double> default_inv_freq(double base, std::size_t rotary_dim) {
    std::vector<double> inv(rotary_dim / 2);
    for (std::size_t i = 0; i < inv.size(); ++i)
        inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
    return inv;
}

/// θᵢ' = wᵢ·θᵢ/s + (1 − wᵢ)·θᵢ: each pair blended between interpolated (w = 1) and original (w = 0).
inline std::vector<double> blend(std::vector<double> inv, const std::vector<double>& w, double factor) {
    for (std::size_t i = 0; i < inv.size(); ++i) inv[i] = w[i] * inv[i] / factor + (1.0 - w[i]) * inv[i];
    return inv;
}

/// Wavelength in tokens of a rotary pair: one full turn.
inline double wavelength(double inv_freq) { return 2.0 * std::numbers::pi / inv_freq; }

}  // namespace detail
}  // namespace posenc
