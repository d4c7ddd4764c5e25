#pragma once
// xsimd kernels for the rotary hot loop, templated on the architecture tag. (One long header: the
// kernels are one class template that each architecture's unit instantiates whole, instantiate.hpp.)
//
// Per token: one cos/sin row (from the caller's rows, a table, or computed here), shared by every
// head of Q and K; per head: read the source (float, bf16 or fp16), optionally normalise (fused
// per-head RMSNorm), rotate in float32, round once to the destination type and write it (in place or
// to another buffer: one read and one write). A head's chunk (up to `unroll` vectors per half) is
// loaded completely before it is stored — on Zen 5 a load/store-interleaved 512-bit loop ran at half
// the speed.
//
// Batch invariance: every lane of every width goes through the same operations in the same order —
// the same FMAs (arch_ops), the cos/sin row computed by the same per-lane double formulas (prefill's
// recurrence rows only where they provably equal those), the lanes
// past the last full vector through the same vector code on a zero-padded copy, the norm's sum of
// squares in a fixed 32-lane order — so a token's result does not depend on the vector width, on the
// call's size or on where the token sits in the call.
//
// Only arch-templated code lives here (see rotate_args.hpp for why).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "posenc/core/dtypes.hpp"
#include "posenc/core/detail/angles.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/functors.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/xsimd_compat.hpp"
#include "posenc/core/detail/unroll.hpp"  // last: POSENC_UNROLL, #undef at the end

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

namespace patterns {
struct duplicate_low_half {  // (c0, c1, …) → (c0, c0, c1, c1, …)
    static constexpr unsigned get(unsigned i, unsigned) noexcept { return i / 2u; }
};
struct duplicate_high_half {  // (…, c_{n/2}, c_{n/2+1}, …) → (c_{n/2}, c_{n/2}, c_{n/2+1}, …)
    static constexpr unsigned get(unsigned i, unsigned n) noexcept { return n / 2u + i / 2u; }
};
}  // namespace patterns

/// Makes the compiler treat a loaded vector as produced here, so every load of a head happens before
/// its first store. Compilers otherwise interleave them (load, store, load, store, …), and on Zen 5
/// that made the 512-bit loop run at half the speed of the 256-bit one at L3/DRAM sizes. Register
/// operands only: no memory clobber, nothing is spilled.
template <class Batch>
inline void pin_in_register(Batch& b) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    asm volatile("" : "+v"(b.data));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
    asm volatile("" : "+w"(b.data));
#else
    (void)b;
#endif
}

template <class T>
struct type_tag {
    using type = T;
};

template <class Arch>
struct kernels {
    using ops = arch_ops<Arch>;
    using fbatch = xsimd::batch<float, Arch>;
    using dbatch = xsimd::batch<double, Arch>;
    static constexpr std::size_t W = fbatch::size;
    static constexpr std::size_t WD = dbatch::size;
    static constexpr std::size_t row_capacity = max_rotary_dim + 2 * W;  // floats, with padding
    static constexpr std::int64_t far_position = std::int64_t{1} << 26;
    static constexpr std::size_t norm_lanes = 32;  // the norm's partial sums
    static_assert(norm_lanes % W == 0, "the norm's fixed summation order needs W | norm_lanes");

    // ---- cos/sin rows ---------------------------------------------------------------------------

    /// cos/sin × amplitude of p·θᵢ for one position, into c[0, pairs) and s[0, pairs); c and s need
    /// room for `pairs` rounded up to W. All in double: the angle is reduced to a quadrant q and
    /// r ∈ [−π/4, π/4]; cos r and sin r come from their Taylor series (through r¹⁶ and r¹⁵, whose
    /// remainders are below 1e-16 there) and are mapped to the quadrant; only the result is rounded
    /// to float. Cheap enough to run per token in the hot loop (no general-purpose sincos with its
    /// own range reduction), and equal to the scalar reference up to a rare 1-ulp double rounding.
    /// Every lane takes the same operations whatever the width, so the rows are width-independent.
    static void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position, double amplitude,
                            float* c, float* s) noexcept {
        alignas(64) double cd[max_rotary_dim / 2 + 2 * W], sd[max_rotary_dim / 2 + 2 * W];
        cos_sin_row(inv_freq, pairs, position, amplitude, cd, sd);
        to_float(cd, sd, pairs, c, s);
    }

    static void to_float(const double* cd, const double* sd, std::size_t pairs, float* c, float* s) noexcept {
        for (std::size_t i = 0; i < pairs; ++i) {
            c[i] = static_cast<float>(cd[i]);
            s[i] = static_cast<float>(sd[i]);
        }
    }

    /// The same in double, into cd and sd (room for `pairs` rounded up to the double vector width).
    static void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position, double amplitude,
                            double* cd, double* sd) noexcept {
        if (position > far_position || position < -far_position) {
            // The vector reduction needs n·π/2 exact: beyond 2^26 (and without FMA hardware, where
            // xsimd emulates fnma) that no longer holds, so far positions take the scalar path.
            for (std::size_t i = 0; i < pairs; ++i) {
                const double r = detail::reduce_angle<Arch>(static_cast<double>(position) * inv_freq[i]);
                cd[i] = amplitude * std::cos(r);
                sd[i] = amplitude * std::sin(r);
            }
            return;
        }
        constexpr double half_pi_hi = 1.5707963267948966, half_pi_lo = 6.123233995736766e-17;
        constexpr double two_over_pi = 0.6366197723675814;
        // Whole vectors read in place, the last partial one from a zero-padded copy (g++ made a copy
        // of the whole row a rep movs, slow to start in a one-token call).
        const std::size_t full = pairs / WD * WD, padded = (pairs + WD - 1) / WD * WD;
        alignas(64) double tail[WD] = {};
        for (std::size_t i = full; i < pairs; ++i) tail[i - full] = inv_freq[i];
        const dbatch p(static_cast<double>(position)), amp(amplitude), one(1.0), two(2.0), three(3.0);
        for (std::size_t i = 0; i < padded; i += WD) {
            const dbatch a = p * (i < full ? dbatch::load_unaligned(inv_freq + i) : dbatch::load_aligned(tail));
            const dbatch n = xsimd::nearbyint(a * dbatch(two_over_pi));
            const dbatch r = ops::fnma(n, dbatch(half_pi_lo), ops::fnma(n, dbatch(half_pi_hi), a));
            const dbatch q = ops::fnma(xsimd::floor(n * dbatch(0.25)), dbatch(4.0), n);  // n mod 4
            const dbatch z = r * r;
            dbatch sn = ops::fma(z, dbatch(-1.0 / 1307674368000.0), dbatch(1.0 / 6227020800.0));
            sn = ops::fma(z, sn, dbatch(-1.0 / 39916800.0));
            sn = ops::fma(z, sn, dbatch(1.0 / 362880.0));
            sn = ops::fma(z, sn, dbatch(-1.0 / 5040.0));
            sn = ops::fma(z, sn, dbatch(1.0 / 120.0));
            sn = ops::fma(z, sn, dbatch(-1.0 / 6.0));
            sn = ops::fma(z * r, sn, r);
            dbatch cs = ops::fma(z, dbatch(1.0 / 20922789888000.0), dbatch(-1.0 / 87178291200.0));
            cs = ops::fma(z, cs, dbatch(1.0 / 479001600.0));
            cs = ops::fma(z, cs, dbatch(-1.0 / 3628800.0));
            cs = ops::fma(z, cs, dbatch(1.0 / 40320.0));
            cs = ops::fma(z, cs, dbatch(-1.0 / 720.0));
            cs = ops::fma(z, cs, dbatch(1.0 / 24.0));
            cs = ops::fma(z * z, cs, ops::fnma(dbatch(0.5), z, one));
            // angle = n·π/2 + r: q = 1 gives (cos, sin) = (−sin r, cos r), q = 2 (−cos r, −sin r),
            // q = 3 (sin r, −cos r).
            const auto odd = (q == one) | (q == three);
            const dbatch sv = xsimd::select(odd, cs, sn), cv = xsimd::select(odd, sn, cs);
            (xsimd::select((q == one) | (q == two), -cv, cv) * amp).store_unaligned(cd + i);
            (xsimd::select(q >= two, -sv, sv) * amp).store_unaligned(sd + i);
        }
    }

    /// Consecutive positions (prefill): the next row from the previous one by the angle-addition
    /// formulas in double, (c, s) ← (c·cos θ − s·sin θ, s·cos θ + c·sin θ), re-seeded with a direct
    /// row at every multiple of `reseed`. A recurrence value v is used only where it provably rounds
    /// to the same float as the direct row's: float(v − B) == float(v + B), with B bounding their
    /// difference (the two angles' roundings, (|p| + reseed)·θ·2^-52, plus 1e-13 for 31 steps of a
    /// few double ulps, × amplitude). Otherwise (a small fraction of the rows, more at large positions)
    /// the row is computed directly. So every row is bit-identical to the direct one — a token's
    /// result does not depend on where its call starts — at a fraction of the direct row's cost.
    struct consecutive_rows {
        static constexpr std::int64_t reseed = 32;
        alignas(64) double cd[max_rotary_dim / 2 + 2 * W], sd[max_rotary_dim / 2 + 2 * W];
        alignas(64) double step_c[max_rotary_dim / 2 + 2 * W], step_s[max_rotary_dim / 2 + 2 * W];
        std::size_t pairs = 0;

        void start(const double* inv_freq, std::size_t n) noexcept {
            pairs = n;
            cos_sin_row(inv_freq, n, 1, 1.0, step_c, step_s);
            const std::size_t padded = (n + WD - 1) / WD * WD;
            for (std::size_t i = n; i < padded; ++i) step_c[i] = step_s[i] = 0.0;
        }

        void advance() noexcept {
            for (std::size_t i = 0; i < pairs; i += WD) {
                const dbatch c0 = dbatch::load_aligned(cd + i), s0 = dbatch::load_aligned(sd + i);
                const dbatch sc = dbatch::load_aligned(step_c + i), ss = dbatch::load_aligned(step_s + i);
                ops::fnma(s0, ss, c0 * sc).store_aligned(cd + i);
                ops::fma(c0, ss, s0 * sc).store_aligned(sd + i);
            }
        }

        /// Rounds the recurrence row to float; false if some value might round differently from the
        /// direct row's.
        bool to_float_checked(const double* inv_freq, std::int64_t position, double amplitude, float* c,
                              float* s) const noexcept {
            // (No std::abs: a non-template inline function, the COMDAT rule.)
            const double p = static_cast<double>(position);
            const double reach = ((p < 0 ? -p : p) + reseed) * 0x1p-52;
            const double amp = amplitude < 0 ? -amplitude : amplitude;
            int unstable = 0;
            for (std::size_t i = 0; i < pairs; ++i) {
                const double b = amp * (reach * inv_freq[i] + 1e-13);
                const double x = cd[i], y = sd[i];
                c[i] = static_cast<float>(x);
                s[i] = static_cast<float>(y);
                unstable |= (static_cast<float>(x - b) != static_cast<float>(x + b)) |
                            (static_cast<float>(y - b) != static_cast<float>(y + b));
            }
            return unstable == 0;
        }

        /// Row of `position`; `first` for the first token of a call (or slice).
        void row(const double* inv_freq, std::int64_t position, double amplitude, bool first, float* c,
                 float* s) noexcept {
            const std::int64_t offset = ((position % reseed) + reseed) % reseed;
            if (offset == 0 || first) {
                cos_sin_row(inv_freq, pairs, position - offset, amplitude, cd, sd);
                if (offset == 0) return to_float(cd, sd, pairs, c, s);  // a direct row
                for (std::int64_t k = 0; k < offset; ++k) advance();
            } else {
                advance();
            }
            if (!to_float_checked(inv_freq, position, amplitude, c, s)) cos_sin_row(inv_freq, pairs, position, amplitude, c, s);
        }
    };

    /// Table rows: the same computation for consecutive positions.
    static void table_rows(const table_args& t) noexcept {
        for (std::size_t k = 0; k < t.positions; ++k) {
            float* row = t.out + k * 2 * t.pairs;
            cos_sin_row(t.inv_freq, t.pairs, t.first_position + static_cast<std::int64_t>(k), t.amplitude, row,
                        row + t.pairs);
        }
    }

    // ---- reading a head ----------------------------------------------------------------------------
    // The rotations read their input through a lane source: the stored values widened to float, or
    // (fused norm) those values normalised, (x·scale)·w — two roundings per lane whatever the width.
    // load_padded reads m < W lanes into a zero-padded vector, so the lanes past the last full vector
    // take the same vector code as the others.

    template <class S>
    struct stored_lanes {
        const S* x;
        fbatch load(std::size_t i) const noexcept { return ops::load(x + i); }
        fbatch load_padded(std::size_t i, std::size_t m) const noexcept {
            S in[W] = {};
            for (std::size_t k = 0; k < m; ++k) in[k] = x[i + k];
            return ops::load(static_cast<const S*>(in));
        }
    };

    template <class S>
    struct normed_lanes {
        const S* x;
        const float* w;
        fbatch scale;
        fbatch load(std::size_t i) const noexcept { return (ops::load(x + i) * scale) * fbatch::load_unaligned(w + i); }
        fbatch load_padded(std::size_t i, std::size_t m) const noexcept {
            alignas(64) float wp[W] = {};
            for (std::size_t k = 0; k < m; ++k) wp[k] = w[i + k];
            return (stored_lanes<S>{x}.load_padded(i, m) * scale) * fbatch::load_aligned(wp);
        }
    };

    /// Writes the first m lanes of v to y (m < W), rounded to D.
    template <class D>
    static void store_partial(D* y, const fbatch& v, std::size_t m) noexcept {
        D out[W];
        ops::store(out, v);
        for (std::size_t k = 0; k < m; ++k) y[k] = out[k];
    }

    /// One token's cos/sin rows, in the orders the rotations read them.
    struct token_rows {
        std::size_t head_dim, r, n;
        bool interleaved, out_of_place;
        const float *c, *s;        // compact, direction applied
        const float *cdup, *sdup;  // interleaved: per lane, (c₀, c₀, c₁, c₁, …), (−s₀, s₀, −s₁, s₁, …);
                                   // not rebuilt for a token whose lanes all go through word pairs
        const float *cpair, *spair;  // half-split bf16 pairs: per 2W lanes, the even ones, then the odd ones
        bool pairs;                  // bf16 word pairs allowed: the rows hold no NaN (ops::store_pairs)
        bool prefetch_16bit;         // rotate_args::prefetch_16bit
        bool last;                   // the call's (or slice's) last token: no next token to prefetch
    };

    // ---- rotations -------------------------------------------------------------------------------
    // Each head's chunk of U vectors is loaded completely before any of it is stored. When a token's
    // whole cos/sin row fits in registers (e.g. 128 lanes in AVX-512), it is loaded once per token
    // and kept there for all heads of a tensor ("hoisted"); otherwise each head reads it from L1.

    static constexpr std::size_t registers = W >= 16 ? 32 : 16;  // AVX-512: 32 vector registers
    static constexpr std::size_t hs_unroll = registers / 8;       // 2U cos/sin, 2U data, 2U temporaries
    static constexpr std::size_t il_unroll = registers / 4;       // 2U cos/sin, U data, U temporaries

    template <std::size_t U>
    static void load_row(const float* c, const float* s, std::size_t i, fbatch* cv, fbatch* sv) noexcept {
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
            cv[u] = fbatch::load_unaligned(c + i + u * W);
            sv[u] = fbatch::load_unaligned(s + i + u * W);
        }
    }

    /// Half-split pair (x₁, x₂) → (x₁c − x₂s, x₂c + x₁s); `s` already carries the direction's sign.
    static fbatch half_split_first(const fbatch& x1, const fbatch& x2, const fbatch& c, const fbatch& s) noexcept {
        return ops::fnma(x2, s, x1 * c);
    }
    static fbatch half_split_second(const fbatch& x1, const fbatch& x2, const fbatch& c, const fbatch& s) noexcept {
        return ops::fma(x1, s, x2 * c);
    }

    /// Half-split pairs (i, i + n) for lanes [i, i + U·W), read from src, written to y (which may be
    /// src's memory).
    template <std::size_t U, class Src, class D>
    static void half_split_chunk(const Src& src, D* y, std::size_t i, std::size_t n, const fbatch* cv,
                                 const fbatch* sv) noexcept {
        fbatch x1[U], x2[U];
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
            x1[u] = src.load(i + u * W);
            x2[u] = src.load(n + i + u * W);
        }
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
            pin_in_register(x1[u]);
            pin_in_register(x2[u]);
        }
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
            ops::store(y + i + u * W, half_split_first(x1[u], x2[u], cv[u], sv[u]));
            ops::store(y + n + i + u * W, half_split_second(x1[u], x2[u], cv[u], sv[u]));
        }
    }

    /// Stored bf16 rotated into bf16 goes 2W lanes at a time through word pairs (ops::load_pairs):
    /// half the conversion work of the per-lane path, the same bits.
    template <class Src, class D>
    static constexpr bool bf16_pairs = ops::has_bf16_pairs && std::is_same_v<Src, stored_lanes<bf16>> && std::is_same_v<D, bf16>;

    /// One word-pair step: loaded pairs of the two halves (x1 at lane i, x2 at n + i) or of an
    /// interleaved run (the pair's lanes are a word's halves), rotated by rows in the same pairing.
    static void half_split_pair_step(bf16* y, std::size_t n, const typename ops::lane_pairs& x1,
                                     const typename ops::lane_pairs& x2, const fbatch& ce, const fbatch& co,
                                     const fbatch& se, const fbatch& so) noexcept {
        ops::store_pairs(y, half_split_first(x1.even, x2.even, ce, se), half_split_first(x1.odd, x2.odd, co, so));
        ops::store_pairs(y + n, half_split_second(x1.even, x2.even, ce, se), half_split_second(x1.odd, x2.odd, co, so));
    }
    static void interleaved_pair_step(bf16* y, const typename ops::lane_pairs& x, const fbatch& c, const fbatch& s) noexcept {
        ops::store_pairs(y, half_split_first(x.even, x.odd, c, s), half_split_second(x.even, x.odd, c, s));
    }

    template <class Src, class D>
    static void half_split_head(const Src& src, D* y, const token_rows& tr) noexcept {
        constexpr std::size_t U = hs_unroll;
        const std::size_t n = tr.n;
        const float *c = tr.c, *s = tr.s;
        std::size_t i = 0;
        if constexpr (bf16_pairs<Src, D>) {
            const bf16* x = src.x;
            const float *cp = tr.cpair, *sp = tr.spair;  // (locals: the stores may alias anything)
            for (const std::size_t end = tr.pairs ? n : 0; i + 2 * W <= end; i += 2 * W) {
                const auto x1 = ops::load_pairs(x + i), x2 = ops::load_pairs(x + n + i);
                const fbatch ce = fbatch::load_unaligned(cp + i), co = fbatch::load_unaligned(cp + i + W);
                const fbatch se = fbatch::load_unaligned(sp + i), so = fbatch::load_unaligned(sp + i + W);
                half_split_pair_step(y + i, n, x1, x2, ce, co, se, so);
            }
        }
        fbatch cv[U], sv[U];
        for (; i + U * W <= n; i += U * W) {
            load_row<U>(c, s, i, cv, sv);
            half_split_chunk<U>(src, y, i, n, cv, sv);
        }
        for (; i + W <= n; i += W) {
            load_row<1>(c, s, i, cv, sv);
            half_split_chunk<1>(src, y, i, n, cv, sv);
        }
        if (i < n) {
            const std::size_t m = n - i;
            const fbatch x1 = src.load_padded(i, m), x2 = src.load_padded(n + i, m);
            load_row<1>(c, s, i, cv, sv);
            store_partial(y + i, half_split_first(x1, x2, cv[0], sv[0]), m);
            store_partial(y + n + i, half_split_second(x1, x2, cv[0], sv[0]), m);
        }
    }

    /// Interleaved pairs (2i, 2i+1): y = x·cdup + swap(x)·sdup with cdup = (c₀, c₀, c₁, c₁, …) and
    /// sdup = (−s₀, s₀, −s₁, s₁, …).
    static fbatch interleaved_rotate(const fbatch& x, const fbatch& cdup, const fbatch& sdup) noexcept {
        return ops::fma(ops::swap_pairs(x), sdup, x * cdup);
    }

    /// Lanes [i, i + U·W).
    template <std::size_t U, class Src, class D>
    static void interleaved_chunk(const Src& src, D* y, std::size_t i, const fbatch* cv, const fbatch* sv) noexcept {
        fbatch v[U];
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) v[u] = src.load(i + u * W);
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) pin_in_register(v[u]);
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) ops::store(y + i + u * W, interleaved_rotate(v[u], cv[u], sv[u]));
    }

    template <class Src, class D>
    static void interleaved_head(const Src& src, D* y, const token_rows& tr) noexcept {
        constexpr std::size_t U = il_unroll;
        const std::size_t r = tr.r;
        const float *cdup = tr.cdup, *sdup = tr.sdup;
        std::size_t i = 0;
        if constexpr (bf16_pairs<Src, D>) {  // a pair's two lanes are a word's halves: the compact row
            const bf16* x = src.x;
            const float *c = tr.c, *s = tr.s;
            for (const std::size_t end = tr.pairs ? r : 0; i + 2 * W <= end; i += 2 * W) {
                const auto v = ops::load_pairs(x + i);
                const fbatch cv = fbatch::load_unaligned(c + i / 2), sv = fbatch::load_unaligned(s + i / 2);
                interleaved_pair_step(y + i, v, cv, sv);
            }
        }
        fbatch cv[U], sv[U];
        for (; i + U * W <= r; i += U * W) {
            load_row<U>(cdup, sdup, i, cv, sv);
            interleaved_chunk<U>(src, y, i, cv, sv);
        }
        for (; i + W <= r; i += W) {
            load_row<1>(cdup, sdup, i, cv, sv);
            interleaved_chunk<1>(src, y, i, cv, sv);
        }
        if (i < r) {
            load_row<1>(cdup, sdup, i, cv, sv);
            store_partial(y + i, interleaved_rotate(src.load_padded(i, r - i), cv[0], sv[0]), r - i);
        }
    }

    /// y[from, to) = src's lanes [from, to) (lanes that pass through an out-of-place or normed call);
    /// stored lanes of the destination's type are copied as they are.
    template <class Src, class D>
    static void copy_lanes(const Src& src, D* y, std::size_t from, std::size_t to) noexcept {
        if constexpr (std::is_same_v<Src, stored_lanes<D>>) {
            std::memcpy(y + from, src.x + from, (to - from) * sizeof(D));
        } else {
            std::size_t i = from;
            for (; i + W <= to; i += W) ops::store(y + i, src.load(i));
            if (i < to) store_partial(y + i, src.load_padded(i, to - i), to - i);
        }
    }

    // ---- fused per-head RMSNorm ---------------------------------------------------------------------

    /// Σx² over a head's head_dim lanes, in a fixed order for every width: 32 partial sums (lane j
    /// collects x[32k + j]², k increasing, one FMA each), then a fixed pairwise tree (j += j + 16, then
    /// + 8, + 4, + 2, + 1), all in registers. (32, not 16: two independent FMA chains per head on
    /// AVX-512; with in-lane shuffles for the tree, the fused norm's L2-resident head went from 15.0
    /// to 12.9 ns on Zen 5. An eight-head tree sharing its shuffles gave nothing more.)
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

    /// Asks for the lines `bytes` past p (a hint: it never faults, also past the end of a buffer, and
    /// the address is computed without pointer arithmetic).
    /// Always inlined: g++ 12 at -O2 found the out-of-line function free of side effects (IPA modref)
    /// and deleted the calls, so float kernels ran without their prefetches (S1 1.6× slower).
    template <int ForWriting>
    [[gnu::always_inline]] static void prefetch_lines(const void* p, std::size_t ahead, std::size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p) + ahead;
        // (A counted loop: one over line addresses, `line < at + bytes`, made the fused norm 1.5×
        // slower with g++ 12. A head that starts inside a line leaves its last line to the hardware.
        // Unrolled: rolled, the loop's add, compare and branch outnumbered a float head's arithmetic;
        // on Zen 5 kv/append went 0.67–0.76 → 0.71–0.78 of its limit, S1-qknorm interleaved
        // 0.76–0.79 → 0.89–0.90, three alternating rounds.)
#pragma GCC unroll 8
        for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(reinterpret_cast<const void*>(at + b), ForWriting);
#else
        (void)p, (void)ahead, (void)bytes;
#endif
    }

    // ---- one tensor of one token ------------------------------------------------------------------

    /// Head x → y of the next token, asked for while this one is rotated: float sources and
    /// destinations always (the hardware prefetcher alone left the loads waiting on memory; Zen 3:
    /// in-place S1 10–20% faster, the fused norm's first pass over a head no longer stalls the
    /// rotations), 16-bit sources unless tr.prefetch_16bit is off (simd::prefetch_16bit()); 16-bit
    /// destinations never (not measured).
    /// Nothing after the last token: there is no next token, and a one-token call (decode) would only
    /// ask again for lines already in L1, which costs load slots the rotation needs.
    template <class S, class D>
    [[gnu::always_inline]] static void prefetch_next_token(const view_args& v, const S* x, D* y, const token_rows& tr) noexcept {
        if (tr.last) return;
        if (sizeof(S) == sizeof(float) || tr.prefetch_16bit)
            prefetch_lines<0>(x, v.src_token_stride * sizeof(S), tr.head_dim * sizeof(S));
        if constexpr (sizeof(D) == sizeof(float))
            if (tr.out_of_place) prefetch_lines<1>(y, v.dst_token_stride * sizeof(D), tr.head_dim * sizeof(D));
    }

    /// body(src_of(h).x, y + h·dst_head_stride) for every head of one token and tensor of bf16 → bf16
    /// word pairs, the next token's source lines asked for first (as prefetch_next_token). What the
    /// loop needs of v, tr and src_of is copied into locals before it: every head's stores go through
    /// may-alias vector types, after which the compiler reloads all of it, head after head, and for
    /// these loops that scalar work had outgrown the vector arithmetic (docs/engine-performance.md,
    /// for the figures). The float and fp16 loops keep reading v and tr per head: with the
    /// same locals S1 float ran slower on Zen 5 (0.85–0.87 → 0.71–0.81 of its limit, four alternating
    /// runs; its loop's instructions are the same but for the reloads, and why is not understood) and
    /// fp16 did not move.
    template <class Heads, class Body>
    [[gnu::always_inline]] static void for_each_head(const view_args& v, const Heads& src_of, bf16* y, const token_rows& tr,
                                                     const Body& body) noexcept {
        // A copy of the closure: view_token's stored-lanes lambda holds x and the head stride by
        // value, so they become locals the stores cannot alias.
        const Heads src = src_of;
        const std::size_t heads = v.heads, stride = v.dst_head_stride;
        const std::size_t head_bytes = tr.head_dim * sizeof(bf16), ahead = v.src_token_stride * sizeof(bf16);
        const bool prefetch = tr.prefetch_16bit && !tr.last;
        for (std::size_t h = 0; h < heads; ++h) {
            const bf16* x = src(h).x;
            if (prefetch) prefetch_lines<0>(x, ahead, head_bytes);
            body(x, y + h * stride);
        }
    }

    /// The token's row kept in registers for every head; `src_of(h)` is head h's lane source.
    template <std::size_t U, class Heads, class D>
    static void half_split_hoisted(const view_args& v, const Heads& src_of, D* y, const token_rows& tr) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(tr.c, tr.s, 0, cv, sv);
        for (std::size_t h = 0; h < v.heads; ++h) {
            prefetch_next_token(v, src_of(h).x, y + h * v.dst_head_stride, tr);
            half_split_chunk<U>(src_of(h), y + h * v.dst_head_stride, 0, tr.n, cv, sv);
        }
    }

    template <std::size_t U, class Heads, class D>
    static void interleaved_hoisted(const view_args& v, const Heads& src_of, D* y, const token_rows& tr) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(tr.cdup, tr.sdup, 0, cv, sv);
        for (std::size_t h = 0; h < v.heads; ++h) {
            prefetch_next_token(v, src_of(h).x, y + h * v.dst_head_stride, tr);
            interleaved_chunk<U>(src_of(h), y + h * v.dst_head_stride, 0, cv, sv);
        }
    }

    /// bf16 → bf16 through word pairs with the token's row in registers, for rows of P steps of 2W
    /// lanes: every head's loads before its stores (as in the chunks above), no per-head call. Only
    /// with 32 registers (AVX-512): up to 8 row and 8 data vectors (half-split P ≤ 2, interleaved P ≤ 4).
    static constexpr bool pairs_hoist = registers >= 32;

    template <std::size_t P, class Heads>
    static void half_split_pairs_hoisted(const view_args& v, const Heads& src_of, bf16* y, const token_rows& tr) noexcept {
        const std::size_t n = tr.n;
        fbatch ce[P], co[P], se[P], so[P];
        POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) {
            ce[p] = fbatch::load_unaligned(tr.cpair + p * 2 * W), co[p] = fbatch::load_unaligned(tr.cpair + p * 2 * W + W);
            se[p] = fbatch::load_unaligned(tr.spair + p * 2 * W), so[p] = fbatch::load_unaligned(tr.spair + p * 2 * W + W);
        }
        for_each_head(v, src_of, y, tr, [&](const bf16* x, bf16* yh) {
            typename ops::lane_pairs x1[P], x2[P];
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) x1[p] = ops::load_pairs(x + p * 2 * W), x2[p] = ops::load_pairs(x + n + p * 2 * W);
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) {
                pin_in_register(x1[p].even), pin_in_register(x1[p].odd);
                pin_in_register(x2[p].even), pin_in_register(x2[p].odd);
            }
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) half_split_pair_step(yh + p * 2 * W, n, x1[p], x2[p], ce[p], co[p], se[p], so[p]);
        });
    }

    template <std::size_t P, class Heads>
    static void interleaved_pairs_hoisted(const view_args& v, const Heads& src_of, bf16* y, const token_rows& tr) noexcept {
        fbatch cv[P], sv[P];
        POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) cv[p] = fbatch::load_unaligned(tr.c + p * W), sv[p] = fbatch::load_unaligned(tr.s + p * W);
        for_each_head(v, src_of, y, tr, [&](const bf16* x, bf16* yh) {
            typename ops::lane_pairs xv[P];
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) xv[p] = ops::load_pairs(x + p * 2 * W);
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) pin_in_register(xv[p].even), pin_in_register(xv[p].odd);
            POSENC_UNROLL for (std::size_t p = 0; p < P; ++p) interleaved_pair_step(yh + p * 2 * W, xv[p], cv[p], sv[p]);
        });
    }

    /// The hoisted word-pair path where the pairs cover the whole row and it fits; false otherwise.
    template <class Heads>
    static bool try_pairs_hoisted(const view_args& v, const Heads& src_of, bf16* y, const token_rows& tr) noexcept {
        if constexpr (pairs_hoist) {
            const std::size_t lanes = tr.interleaved ? tr.r : tr.n;
            if (lanes % (2 * W) != 0) return false;
            const std::size_t steps = lanes / (2 * W);
            if (tr.interleaved) {
                switch (steps) {
                    case 1: return interleaved_pairs_hoisted<1>(v, src_of, y, tr), true;
                    case 2: return interleaved_pairs_hoisted<2>(v, src_of, y, tr), true;
                    case 4: return interleaved_pairs_hoisted<4>(v, src_of, y, tr), true;
                    default: return false;
                }
            }
            switch (steps) {
                case 1: return half_split_pairs_hoisted<1>(v, src_of, y, tr), true;
                case 2: return half_split_pairs_hoisted<2>(v, src_of, y, tr), true;
                default: return false;
            }
        } else {
            (void)v, (void)src_of, (void)y, (void)tr;
            return false;
        }
    }

    template <class Heads, class D>
    static bool try_hoisted(const view_args& v, const Heads& src_of, D* y, const token_rows& tr) noexcept {
        if constexpr (bf16_pairs<decltype(src_of(0)), D>)  // the pair path replaces float hoisting where it runs
            if (tr.pairs && (tr.interleaved ? tr.r : tr.n) >= 2 * W) return try_pairs_hoisted(v, src_of, y, tr);
        if (tr.interleaved) {
            if (tr.r % W != 0 || tr.r / W > il_unroll) return false;
            switch (tr.r / W) {
                case 1: return interleaved_hoisted<1>(v, src_of, y, tr), true;
                case 2: return interleaved_hoisted<2>(v, src_of, y, tr), true;
                case 4: return interleaved_hoisted<4>(v, src_of, y, tr), true;
                case 8: if constexpr (il_unroll >= 8) return interleaved_hoisted<8>(v, src_of, y, tr), true; break;
                default: break;
            }
            return false;
        }
        if (tr.n % W != 0 || tr.n / W > hs_unroll) return false;
        switch (tr.n / W) {
            case 1: return half_split_hoisted<1>(v, src_of, y, tr), true;
            case 2: return half_split_hoisted<2>(v, src_of, y, tr), true;
            case 4: if constexpr (hs_unroll >= 4) return half_split_hoisted<4>(v, src_of, y, tr), true; break;
            default: break;
        }
        return false;
    }

    /// Heads [0, v.heads) of one token: rotated lanes [0, r), lanes [r, head_dim) copied through
    /// when `pass_through`.
    template <class Heads, class D>
    static void rotate_heads(const view_args& v, const Heads& src_of, D* y, const token_rows& tr, bool pass_through) noexcept {
        if (!try_hoisted(v, src_of, y, tr))
            for (std::size_t h = 0; h < v.heads; ++h) {
                D* yh = y + h * v.dst_head_stride;
                prefetch_next_token(v, src_of(h).x, yh, tr);
                if (tr.interleaved)
                    interleaved_head(src_of(h), yh, tr);
                else
                    half_split_head(src_of(h), yh, tr);
            }
        if (pass_through && tr.head_dim > tr.r)
            for (std::size_t h = 0; h < v.heads; ++h) copy_lanes(src_of(h), y + h * v.dst_head_stride, tr.r, tr.head_dim);
    }

    template <class S, class D>
    static void view_token(const view_args& whole, std::size_t t, const token_rows& tr) noexcept {
        const S* x = static_cast<const S*>(whole.src) + t * whole.src_token_stride;
        D* y = static_cast<D*>(whole.dst) + t * whole.dst_token_stride;
        // The prefetches ask for the next token's heads, one token stride ahead (none after the last).
        const view_args v = whole;
        if (!v.norm_weight)
            return rotate_heads(v, [x, hs = v.src_head_stride](std::size_t h) { return stored_lanes<S>{x + h * hs}; }, y, tr,
                                tr.out_of_place);
        // Fused norm, a block of heads at a time: every head's sum of squares and the block's scales
        // first (no head waits on its own reduction and square root), then the rotations, reading the
        // block again from L1 (in place too: a block's reads all precede its writes). 8 heads: the
        // fastest block in memory on the AVX2 VM (docs/engine-performance.md).
        constexpr std::size_t block = 8;
        for (std::size_t h0 = 0; h0 < v.heads; h0 += block) {
            view_args part = v;
            part.heads = v.heads - h0 < block ? v.heads - h0 : block;
            const S* xb = x + h0 * v.src_head_stride;
            float sc[block];
            for (std::size_t h = 0; h < part.heads; ++h) sc[h] = sum_of_squares(xb + h * v.src_head_stride, tr.head_dim);
            inverse_rms(sc, part.heads, tr.head_dim, v.norm_eps, sc);
            rotate_heads(
                part, [&](std::size_t h) { return normed_lanes<S>{xb + h * v.src_head_stride, v.norm_weight, fbatch(sc[h])}; },
                y + h0 * v.dst_head_stride, tr, true);
        }
    }

    template <class F>
    static void with_type(dtype t, F&& f) noexcept {
        switch (t) {
            case dtype::f32: return f(type_tag<float>{});
            case dtype::bf16: return f(type_tag<bf16>{});
            case dtype::fp16: return f(type_tag<fp16>{});
        }
    }

    // ---- one call -------------------------------------------------------------------------------

    static std::int64_t position(const rotate_args& a, std::size_t t) noexcept {
        if (a.pos64) return a.pos64[t];
        if (a.pos32) return a.pos32[t];
        return a.pos_start + a.pos_step * static_cast<std::int64_t>(t);
    }

    static void run(const rotate_args& a) noexcept {
        const std::size_t r = a.rotary_dim, n = r / 2;
        const bool interleaved = a.layout == layout_id::interleaved;
        alignas(64) float c[row_capacity / 2], s[row_capacity / 2];  // compact row, direction applied
        alignas(64) float cdup[row_capacity], sdup[row_capacity];    // interleaved: per-lane row
        alignas(64) float cpair[row_capacity / 2], spair[row_capacity / 2];  // half-split bf16 pairs
        bool bf16_views = false;             // some view is rotated through word pairs when the rows allow it
        bool only_bf16_views = ops::has_bf16_pairs;  // every view is
        for (const view_args& v : a.view) {
            if (!v.src || v.heads == 0) continue;
            const bool p = ops::has_bf16_pairs && !v.norm_weight && v.src_type == dtype::bf16 && v.dst_type == dtype::bf16;
            bf16_views |= p;
            only_bf16_views &= p;
        }
        constexpr auto dup_low = compat::swizzle_mask<Arch, patterns::duplicate_low_half>();
        constexpr auto dup_high = compat::swizzle_mask<Arch, patterns::duplicate_high_half>();
        fbatch alternate;  // (−1, 1, −1, 1, …)
        {
            alignas(64) float alt[W];
            for (std::size_t k = 0; k < W; ++k) alt[k] = k % 2 ? 1.0f : -1.0f;
            alternate = fbatch::load_aligned(alt);
        }
        // Lanes past n are loaded by the tails and the swizzles below: zero, so that padded lanes
        // stay finite (and are discarded). One vector store each: g++ made the loop two rep stos, slow
        // to start in a one-token call.
        fbatch(0.0f).store_unaligned(c + n);
        fbatch(0.0f).store_unaligned(s + n);
        token_rows tr{a.head_dim, r, n, interleaved, false, c, s, cdup, sdup, cpair, spair, false, a.prefetch_16bit, false};
        // The recurrence's step row costs as much as a direct row: it pays from the third token on.
        const bool consecutive = a.tokens > 2 && !a.rows && !a.table && !a.pos64 && !a.pos32 && a.pos_step == 1;
        consecutive_rows rows;
        if (consecutive) rows.start(a.inv_freq, n);
        // The caller's rows (or the table's) are read where they are when nothing reads past their n
        // lanes (n a multiple of W: no tails, and the interleaved rows below take whole vectors) and
        // they need no scaling or sign; otherwise they are copied into c and s.
        const bool rows_in_place = (a.rows || a.table) && a.row_scale == 1.0 && !a.inverse && n % W == 0;
        for (std::size_t t = 0; t < a.tokens; ++t) {
            tr.last = t + 1 == a.tokens;
            const float* src = nullptr;
            if (a.rows) {
                src = a.rows + t * r;
            } else if (a.table) {
                src = a.table + static_cast<std::size_t>(position(a, t)) * r;
            } else if (consecutive) {
                rows.row(a.inv_freq, position(a, t), a.amplitude, t == 0, c, s);
            } else {
                cos_sin_row(a.inv_freq, n, position(a, t), a.amplitude, c, s);
            }
            if (rows_in_place) {
                tr.c = src;
                tr.s = src + n;
                // The next token's row, asked for now: every head of this token waits on its row, and a
                // table larger than L2 holds it in memory (kv/append on Zen 5, 8 heads a token: 0.59–0.65
                // → 0.68–0.75 of its limit, three alternating rounds).
                if (t + 1 < a.tokens)
                    prefetch_lines<0>(a.rows ? a.rows + (t + 1) * r : a.table + static_cast<std::size_t>(position(a, t + 1)) * r,
                                      0, r * sizeof(float));
            } else if (src && a.row_scale == 1.0) {
                std::memcpy(c, src, n * sizeof(float));
                std::memcpy(s, src + n, n * sizeof(float));
            } else if (src) {
                for (std::size_t i = 0; i < n; ++i) {
                    c[i] = static_cast<float>(a.row_scale * src[i]);
                    s[i] = static_cast<float>(a.row_scale * src[n + i]);
                }
            }
            if (a.inverse)
                for (std::size_t i = 0; i < n; ++i) s[i] = -s[i];
            if (bf16_views) tr.pairs = !ops::any_nan(tr.c, tr.s, n);  // rows may hold NaN: a caller's rows, a NaN amplitude
            // The interleaved per-lane rows, unless word pairs rotate every lane (they read the compact
            // row). In step with interleaved_head's pair loop (all of [0, r) when r is a multiple of
            // 2W) and with try_hoisted, which then returns false.
            const bool pairs_cover_row = only_bf16_views && tr.pairs && r % (2 * W) == 0;
            if (interleaved && !pairs_cover_row)  // W compact lanes make 2W per-lane ones
                for (std::size_t i = 0; i < r; i += 2 * W) {
                    const fbatch cv = fbatch::load_unaligned(tr.c + i / 2), sv = fbatch::load_unaligned(tr.s + i / 2);
                    xsimd::swizzle(cv, dup_low).store_aligned(cdup + i);
                    (xsimd::swizzle(sv, dup_low) * alternate).store_aligned(sdup + i);
                    xsimd::swizzle(cv, dup_high).store_aligned(cdup + i + W);
                    (xsimd::swizzle(sv, dup_high) * alternate).store_aligned(sdup + i + W);
                }
            if (tr.pairs && !interleaved)
                for (std::size_t b = 0; b + 2 * W <= n; b += 2 * W) {
                    ops::pair_lanes(tr.c + b, cpair + b);
                    ops::pair_lanes(tr.s + b, spair + b);
                }
            for (const view_args& v : a.view) {
                if (!v.src || v.heads == 0) continue;
                tr.out_of_place = v.src != v.dst;
                with_type(v.src_type, [&](auto st) {
                    with_type(v.dst_type, [&](auto dt) {
                        view_token<typename decltype(st)::type, typename decltype(dt)::type>(v, t, tr);
                    });
                });
            }
        }
    }
};

template <class Arch>
void rotate_functor::operator()(Arch, const rotate_args& args) const noexcept {
    kernels<Arch>::run(args);
}

template <class Arch>
void table_functor::operator()(Arch, const table_args& args) const noexcept {
    kernels<Arch>::table_rows(args);
}

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP

#undef POSENC_UNROLL
