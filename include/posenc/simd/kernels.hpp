#pragma once
// xsimd kernels for the rotary hot loop, templated on the architecture tag.
//
// Per token: one cos/sin row (from the caller's rows, a table, or computed here), shared by every
// head of Q and K; per head: the rotation, loading a whole head (up to `unroll` vectors per half)
// before storing it — on Zen 5 a load/store-interleaved 512-bit loop ran at half the speed.
//
// Only arch-templated code lives here (see rotate_args.hpp for why).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <xsimd/xsimd.hpp>

#include "posenc/detail/angles.hpp"
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

template <class Arch>
struct kernels {
    using fbatch = xsimd::batch<float, Arch>;
    using dbatch = xsimd::batch<double, Arch>;
    static constexpr std::size_t W = fbatch::size;
    static constexpr std::size_t WD = dbatch::size;
    static constexpr std::size_t row_capacity = max_rotary_dim + 2 * W;  // floats, with padding
    static constexpr std::int64_t far_position = std::int64_t{1} << 26;

    // ---- cos/sin rows ---------------------------------------------------------------------------

    /// cos/sin × amplitude of p·θᵢ for one position, into c[0, pairs) and s[0, pairs); c and s need
    /// room for `pairs` rounded up to W. All in double: the angle is reduced to a quadrant q and
    /// r ∈ [−π/4, π/4]; cos r and sin r come from their Taylor series (through r¹² and r¹¹, whose
    /// remainders are below 1e-12 there) and are mapped to the quadrant; only the result is rounded
    /// to float. Cheap enough to run per token in the hot loop (no general-purpose sincos with its
    /// own range reduction), and equal to the scalar reference up to a rare 1-ulp double rounding.
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
            const dbatch r = xsimd::fnma(n, dbatch(half_pi_lo), xsimd::fnma(n, dbatch(half_pi_hi), a));
            const dbatch q = xsimd::fnma(xsimd::floor(n * dbatch(0.25)), dbatch(4.0), n);  // n mod 4
            const dbatch z = r * r;
            dbatch sn = xsimd::fma(z, dbatch(-1.0 / 39916800.0), dbatch(1.0 / 362880.0));
            sn = xsimd::fma(z, sn, dbatch(-1.0 / 5040.0));
            sn = xsimd::fma(z, sn, dbatch(1.0 / 120.0));
            sn = xsimd::fma(z, sn, dbatch(-1.0 / 6.0));
            sn = xsimd::fma(z * r, sn, r);
            dbatch cs = xsimd::fma(z, dbatch(1.0 / 479001600.0), dbatch(-1.0 / 3628800.0));
            cs = xsimd::fma(z, cs, dbatch(1.0 / 40320.0));
            cs = xsimd::fma(z, cs, dbatch(-1.0 / 720.0));
            cs = xsimd::fma(z, cs, dbatch(1.0 / 24.0));
            cs = xsimd::fma(z * z, cs, xsimd::fnma(dbatch(0.5), z, one));
            // angle = n·π/2 + r: q = 1 gives (cos, sin) = (−sin r, cos r), q = 2 (−cos r, −sin r),
            // q = 3 (sin r, −cos r).
            const auto odd = (q == one) | (q == three);
            const dbatch sv = xsimd::select(odd, cs, sn), cv = xsimd::select(odd, sn, cs);
            (xsimd::select((q == one) | (q == two), -cv, cv) * amp).store_unaligned(cd + i);
            (xsimd::select(q >= two, -sv, sv) * amp).store_unaligned(sd + i);
        }
    }

    /// Consecutive positions (prefill): the next row from the previous one by the angle-addition
    /// formulas in double, (c, s) ← (c·cos θ − s·sin θ, s·cos θ + c·sin θ), seeded exactly at every
    /// position that is a multiple of `reseed` (so a row depends on its position only, not on where
    /// a call or a thread's slice starts). The drift stays below 1e-14, far under float's 6e-8: the
    /// float rows equal the direct computation's (bar a rare double rounding) at a fraction of its cost.
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
                xsimd::fnma(s0, ss, c0 * sc).store_aligned(cd + i);
                xsimd::fma(c0, ss, s0 * sc).store_aligned(sd + i);
            }
        }

        /// Row of `position`; `first` for the first token of a call (or slice).
        void row(const double* inv_freq, std::int64_t position, double amplitude, bool first, float* c,
                 float* s) noexcept {
            const std::int64_t offset = ((position % reseed) + reseed) % reseed;
            if (offset == 0 || first) {
                cos_sin_row(inv_freq, pairs, position - offset, amplitude, cd, sd);
                for (std::int64_t k = 0; k < offset; ++k) advance();
            } else {
                advance();
            }
            to_float(cd, sd, pairs, c, s);
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
    // and kept there for all heads of Q and K ("hoisted"); otherwise each head reads it from L1.

    struct heads {  // the rows of one token: base pointers and strides of Q and K
        float* data[2];
        std::size_t count[2];
        std::size_t stride[2];

        template <class F>
        void for_each(F&& f) const noexcept {
            for (int v = 0; v < 2; ++v)
                for (std::size_t h = 0; h < count[v]; ++h) f(data[v] + h * stride[v]);
        }
    };

    static constexpr std::size_t registers = W >= 16 ? 32 : 16;  // AVX-512: 32 vector registers

    /// Half-split pairs (i, i + n) for lanes [i, i + U·W) of one head, with cos/sin in registers.
    template <std::size_t U>
    static void half_split_chunk(float* x, std::size_t i, std::size_t n, const fbatch* cv, const fbatch* sv) noexcept {
        fbatch x1[U], x2[U];
        for (std::size_t u = 0; u < U; ++u) {
            x1[u] = fbatch::load_unaligned(x + i + u * W);
            x2[u] = fbatch::load_unaligned(x + n + i + u * W);
        }
        for (std::size_t u = 0; u < U; ++u) {
            pin_in_register(x1[u]);
            pin_in_register(x2[u]);
        }
        for (std::size_t u = 0; u < U; ++u) {
            xsimd::fnma(x2[u], sv[u], x1[u] * cv[u]).store_unaligned(x + i + u * W);
            xsimd::fma(x1[u], sv[u], x2[u] * cv[u]).store_unaligned(x + n + i + u * W);
        }
    }

    template <std::size_t U>
    static void load_row(const float* c, const float* s, std::size_t i, fbatch* cv, fbatch* sv) noexcept {
        for (std::size_t u = 0; u < U; ++u) {
            cv[u] = fbatch::load_unaligned(c + i + u * W);
            sv[u] = fbatch::load_unaligned(s + i + u * W);
        }
    }

    /// y₁ = x₁c − x₂s, y₂ = x₂c + x₁s for pairs (i, i + n); `s` already carries the direction's sign.
    template <std::size_t U>
    static void half_split_hoisted(const heads& hs, std::size_t n, const float* c, const float* s) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(c, s, 0, cv, sv);
        hs.for_each([&](float* x) { half_split_chunk<U>(x, 0, n, cv, sv); });
    }

    static void half_split_token(const heads& hs, std::size_t n, const float* c, const float* s) noexcept {
        constexpr std::size_t max_hoisted = registers / 8;  // 2U for cos/sin, 2U data, 2U temporaries
        if (n % W == 0 && n / W <= max_hoisted) {
            switch (n / W) {
                case 1: return half_split_hoisted<1>(hs, n, c, s);
                case 2: return half_split_hoisted<2>(hs, n, c, s);
                case 4: if constexpr (max_hoisted >= 4) return half_split_hoisted<4>(hs, n, c, s); break;
                default: break;
            }
        }
        constexpr std::size_t U = max_hoisted;
        hs.for_each([&](float* x) {
            std::size_t i = 0;
            fbatch cv[U], sv[U];
            for (; i + U * W <= n; i += U * W) {
                load_row<U>(c, s, i, cv, sv);
                half_split_chunk<U>(x, i, n, cv, sv);
            }
            for (; i + W <= n; i += W) {
                load_row<1>(c, s, i, cv, sv);
                half_split_chunk<1>(x, i, n, cv, sv);
            }
            for (; i < n; ++i) {
                const float x1 = x[i], x2 = x[n + i];
                x[i] = static_cast<float>(double(x1) * c[i] - double(x2) * s[i]);  // as the scalar reference
                x[n + i] = static_cast<float>(double(x2) * c[i] + double(x1) * s[i]);
            }
        });
    }

    /// Interleaved pairs (2i, 2i+1) for lanes [i, i + U·W) of one head: y = x·cdup + swap(x)·sdup
    /// with cdup = (c₀, c₀, c₁, c₁, …) and sdup = (−s₀, s₀, −s₁, s₁, …).
    template <std::size_t U>
    static void interleaved_chunk(float* x, std::size_t i, const fbatch* cv, const fbatch* sv) noexcept {
        constexpr auto swap = compat::swizzle_mask<Arch, patterns::swap_pairs>();
        fbatch v[U];
        for (std::size_t u = 0; u < U; ++u) v[u] = fbatch::load_unaligned(x + i + u * W);
        for (std::size_t u = 0; u < U; ++u) pin_in_register(v[u]);
        for (std::size_t u = 0; u < U; ++u)
            xsimd::fma(xsimd::swizzle(v[u], swap), sv[u], v[u] * cv[u]).store_unaligned(x + i + u * W);
    }

    template <std::size_t U>
    static void interleaved_hoisted(const heads& hs, const float* cdup, const float* sdup) noexcept {
        fbatch cv[U], sv[U];
        load_row<U>(cdup, sdup, 0, cv, sv);
        hs.for_each([&](float* x) { interleaved_chunk<U>(x, 0, cv, sv); });
    }

    static void interleaved_token(const heads& hs, std::size_t r, const float* cdup, const float* sdup,
                                  const float* c, const float* s) noexcept {
        constexpr std::size_t max_hoisted = registers / 4;  // 2U for cos/sin, U data, U temporaries
        if (r % W == 0 && r / W <= max_hoisted) {
            switch (r / W) {
                case 1: return interleaved_hoisted<1>(hs, cdup, sdup);
                case 2: return interleaved_hoisted<2>(hs, cdup, sdup);
                case 4: return interleaved_hoisted<4>(hs, cdup, sdup);
                case 8: if constexpr (max_hoisted >= 8) return interleaved_hoisted<8>(hs, cdup, sdup); break;
                default: break;
            }
        }
        constexpr std::size_t U = max_hoisted;
        hs.for_each([&](float* x) {
            std::size_t i = 0;
            fbatch cv[U], sv[U];
            for (; i + U * W <= r; i += U * W) {
                load_row<U>(cdup, sdup, i, cv, sv);
                interleaved_chunk<U>(x, i, cv, sv);
            }
            for (; i + W <= r; i += W) {
                load_row<1>(cdup, sdup, i, cv, sv);
                interleaved_chunk<1>(x, i, cv, sv);
            }
            for (std::size_t k = i / 2; 2 * k < r; ++k) {
                const float x1 = x[2 * k], x2 = x[2 * k + 1];
                x[2 * k] = static_cast<float>(double(x1) * c[k] - double(x2) * s[k]);
                x[2 * k + 1] = static_cast<float>(double(x2) * c[k] + double(x1) * s[k]);
            }
        });
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
        // Lanes past n are loaded (then discarded) by the swizzles below: keep them defined.
        for (std::size_t k = n; k < n + W; ++k) c[k] = s[k] = 0.0f;
        heads hs{};
        for (int v = 0; v < 2; ++v) {
            hs.count[v] = a.data[v] ? a.heads[v] : 0;
            hs.stride[v] = a.head_stride[v];
        }
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
            for (int v = 0; v < 2; ++v) hs.data[v] = a.data[v] ? a.data[v] + t * a.token_stride[v] : nullptr;
            if (interleaved) {
                for (std::size_t i = 0; i + W <= r; i += W) {
                    xsimd::swizzle(fbatch::load_unaligned(c + i / 2), dup).store_aligned(cdup + i);
                    (xsimd::swizzle(fbatch::load_unaligned(s + i / 2), dup) * alternate).store_aligned(sdup + i);
                }
                interleaved_token(hs, r, cdup, sdup, c, s);
            } else {
                half_split_token(hs, n, c, s);
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
