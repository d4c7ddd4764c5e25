#pragma once
// The rotary kernels' rotations, templated on the architecture: half-split and interleaved pairs of
// a head's lanes (float vectors, or bf16 word pairs), with the token's cos/sin row kept in registers
// for every head where it fits, and the lanes a rotation passes through.
// Only arch-templated code lives here (the COMDAT rule, rotate_args.hpp); kernels.hpp puts the parts
// together.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "posenc/core/dtypes.hpp"
#include "posenc/simd/lane_io.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/xsimd_compat.hpp"
#include "posenc/core/detail/unroll.hpp"  // last: POSENC_UNROLL, #undef at the end

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct rotate_kernels : lane_io<Arch> {
    using base = lane_io<Arch>;
    using typename base::ops;
    using typename base::fbatch;
    using base::W;
    template <class S>
    using stored_lanes = typename base::template stored_lanes<S>;
    using typename base::token_rows;
    using base::store_partial;

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

    /// Asks for the lines `bytes` past p (a hint: it never faults, also past the end of a buffer, and
    /// the address is computed without pointer arithmetic).
    /// Always inlined: g++ 12 at -O2 finds the out-of-line function free of side effects (IPA modref)
    /// and deletes the calls.
    template <int ForWriting>
    [[gnu::always_inline]] static void prefetch_lines(const void* p, std::size_t ahead, std::size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p) + ahead;
        // A loop counted in bytes (one over line addresses measured slower with g++ 12), unrolled so
        // that its add, compare and branch do not outnumber a float head's arithmetic; a head that
        // starts inside a line leaves its last line to the hardware.
#pragma GCC unroll 8
        for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(reinterpret_cast<const void*>(at + b), ForWriting);
#else
        (void)p, (void)ahead, (void)bytes;
#endif
    }

    // ---- one tensor of one token ------------------------------------------------------------------

    /// Head x → y of the next token, asked for while this one is rotated: float sources and separate
    /// destinations of any type always (the hardware prefetcher alone leaves the loads and the stores'
    /// line fills waiting on memory: a 16-bit cache's append), 16-bit sources unless
    /// tr.prefetch_16bit is off (simd::prefetch_16bit()).
    /// Nothing after the last token: there is no next token, and a one-token call (decode) would only
    /// ask again for lines already in L1, which costs load slots the rotation needs.
    template <class S, class D>
    [[gnu::always_inline]] static void prefetch_next_token(const view_args& v, const S* x, D* y, const token_rows& tr) noexcept {
        if (tr.last) return;
        if (sizeof(S) == sizeof(float) || tr.prefetch_16bit)
            prefetch_lines<0>(x, v.src_token_stride * sizeof(S), tr.head_dim * sizeof(S));
        if (tr.out_of_place) prefetch_lines<1>(y, v.dst_token_stride * sizeof(D), tr.head_dim * sizeof(D));
    }

    /// body(src_of(h).x, y + h·dst_head_stride) for every head of one token and tensor of bf16 → bf16
    /// word pairs, the next token's source lines asked for first (as prefetch_next_token; not a separate
    /// destination's, which prefetch_next_token asks for: that case, a bf16 append into a bf16 cache,
    /// has not been measured with it). What the
    /// loop needs of v, tr and src_of is copied into locals before it: every head's stores go through
    /// may-alias vector types, after which the compiler reloads all of it, head after head, and for
    /// these loops that scalar work outgrew the vector arithmetic. The float and fp16 loops keep
    /// reading v and tr per head: the same locals measured slower for float and no faster for fp16
    /// (docs/performance.md).
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
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP

#undef POSENC_UNROLL
