#pragma once
// Per-architecture primitives the kernels build on, templated on the xsimd architecture tag:
//  - fused multiply-add with one rounding on every architecture that has FMA hardware. xsimd 8.1
//    spells fma/fnma as x·y + z for AVX-512 (fused or not as the compiler pleases: g++ contracts,
//    clang does not), so AVX-512 calls the intrinsics. This is what makes every vector width compute
//    each lane with the same operations (batch-invariant numerics); SSE has no FMA and rounds twice.
//  - loads that widen float / bf16 / fp16 to a float batch, stores that round a float batch to the
//    storage type (round to nearest even): F16C for fp16 on AVX2/AVX-512, integer shift + rounding
//    for bf16, a per-lane conversion elsewhere.
// Only arch-templated code here (the COMDAT rule, shared/notes/xsimd.md).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "posenc/core/dtypes.hpp"

namespace posenc::simd {

template <class Arch>
struct arch_ops {
    using fbatch = xsimd::batch<float, Arch>;
    using dbatch = xsimd::batch<double, Arch>;
    static constexpr std::size_t W = fbatch::size;

    static constexpr bool is_avx512 = std::is_base_of_v<xsimd::avx512f, Arch>;
    static constexpr bool is_avx2 = std::is_base_of_v<xsimd::avx2, Arch> && !is_avx512;
    static constexpr bool is_sse4_1 = std::is_base_of_v<xsimd::sse4_1, Arch> && !is_avx2 && !is_avx512;
    static constexpr bool is_sse2 = std::is_base_of_v<xsimd::sse2, Arch> && !is_sse4_1 && !is_avx2 && !is_avx512;

    // ---- fused multiply-add: x·y + z and z − x·y ---------------------------------------------------
    template <class T>
    static xsimd::batch<T, Arch> fma(const xsimd::batch<T, Arch>& x, const xsimd::batch<T, Arch>& y,
                                     const xsimd::batch<T, Arch>& z) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            if constexpr (std::is_same_v<T, float>) return _mm512_fmadd_ps(x, y, z);
            else return _mm512_fmadd_pd(x, y, z);
        } else
#endif
            return xsimd::fma(x, y, z);
    }
    template <class T>
    static xsimd::batch<T, Arch> fnma(const xsimd::batch<T, Arch>& x, const xsimd::batch<T, Arch>& y,
                                      const xsimd::batch<T, Arch>& z) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            if constexpr (std::is_same_v<T, float>) return _mm512_fnmadd_ps(x, y, z);
            else return _mm512_fnmadd_pd(x, y, z);
        } else
#endif
            return xsimd::fnma(x, y, z);
    }

    // ---- loads ---------------------------------------------------------------------------------------
    static fbatch load(const float* p) noexcept { return fbatch::load_unaligned(p); }

    static fbatch load(const bf16* p) noexcept {  // exact: the bits move to the top half
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        } else
#endif
#if defined(__SSE2__)
        if constexpr (is_sse4_1 || is_sse2) {
            const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
            return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
        } else
#endif
        {
            alignas(64) float tmp[W];
            for (std::size_t i = 0; i < W; ++i) tmp[i] = detail::bf16_bits_to_float<Arch>(p[i].bits);
            return fbatch::load_aligned(tmp);
        }
    }

    static fbatch load(const fp16* p) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        } else
#endif
#if defined(__F16C__)
        if constexpr (is_avx2) {
            return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        } else
#endif
        {
            alignas(64) float tmp[W];
            for (std::size_t i = 0; i < W; ++i) tmp[i] = detail::fp16_bits_to_float<Arch>(p[i].bits);
            return fbatch::load_aligned(tmp);
        }
    }

    // ---- stores (round to nearest even) ---------------------------------------------------------------
    static void store(float* p, const fbatch& v) noexcept { v.store_unaligned(p); }

    static void store(bf16* p, const fbatch& v) noexcept {
        // (u + 0x7FFF + lsb) >> 16 rounds to nearest even (overflow carries into the exponent, up to
        // inf); NaN keeps its top bits with the quiet bit set.
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
            const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
            const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            const __m256i u = _mm256_castps_si256(v), hi = _mm256_srli_epi32(u, 16);
            const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
            const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
            const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
        } else
#endif
#if defined(__SSE2__)
        if constexpr (is_sse4_1 || is_sse2) {
            const __m128i u = _mm_castps_si128(v), hi = _mm_srli_epi32(u, 16);
            const __m128i lsb = _mm_and_si128(hi, _mm_set1_epi32(1));
            __m128i r = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7FFF)), lsb), 16);
            const __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(v, v));
            r = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(hi, _mm_set1_epi32(0x40))), _mm_andnot_si128(nan, r));
            __m128i packed;
#if defined(__SSE4_1__)
            if constexpr (is_sse4_1) packed = _mm_packus_epi32(r, r);
            else
#endif
            {
                const __m128i sx = _mm_srai_epi32(_mm_slli_epi32(r, 16), 16);  // signed pack keeps 16 bits exactly
                packed = _mm_packs_epi32(sx, sx);
            }
            _mm_storel_epi64(reinterpret_cast<__m128i*>(p), packed);
        } else
#endif
        {
            alignas(64) float tmp[W];
            v.store_aligned(tmp);
            for (std::size_t i = 0; i < W; ++i) p[i].bits = detail::float_to_bf16_bits<Arch>(tmp[i]);
        }
    }

    static void store(fp16* p, const fbatch& v) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                                _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        } else
#endif
#if defined(__F16C__)
        if constexpr (is_avx2) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        } else
#endif
        {
            alignas(64) float tmp[W];
            v.store_aligned(tmp);
            for (std::size_t i = 0; i < W; ++i) p[i].bits = detail::float_to_fp16_bits<Arch>(tmp[i]);
        }
    }
};

}  // namespace posenc::simd
