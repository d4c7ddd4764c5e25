#pragma once
// The fused per-head RMSNorm's reductions, templated on the architecture: a head's sum of squares in
// a fixed order for every vector width, and the inverse RMS of a block of heads.
// Only arch-templated code lives here (the COMDAT rule, rotate_args.hpp); kernels.hpp puts the parts
// together.

#include <cstddef>

#include "posenc/simd/lane_io.hpp"
#include "posenc/simd/xsimd_compat.hpp"
#include "posenc/core/detail/unroll.hpp"  // last: POSENC_UNROLL, #undef at the end

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct norm_kernels : lane_io<Arch> {
    using base = lane_io<Arch>;
    using typename base::ops;
    using typename base::fbatch;
    using typename base::dbatch;
    using base::W;
    using base::WD;
    template <class S>
    using stored_lanes = typename base::template stored_lanes<S>;
    static constexpr std::size_t norm_lanes = 32;  // the norm's partial sums
    static_assert(norm_lanes % W == 0, "the norm's fixed summation order needs W | norm_lanes");

    // ---- fused per-head RMSNorm ---------------------------------------------------------------------

    /// Σx² over a head's head_dim lanes, in a fixed order for every width: 32 partial sums (lane j
    /// collects x[32k + j]², k increasing, one FMA each), then a fixed pairwise tree (j += j + 16, then
    /// + 8, + 4, + 2, + 1), all in registers. 32, not 16: two independent FMA chains per head on
    /// AVX-512, which measured faster.
    template <class S>
    static float sum_of_squares(const S* x, std::size_t head_dim) noexcept {
        constexpr std::size_t B = norm_lanes / W;
        const stored_lanes<S> src{x};
        fbatch acc[B];
        POSENC_UNROLL for (std::size_t b = 0; b < B; ++b) acc[b] = fbatch(0.0f);
        std::size_t k = 0;
        for (; k + norm_lanes <= head_dim; k += norm_lanes)
            POSENC_UNROLL for (std::size_t b = 0; b < B; ++b) {
                const fbatch v = src.load(k + b * W);
                acc[b] = ops::fma(v, v, acc[b]);
            }
        POSENC_UNROLL for (std::size_t b = 0; b < B; ++b) {
            const std::size_t from = k + b * W;
            if (from >= head_dim) break;
            const std::size_t m = head_dim - from;
            const fbatch v = m >= W ? src.load(from) : src.load_padded(from, m);
            acc[b] = ops::fma(v, v, acc[b]);
        }
        POSENC_UNROLL for (std::size_t step = B / 2; step >= 1; step /= 2)  // tree steps of W lanes or more
            for (std::size_t b = 0; b < step; ++b) acc[b] = acc[b] + acc[b + step];
        return ops::pairwise_sum(acc[0]);  // the steps within a vector
    }

    /// out[h] = 1/√(sums[h]/head_dim + eps) for h < count, in double, each rounded once to float;
    /// a vector at a time (no head waits on its own division and square root); out may be sums.
    static void inverse_rms(const float* sums, std::size_t count, std::size_t head_dim, double eps, float* out) noexcept {
        const dbatch d(static_cast<double>(head_dim)), e(eps), one(1.0);
        // s/d by a power of two d is exact, and so is s·(1/d): the same bits without a division.
        const bool power_of_two = (head_dim & (head_dim - 1)) == 0;
        const dbatch inv_d(1.0 / static_cast<double>(head_dim));
        for (std::size_t h = 0; h < count; h += WD) {
            alignas(64) double v[WD];
            for (std::size_t k = 0; k < WD; ++k) v[k] = 1.0;  // padding: no 1/√0 (a flag, or a trap)
            for (std::size_t k = 0; k < WD && h + k < count; ++k) v[k] = static_cast<double>(sums[h + k]);
            const dbatch sv = dbatch::load_aligned(v);
            (one / xsimd::sqrt((power_of_two ? sv * inv_d : sv / d) + e)).store_aligned(v);
            for (std::size_t k = 0; k < WD && h + k < count; ++k) out[h + k] = static_cast<float>(v[k]);
        }
    }
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP

#undef POSENC_UNROLL
