#pragma once
// Angles are formed in double (position × inv_freq) and reduced to [−π, π] in double before any
// trigonometry; only the final cos/sin are rounded to float. In float, p·θ at p = 10^6 is already off
// by ~0.06 rad.

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace posenc::detail {

// 2π split in two doubles (Cody–Waite): two_pi_hi is 2π rounded to double, two_pi_lo the rest.
inline constexpr double two_pi_hi = 6.283185307179586;
inline constexpr double two_pi_lo = 2.4492935982947064e-16;
inline constexpr double inv_two_pi = 0.15915494309189535;

/// `angle` minus the nearest multiple of 2π, accurate to ~1e-16·|angle|/2π + 1 ulp.
/// A template so that each SIMD kernel translation unit gets its own instantiation (Tag = its arch)
/// and never shares a machine-code copy with baseline code (docs/simd-and-precision.md, the COMDAT rule).
template <class Tag = void>
inline double reduce_angle(double angle) noexcept {
    const double n = std::nearbyint(angle * inv_two_pi);
    return std::fma(-n, two_pi_lo, std::fma(-n, two_pi_hi, angle));
}

/// One row of a cos/sin table: cos[i] = a·cos(p·θᵢ), sin[i] = a·sin(p·θᵢ) for i < pairs, in double,
/// rounded once to float.
inline void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position, double amplitude,
                        float* cos_out, float* sin_out) noexcept {
    const double p = static_cast<double>(position);
    for (std::size_t i = 0; i < pairs; ++i) {
        const double r = reduce_angle<>(p * inv_freq[i]);
        cos_out[i] = static_cast<float>(amplitude * std::cos(r));
        sin_out[i] = static_cast<float>(amplitude * std::sin(r));
    }
}

}  // namespace posenc::detail
