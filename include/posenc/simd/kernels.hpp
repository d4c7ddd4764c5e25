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

template <class Arch>
struct kernels {
    using fbatch = xsimd::batch<float, Arch>;
    using dbatch = xsimd::batch<double, Arch>;
    static constexpr std::size_t W = fbatch::size;
    static constexpr std::size_t WD = dbatch::size;
    static constexpr std::size_t row_capacity = max_rotary_dim + 2 * W;  // floats, with padding

    // ---- cos/sin rows ---------------------------------------------------------------------------

    /// Reduced angles p·θᵢ (mod 2π, in double) for i < pairs, split into a float high part and the
    /// float remainder: hi + lo equals the double angle to ~1e-15.
    static void reduced_angles(const double* inv_freq, std::size_t pairs, std::int64_t position, float* hi,
                               float* lo) noexcept {
        alignas(64) double r[max_rotary_dim / 2 + 2 * W];
        const dbatch p(static_cast<double>(position));
        std::size_t i = 0;
        for (; i + WD <= pairs; i += WD) {
            const dbatch a = p * dbatch::load_unaligned(inv_freq + i);
            const dbatch n = xsimd::nearbyint(a * dbatch(detail::inv_two_pi));
            xsimd::fnma(n, dbatch(detail::two_pi_lo), xsimd::fnma(n, dbatch(detail::two_pi_hi), a)).store_aligned(r + i);
        }
        for (; i < pairs; ++i) r[i] = detail::reduce_angle<Arch>(static_cast<double>(position) * inv_freq[i]);
        for (i = 0; i < pairs; ++i) {
            hi[i] = static_cast<float>(r[i]);
            lo[i] = static_cast<float>(r[i] - static_cast<double>(hi[i]));
        }
    }

    /// cos/sin × amplitude of one position; c and s need room for pairs rounded up to W.
    /// Float sincos of the high part, corrected to first order by the low part (the next term is
    /// below 1e-14), so the result is as accurate as the float sincos itself.
    static void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position, float amplitude,
                            float* c, float* s) noexcept {
        alignas(64) float hi[max_rotary_dim / 2 + W], lo[max_rotary_dim / 2 + W];
        reduced_angles(inv_freq, pairs, position, hi, lo);
        std::size_t padded = pairs;
        for (; padded % W; ++padded) hi[padded] = lo[padded] = 0.0f;
        const fbatch a(amplitude);
        for (std::size_t i = 0; i < padded; i += W) {
            const fbatch h = fbatch::load_aligned(hi + i), l = fbatch::load_aligned(lo + i);
            const auto sc = xsimd::sincos(h);  // (sin, cos)
            (xsimd::fnma(l, sc.first, sc.second) * a).store_unaligned(c + i);
            (xsimd::fma(l, sc.second, sc.first) * a).store_unaligned(s + i);
        }
    }

    /// Table rows, in double-precision sincos (the table is built once and kept, so it is rounded
    /// once from the double result, like the scalar reference).
    static void table_rows(const table_args& t) noexcept {
        const std::size_t n = t.pairs;
        alignas(64) double cd[max_rotary_dim / 2 + 2 * W], sd[max_rotary_dim / 2 + 2 * W];
        for (std::size_t k = 0; k < t.positions; ++k) {
            const double p = static_cast<double>(t.first_position + static_cast<std::int64_t>(k));
            float* row = t.out + k * 2 * n;
            std::size_t i = 0;
            for (; i + WD <= n; i += WD) {
                const dbatch a = dbatch(p) * dbatch::load_unaligned(t.inv_freq + i);
                const dbatch m = xsimd::nearbyint(a * dbatch(detail::inv_two_pi));
                const dbatch r = xsimd::fnma(m, dbatch(detail::two_pi_lo), xsimd::fnma(m, dbatch(detail::two_pi_hi), a));
                const auto sc = xsimd::sincos(r);
                (sc.second * dbatch(t.amplitude)).store_aligned(cd + i);
                (sc.first * dbatch(t.amplitude)).store_aligned(sd + i);
            }
            for (; i < n; ++i) {
                const double r = detail::reduce_angle<Arch>(p * t.inv_freq[i]);
                cd[i] = t.amplitude * std::cos(r);
                sd[i] = t.amplitude * std::sin(r);
            }
            for (i = 0; i < n; ++i) {
                row[i] = static_cast<float>(cd[i]);
                row[n + i] = static_cast<float>(sd[i]);
            }
        }
    }

    // ---- rotations of one head ------------------------------------------------------------------

    /// Pairs (i, i + n): y₁ = x₁c − x₂s, y₂ = x₂c + x₁s. `s` already carries the direction's sign.
    static void half_split_head(float* x, std::size_t n, const float* c, const float* s) noexcept {
        constexpr std::size_t unroll = 4;  // 4 vectors per half: a whole 128-lane head in AVX-512
        std::size_t i = 0;
        for (; i + unroll * W <= n; i += unroll * W) {
            fbatch x1[unroll], x2[unroll];
            for (std::size_t u = 0; u < unroll; ++u) {
                x1[u] = fbatch::load_unaligned(x + i + u * W);
                x2[u] = fbatch::load_unaligned(x + n + i + u * W);
            }
            for (std::size_t u = 0; u < unroll; ++u) {
                const fbatch cv = fbatch::load_unaligned(c + i + u * W), sv = fbatch::load_unaligned(s + i + u * W);
                xsimd::fnma(x2[u], sv, x1[u] * cv).store_unaligned(x + i + u * W);
                xsimd::fma(x1[u], sv, x2[u] * cv).store_unaligned(x + n + i + u * W);
            }
        }
        for (; i + W <= n; i += W) {
            const fbatch x1 = fbatch::load_unaligned(x + i), x2 = fbatch::load_unaligned(x + n + i);
            const fbatch cv = fbatch::load_unaligned(c + i), sv = fbatch::load_unaligned(s + i);
            xsimd::fnma(x2, sv, x1 * cv).store_unaligned(x + i);
            xsimd::fma(x1, sv, x2 * cv).store_unaligned(x + n + i);
        }
        for (; i < n; ++i) {
            const float x1 = x[i], x2 = x[n + i];
            x[i] = std::fma(-x2, s[i], x1 * c[i]);
            x[n + i] = std::fma(x1, s[i], x2 * c[i]);
        }
    }

    /// Pairs (2i, 2i+1): y = x·cdup + swap(x)·sdup with cdup = (c₀, c₀, c₁, c₁, …) and
    /// sdup = (−s₀, s₀, −s₁, s₁, …). c, s (compact) serve the scalar tail.
    static void interleaved_head(float* x, std::size_t r, const float* cdup, const float* sdup, const float* c,
                                 const float* s) noexcept {
        constexpr std::size_t unroll = 8;
        constexpr auto swap = compat::swizzle_mask<Arch, patterns::swap_pairs>();
        std::size_t i = 0;
        for (; i + unroll * W <= r; i += unroll * W) {
            fbatch v[unroll];
            for (std::size_t u = 0; u < unroll; ++u) v[u] = fbatch::load_unaligned(x + i + u * W);
            for (std::size_t u = 0; u < unroll; ++u)
                xsimd::fma(xsimd::swizzle(v[u], swap), fbatch::load_aligned(sdup + i + u * W),
                           v[u] * fbatch::load_aligned(cdup + i + u * W))
                    .store_unaligned(x + i + u * W);
        }
        for (; i + W <= r; i += W) {
            const fbatch v = fbatch::load_unaligned(x + i);
            xsimd::fma(xsimd::swizzle(v, swap), fbatch::load_aligned(sdup + i), v * fbatch::load_aligned(cdup + i))
                .store_unaligned(x + i);
        }
        for (std::size_t k = i / 2; 2 * k < r; ++k) {
            const float x1 = x[2 * k], x2 = x[2 * k + 1];
            x[2 * k] = std::fma(-x2, s[k], x1 * c[k]);
            x[2 * k + 1] = std::fma(x1, s[k], x2 * c[k]);
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
        alignas(64) float c[row_capacity / 2], s[row_capacity / 2];          // compact row, direction applied
        alignas(64) float cdup[row_capacity], sdup[row_capacity];            // interleaved: per-lane row
        constexpr auto dup = compat::swizzle_mask<Arch, patterns::duplicate_low_half>();
        fbatch alternate;  // (−1, 1, −1, 1, …)
        {
            alignas(64) float alt[W];
            for (std::size_t k = 0; k < W; ++k) alt[k] = k % 2 ? 1.0f : -1.0f;
            alternate = fbatch::load_aligned(alt);
        }
        std::memset(c, 0, sizeof c);  // padding lanes are loaded (then discarded) by the swizzles below
        std::memset(s, 0, sizeof s);
        for (std::size_t t = 0; t < a.tokens; ++t) {
            const float* src = nullptr;
            if (a.rows) {
                src = a.rows + t * r;
            } else if (a.table) {
                src = a.table + static_cast<std::size_t>(position(a, t)) * r;
            } else {
                cos_sin_row(a.inv_freq, n, position(a, t), static_cast<float>(a.amplitude), c, s);
            }
            if (src) {
                std::memcpy(c, src, n * sizeof(float));
                std::memcpy(s, src + n, n * sizeof(float));
            }
            if (a.inverse)
                for (std::size_t i = 0; i < n; ++i) s[i] = -s[i];
            if (interleaved) {
                for (std::size_t i = 0; i + W <= r; i += W) {
                    xsimd::swizzle(fbatch::load_unaligned(c + i / 2), dup).store_aligned(cdup + i);
                    (xsimd::swizzle(fbatch::load_unaligned(s + i / 2), dup) * alternate).store_aligned(sdup + i);
                }
            }
            for (int v = 0; v < 2; ++v) {
                if (!a.data[v]) continue;
                float* token = a.data[v] + t * a.token_stride[v];
                for (std::size_t h = 0; h < a.heads[v]; ++h) {
                    float* x = token + h * a.head_stride[v];
                    if (interleaved)
                        interleaved_head(x, r, cdup, sdup, c, s);
                    else
                        half_split_head(x, n, c, s);
                }
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
