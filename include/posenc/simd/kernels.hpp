#pragma once
// xsimd kernels for the rotary hot loop, templated on the architecture tag: one class template that
// each architecture's unit instantiates whole (instantiate.hpp), put together here from its parts:
// lane access (lane_io.hpp), cos/sin rows (cos_sin_rows.hpp), the fused norm (norm_kernels.hpp) and
// the rotations (rotate_kernels.hpp); this header drives one call, token by token.
//
// Per token: one cos/sin row (from the caller's rows, a table, or computed here), shared by every
// head of Q and K; per head: read the source (float, bf16 or fp16), optionally normalise (fused
// per-head RMSNorm), rotate in float32, round once to the destination type and write it (in place or
// to another buffer: one read and one write). A head's chunk (up to `unroll` vectors per half) is
// loaded completely before it is stored: interleaved loads and stores halved the 512-bit loop's speed.
// A one-token call over float heads in place (decode) instead rotates every head a column or two of
// the row at a time while the next are computed (rotate_while_computing_row), so that the row's
// latency hides behind the stores; same operations, same bits.
//
// Batch invariance: every lane of every width goes through the same operations in the same order —
// the same FMAs (arch_ops), the cos/sin row computed by the same per-lane double formulas (prefill's
// recurrence rows only where they provably equal those), the lanes
// past the last full vector through the same vector code on a zero-padded copy, the norm's sum of
// squares in a fixed 32-lane order — so a token's result does not depend on the vector width, on the
// call's size or on where the token sits in the call.
//
// Only arch-templated code lives here (see rotate_args.hpp for why).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "posenc/core/dtypes.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/cos_sin_rows.hpp"
#include "posenc/simd/functors.hpp"
#include "posenc/simd/norm_kernels.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/rotate_kernels.hpp"
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

template <class T>
struct type_tag {
    using type = T;
};

template <class Arch>
struct kernels : cos_sin_rows<Arch>, norm_kernels<Arch>, rotate_kernels<Arch> {
    using row_base = cos_sin_rows<Arch>;
    using norm_base = norm_kernels<Arch>;
    using rotate_base = rotate_kernels<Arch>;
    using typename rotate_base::ops;
    using typename rotate_base::fbatch;
    using rotate_base::W;
    static constexpr std::size_t row_capacity = max_rotary_dim + 2 * W;  // floats, with padding
    template <class S>
    using stored_lanes = typename rotate_base::template stored_lanes<S>;
    template <class S>
    using normed_lanes = typename rotate_base::template normed_lanes<S>;
    using typename rotate_base::token_rows;
    using typename row_base::consecutive_rows;
    using row_base::cos_sin_row;
    using row_base::far_position;
    using typename row_base::dbatch;
    using row_base::table_rows;
    using norm_base::sum_of_squares;
    using norm_base::inverse_rms;
    using rotate_base::rotate_heads;

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
        // fastest block measured (docs/performance.md).
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

    /// Bytes of heads the one-token column path takes: it visits each head once per pass, so they
    /// must stay in L1 between passes; three quarters of the 32 KiB L1D of Zen 2–4 and Skylake-class
    /// cores (Zen 5 has 48 KiB).
    static constexpr std::size_t column_path_bytes = 24 * 1024;

    /// A one-token call whose row is computed here (decode), every view float, in place and without a
    /// norm, the views disjoint and within column_path_bytes: every head is rotated U columns of the
    /// row (U·W pairs; U = 2 on AVX-512 when n/W is even, else 1) at a time while the next U columns'
    /// cos/sin are computed, so that the row's latency hides behind the heads' stores rather than
    /// delaying every head. The same operations as cos_sin_row, the inverse's negation, the
    /// interleaved per-lane rows and the chunks, so the same bits as the general path (NaN payloads
    /// aside: which NaN an FMA keeps depends on its instruction form). False, nothing written, when
    /// the call is not this case.
    static bool rotate_while_computing_row(const rotate_args& a) noexcept {
        const std::size_t n = a.rotary_dim / 2;
        if (a.tokens != 1 || a.rows || a.table || n == 0 || n % W != 0) return false;
        const std::int64_t pos = position(a, 0);
        if (pos > far_position || pos < -far_position) return false;
        // Out of place (a cache's strided heads, pass-through lanes to copy) was not measured this way.
        // Views that share memory keep the general path's order (all of Q, then K): the column
        // passes alternate between them.
        std::size_t bytes = 0;
        const float *lo[2] = {}, *hi[2] = {};
        for (std::size_t k = 0; k < 2; ++k) {
            const view_args& v = a.view[k];
            if (!v.src || v.heads == 0) continue;
            if (v.norm_weight || v.src_type != dtype::f32 || v.dst_type != dtype::f32 || v.src != v.dst) return false;
            lo[k] = static_cast<const float*>(v.src);
            hi[k] = lo[k] + (v.heads - 1) * v.src_head_stride + a.head_dim;
            bytes += v.heads * a.head_dim * sizeof(float);
        }
        if (bytes > column_path_bytes || (lo[0] && lo[1] && lo[0] < hi[1] && lo[1] < hi[0])) return false;
        const dbatch p(static_cast<double>(pos)), amp(a.amplitude);
        if (!row_base::row_within_reach(a.inv_freq, n, p)) return false;
        const bool pairs = (n / W) % 2 == 0 && rotate_base::registers >= 32;
        const auto with_layout = [&]<bool Scaled>(std::bool_constant<Scaled>) {
            if (a.layout == layout_id::interleaved)
                pairs ? columns_while_computing_row<Scaled, 2, true>(a, p, amp) : columns_while_computing_row<Scaled, 1, true>(a, p, amp);
            else
                pairs ? columns_while_computing_row<Scaled, 2, false>(a, p, amp) : columns_while_computing_row<Scaled, 1, false>(a, p, amp);
        };
        if (a.amplitude == 1.0)  // (× 1 changes no bits: skipped, as cos_sin_row does)
            with_layout(std::false_type{});
        else
            with_layout(std::true_type{});
        return true;
    }

    /// rotate_while_computing_row's loop: U columns a pass, each head revisited n/(U·W) times.
    template <bool Scaled, std::size_t U, bool Interleaved>
    [[gnu::noinline]] static void columns_while_computing_row(const rotate_args& a, const dbatch& p, const dbatch& amp) noexcept {
        const std::size_t n = a.rotary_dim / 2;
        const double* inv_freq = a.inv_freq;  // locals: the stores below may alias anything in a
        const bool inverse = a.inverse;
        const view_args views[2] = {a.view[0], a.view[1]};
        const fbatch alternate = alternating_signs();
        fbatch cn[U], sn[U];  // the next pass's columns
        POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) row_base::template cos_sin_column<Scaled>(inv_freq + u * W, p, amp, cn[u], sn[u]);
        for (std::size_t i = 0; i < n; i += U * W) {
            fbatch cv[U], sv[U];
            POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) cv[u] = cn[u], sv[u] = inverse ? -sn[u] : sn[u];
            if (i + U * W < n)
                POSENC_UNROLL for (std::size_t u = 0; u < U; ++u)
                    row_base::template cos_sin_column<Scaled>(inv_freq + i + (U + u) * W, p, amp, cn[u], sn[u]);
            if constexpr (Interleaved) {
                fbatch cd[2 * U], sd[2 * U];  // W pairs make 2W lanes
                POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) interleaved_lanes(cv[u], sv[u], alternate, cd + 2 * u, sd + 2 * u);
                for (const view_args& v : views) {
                    if (!v.src || v.heads == 0) continue;
                    float* x = static_cast<float*>(v.dst) + 2 * i;  // in place
                    const std::size_t heads = v.heads, stride = v.dst_head_stride;
                    for (std::size_t h = 0; h < heads; ++h) {
                        float* xh = x + h * stride;
                        fbatch xv[2 * U];
                        POSENC_UNROLL for (std::size_t k = 0; k < 2 * U; ++k) xv[k] = fbatch::load_unaligned(xh + k * W);
                        POSENC_UNROLL for (std::size_t k = 0; k < 2 * U; ++k)
                            ops::store(xh + k * W, rotate_base::interleaved_rotate(xv[k], cd[k], sd[k]));
                    }
                }
                continue;
            }
            for (const view_args& v : views) {
                if (!v.src || v.heads == 0) continue;
                float* x = static_cast<float*>(v.dst) + i;  // in place
                const std::size_t heads = v.heads, stride = v.dst_head_stride;
                for (std::size_t h = 0; h < heads; ++h) {  // half_split_chunk's steps, written out: through it the rows spilled
                    float* xh = x + h * stride;
                    fbatch x1[U], x2[U];
                    POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
                        x1[u] = fbatch::load_unaligned(xh + u * W);
                        x2[u] = fbatch::load_unaligned(xh + n + u * W);
                    }
                    POSENC_UNROLL for (std::size_t u = 0; u < U; ++u) {
                        ops::store(xh + u * W, rotate_base::half_split_first(x1[u], x2[u], cv[u], sv[u]));
                        ops::store(xh + n + u * W, rotate_base::half_split_second(x1[u], x2[u], cv[u], sv[u]));
                    }
                }
            }
        }
    }

    /// (−1, 1, −1, 1, …): the signs of sin in the interleaved per-lane rows.
    [[gnu::always_inline]] static fbatch alternating_signs() noexcept {
        alignas(64) float alt[W];
        for (std::size_t k = 0; k < W; ++k) alt[k] = k % 2 ? 1.0f : -1.0f;
        return fbatch::load_aligned(alt);
    }
    /// The interleaved per-lane rows of W pairs' cos c and sin s: cd[0], sd[0] for lanes [0, W), cd[1],
    /// sd[1] for [W, 2W) (each pair's value twice, sin with alternating signs); run's rows and the
    /// column path's both come from here, so both rotate with the same bits.
    [[gnu::always_inline]] static void interleaved_lanes(const fbatch& c, const fbatch& s, const fbatch& alternate, fbatch* cd,
                                                         fbatch* sd) noexcept {
        constexpr auto dup_low = compat::swizzle_mask<Arch, patterns::duplicate_low_half>();
        constexpr auto dup_high = compat::swizzle_mask<Arch, patterns::duplicate_high_half>();
        cd[0] = xsimd::swizzle(c, dup_low);
        sd[0] = xsimd::swizzle(s, dup_low) * alternate;
        cd[1] = xsimd::swizzle(c, dup_high);
        sd[1] = xsimd::swizzle(s, dup_high) * alternate;
    }

    static void run(const rotate_args& a) noexcept {
        if (rotate_while_computing_row(a)) return;
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
        const fbatch alternate = alternating_signs();
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
                // table larger than L2 holds it in memory.
                if (t + 1 < a.tokens)
                    rotate_base::template prefetch_lines<0>(a.rows ? a.rows + (t + 1) * r : a.table + static_cast<std::size_t>(position(a, t + 1)) * r,
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
                    fbatch cd[2], sd[2];
                    interleaved_lanes(fbatch::load_unaligned(tr.c + i / 2), fbatch::load_unaligned(tr.s + i / 2), alternate, cd, sd);
                    cd[0].store_aligned(cdup + i);
                    sd[0].store_aligned(sdup + i);
                    cd[1].store_aligned(cdup + i + W);
                    sd[1].store_aligned(sdup + i + W);
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
