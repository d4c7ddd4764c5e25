#pragma once
// RoPE's long-range decay, RoFormer (Su et al. 2021, arXiv 2104.09864) §3.4.3: with
// S_j = Σ_{k<j} e^{i·r·θ_k} for relative distance r = m − n, Abel summation bounds the score by
// max|h_{j+1} − h_j| · Σ_j |S_j|, and the paper plots the "relative upper bound"
// (1/(d/2)) · Σ_{j=1}^{d/2} |S_j| against r (its Figure 2). Here for any inverse frequencies
// (take rope_frequencies::inv_freq of a schedule), so the effect of PI, NTK, YaRN or Llama-3
// scaling on the curve can be compared. At r = 0 every |S_j| = j and the bound is (d/2 + 1)/2.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"

namespace posenc::analysis {

/// (1/(d/2)) · Σ_{j=1}^{d/2} |Σ_{k<j} e^{i·r·θ_k}|, angles r·θ_k formed in double.
[[nodiscard]] inline double relative_upper_bound(std::span<const double> inv_freq, double distance) {
    posenc::detail::require(!inv_freq.empty(), "inv_freq.size", inv_freq.size(), "must be > 0");
    posenc::detail::require(std::isfinite(distance), "distance", distance, "must be finite");
    double re = 0.0, im = 0.0, total = 0.0;
    for (const double t : inv_freq) {
        re += std::cos(distance * t);
        im += std::sin(distance * t);
        total += std::hypot(re, im);
    }
    return total / static_cast<double>(inv_freq.size());
}

/// relative_upper_bound at each distance.
[[nodiscard]] inline std::vector<double> decay_curve(std::span<const double> inv_freq,
                                                     std::span<const double> distances) {
    std::vector<double> out;
    out.reserve(distances.size());
    for (const double r : distances) out.push_back(relative_upper_bound(inv_freq, r));
    return out;
}

}  // namespace posenc::analysis
