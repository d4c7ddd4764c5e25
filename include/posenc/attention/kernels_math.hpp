#pragma once
// The attention steps' vector math, templated on the architecture: exp for the softmax, tanh for
// soft-capping, and the horizontal reductions. Only arch-templated code (the COMDAT rule of
// kernels.hpp); kernels.hpp's steps derive from this struct.

#include <cstddef>
#include <cstdint>

#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/xsimd_compat.hpp"  // xsimd

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#endif

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct attention_vector_math {
    using batch = xsimd::batch<float, Arch>;
    static constexpr std::size_t W = batch::size;

    // exp and tanh written here, not xsimd's: those call scalar-typed helpers (constants::infinity<float>,
    // bit_cast<float, unsigned>) that are weak symbols shared by every architecture's unit — the COMDAT
    // trap. These use batch operations and literal constants only.

    /// e^x for x ≤ 0 (the softmax's s − m), 1-2 ulp: Cephes' expf (n = round(x·log₂e), r = x − n·ln 2 in
    /// two parts, degree-5 polynomial, × 2ⁿ). x < −87 (and −∞) gives exactly 0, NaN gives NaN.
    static batch exp_nonpositive(const batch& x) noexcept {
        using ibatch = xsimd::batch<std::int32_t, Arch>;
        const batch xc = xsimd::max(batch(-87.0f), x);  // (x86's max returns its second operand for a NaN)
        const batch n = xsimd::nearbyint(xc * batch(1.44269504088896341f));
        batch r = xsimd::fnma(n, batch(0.693359375f), xc);
        r = xsimd::fnma(n, batch(-2.12194440e-4f), r);
        batch p(1.9875691500e-4f);
        p = xsimd::fma(p, r, batch(1.3981999507e-3f));
        p = xsimd::fma(p, r, batch(8.3334519073e-3f));
        p = xsimd::fma(p, r, batch(4.1665795894e-2f));
        p = xsimd::fma(p, r, batch(1.6666665459e-1f));
        p = xsimd::fma(p, r, batch(5.0000001201e-1f));
        p = xsimd::fma(p * r, r, r) + batch(1.0f);
#if defined(__AVX512F__)
        // vscalefps rounds p·2ⁿ once, as the product with 2ⁿ's bits does (subnormal results included):
        // one instruction instead of four, and its zero-masking is the select below.
        if constexpr (arch_ops<Arch>::is_avx512)
            return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ), p, n);
        else
#endif
        {
            const ibatch bits = (xsimd::to_int(n) + ibatch(127)) << 23;
            const batch scaled = p * xsimd::bitwise_cast<batch>(bits);
            return xsimd::select(x < batch(-87.0f), batch(0.0f), scaled);
        }
    }

    /// tanh: odd Taylor series through x⁹ for |x| < 0.3 (remainder < 1.6e-8, 6e-8 relative), else
    /// sign(x)·(1 − 2/(e^{2|x|} + 1)) with e^{2|x|} = 1/e^{−2|x|}.
    static batch tanh_(const batch& x) noexcept {
        const batch a = xsimd::abs(x);
        const batch z = x * x;
        batch p(62.0f / 2835.0f);
        p = xsimd::fma(p, z, batch(-17.0f / 315.0f));
        p = xsimd::fma(p, z, batch(2.0f / 15.0f));
        p = xsimd::fma(p, z, batch(-1.0f / 3.0f));
        const batch small = xsimd::fma(p * z, x, x);
        const batch e = exp_nonpositive(batch(-2.0f) * a);  // e^{−2|x|} ∈ (0, 1]
        const batch t = (batch(1.0f) - e) / (batch(1.0f) + e);
        const batch large = xsimd::select(x < batch(0.0f), -t, t);
        return xsimd::select(a < batch(0.3f), small, large);
    }

    /// The same pairwise tree as hsum, in registers; the operand order matters too (max returns its
    /// second operand for equal ±0 or a NaN), and kernels_softmax.hpp's row_maxes keeps it.
    static float hmax(batch v) noexcept {
        using ops = arch_ops<Arch>;
        if constexpr (W >= 16) v = xsimd::max(v, ops::template lanes_above<8>(v));
        if constexpr (W >= 8) v = xsimd::max(v, ops::template lanes_above<4>(v));
        if constexpr (W >= 4) v = xsimd::max(v, ops::template lanes_above<2>(v));
        if constexpr (W >= 2) v = xsimd::max(v, ops::template lanes_above<1>(v));
        return v.get(0);
    }
    /// Pairwise, not a serial chain, in registers (a loop over a stored copy was scalar at -O2).
    static float hsum(const batch& b) noexcept { return arch_ops<Arch>::pairwise_sum(b); }
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP
