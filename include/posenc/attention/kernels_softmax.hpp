#pragma once
// The attention kernel's online-softmax step, templated on the architecture (kernels.hpp's steps
// derive from this struct; only arch-templated code, the COMDAT rule of kernels.hpp).
//
// A tile's scores become p = exp(s − m_new) in place, each row's running max m and sum l are updated,
// and each row's rescale factor e^{m_old − m_new} goes to the pv step, which applies it to the
// accumulator as it loads the row (one pass over acc per tile). Rows are taken W at a time so that
// their maxima, sums and rescale factors are lanes of one vector (one exp per W rows, and on AVX-512
// one transposing reduction tree per 16 rows): row by row, each row is a serial chain of horizontal
// reductions and a scalar exp that the core cannot overlap with the next row's. Lane i of a reduction
// is exactly hsum's (hmax's) tree over row i, in the same operand order, and every other step is
// lane-wise, so the step gives a row the same bits whichever rows share its vector; a few rows go one
// at a time (softmax_row) with the same operations. A row whose maximum is not finite (+∞ logits, or a
// NaN met) takes a cold path with IEEE semantics (exp_unbounded): NaN stays NaN, +∞ logits share the
// weight.

#include <cstddef>

#include "posenc/attention/functors.hpp"
#include "posenc/attention/kernels_math.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/xsimd_compat.hpp"  // xsimd
#include "posenc/core/detail/unroll.hpp"  // last: POSENC_UNROLL, #undef at the end

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#warning "posenc: -ffinite-math-only (-ffast-math) folds away the NaN checks of the attention softmax: NaN logits may come out as numbers"
#endif

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct attention_softmax_step : attention_vector_math<Arch> {
    using batch = xsimd::batch<float, Arch>;
    static constexpr std::size_t W = batch::size;
    static constexpr std::size_t BK = attn_key_tile;
    static constexpr std::size_t NV = BK / W;
    static_assert(BK % W == 0 && NV <= 16, "POSENC_UNROLL unrolls loops of up to 16 trips completely");
    static constexpr float ninf = -__builtin_inff();  // (not numeric_limits: a weak function at -O0)

    using math = attention_vector_math<Arch>;
    using math::exp_nonpositive;
    using math::hmax;
    using math::hsum;
    using math::tanh_;

#if defined(__AVX512F__)
    /// Lane i of the result = v[i]'s lanes combined by `op` in hsum's pairwise tree (lanes 8 apart,
    /// then 4, 2, 1), bit for bit, for all 16 vectors at once: 30 two-source shuffles and 15 ops
    /// instead of 16 separate reductions. The shuffles (vshuff32x4, vshufps) leave their sources
    /// intact, so no copies, and the network transposes 4 × 4: v is fed in that order
    /// (transposed4x4) so that lane i comes out as v[i].
    template <class Op>
    static __m512 pairwise16(const __m512 (&v)[16], Op op) noexcept {
        // The same immediates pick 128-bit blocks in vshuff32x4 and elements of each block in vshufps:
        // (first half of x, first half of y) and (second halves), or (evens of x, evens of y) and (odds).
        constexpr int first_halves = 0x44, second_halves = 0xEE, evens = 0x88, odds = 0xDD;
        __m512 t[8], u[4], w[2];
        POSENC_UNROLL for (std::size_t i = 0; i < 8; ++i) {  // lanes 8 apart
            const __m512 &x = v[transposed4x4(2 * i)], &y = v[transposed4x4(2 * i + 1)];
            t[i] = op(_mm512_shuffle_f32x4(x, y, first_halves), _mm512_shuffle_f32x4(x, y, second_halves));
        }
        POSENC_UNROLL for (std::size_t i = 0; i < 4; ++i)  // 4 apart
            u[i] = op(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], evens), _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], odds));
        POSENC_UNROLL for (std::size_t i = 0; i < 2; ++i)  // 2 apart
            w[i] = op(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], first_halves),
                      _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], second_halves));
        return op(_mm512_shuffle_ps(w[0], w[1], evens), _mm512_shuffle_ps(w[0], w[1], odds));  // 1 apart
    }
    /// Index j of a 4 × 4 matrix stored by rows, read by columns.
    static constexpr std::size_t transposed4x4(std::size_t j) noexcept { return j / 4 + 4 * (j % 4); }
    static __m512 pairwise_sums16(const __m512 (&v)[16]) noexcept {
        return pairwise16(v, [](__m512 x, __m512 y) noexcept { return _mm512_add_ps(x, y); });
    }
#endif

    /// Lane i = hsum(v[i]).
    static batch row_sums(const batch (&v)[W]) noexcept {
#if defined(__AVX512F__)
        if constexpr (arch_ops<Arch>::is_avx512) {
            __m512 r[16];
            POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) r[i] = v[i];
            return pairwise_sums16(r);
        } else
#endif
        {
            alignas(64) float t[W];
            POSENC_UNROLL for (std::size_t i = 0; i < W; ++i) t[i] = hsum(v[i]);
            return batch::load_aligned(t);
        }
    }
    /// Lane i = hmax(v[i]).
    static batch row_maxes(const batch (&v)[W]) noexcept {
#if defined(__AVX512F__)
        if constexpr (arch_ops<Arch>::is_avx512) {
            __m512 r[16];
            POSENC_UNROLL for (std::size_t i = 0; i < 16; ++i) r[i] = v[i];
            return pairwise16(r, [](__m512 x, __m512 y) noexcept { return _mm512_max_ps(x, y); });
        } else
#endif
        {
            alignas(64) float t[W];
            POSENC_UNROLL for (std::size_t i = 0; i < W; ++i) t[i] = hmax(v[i]);
            return batch::load_aligned(t);
        }
    }

    static void softmax(const attn_softmax_args& a) noexcept {
        for (std::size_t r0 = 0; r0 < a.rows; r0 += W) {
            const std::size_t n = a.rows - r0 < W ? a.rows - r0 : W;
            if (4 * n <= W)  // (decode's few rows: a vector of mostly empty lanes would cost more than it saves)
                for (std::size_t r = r0; r < r0 + n; ++r) softmax_row(a, r);
            else
                softmax_rows(a, r0, n);
        }
    }

    /// A row's scores into v (keys past the tile's end −∞, finite ones soft-capped, stored back when
    /// `store_capped`), and the lanes of its max.
    static batch load_scores(const attn_softmax_args& a, float* s, batch (&v)[NV], bool store_capped) noexcept {
        const batch neg(ninf);
        for (std::size_t j = a.keys; j < BK; ++j) s[j] = ninf;
        POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) v[u] = batch::load_aligned(s + u * W);
        if (a.softcap > 0.0f) {
            const batch c(a.softcap), inv(1.0f / a.softcap);
            POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) {
                v[u] = xsimd::select(v[u] == neg, v[u], c * tanh_(v[u] * inv));
                if (store_capped) v[u].store_aligned(s + u * W);
            }
        }
        batch mx = v[0];
        POSENC_UNROLL for (std::size_t u = 1; u < NV; ++u) mx = xsimd::max(mx, v[u]);
        return mx;
    }

    /// Whether a row's scores hold a NaN (the max can drop one: x86's max returns its second operand).
    static bool any_nan(const batch (&v)[NV]) noexcept {
        auto nan = xsimd::isnan(v[0]);  // (not v != v: AVX-512's != is an ordered compare)
        POSENC_UNROLL for (std::size_t u = 1; u < NV; ++u) nan = nan | xsimd::isnan(v[u]);
        return xsimd::any(nan);
    }

    /// p = e^{s − m} where m is +∞ or NaN, where the difference is no guide (IEEE: ∞ − ∞ and x − NaN
    /// are NaN): under m = +∞ the +∞ logits share the weight (p = 1, the limit of the softmax) and a
    /// NaN logit stays NaN; under m = NaN (a row that has met a NaN) every visible key gets NaN. A
    /// masked key (−∞) gets 0 either way, so the backward's masked keys get no NaN gradient.
    static batch exp_unbounded(const batch& s, float m) noexcept {
        const batch nan(__builtin_nanf("")), zero(0.0f);
        if (m != m) return xsimd::select(s == batch(ninf), zero, nan);
        return xsimd::select(s == batch(-ninf), batch(1.0f), xsimd::select(xsimd::isnan(s), nan, zero));
    }

    /// The running max after a tile whose max is −∞ (all it showed was −∞ and NaN): NaN if a NaN
    /// was among the scores, so the row's output and log-sum-exp are NaN as a direct softmax's.
    static float settle_unseen(const batch (&v)[NV]) noexcept { return any_nan(v) ? __builtin_nanf("") : ninf; }

    /// Row r alone, with the operations of one lane of softmax_rows (the same bits).
    static void softmax_row(const attn_softmax_args& a, std::size_t r) noexcept {
        float* s = a.s + r * BK;
        batch v[NV];
        const float tile_max = hmax(load_scores(a, s, v, false)), m_old = a.m[r];
        float m_new = tile_max > m_old ? tile_max : m_old;
        if (m_new == ninf) m_new = settle_unseen(v);
        if (m_new == ninf) {  // nothing visible so far: p = 0, state unchanged (α = 1)
            POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) batch(0.0f).store_aligned(s + u * W);
            return put_factor(a, r, 1.0f);
        }
        const batch mb(m_new);
        batch sum(0.0f);
        if (m_new < -ninf) {
            POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) {
                const batch p = exp_nonpositive(v[u] - mb);
                p.store_aligned(s + u * W);
                sum += p;
            }
        } else {  // m = +∞ or NaN
            POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) {
                const batch p = exp_unbounded(v[u], m_new);
                p.store_aligned(s + u * W);
                sum += p;
            }
        }
        const batch alpha = rescale_factor(batch(m_old), batch(m_new));
        a.l[r] = xsimd::fma(batch(a.l[r]), alpha, batch(hsum(sum))).get(0);
        a.m[r] = m_new;
        put_factor(a, r, alpha.get(0));
    }

    /// α = e^{m_old − m_new}: 0 after a row that had seen nothing (e^{−∞}), exactly 1 for an unchanged
    /// max (+∞ included, where the difference would be NaN).
    static batch rescale_factor(const batch& m_old, const batch& m_new) noexcept {
        return xsimd::select(m_old == m_new, batch(1.0f), exp_nonpositive(m_old - m_new));
    }

    /// α into a.alpha[r] for the pv step (every row gets its factor: the buffer holds an earlier tile's).
    static void put_factor(const attn_softmax_args& a, std::size_t r, float alpha) noexcept {
        if (a.alpha) a.alpha[r] = alpha;
    }

    /// Rows [r0, r0 + n), n ≤ W, as the lanes of one vector (lanes ≥ n: a row that sees nothing).
    static void softmax_rows(const attn_softmax_args& a, std::size_t r0, std::size_t n) noexcept {
        const batch neg(ninf);
        batch part[W];
        // The scores (keys past the tile's end −∞, soft-capped in place) and each row's lanes of its max.
        for (std::size_t i = 0; i < n; ++i) {
            batch v[NV];
            part[i] = load_scores(a, a.s + (r0 + i) * BK, v, true);
        }
        for (std::size_t i = n; i < W; ++i) part[i] = neg;

        alignas(64) float lanes[W];
        for (std::size_t i = 0; i < W; ++i) lanes[i] = i < n ? a.m[r0 + i] : ninf;
        const batch m_old = batch::load_aligned(lanes);
        const batch mx = row_maxes(part);
        const batch m_new = xsimd::max(mx, m_old);
        alignas(64) float m_row[W];
        m_new.store_aligned(m_row);

        for (std::size_t i = 0; i < n; ++i) {
            float* s = a.s + (r0 + i) * BK;
            batch v[NV];
            POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) v[u] = batch::load_aligned(s + u * W);
            if (m_row[i] == ninf) m_row[i] = settle_unseen(v);
            if (m_row[i] == ninf) {  // nothing visible so far: p = 0, state unchanged (α = 1 below)
                POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) batch(0.0f).store_aligned(s + u * W);
                part[i] = batch(0.0f);
                continue;
            }
            const batch mb(m_row[i]);
            batch sum(0.0f);
            if (m_row[i] < -ninf) {
                POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) {
                    const batch p = exp_nonpositive(v[u] - mb);  // exp(−∞) = 0
                    p.store_aligned(s + u * W);
                    sum += p;
                }
            } else {  // m = +∞ or NaN
                POSENC_UNROLL for (std::size_t u = 0; u < NV; ++u) {
                    const batch p = exp_unbounded(v[u], m_row[i]);
                    p.store_aligned(s + u * W);
                    sum += p;
                }
            }
            part[i] = sum;
        }
        for (std::size_t i = n; i < W; ++i) part[i] = batch(0.0f);

        const batch alpha = rescale_factor(m_old, batch::load_aligned(m_row));  // (settle_unseen may have changed it)
        for (std::size_t i = 0; i < W; ++i) lanes[i] = i < n ? a.l[r0 + i] : 0.0f;
        const batch l_new = xsimd::fma(batch::load_aligned(lanes), alpha, row_sums(part));
        alignas(64) float alpha_row[W];
        alpha.store_aligned(alpha_row);
        l_new.store_aligned(lanes);
        for (std::size_t i = 0; i < n; ++i) {
            a.l[r0 + i] = lanes[i];
            a.m[r0 + i] = m_row[i];
            put_factor(a, r0 + i, alpha_row[i]);
        }
    }
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP

#undef POSENC_UNROLL
