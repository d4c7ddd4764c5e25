#pragma once
// Per-architecture primitives the kernels build on, templated on the xsimd architecture tag:
//  - fused multiply-add with one rounding on every architecture that has FMA hardware. xsimd 8.1
//    spells fma/fnma as x·y + z for AVX-512 (fused or not as the compiler pleases: g++ contracts,
//    clang does not), so AVX-512 calls the intrinsics. This is what makes every vector width compute
//    each lane with the same operations (batch-invariant numerics); SSE has no FMA and rounds twice.
//  - loads that widen float / bf16 / fp16 to a float batch, stores that round a float batch to the
//    storage type (round to nearest even): F16C for fp16 on AVX2/AVX-512, integer shift + rounding
//    for bf16, a per-lane conversion elsewhere.
//  - narrowing, pair shuffles, and the cos/sin rows' quadrant step (as masks on AVX-512).
// Only arch-templated code here (the COMDAT rule, docs/simd-and-precision.md). Some 470 lines: a list
// of small independent primitives, each with its architectures' branches side by side.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "posenc/simd/xsimd_compat.hpp"  // xsimd

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "posenc/core/dtypes.hpp"

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
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

    /// Whether fma/fnma of doubles round once: AVX-512 (the intrinsics below) and xsimd's fma3<…>
    /// tags. Every other tag (SSE, plain AVX/AVX2 without -mfma, NEON's fnma) may multiply and add,
    /// rounding twice.
    template <class A>
    struct is_fma3 : std::false_type {};
    template <class A>
    struct is_fma3<xsimd::fma3<A>> : std::true_type {};
    static constexpr bool has_fma = is_avx512 || is_fma3<Arch>::value;

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

    /// cos and sin of n·π/2 + r from cos r and sin r, with q = n mod 4 in each lane's low bits: odd q
    /// swaps them, bit 1 of q negates sin, bit 1 of q + 1 (bit 1 xor bit 0) negates cos.
    static void quadrant(const xsimd::batch<std::int64_t, Arch>& q, const dbatch& cos_r, const dbatch& sin_r, dbatch& c,
                         dbatch& s) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) {  // the bits as masks: two tests, two blends, two masked sign flips
            const __mmask8 odd = _mm512_test_epi64_mask(q, _mm512_set1_epi64(1));
            const __mmask8 s_neg = _mm512_test_epi64_mask(q, _mm512_set1_epi64(2));
            const auto c_neg = static_cast<__mmask8>(s_neg ^ odd);
            const __m512i sign = _mm512_set1_epi64(INT64_MIN);
            const __m512i cv = _mm512_castpd_si512(_mm512_mask_blend_pd(odd, cos_r, sin_r));
            const __m512i sv = _mm512_castpd_si512(_mm512_mask_blend_pd(odd, sin_r, cos_r));
            c = _mm512_castsi512_pd(_mm512_mask_xor_epi64(cv, c_neg, cv, sign));
            s = _mm512_castsi512_pd(_mm512_mask_xor_epi64(sv, s_neg, sv, sign));
            return;
        }
#endif
        using ibatch = xsimd::batch<std::int64_t, Arch>;
        const dbatch sign(-0.0);
        const auto odd = xsimd::bitwise_cast<dbatch>((q << 63) | ibatch(0x3ff0000000000000)) < dbatch(0.0);  // ±1
        c = xsimd::select(odd, sin_r, cos_r) ^ (xsimd::bitwise_cast<dbatch>((q + ibatch(1)) << 62) & sign);
        s = xsimd::select(odd, cos_r, sin_r) ^ (xsimd::bitwise_cast<dbatch>(q << 62) & sign);
    }

    /// (lo's lanes, hi's lanes) rounded to float (to nearest even, as static_cast), in registers.
    static fbatch narrow(const dbatch& lo, const dbatch& hi) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512)
            return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),
                                                       _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
        else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
        else
#endif
#if defined(__SSE2__)
        if constexpr (is_sse4_1 || is_sse2) return _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
        else
#endif
        {
            alignas(64) double d[2 * dbatch::size];
            alignas(64) float f[W];
            lo.store_aligned(d), hi.store_aligned(d + dbatch::size);
            for (std::size_t i = 0; i < W; ++i) f[i] = static_cast<float>(d[i]);
            return fbatch::load_aligned(f);
        }
    }

    // ---- lane moves ------------------------------------------------------------------------------------
    template <std::size_t Step>
    struct rotate_by {  // lane j takes lane j + Step (wrapping)
        static constexpr unsigned get(unsigned i, unsigned n) noexcept { return (i + Step) % n; }
    };
    struct swap_pattern {  // lane i takes lane i ^ 1
        static constexpr unsigned get(unsigned i, unsigned) noexcept { return i ^ 1u; }
    };
    /// (x0, x1, x2, x3, …) → (x1, x0, x3, x2, …), within 128-bit lanes: one vpermilps / shufps. (xsimd
    /// 8.1's swizzle spells this pattern as a cross-lane vpermps with an index vector, which competes
    /// with the fp16 conversions for the shuffle pipes.)
    static fbatch swap_pairs(const fbatch& x) noexcept {
#if defined(__AVX512F__)
        if constexpr (is_avx512) return _mm512_permute_ps(x, 0xB1);
        else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) return _mm256_permute_ps(x, 0xB1);
        else
#endif
#if defined(__SSE2__)
        if constexpr (is_sse4_1 || is_sse2) return _mm_shuffle_ps(x, x, 0xB1);
        else
#endif
            return xsimd::swizzle(x, compat::swizzle_mask<Arch, swap_pattern>());
    }

    /// Lane j < Step of the result is lane j + Step of v (Step = 8, 4, 2, 1, below W); the other lanes
    /// are unspecified. In-lane permutes where they do (cheaper than a general swizzle, and no index
    /// vector to load).
    template <std::size_t Step>
    static fbatch lanes_above(const fbatch& v) noexcept {
        static_assert(Step < W);
#if defined(__AVX512F__)
        if constexpr (is_avx512) {
            if constexpr (Step == 8) return _mm512_shuffle_f32x4(v, v, 0x4E);
            else if constexpr (Step == 4) return _mm512_shuffle_f32x4(v, v, 0xB1);
            else if constexpr (Step == 2) return _mm512_permute_ps(v, 0x4E);
            else return _mm512_permute_ps(v, 0xB1);
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            if constexpr (Step == 4) return _mm256_permute2f128_ps(v, v, 0x01);
            else if constexpr (Step == 2) return _mm256_permute_ps(v, 0x4E);
            else return _mm256_permute_ps(v, 0xB1);
        } else
#endif
#if defined(__SSE2__)
        if constexpr (is_sse4_1 || is_sse2) {
            if constexpr (Step == 2) return _mm_shuffle_ps(v, v, 0x4E);
            else return _mm_shuffle_ps(v, v, 0xB1);
        } else
#endif
            return xsimd::swizzle(v, compat::swizzle_mask<Arch, rotate_by<Step>>());
    }

    /// Σ of v's lanes as a fixed pairwise tree: lane j += lane j + s for s = W/2, …, 1, then lane 0
    /// (the same additions for every width once the steps of W lanes or more are done).
    static float pairwise_sum(fbatch v) noexcept {
        static_assert(W <= 16);
        if constexpr (W >= 16) v = v + lanes_above<8>(v);
        if constexpr (W >= 8) v = v + lanes_above<4>(v);
        if constexpr (W >= 4) v = v + lanes_above<2>(v);
        if constexpr (W >= 2) v = v + lanes_above<1>(v);
        return v.get(0);
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

    // ---- bf16 word pairs (AVX2, AVX-512) -----------------------------------------------------------------
    // 2W bf16 values read as W 32-bit words: the even element is a word's low half, the odd one its
    // high half. Widening is one shift or one mask per W lanes; the narrowing store rounds and merges
    // two vectors within each word (a 16-bit blend, or a masked byte shuffle on AVX-512; no cross-lane
    // packing). Each lane gets the bits store(bf16*)
    // gives it; the caller pairs its cos/sin lanes the same way (pair_lanes).
#if defined(__AVX512BW__)
    static constexpr bool has_bf16_pairs = is_avx2 || is_avx512;
#elif defined(__AVX2__)
    static constexpr bool has_bf16_pairs = is_avx2;
#else
    static constexpr bool has_bf16_pairs = false;
#endif

    struct lane_pairs {
        fbatch even, odd;
    };

    static lane_pairs load_pairs(const bf16* p) noexcept {
#if defined(__AVX512BW__)
        if constexpr (is_avx512) {
            const __m512i u = _mm512_loadu_si512(p);
            return {_mm512_castsi512_ps(_mm512_slli_epi32(u, 16)),
                    _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))))};
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
            return {_mm256_castsi256_ps(_mm256_slli_epi32(u, 16)),
                    _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))))};
        } else
#endif
        {
            (void)p;
            return {fbatch(0.0f), fbatch(0.0f)};  // not reached: callers check has_bf16_pairs
        }
    }

    /// Whether a[0, n) or b[0, n) holds a NaN; both readable (and not NaN) up to n rounded up to W.
    /// AVX2 and AVX-512 only, like the pairs it guards; elsewhere (never called) it answers true.
    /// Bits, not v != v, which -ffinite-math-only in the including unit could fold away.
    static bool any_nan(const float* a, const float* b, std::size_t n) noexcept {
#if defined(__AVX512BW__)
        if constexpr (is_avx512) {
            const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
            __mmask16 found = 0;
            for (std::size_t i = 0; i < n; i += W) {
                const __m512i u = _mm512_and_si512(_mm512_loadu_si512(a + i), abs_mask);
                const __m512i v = _mm512_and_si512(_mm512_loadu_si512(b + i), abs_mask);
                found |= _mm512_cmpgt_epi32_mask(u, inf) | _mm512_cmpgt_epi32_mask(v, inf);
            }
            return found != 0;
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
            __m256i found = _mm256_setzero_si256();
            for (std::size_t i = 0; i < n; i += W) {
                const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
                found = _mm256_or_si256(found, _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf));
                found = _mm256_or_si256(found, _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf));
            }
            return !_mm256_testz_si256(found, found);
        } else
#endif
        {
            (void)a, (void)b, (void)n;
            return true;  // not reached: callers check has_bf16_pairs (true keeps the per-lane path)
        }
    }

    /// Two vectors of consecutive floats x[0, 2W) as load_pairs orders them: even, odd.
    static lane_pairs split_pairs(const fbatch& lo, const fbatch& hi) noexcept {
#if defined(__AVX512BW__)
        if constexpr (is_avx512) {
            const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            return {_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi)};
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            const auto in_order = [](__m256 v) noexcept {  // (a0 a2 b0 b2 | a4 a6 b4 b6) → (a0 a2 a4 a6 b0 b2 b4 b6)
                return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
            };
            return {in_order(_mm256_shuffle_ps(lo, hi, 0x88)), in_order(_mm256_shuffle_ps(lo, hi, 0xDD))};
        } else
#endif
        {
            (void)lo, (void)hi;
            return {fbatch(0.0f), fbatch(0.0f)};  // not reached: callers check has_bf16_pairs
        }
    }
    /// The inverse of split_pairs, on AVX-512 with BW only (attention's PV step, the one caller,
    /// measured no faster through pairs on AVX2).
    static void join_pairs(const lane_pairs& x, fbatch& lo, fbatch& hi) noexcept {
#if defined(__AVX512BW__)
        if constexpr (is_avx512) {
            const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
            lo = _mm512_permutex2var_ps(x.even, first, x.odd);
            hi = _mm512_permutex2var_ps(x.even, second, x.odd);
        } else
#endif
        {
            (void)x, lo = hi = fbatch(0.0f);  // not reached: the caller checks is_avx512 and has_bf16_pairs
        }
    }

    /// out[0, W) = the even lanes of x[0, 2W), out[W, 2W) = the odd ones.
    static void pair_lanes(const float* x, float* out) noexcept {
        const lane_pairs p = split_pairs(fbatch::load_unaligned(x), fbatch::load_unaligned(x + W));
        p.even.store_unaligned(out);
        p.odd.store_unaligned(out + W);
    }

    /// Stores round(even) to p[0], p[2], …, round(odd) to p[1], p[3], … (round as store(bf16*)).
    /// Precondition: a NaN lane is quiet and its low 16 bits are 0 — true of every NaN that float
    /// arithmetic makes from bf16-widened operands and NaN-free cos/sin rows (x86 returns the default
    /// NaN or a NaN operand, quieted, whose low bits are 0), which is how the kernels call it. Such a
    /// NaN needs no special case: it rounds to its top bits, quiet bit included. (Checked for all 2³²
    /// inputs against store(bf16*) by tools/check-bf16-pairs.cpp: equal for every input the
    /// precondition allows; a NaN outside it could round into another NaN or, from 0x7FFFFFFF, into −0.)
    static void store_pairs(bf16* p, const fbatch& even, const fbatch& odd) noexcept {
#if defined(__AVX512BW__)
        if constexpr (is_avx512) {  // as the AVX2 form below; each half-word move is one masked byte shuffle
            const __m512i half = _mm512_set1_epi32(0x8000);
            const __m512i e = _mm512_add_epi32(_mm512_castps_si512(even), half);
            const __m512i o = _mm512_add_epi32(_mm512_castps_si512(odd), half);
            // e's high halves into o's low ones (high), o's low halves into e's high ones (low)
            const __m512i down = _mm512_broadcast_i32x4(_mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
            const __m512i up = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
            const __m512i high = _mm512_mask_shuffle_epi8(o, 0x3333333333333333ull, e, down);
            const __m512i low = _mm512_mask_shuffle_epi8(e, 0xCCCCCCCCCCCCCCCCull, o, up);
            const __m512i keep = _mm512_adds_epu16(low, _mm512_set1_epi16(-2));  // 0xFFFE at a tie, else 0xFFFF
            _mm512_storeu_si512(p, _mm512_and_si512(high, keep));
        } else
#endif
#if defined(__AVX2__)
        if constexpr (is_avx2) {
            // Round half up, u + 0x8000, then undo the round-up of an exact tie to an even value: a tie
            // (low half 0x8000) leaves a zero low half, and its rounded-up high half is odd exactly when
            // the even choice was the one below, so clearing bit 0 there gives round-half-to-even.
            const __m256i half = _mm256_set1_epi32(0x8000);
            const __m256i e = _mm256_add_epi32(_mm256_castps_si256(even), half);
            const __m256i o = _mm256_add_epi32(_mm256_castps_si256(odd), half);
            const __m256i high = _mm256_blend_epi16(_mm256_srli_epi32(e, 16), o, 0xAA);
            const __m256i low = _mm256_blend_epi16(e, _mm256_slli_epi32(o, 16), 0xAA);
            const __m256i keep = _mm256_adds_epu16(low, _mm256_set1_epi16(-2));  // 0xFFFE at a tie, else 0xFFFF
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_and_si256(high, keep));
        } else
#endif
        {
            (void)p, (void)even, (void)odd;  // not reached: callers check has_bf16_pairs
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
POSENC_SIMD_DIAGNOSTICS_POP
