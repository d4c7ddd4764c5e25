#pragma once
// The RoPE base lower bound of Men et al. 2024, "Base of RoPE Bounds Context Length" (arXiv
// 2405.14591): B(m, θ) = Σᵢ cos(m·θᵢ) over the rotary pairs, the context length it allows
// L_θ = sup{L : B(m, θ) ≥ 0 for every integer 0 ≤ m ≤ L}, and the smallest base of the default
// schedule θᵢ = base^(−2i/d) that reaches a target length.
//
// B is evaluated for consecutive m by the Chebyshev (angle-addition) recurrence in double, re-seeded
// from exact cosines every `reseed_interval` steps (drift ~2e-12 per pair), with the pairs in
// independent lanes so the compiler vectorises the update. An exact zero crossing (|B| below
// that drift) could be classified either way; the direct sum cos_sum() is the definition.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/rope/frequencies.hpp"

namespace posenc::analysis {

/// B(m, θ) = Σᵢ cos(m·θᵢ), summed directly (the angle m·θᵢ formed in double).
[[nodiscard]] inline double cos_sum(std::span<const double> inv_freq, std::int64_t m) {
    double b = 0.0;
    for (const double t : inv_freq) b += std::cos(static_cast<double>(m) * t);
    return b;
}

namespace detail {

inline constexpr std::int64_t reseed_interval = 128;
inline constexpr std::size_t lanes = 8;

/// Streams B(m, θ) for m = 0, 1, 2, ..., m_max; `visit(m, B)` returns false to stop.
///
/// Block by block (reseed_interval values of m): each group of `lanes` pairs is seeded with exact
/// cos(m₀θ) and cos((m₀+1)θ) and stepped by the Chebyshev recurrence cos((m+1)θ) = 2cos θ·cos(mθ)
/// − cos((m−1)θ) (two flops a pair; a rounding error grows at most linearly over the block, so the
/// drift stays ~128²·2^-53 ≈ 2e-12 per pair); the cosines go into per-lane sums, summed in a fixed
/// order afterwards (results do not depend on the compiler's vector width).
template <class Visit>
void stream_cos_sum(std::span<const double> inv_freq, std::int64_t m_max, Visit&& visit) {
    constexpr auto block = static_cast<std::size_t>(reseed_interval);
    const std::size_t n = (inv_freq.size() + lanes - 1) / lanes * lanes;
    // Padding lanes have cos = 0 at every step: they add nothing to B.
    // (A loop, not std::copy: g++ 12 at -O2 warned of a memcpy bound past PTRDIFF_MAX there.)
    std::vector<double> theta(n, 0.0), two_cos(n, 0.0);
    for (std::size_t i = 0; i < inv_freq.size(); ++i) {
        theta[i] = inv_freq[i];
        two_cos[i] = 2.0 * std::cos(theta[i]);
    }
    std::vector<std::array<double, lanes>> partial(block);
    for (std::int64_t m0 = 0; m0 <= m_max; m0 += reseed_interval) {
        const auto count = static_cast<std::size_t>(std::min<std::int64_t>(reseed_interval, m_max - m0 + 1));
        for (auto& p : partial) p.fill(0.0);
        const double md = static_cast<double>(m0);
        for (std::size_t g = 0; g < n; g += lanes) {
            double c0[lanes] = {}, c1[lanes] = {}, k[lanes] = {};  // plain arrays: fast in Debug builds too
            for (std::size_t l = 0; l < lanes; ++l) {
                if (g + l < inv_freq.size()) {
                    c0[l] = std::cos(md * theta[g + l]);
                    c1[l] = std::cos((md + 1.0) * theta[g + l]);
                }
                k[l] = two_cos[g + l];
            }
            for (std::size_t j = 0; j < count; ++j) {
                double* row = partial[j].data();
                for (std::size_t l = 0; l < lanes; ++l) {
                    row[l] += c0[l];
                    const double next = k[l] * c1[l] - c0[l];
                    c0[l] = c1[l];
                    c1[l] = next;
                }
            }
        }
        for (std::size_t j = 0; j < count; ++j) {
            double sum = 0.0;
            for (const double v : partial[j]) sum += v;
            if (!visit(m0 + static_cast<std::int64_t>(j), sum)) return;
        }
    }
}

inline void require_inv_freq(std::span<const double> inv_freq) {
    posenc::detail::require(!inv_freq.empty(), "inv_freq.size", inv_freq.size(), "must be > 0");
    for (const double t : inv_freq)
        posenc::detail::require(std::isfinite(t) && t >= 0.0, "inv_freq", t, "must be finite and >= 0");
}

}  // namespace detail

/// B(m, θ) for m = 0..m_max (m_max + 1 values), by the re-seeded recurrence.
[[nodiscard]] inline std::vector<double> cos_sum_curve(std::span<const double> inv_freq, std::int64_t m_max) {
    detail::require_inv_freq(inv_freq);
    posenc::detail::require(m_max >= 0, "m_max", m_max, "must be >= 0");
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(m_max) + 1);
    detail::stream_cos_sum(inv_freq, m_max, [&](std::int64_t, double b) {
        out.push_back(b);
        return true;
    });
    return out;
}

/// L_θ = sup{L : B(m, θ) ≥ 0 for every integer 0 ≤ m ≤ L}, i.e. (first m with B(m) < 0) − 1, or
/// `limit` when B stays ≥ 0 on 0..limit (the scan stops there: L_θ ≥ limit).
[[nodiscard]] inline std::int64_t context_length_bound(std::span<const double> inv_freq, std::int64_t limit) {
    detail::require_inv_freq(inv_freq);
    posenc::detail::require(limit >= 0, "limit", limit, "must be >= 0");
    std::int64_t first_negative = -1;
    detail::stream_cos_sum(inv_freq, limit, [&](std::int64_t m, double b) {
        if (b < 0.0) {
            first_negative = m;
            return false;
        }
        return true;
    });
    return first_negative < 0 ? limit : first_negative - 1;
}

/// The grid the base search walks: every number with `significant_digits` significant decimal
/// digits (2: 1.0e4, 1.1e4, ..., 9.9e4, 1.0e5, ...), from `from` (rounded up onto the grid) to `to`.
struct base_search {
    double from = 10.0;
    double to = 1e12;
    int significant_digits = 2;
};

struct base_search_result {
    double base = 0.0;                  ///< the first grid base with L_θ ≥ target; 0 when none up to `to`
    std::int64_t context_length = 0;    ///< min(L_θ(base), target)
    std::size_t bases_tried = 0;        ///< grid points evaluated
};

/// The smallest base on the search grid whose default schedule (head_dim/2 pairs,
/// θᵢ = base^(−2i/head_dim), the same as posenc::default_rope) has L_θ ≥ target, scanning the grid
/// upward from `grid.from`. L_θ is not monotone in the base, so a larger base is not guaranteed to
/// qualify (for head_dim 128 and target 4096, 2.9e4 qualifies, 3.0e4..3.9e4 do not): this is "the
/// first base that works", not "the base above which everything works".
[[nodiscard]] inline base_search_result smallest_base_for_length(std::size_t head_dim, std::int64_t target,
                                                                 const base_search& grid = {}) {
    posenc::detail::require(head_dim >= 2 && head_dim % 2 == 0, "head_dim", head_dim, "must be even and >= 2");
    posenc::detail::require(target >= 1, "target", target, "must be >= 1");
    posenc::detail::require(grid.significant_digits >= 1 && grid.significant_digits <= 6, "significant_digits",
                            grid.significant_digits, "must be in 1..6");
    posenc::detail::require(std::isfinite(grid.from) && grid.from > 1.0, "from", grid.from, "must be finite and > 1");
    posenc::detail::require(std::isfinite(grid.to) && grid.to >= grid.from, "to", grid.to, "must be finite and >= from");
    const std::int64_t steps = static_cast<std::int64_t>(std::llround(std::pow(10.0, grid.significant_digits - 1)));
    // Grid point k·10^e with k in [steps, 10·steps).
    auto exponent = static_cast<int>(std::floor(std::log10(grid.from))) - (grid.significant_digits - 1);
    auto k = static_cast<std::int64_t>(std::ceil(grid.from / std::pow(10.0, exponent) - 1e-9));
    if (k >= 10 * steps) {
        k = steps;
        ++exponent;
    }
    base_search_result r;
    for (;;) {
        const double base = static_cast<double>(k) * std::pow(10.0, exponent);
        if (base > grid.to * (1.0 + 1e-12)) return {0.0, 0, r.bases_tried};
        ++r.bases_tried;
        // A failing base costs a scan up to its first negative m; only the answer scans to target.
        const std::int64_t l = context_length_bound(posenc::detail::default_inv_freq(base, head_dim), target);
        if (l >= target) return {base, l, r.bases_tried};
        if (++k == 10 * steps) {
            k = steps;
            ++exponent;
        }
    }
}

}  // namespace posenc::analysis
