#pragma once
// ALiBi emulated by one extra rotary pair (A. Litzenberger, "Emulating ALiBi with RoPE",
// alexlitzenberger.com/blog/emulating_alibi_with_rope). Add a pair to Q and K with fixed values
// q = (−N, 0), k = (0, 1), rotated at frequency θ (all other pairs unrotated for the construction).
// For query position i, key position j and distance d = i − j, the pair contributes
// (R_i q)·(R_j k) = −N·sin(θ·d) to qᵀk, i.e. −(N/√head_dim)·sin(θ·d) to the scaled score. With
// N = m·√head_dim/θ that is −(m/θ)·sin(θ·d) ≈ −m·d (ALiBi with slope m) while θ·d is small.
//
// The deviation from ALiBi, (m/θ)·(θd − sin θd), is ≥ 0 and grows with d, so over a window of W
// tokens the worst case is at d = W: (m/θ)·(φ − sin φ) ≈ m·W·φ²/6 for the maximal phase φ = θ·W.
// A smaller φ is more exact but needs a larger N, which float32 scores cannot carry (see
// docs/alibi.md and examples/alibi_via_rope.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "posenc/core/errors.hpp"

namespace posenc::analysis {

struct alibi_rope_pair {
    double theta = 0.0;  ///< rotation frequency of the extra pair (radians per token)
    double n = 0.0;      ///< the query value N in q = (−N, 0)
};

namespace detail {
inline void require_alibi_rope(double slope, std::size_t head_dim) {
    posenc::detail::require(std::isfinite(slope) && slope > 0.0, "slope", slope, "must be finite and > 0");
    posenc::detail::require(head_dim > 0, "head_dim", head_dim, "must be > 0");
}
}  // namespace detail

/// The pair for ALiBi slope `slope` whose phase reaches `max_phase` radians at distance `window`:
/// θ = max_phase / window, N = slope·√head_dim / θ.
[[nodiscard]] inline alibi_rope_pair alibi_rope_for_window(double slope, std::size_t head_dim, std::int64_t window,
                                                           double max_phase) {
    detail::require_alibi_rope(slope, head_dim);
    posenc::detail::require(window > 0, "window", window, "must be > 0");
    posenc::detail::require(std::isfinite(max_phase) && max_phase > 0.0 && max_phase <= std::acos(-1.0) / 2,
                            "max_phase", max_phase, "must be in (0, pi/2] (sin must be monotone over the window)");
    const double theta = max_phase / static_cast<double>(window);
    return {theta, slope * std::sqrt(static_cast<double>(head_dim)) / theta};
}

/// The pair's contribution to the scaled score at distance d: −(N/√head_dim)·sin(θ·d).
[[nodiscard]] inline double emulated_alibi_bias(const alibi_rope_pair& p, std::size_t head_dim, double distance) {
    return -(p.n / std::sqrt(static_cast<double>(head_dim))) * std::sin(p.theta * distance);
}

/// max over d in [0, window] of |emulated − (−slope·d)|. With N = slope·√head_dim/θ the error
/// (m/θ)(θd − sin θd) increases with d while θd ≤ π/2 (required), so it is the value at d = window;
/// for another N (a pair fitted to a model's existing frequency) the error is |m·d − (N/√hd)·sin θd|,
/// whose extremes lie at d = 0, d = window or where cos θd = m·√hd/N, all checked here.
[[nodiscard]] inline double alibi_rope_max_deviation(const alibi_rope_pair& p, double slope, std::size_t head_dim,
                                                     std::int64_t window) {
    detail::require_alibi_rope(slope, head_dim);
    posenc::detail::require(window > 0, "window", window, "must be > 0");
    posenc::detail::require(p.theta * static_cast<double>(window) <= std::acos(-1.0) / 2, "theta", p.theta,
                            "theta * window must be <= pi/2");
    const double w = static_cast<double>(window);
    auto err = [&](double d) { return std::abs(emulated_alibi_bias(p, head_dim, d) + slope * d); };
    double worst = err(w);
    const double c = slope * std::sqrt(static_cast<double>(head_dim)) / (p.n * p.theta);  // cos θd where d/dd = 0
    if (c < 1.0) {
        const double d = std::acos(c) / p.theta;
        if (d < w) worst = std::max(worst, err(d));
    }
    return worst;
}

/// The largest max_phase whose worst-case deviation over `window` stays ≤ tolerance (in score
/// units), by bisection on (m·W/φ)·(φ − sin φ), which increases with φ.
[[nodiscard]] inline double alibi_rope_phase_for_tolerance(double slope, std::int64_t window, double tolerance) {
    posenc::detail::require(std::isfinite(slope) && slope > 0.0, "slope", slope, "must be finite and > 0");
    posenc::detail::require(window > 0, "window", window, "must be > 0");
    posenc::detail::require(std::isfinite(tolerance) && tolerance > 0.0, "tolerance", tolerance,
                            "must be finite and > 0");
    const double w = static_cast<double>(window);
    // φ − sin φ loses everything to cancellation for tiny φ: use its series there.
    auto deviation = [&](double phi) {
        const double x = phi < 1e-3 ? phi * phi * phi / 6.0 * (1.0 - phi * phi / 20.0) : phi - std::sin(phi);
        return slope * w / phi * x;
    };
    double lo = 0.0, hi = std::acos(-1.0) / 2;
    if (deviation(hi) <= tolerance) return hi;
    for (int it = 0; it < 200; ++it) {
        const double mid = 0.5 * (lo + hi);
        (deviation(mid) <= tolerance ? lo : hi) = mid;
    }
    return lo;
}

}  // namespace posenc::analysis
