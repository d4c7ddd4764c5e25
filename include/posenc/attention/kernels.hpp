#pragma once
// xsimd definitions of the attention steps declared in functors.hpp, templated on the architecture.
// Only arch-templated code lives here (the COMDAT rule of simd/rotate_args.hpp: a non-template inline
// function compiled with AVX-512 flags could replace the baseline copy at link time), so no std::
// helpers either: std::max, std::exp(float) are inline functions the linker would merge.
//
// QKᵀ: K's tile is transposed into scratch ([head_dim][64], keys contiguous, W × W blocks through
// registers) so that the inner loop broadcasts one q element and multiplies a vector of keys; a
// 6-row × 4-vector register block (AVX-512) gives 24 FMAs per 4 vector loads and 6 broadcasts. PV: V
// rows are contiguous over Dv (the caller packs a tile of them): the same block broadcasts p and
// streams V. The transposition costs head_dim·64 moves per tile,
// shared by every query row of the tile (rows = G·query tokens); for 8 rows or fewer (decode) QKᵀ
// takes dot products along D instead. On a tile a causal-like mask cuts through (row_keys), each
// register block of rows stops both products at the last key its rows see.
//
// The steps that share the block shapes live here; the online softmax in kernels_softmax.hpp (on the
// vector exp, tanh and reductions of kernels_math.hpp), the conversions and prefetch in
// kernels_convert.hpp (arch-templated structs this one derives from: the COMDAT rule forbids sharing
// them as plain helpers). Some 530 lines: the QKᵀ and PV steps share their register blocks.

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "posenc/attention/functors.hpp"
#include "posenc/attention/kernels_convert.hpp"
#include "posenc/attention/kernels_softmax.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/xsimd_compat.hpp"  // xsimd
#include "posenc/core/detail/unroll.hpp"  // last: POSENC_UNROLL, #undef at the end

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct attention_steps : attention_convert_steps<Arch>, attention_softmax_step<Arch> {
    using batch = xsimd::batch<float, Arch>;
    static constexpr std::size_t W = batch::size;
    static constexpr std::size_t BK = attn_key_tile;
    static constexpr std::size_t NV = BK / W;           // vectors per score row
    static_assert(NV <= 16, "POSENC_UNROLL unrolls loops of up to 16 trips completely");
    static constexpr std::size_t CV = NV < 4 ? NV : 4;  // vectors per register block
    static constexpr std::size_t RB = attn_row_block;
    static constexpr std::size_t dot_rows = 2 * RB;  // calls of up to this many rows (decode) take qk_dot
    static_assert(BK % W == 0 && NV % CV == 0);

    using convert = attention_convert_steps<Arch>;
    using convert::prefetch_ahead;
    using convert::prefetch_row;
    using convert::prefetch_rows;
    using convert::to_float;

    using softmax_step = attention_softmax_step<Arch>;
    using softmax_step::hsum;
#if defined(__AVX512F__)
    using softmax_step::pairwise_sums16;
#endif
    using softmax_step::softmax;

    /// Few rows (decode: G query heads of one token): dot products along D, each K row read once and
    /// never transposed; the transposition would cost more than these rows' FMAs.
#if defined(__AVX512F__)
    /// Rows [r0, r0 + 4) × keys [j, j + 4) of qk_dot on AVX-512: 16 accumulators, each q and k
    /// vector loaded once for four FMAs; qk_dot_4x4_store reduces them together (the bits of
    /// qk_dot's per-key sums).
    template <class E>
    static void qk_dot_4x4_sums(const attn_qk_args& a, const E* k, std::size_t r0, std::size_t j, __m512 (&acc)[16]) noexcept {
        static_assert(RB == 4);
        const std::size_t D = a.head_dim, Dw = D / W * W;
        const float* q0 = a.q + r0 * D;
        const E* kr[4] = {k + j * a.k_stride, k + (j + 1) * a.k_stride, k + (j + 2) * a.k_stride, k + (j + 3) * a.k_stride};
        POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
        for (std::size_t d = 0; d < Dw; d += W) {
            batch kv[4];
            POSENC_UNROLL for (std::size_t u = 0; u < 4; ++u) kv[u] = arch_ops<Arch>::load(kr[u] + d);
            POSENC_UNROLL for (std::size_t i = 0; i < 4; ++i) {
                const batch qv = batch::load_unaligned(q0 + i * D + d);
                POSENC_UNROLL for (std::size_t u = 0; u < 4; ++u) acc[i * 4 + u] = xsimd::fma(qv, kv[u], batch(acc[i * 4 + u]));
            }
        }
    }
    template <class E>
    static void qk_dot_4x4_store(const attn_qk_args& a, const E* k, std::size_t r0, std::size_t j, const __m512 (&acc)[16]) noexcept {
        const std::size_t D = a.head_dim, Dw = D / W * W;
        const float* q0 = a.q + r0 * D;
        const E* kr[4] = {k + j * a.k_stride, k + (j + 1) * a.k_stride, k + (j + 2) * a.k_stride, k + (j + 3) * a.k_stride};
        const __m512 sums16 = pairwise_sums16(acc);  // lane 4i + u: row r0 + i, key j + u
        if (Dw == D) {  // each row's four scores scaled and stored as one 128-bit lane
            __m512 v = sums16;
            if (a.row_scale) {
                const __m512i row_of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
                v = _mm512_mul_ps(v, _mm512_permutexvar_ps(row_of_lane, _mm512_castps128_ps512(_mm_loadu_ps(a.row_scale + r0))));
            }
            float* s = a.s + r0 * BK + j;
            _mm_storeu_ps(s, _mm512_castps512_ps128(v));
            _mm_storeu_ps(s + BK, _mm512_extractf32x4_ps(v, 1));
            _mm_storeu_ps(s + 2 * BK, _mm512_extractf32x4_ps(v, 2));
            _mm_storeu_ps(s + 3 * BK, _mm512_extractf32x4_ps(v, 3));
            return;
        }
        alignas(64) float sums[16];
        _mm512_store_ps(sums, sums16);
        POSENC_UNROLL for (std::size_t i = 0; i < 4; ++i)
            POSENC_UNROLL for (std::size_t u = 0; u < 4; ++u) {
                float x = sums[i * 4 + u];
                for (std::size_t d = Dw; d < D; ++d) x += q0[i * D + d] * to_float(kr[u][d]);
                a.s[(r0 + i) * BK + j + u] = a.row_scale ? x * a.row_scale[r0 + i] : x;
            }
    }
#endif

    template <class E>
    static void qk_dot(const attn_qk_args& a) noexcept {
        assert(a.rows <= dot_rows && a.rows % RB == 0);
        const E* k = static_cast<const E*>(a.k);
        const std::size_t D = a.head_dim, Dw = D / W * W;
        for (std::size_t r = 0; r < a.rows; ++r)
            for (std::size_t j = a.keys; j < BK; ++j) a.s[r * BK + j] = 0.0f;
        std::size_t j = 0;
#if defined(__AVX512F__)
        if constexpr (arch_ops<Arch>::is_avx512) {
            if constexpr (!std::is_same_v<E, float>) {
                // 16-bit K: four blocks' sums parked, then reduced, so that a block's reduction does
                // not hold up the next block's FMAs (parking made float K slower).
                constexpr std::size_t blocks = 4;
                alignas(64) float parked[blocks][dot_rows / RB][16 * 16];
                for (; j + blocks * 4 <= a.keys; j += blocks * 4) {
                    POSENC_UNROLL for (std::size_t b = 0; b < blocks; ++b) {
                        convert::prefetch_row_range(k, j + 4 * b + a.stream_rows, 4, a.k_stride, D);
                        convert::prefetch_ahead_range(a.ahead, j + 4 * b, 4);
                        for (std::size_t r0 = 0; r0 < a.rows; r0 += RB) {
                            __m512 acc[16];
                            qk_dot_4x4_sums(a, k, r0, j + 4 * b, acc);
                            POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) _mm512_store_ps(parked[b][r0 / RB] + 16 * i, acc[i]);
                        }
                    }
                    POSENC_UNROLL for (std::size_t b = 0; b < blocks; ++b)
                        for (std::size_t r0 = 0; r0 < a.rows; r0 += RB) {
                            __m512 acc[16];
                            POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) acc[i] = _mm512_load_ps(parked[b][r0 / RB] + 16 * i);
                            qk_dot_4x4_store(a, k, r0, j + 4 * b, acc);
                        }
                }
            }
            for (; j + 4 <= a.keys; j += 4) {
                convert::prefetch_row_range(k, j + a.stream_rows, 4, a.k_stride, D);
                convert::prefetch_ahead_range(a.ahead, j, 4);
                for (std::size_t r0 = 0; r0 < a.rows; r0 += RB) {
                    __m512 acc[16];
                    qk_dot_4x4_sums(a, k, r0, j, acc);
                    qk_dot_4x4_store(a, k, r0, j, acc);
                }
            }
        }
#endif
        for (; j + 2 <= a.keys; j += 2) {  // two keys at a time: each q vector loaded once for both
            const E* k0 = k + j * a.k_stride;
            const E* k1 = k0 + a.k_stride;
            prefetch_row(k, j + a.stream_rows, a.k_stride, D);
            prefetch_row(k, j + 1 + a.stream_rows, a.k_stride, D);
            prefetch_ahead(a.ahead, j);
            prefetch_ahead(a.ahead, j + 1);
            for (std::size_t r0 = 0; r0 < a.rows; r0 += RB) {
                const float* q0 = a.q + r0 * D;
                batch acc0[RB], acc1[RB];
                POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) acc0[i] = acc1[i] = batch(0.0f);
                for (std::size_t d = 0; d < Dw; d += W) {
                    const batch kv0 = arch_ops<Arch>::load(k0 + d), kv1 = arch_ops<Arch>::load(k1 + d);
                    POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) {
                        const batch qv = batch::load_unaligned(q0 + i * D + d);
                        acc0[i] = xsimd::fma(qv, kv0, acc0[i]);
                        acc1[i] = xsimd::fma(qv, kv1, acc1[i]);
                    }
                }
                POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) {
                    float x0 = hsum(acc0[i]), x1 = hsum(acc1[i]);
                    for (std::size_t d = Dw; d < D; ++d) {
                        x0 += q0[i * D + d] * to_float(k0[d]);
                        x1 += q0[i * D + d] * to_float(k1[d]);
                    }
                    const float sc = a.row_scale ? a.row_scale[r0 + i] : 1.0f;
                    a.s[(r0 + i) * BK + j] = a.row_scale ? x0 * sc : x0;
                    a.s[(r0 + i) * BK + j + 1] = a.row_scale ? x1 * sc : x1;
                }
            }
        }
        for (; j < a.keys; ++j) {
            const E* kr = k + j * a.k_stride;
            prefetch_ahead(a.ahead, j);
            for (std::size_t r0 = 0; r0 < a.rows; r0 += RB) {
                const float* q0 = a.q + r0 * D;
                batch acc[RB];
                POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) acc[i] = batch(0.0f);
                for (std::size_t d = 0; d < Dw; d += W) {
                    const batch kv = arch_ops<Arch>::load(kr + d);
                    POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) acc[i] = xsimd::fma(batch::load_unaligned(q0 + i * D + d), kv, acc[i]);
                }
                POSENC_UNROLL for (std::size_t i = 0; i < RB; ++i) {
                    float x = hsum(acc[i]);
                    for (std::size_t d = Dw; d < D; ++d) x += q0[i * D + d] * to_float(kr[d]);
                    a.s[(r0 + i) * BK + j] = a.row_scale ? x * a.row_scale[r0 + i] : x;
                }
            }
        }
    }

    /// r[i] ← column i of the W × W block whose rows are r[0..W) (in registers: shuffles, no stores).
    static void transpose(batch (&r)[W]) noexcept {
#if defined(__AVX512F__)
        if constexpr (arch_ops<Arch>::is_avx512) {
            // Four perfect shuffles (row i with row i + 8, interleaved) transpose 16 × 16.
            const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            POSENC_UNROLL for (int stage = 0; stage < 4; ++stage) {
                __m512 t[16];
                POSENC_UNROLL for (std::size_t i = 0; i < 8; ++i) {
                    t[2 * i] = _mm512_permutex2var_ps(r[i], lo, r[i + 8]);
                    t[2 * i + 1] = _mm512_permutex2var_ps(r[i], hi, r[i + 8]);
                }
                POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) r[i] = t[i];
            }
            return;
        } else
#endif
#if defined(__AVX2__)
        if constexpr (arch_ops<Arch>::is_avx2) {
            __m256 t[8], u[8];
            POSENC_UNROLL for (std::size_t i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
            }
            POSENC_UNROLL for (std::size_t i = 0; i < 8; i += 4) {
                u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
                u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
            }
            POSENC_UNROLL for (std::size_t i = 0; i < 4; ++i) {
                r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
                r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
            }
            return;
        } else
#endif
#if defined(__SSE2__)
        if constexpr (W == 4 && (arch_ops<Arch>::is_sse4_1 || arch_ops<Arch>::is_sse2)) {
            const __m128 t0 = _mm_unpacklo_ps(r[0], r[1]), t1 = _mm_unpackhi_ps(r[0], r[1]);
            const __m128 t2 = _mm_unpacklo_ps(r[2], r[3]), t3 = _mm_unpackhi_ps(r[2], r[3]);
            r[0] = _mm_movelh_ps(t0, t2);
            r[1] = _mm_movehl_ps(t2, t0);
            r[2] = _mm_movelh_ps(t1, t3);
            r[3] = _mm_movehl_ps(t3, t1);
            return;
        } else
#endif
        {
            alignas(64) float m[W][W];
            for (std::size_t i = 0; i < W; ++i) r[i].store_aligned(m[i]);
            for (std::size_t i = 0; i < W; ++i)
                for (std::size_t j = 0; j < i; ++j) {
                    const float x = m[i][j];
                    m[i][j] = m[j][i];
                    m[j][i] = x;
                }
            for (std::size_t i = 0; i < W; ++i) r[i] = batch::load_aligned(m[i]);
        }
    }

    /// kt[d][j] = k_j[d] (0 for keys ≥ a.keys): W keys × W dims at a time through registers, the
    /// last D mod W dims per element.
    template <class E>
    static void pack_kt(const attn_qk_args& a) noexcept {
        const E* k = static_cast<const E*>(a.k);
        const std::size_t D = a.head_dim, Dw = D / W * W;
        float* kt = a.kt;
        for (std::size_t j0 = 0; j0 < BK; j0 += W) {
            const std::size_t n = a.keys > j0 ? (a.keys - j0 < W ? a.keys - j0 : W) : 0;
            const E* k0 = n > 0 ? k + j0 * a.k_stride : k;
            if (n == W) {
                for (std::size_t d0 = 0; d0 < Dw; d0 += W) {
                    batch r[W];
                    POSENC_UNROLL for (std::size_t i = 0; i < W; ++i) r[i] = arch_ops<Arch>::load(k0 + i * a.k_stride + d0);
                    transpose(r);
                    POSENC_UNROLL for (std::size_t i = 0; i < W; ++i) r[i].store_aligned(kt + (d0 + i) * BK + j0);
                }
            } else {
                for (std::size_t d0 = 0; d0 < Dw; d0 += W) {
                    batch r[W];
                    for (std::size_t i = 0; i < W; ++i) r[i] = i < n ? arch_ops<Arch>::load(k0 + i * a.k_stride + d0) : batch(0.0f);
                    transpose(r);
                    for (std::size_t i = 0; i < W; ++i) r[i].store_aligned(kt + (d0 + i) * BK + j0);
                }
            }
            for (std::size_t d = Dw; d < D; ++d)
                for (std::size_t i = 0; i < W; ++i) kt[d * BK + j0 + i] = i < n ? to_float(k0[i * a.k_stride + d]) : 0.0f;
        }
    }

    /// Register blocks of the tile products: MR rows × CQ vectors of accumulators (24 of AVX-512's 32
    /// registers, 12 of AVX2's and SSE's 16), the rest for the streamed vectors and the broadcast.
    /// Every element is one serial FMA chain in the same order whatever the block, so tail rows (smaller
    /// blocks) compute exactly what a full block does.
    static constexpr std::size_t MR = 6;
    static constexpr std::size_t CQ = arch_ops<Arch>::is_avx512 ? CV : (CV < 2 ? CV : 2);
    static_assert(NV % CQ == 0);

    /// The keys rows [r, r + R) need (attn_qk_args::row_keys): the largest of theirs, or all.
    template <std::size_t R>
    static std::size_t block_keys(const std::size_t* row_keys, std::size_t r, std::size_t all) noexcept {
        if (!row_keys) return all;
        std::size_t n = 0;
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) n = row_keys[r + i] > n ? row_keys[r + i] : n;
        return n < all ? n : all;
    }

    /// S rows [r, r + R), key vectors [c, c + C) from the packed K tile: broadcast q[r + i][d], stream kt[d][·].
    template <std::size_t R, std::size_t C>
    static void qk_chunk(const attn_qk_args& a, std::size_t r, std::size_t c) noexcept {
        const std::size_t D = a.head_dim;
        const float* q0 = a.q + r * D;
        batch acc[R][C];
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i)
            POSENC_UNROLL for (std::size_t u = 0; u < C; ++u) acc[i][u] = batch(0.0f);
        const float* kc = a.kt + c * W;
        for (std::size_t d = 0; d < D; ++d) {
            batch kv[C];
            POSENC_UNROLL for (std::size_t u = 0; u < C; ++u) kv[u] = batch::load_aligned(kc + d * BK + u * W);
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) {
                const batch qb(q0[i * D + d]);
                POSENC_UNROLL for (std::size_t u = 0; u < C; ++u) acc[i][u] = xsimd::fma(qb, kv[u], acc[i][u]);
            }
        }
        if (a.row_scale) {
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) {
                const batch sc(a.row_scale[r + i]);
                POSENC_UNROLL for (std::size_t u = 0; u < C; ++u) acc[i][u] *= sc;
            }
        }
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i)
            POSENC_UNROLL for (std::size_t u = 0; u < C; ++u) acc[i][u].store_aligned(a.s + (r + i) * BK + (c + u) * W);
    }

    /// The last n < CQ key vectors of a block, as one chunk of that width.
    template <std::size_t R, std::size_t C = CQ - 1>
    static void qk_rest(const attn_qk_args& a, std::size_t r, std::size_t c, std::size_t n) noexcept {
        if constexpr (C > 0) {
            if (n == C) return qk_chunk<R, C>(a, r, c);
            qk_rest<R, C - 1>(a, r, c, n);
        }
    }

    /// S rows [r, r + R): CQ key vectors at a time, up to the vector holding the block's last key.
    template <std::size_t R>
    static void qk_block(const attn_qk_args& a, std::size_t r) noexcept {
        const std::size_t nv = (block_keys<R>(a.row_keys, r, BK) + W - 1) / W;
        std::size_t c = 0;
        for (; c + CQ <= nv; c += CQ) qk_chunk<R, CQ>(a, r, c);
        qk_rest<R>(a, r, c, nv - c);
    }

    static void qk(const attn_qk_args& a) noexcept {
        if (a.rows <= dot_rows) {
            if (a.k_type == dtype::bf16) return qk_dot<bf16>(a);
            if (a.k_type == dtype::fp16) return qk_dot<fp16>(a);
            return qk_dot<float>(a);
        }
        if (a.k_type == dtype::bf16)
            pack_kt<bf16>(a);
        else if (a.k_type == dtype::fp16)
            pack_kt<fp16>(a);
        else
            pack_kt<float>(a);
        // The rows ahead (the tile's V, into L2) asked for a few before each block of rows (the last
        // few after them), spread over the products so that the requests stay in flight without
        // crowding the fill buffers.
        const std::size_t per_block = (a.ahead.rows + a.rows / MR) / (a.rows / MR + 1);
        std::size_t r = 0, asked = 0;
        for (; r + MR <= a.rows; r += MR) {
            for (const std::size_t e = asked + per_block < a.ahead.rows ? asked + per_block : a.ahead.rows; asked < e; ++asked)
                prefetch_ahead(a.ahead, asked);
            qk_block<MR>(a, r);
        }
        for (; asked < a.ahead.rows; ++asked) prefetch_ahead(a.ahead, asked);
        if (a.rows - r >= 4) qk_block<4>(a, r), r += 4;
        if (a.rows - r >= 2) qk_block<2>(a, r), r += 2;
        if (a.rows - r >= 1) qk_block<1>(a, r);
    }

    /// p[r][j] of a pv step (attn_pv_args: row-major, or transposed for the backward's key side).
    template <bool Tr>
    static float p_at(const attn_pv_args& a, std::size_t r, std::size_t j) noexcept { return Tr ? a.p[j * BK + r] : a.p[r * BK + j]; }

    /// Accumulator rows [r0, r0 + R), columns [c0, c0 + C·W) += p · V over the block's keys, each V
    /// vector widened as it is loaded. bf16 rows on AVX-512 with BW are read as word pairs instead
    /// (arch_ops::load_pairs: one shift or one mask per vector, where a widening load costs a shuffle
    /// and a shift; on AVX2 pairs measured no faster), the accumulators then held as even and odd
    /// columns, split on load and joined on store. Each column gets the same FMAs in the same order
    /// either way, so the same bits.
    template <class E, std::size_t R, std::size_t C, bool Tr>
    static void pv_block(const attn_pv_args& a, std::size_t r0, std::size_t c0, std::size_t keys) noexcept {
        using ops = arch_ops<Arch>;
        constexpr bool pairs = std::is_same_v<E, bf16> && ops::is_avx512 && ops::has_bf16_pairs && C % 2 == 0;
        using unit = std::conditional_t<pairs, typename ops::lane_pairs, batch>;
        constexpr std::size_t U = pairs ? C / 2 : C, UW = pairs ? 2 * W : W;  // units per block, columns per unit
        const E* v = static_cast<const E*>(a.v);
        unit acc[R][U];
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i)
            POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
                const float* at = a.acc + (r0 + i) * a.acc_stride + c0 + u * UW;
                if constexpr (pairs)
                    acc[i][u] = ops::split_pairs(batch::load_aligned(at), batch::load_aligned(at + W));
                else
                    acc[i][u] = batch::load_aligned(at);
            }
        if (a.acc_scale)
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) {
                const batch sc(a.acc_scale[r0 + i]);
                POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) acc[i][u] = pv_scaled(acc[i][u], sc);
            }
        const std::size_t rows_ahead = a.rows <= dot_rows ? a.stream_rows : prefetch_rows;
        for (std::size_t j = 0; j < keys; ++j) {
            const E* vr = v + j * a.v_stride + c0;
            if (c0 == 0 && r0 == 0) {
                prefetch_row(v, j + rows_ahead, a.v_stride, a.dv);
                prefetch_ahead(a.ahead, j);
            }
            unit vv[U];
            POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
                if constexpr (pairs)
                    vv[u] = ops::load_pairs(vr + u * UW);
                else
                    vv[u] = ops::load(vr + u * UW);
            }
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) {
                const batch pb(p_at<Tr>(a, r0 + i, j));
                POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) acc[i][u] = pv_fma(pb, vv[u], acc[i][u]);
            }
        }
        if (c0 == 0 && r0 == 0)  // the rows ahead a shorter first block did not ask for
            for (std::size_t j = keys; j < a.keys; ++j) prefetch_ahead(a.ahead, j);
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i)
            POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
                float* at = a.acc + (r0 + i) * a.acc_stride + c0 + u * UW;
                if constexpr (pairs) {
                    batch lo, hi;
                    ops::join_pairs(acc[i][u], lo, hi);
                    lo.store_aligned(at);
                    hi.store_aligned(at + W);
                } else {
                    acc[i][u].store_aligned(at);
                }
            }
    }
    /// pv_block's per-unit arithmetic: one vector, or a pair of even and odd columns lane by lane.
    static batch pv_scaled(const batch& x, const batch& s) noexcept { return x * s; }
    static typename arch_ops<Arch>::lane_pairs pv_scaled(const typename arch_ops<Arch>::lane_pairs& x, const batch& s) noexcept {
        return {x.even * s, x.odd * s};
    }
    static batch pv_fma(const batch& p, const batch& v, const batch& acc) noexcept { return xsimd::fma(p, v, acc); }
    static typename arch_ops<Arch>::lane_pairs pv_fma(const batch& p, const typename arch_ops<Arch>::lane_pairs& v,
                                                     const typename arch_ops<Arch>::lane_pairs& acc) noexcept {
        return {xsimd::fma(p, v.even, acc.even), xsimd::fma(p, v.odd, acc.odd)};
    }

    template <class E, std::size_t R, bool Tr>
    static void pv_rows(const attn_pv_args& a, std::size_t r0) noexcept {
        const std::size_t keys = block_keys<R>(a.row_keys, r0, a.keys);
        std::size_t c = 0;
        for (; c + CQ * W <= a.dv; c += CQ * W) pv_block<E, R, CQ, Tr>(a, r0, c, keys);
        for (; c + W <= a.dv; c += W) pv_block<E, R, 1, Tr>(a, r0, c, keys);
        if (c < a.dv) pv_tail<E, R, Tr>(a, r0, c, keys);
    }

    /// The last dv − c0 < W columns with the same vector operation per lane as pv_block. (A scalar loop here
    /// rounded differently depending on the number of keys in the tile, so a decode chunk against a
    /// cache differed from prefill in the last bit, with FMA on AVX2 and AVX-512.) The accumulator rows
    /// are padded to 16 lanes; V's are not, so each key's tail is copied into zeroed lanes.
    template <class E, std::size_t R, bool Tr>
    static void pv_tail(const attn_pv_args& a, std::size_t r0, std::size_t c0, std::size_t keys) noexcept {
        const E* v = static_cast<const E*>(a.v);
        const std::size_t m = a.dv - c0;
        batch acc[R];
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) acc[i] = batch::load_aligned(a.acc + (r0 + i) * a.acc_stride + c0);
        if (a.acc_scale)
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) acc[i] *= batch(a.acc_scale[r0 + i]);
        alignas(64) float vt[W] = {};
        for (std::size_t j = 0; j < keys; ++j) {
            for (std::size_t i = 0; i < m; ++i) vt[i] = to_float(v[j * a.v_stride + c0 + i]);
            const batch vv = batch::load_aligned(vt);
            POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) acc[i] = xsimd::fma(batch(p_at<Tr>(a, r0 + i, j)), vv, acc[i]);
        }
        POSENC_UNROLL for (std::size_t i = 0; i < R; ++i) acc[i].store_aligned(a.acc + (r0 + i) * a.acc_stride + c0);
    }

    static void pv(const attn_pv_args& a) noexcept {
        assert(a.acc_stride % 16 == 0 && a.acc_stride >= a.dv);  // pv_tail reads and writes whole vectors
        assert(reinterpret_cast<std::uintptr_t>(a.acc) % 64 == 0);
        if (a.p_transposed) return pv_all<float, true>(a);  // (the backward's blocks: float rows)
        if (a.v_type == dtype::bf16) return pv_all<bf16, false>(a);
        if (a.v_type == dtype::fp16) return pv_all<fp16, false>(a);
        pv_all<float, false>(a);
    }
    template <class E, bool Tr>
    static void pv_all(const attn_pv_args& a) noexcept {
        std::size_t r = 0;
        for (; r + MR <= a.rows; r += MR) pv_rows<E, MR, Tr>(a, r);
        if (a.rows - r >= 4) pv_rows<E, 4, Tr>(a, r), r += 4;
        for (; r < a.rows; ++r) pv_rows<E, 1, Tr>(a, r);
    }
};

template <class Arch>
void attn_qk_functor::operator()(Arch, const attn_qk_args& a) const noexcept {
    attention_steps<Arch>::qk(a);
}
template <class Arch>
void attn_softmax_functor::operator()(Arch, const attn_softmax_args& a) const noexcept {
    attention_steps<Arch>::softmax(a);
}
template <class Arch>
void attn_pv_functor::operator()(Arch, const attn_pv_args& a) const noexcept {
    attention_steps<Arch>::pv(a);
}

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP

#undef POSENC_UNROLL
