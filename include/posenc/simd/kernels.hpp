#pragma once
// xsimd kernels for the rotary hot loop, templated on the architecture tag.
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
// squares in a fixed 16-lane order — so a token's result does not depend on the vector width, on the
// call's size or on where the token sits in the call.
//
// Only arch-templated code lives here (see rotate_args.hpp for why).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "posenc/core/dtypes.hpp"
#include "posenc/detail/angles.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/functors.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/xsimd_compat.hpp"

namespace posenc::simd {

namespace patterns {
struct swap_pairs {  // (x0, x1, x2, x3, …) → (x1, x0, x3, x2, …)
    static constexpr unsigned get(unsigned i, unsigned) noexcept { return i ^ 1u; }
};
struct duplicate_low_half {  // (c0, c1, …) → (c0, c0, c1, c1, …)
    static constexpr unsigned get(unsigned i, unsigned) noexcept { return i / 2u; }
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
    static_assert(16 % W == 0, "the norm's fixed 16-lane summation order needs W | 16");

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
        alignas(64) double inv[max_rotary_dim / 2 + 2 * W];
        const std::size_t padded = (pairs + WD - 1) / WD * WD;
        std::memcpy(inv, inv_freq, pairs * sizeof(double));
        for (std::size_t i = pairs; i < padded; ++i) inv[i] = 0.0;
        const dbatch p(static_cast<double>(position)), amp(amplitude), one(1.0), two(2.0), three(3.0);
        for (std::size_t i = 0; i < padded; i += WD) {
            const dbatch a = p * dbatch::load_aligned(inv + i);
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

    // ---- rotations -------------------------------------------------------------------------------
    // Each head's chunk of U vectors is loaded completely before any of it is stored. When a token's
    // whole cos/sin row fits in registers (e.g. 128 lanes in AVX-512), it is loaded once per token
    // and kept there for all heads of a tensor ("hoisted"); otherwise each head reads it from L1.

    static constexpr std::size_t registers = W >= 16 ? 32 : 16;  // AVX-512: 32 vector registers
    static constexpr std::size_t hs_unroll = registers / 8;       // 2U cos/sin, 2U data, 2U temporaries
    static constexpr std::size_t il_unroll = registers / 4;       // 2U cos/sin, U data, U temporaries

    template <std::size_t U>
    static void load_row(const float* c, const float* s, std::size_t i, fbatch* cv, fbatch* sv) noexcept {
        for (std::size_t u = 0; u < U; ++u) {
            cv[u] = fbatch::load_unaligned(c + i + u * W);
            sv[u] = fbatch::load_unaligned(s + i + u * W);
        }
    }

    /// Half-split pairs (i, i + n) for lanes [i, i + U·W): y₁ = x₁c − x₂s, y₂ = x₂c + x₁s (`s`
    /// already carries the direction's sign), read from x, written to y (which may be x).
    template <std::size_t U, class S, class D>
    static void half_split_chunk(const S* x, D* y, std::size_t i, std::size_t n, const fbatch* cv,
                                 const fbatch* sv) noexcept {
        fbatch x1[U], x2[U];
        for (std::size_t u = 0; u < U; ++u) {
            x1[u] = ops::load(x + i + u * W);
            x2[u] = ops::load(x + n + i + u * W);
        }
        for (std::size_t u = 0; u < U; ++u) {
            pin_in_register(x1[u]);
            pin_in_register(x2[u]);
        }
        for (std::size_t u = 0; u < U; ++u) {
            ops::store(y + i + u * W, ops::fnma(x2[u], sv[u], x1[u] * cv[u]));
            ops::store(y + n + i + u * W, ops::fma(x1[u], sv[u], x2[u] * cv[u]));
        }
    }

    /// The pairs past the last full vector: the same vector code on a zero-padded copy.
    template <class S, class D>
    static void half_split_tail(const S* x, D* y, std::size_t i, std::size_t n, const float* c,
                                const float* s) noexcept {
        S in[2 * W] = {};
        D out[2 * W];
        const std::size_t m = n - i;
        for (std::size_t k = 0; k < m; ++k) {
            in[k] = x[i + k];
            in[W + k] = x[n + i + k];
        }
        fbatch cv, sv;
        load_row<1>(c, s, i, &cv, &sv);
        half_split_chunk<1>(in, out, 0, W, &cv, &sv);
        for (std::size_t k = 0; k < m; ++k) {
            y[i + k] = out[k];
            y[n + i + k] = out[W + k];
        }
    }

    template <class S, class D>
    static void half_split_head(const S* x, D* y, std::size_t n, const float* c, const float* s) noexcept {
        constexpr std::size_t U = hs_unroll;
        std::size_t i = 0;
        fbatch cv[U], sv[U];
        for (; i + U * W <= n; i += U * W) {
            load_row<U>(c, s, i, cv, sv);
            half_split_chunk<U>(x, y, i, n, cv, sv);
        }
        for (; i + W <= n; i += W) {
            load_row<1>(c, s, i, cv, sv);
            half_split_chunk<1>(x, y, i, n, cv, sv);
        }
        if (i < n) half_split_tail(x, y, i, n, c, s);
    }

    /// Interleaved pairs (2i, 2i+1) for lanes [i, i + U·W): y = x·cdup + swap(x)·sdup with
    /// cdup = (c₀, c₀, c₁, c₁, …) and sdup = (−s₀, s₀, −s₁, s₁, …).
    template <std::size_t U, class S, class D>
    static void interleaved_chunk(const S* x, D* y, std::size_t i, const fbatch* cv, const fbatch* sv) noexcept {
        constexpr auto swap = compat::swizzle_mask<Arch, patterns::swap_pairs>();
        fbatch v[U];
        for (std::size_t u = 0; u < U; ++u) v[u] = ops::load(x + i + u * W);
        for (std::size_t u = 0; u < U; ++u) pin_in_register(v[u]);
        for (std::size_t u = 0; u < U; ++u) ops::store(y + i + u * W, ops::fma(xsimd::swizzle(v[u], swap), sv[u], v[u] * cv[u]));
    }

    template <class S, class D>
    static void interleaved_head(const S* x, D* y, std::size_t r, const float* cdup, const float* sdup) noexcept {
        constexpr std::size_t U = il_unroll;
        std::size_t i = 0;
        fbatch cv[U], sv[U];
        for (; i + U * W <= r; i += U * W) {
            load_row<U>(cdup, sdup, i, cv, sv);
            interleaved_chunk<U>(x, y, i, cv, sv);
        }
        for (; i + W <= r; i += W) {
            load_row<1>(cdup, sdup, i, cv, sv);
            interleaved_chunk<1>(x, y, i, cv, sv);
        }
        if (i < r) {  // the same vector code on a zero-padded copy
            S in[W] = {};
            D out[W];
            for (std::size_t k = 0; k < r - i; ++k) in[k] = x[i + k];
            load_row<1>(cdup, sdup, i, cv, sv);
            interleaved_chunk<1>(in, out, 0, cv, sv);
            for (std::size_t k = 0; k < r - i; ++k) y[i + k] = out[k];
        }
    }

    /// y[from, to) = x[from, to) converted (lanes that pass through an out-of-place call).
    template <class S, class D>
    static void copy_lanes(const S* x, D* y, std::size_t from, std::size_t to) noexcept {
        if constexpr (std::is_same_v<S, D>) {
            std::memcpy(y + from, x + from, (to - from) * sizeof(S));
        } else {
            std::size_t i = from;
            for (; i + W <= to; i += W) ops::store(y + i, ops::load(x + i));
            if (i < to) {
                S in[W] = {};
                D out[W];
                for (std::size_t k = 0; k < to - i; ++k) in[k] = x[i + k];
                ops::store(out, ops::load(in));
                for (std::size_t k = 0; k < to - i; ++k) y[i + k] = out[k];
            }
        }
    }

    // ---- fused per-head RMSNorm ---------------------------------------------------------------------

    /// local[0, head_dim) = x converted to float, then ·(1/√(mean(x²) + eps))·w. local has room for
    /// head_dim rounded up to 16 (zeroed there). The sum of squares is taken in a fixed order for
    /// every width: 16 partial sums (lane j collects x[16k + j]², k increasing, one FMA each), then a
    /// fixed pairwise tree; the mean and the inverse square root in double, rounded once to float.
    template <class S>
    static void rms_normalise(const S* x, float* local, std::size_t head_dim, const float* w, double eps) noexcept {
        const std::size_t padded = (head_dim + 15) / 16 * 16;
        std::size_t i = 0;
        for (; i + W <= head_dim; i += W) ops::store(local + i, ops::load(x + i));
        if (i < head_dim) {
            S in[W] = {};
            for (std::size_t k = 0; k < head_dim - i; ++k) in[k] = x[i + k];
            ops::store(local + i, ops::load(in));
            i += W;
        }
        for (; i < padded; ++i) local[i] = 0.0f;
        constexpr std::size_t B = 16 / W;
        fbatch acc[B];
        for (std::size_t b = 0; b < B; ++b) acc[b] = fbatch(0.0f);
        for (std::size_t k = 0; k < padded; k += 16)
            for (std::size_t b = 0; b < B; ++b) {
                const fbatch v = fbatch::load_aligned(local + k + b * W);
                acc[b] = ops::fma(v, v, acc[b]);
            }
        alignas(64) float part[16];
        for (std::size_t b = 0; b < B; ++b) acc[b].store_aligned(part + b * W);
        for (std::size_t step = 8; step >= 1; step /= 2)
            for (std::size_t j = 0; j < step; ++j) part[j] += part[j + step];
        const double mean = static_cast<double>(part[0]) / static_cast<double>(head_dim);
        const float scale = static_cast<float>(1.0 / std::sqrt(mean + eps));
        const fbatch sc(scale);
        i = 0;
        for (; i + W <= head_dim; i += W)
            ((fbatch::load_aligned(local + i) * sc) * fbatch::load_unaligned(w + i)).store_aligned(local + i);
        for (; i < head_dim; ++i) local[i] = (local[i] * scale) * w[i];  // the same two roundings per lane
    }

    // ---- one tensor of one token ------------------------------------------------------------------

    struct token_rows {
        std::size_t head_dim, r, n;
        bool interleaved, out_of_place;
        const float *c, *s, *cdup, *sdup;
    };

    template <std::size_t U, class S, class D>
    static void half_split_hoisted(const view_args& v, const S* x, D* y, const token_rows& tr) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(tr.c, tr.s, 0, cv, sv);
        for (std::size_t h = 0; h < v.heads; ++h)
            half_split_chunk<U>(x + h * v.src_head_stride, y + h * v.dst_head_stride, 0, tr.n, cv, sv);
    }

    template <std::size_t U, class S, class D>
    static void interleaved_hoisted(const view_args& v, const S* x, D* y, const token_rows& tr) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(tr.cdup, tr.sdup, 0, cv, sv);
        for (std::size_t h = 0; h < v.heads; ++h)
            interleaved_chunk<U>(x + h * v.src_head_stride, y + h * v.dst_head_stride, 0, cv, sv);
    }

    template <class S, class D>
    static bool try_hoisted(const view_args& v, const S* x, D* y, const token_rows& tr) noexcept {
        if (tr.interleaved) {
            if (tr.r % W != 0 || tr.r / W > il_unroll) return false;
            switch (tr.r / W) {
                case 1: return interleaved_hoisted<1>(v, x, y, tr), true;
                case 2: return interleaved_hoisted<2>(v, x, y, tr), true;
                case 4: return interleaved_hoisted<4>(v, x, y, tr), true;
                case 8: if constexpr (il_unroll >= 8) return interleaved_hoisted<8>(v, x, y, tr), true; break;
                default: break;
            }
            return false;
        }
        if (tr.n % W != 0 || tr.n / W > hs_unroll) return false;
        switch (tr.n / W) {
            case 1: return half_split_hoisted<1>(v, x, y, tr), true;
            case 2: return half_split_hoisted<2>(v, x, y, tr), true;
            case 4: if constexpr (hs_unroll >= 4) return half_split_hoisted<4>(v, x, y, tr), true; break;
            default: break;
        }
        return false;
    }

    template <class S, class D>
    static void rotate_head(const S* x, D* y, const token_rows& tr) noexcept {
        if (tr.interleaved)
            interleaved_head(x, y, tr.r, tr.cdup, tr.sdup);
        else
            half_split_head(x, y, tr.n, tr.c, tr.s);
    }

    template <class S, class D>
    static void view_token(const view_args& v, std::size_t t, const token_rows& tr) noexcept {
        const S* x = static_cast<const S*>(v.src) + t * v.src_token_stride;
        D* y = static_cast<D*>(v.dst) + t * v.dst_token_stride;
        if (v.norm_weight) {
            alignas(64) float local[max_rotary_dim + 16];
            for (std::size_t h = 0; h < v.heads; ++h) {
                D* yh = y + h * v.dst_head_stride;
                rms_normalise(x + h * v.src_head_stride, local, tr.head_dim, v.norm_weight, v.norm_eps);
                rotate_head(static_cast<const float*>(local), yh, tr);
                if (tr.head_dim > tr.r) copy_lanes(static_cast<const float*>(local), yh, tr.r, tr.head_dim);
            }
            return;
        }
        if (!try_hoisted(v, x, y, tr))
            for (std::size_t h = 0; h < v.heads; ++h) rotate_head(x + h * v.src_head_stride, y + h * v.dst_head_stride, tr);
        if (tr.out_of_place && tr.head_dim > tr.r)
            for (std::size_t h = 0; h < v.heads; ++h)
                copy_lanes(x + h * v.src_head_stride, y + h * v.dst_head_stride, tr.r, tr.head_dim);
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
        constexpr auto dup = compat::swizzle_mask<Arch, patterns::duplicate_low_half>();
        fbatch alternate;  // (−1, 1, −1, 1, …)
        {
            alignas(64) float alt[W];
            for (std::size_t k = 0; k < W; ++k) alt[k] = k % 2 ? 1.0f : -1.0f;
            alternate = fbatch::load_aligned(alt);
        }
        // Lanes past n are loaded by the tails and the swizzles below: zero, so that padded lanes
        // stay finite (and are discarded).
        for (std::size_t k = n; k < n + W; ++k) c[k] = s[k] = 0.0f;
        token_rows tr{a.head_dim, r, n, interleaved, false, c, s, cdup, sdup};
        const bool consecutive = !a.rows && !a.table && !a.pos64 && !a.pos32 && a.pos_step == 1;
        consecutive_rows rows;
        if (consecutive) rows.start(a.inv_freq, n);
        for (std::size_t t = 0; t < a.tokens; ++t) {
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
            if (src && a.row_scale == 1.0) {
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
            if (interleaved)
                for (std::size_t i = 0; i < r; i += W) {
                    xsimd::swizzle(fbatch::load_unaligned(c + i / 2), dup).store_aligned(cdup + i);
                    (xsimd::swizzle(fbatch::load_unaligned(s + i / 2), dup) * alternate).store_aligned(sdup + i);
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
