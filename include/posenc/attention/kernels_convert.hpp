#pragma once
// The attention steps that convert rather than multiply, templated on the architecture: K/V rows
// packed as float (16-bit ones widened) and float rows narrowed to 16 bits (a cache's append), the
// prefetch of rows ahead, and double terms
// added to float scores with one rounding (a bias computed in double), and the backward's per-element
// dS = P ⊙ (dP − Δ). kernels.hpp builds the tile
// products on the prefetch and widening helpers here. Only arch-templated code (the COMDAT rule of
// kernels.hpp).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "posenc/attention/functors.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/xsimd_compat.hpp"  // xsimd

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct attention_convert_steps {
    using batch = xsimd::batch<float, Arch>;
    static constexpr std::size_t W = batch::size;

    /// Rows of one kv head lie a token stride apart (4 KiB for 8 heads of 128): the hardware prefetcher
    /// stops at page boundaries, so the steps that stream K and V ask for rows ahead themselves, a few
    /// rows ahead into L1 — also past the end of a tile (a step sees one tile), so past the last key
    /// too: a hint, it never faults, and the address is computed without pointer arithmetic.
    /// (Always inlined, as the rotary kernels' prefetch: g++ 12 at -O2 may delete calls to an
    /// out-of-line function whose only effect is a prefetch.)
    /// (Decode's steps ask attn_decode_prefetch::stream_rows ahead instead: prefill's packing and
    /// packed tiles measured slower with decode's 12 on a Zen 5.)
    static constexpr std::size_t prefetch_rows = 4;
    template <class E>
    [[gnu::always_inline]] static void prefetch_row(const E* base, std::size_t row, std::size_t stride, std::size_t n) noexcept {
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(base) + row * stride * sizeof(E);
        for (std::uintptr_t line = at & ~std::uintptr_t{63}; line < at + n * sizeof(E); line += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(line));
    }

    /// Row `row` of `r` into L2 (attn_rows_ahead), if it is one of its rows.
    [[gnu::always_inline]] static void prefetch_ahead(const attn_rows_ahead& r, std::size_t row) noexcept {
        if (row >= r.rows) return;
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(r.base) + row * r.stride_bytes;
        for (std::uintptr_t line = at & ~std::uintptr_t{63}; line < at + r.row_bytes; line += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
    }

    /// Rows [row, row + count) as prefetch_row and prefetch_ahead ask for them one by one, in one loop
    /// over their lines where the rows are contiguous (a kv_cache's head): decode asks for four rows a
    /// step, and one loop asks for each line once without four loops' setup.
    template <class E>
    [[gnu::always_inline]] static void prefetch_row_range(const E* base, std::size_t row, std::size_t count, std::size_t stride,
                                                          std::size_t n) noexcept {
        if (stride != n) {
            for (std::size_t u = 0; u < count; ++u) prefetch_row(base, row + u, stride, n);
            return;
        }
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(base) + row * stride * sizeof(E);
        for (std::uintptr_t line = at & ~std::uintptr_t{63}; line < at + count * n * sizeof(E); line += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(line));
    }
    [[gnu::always_inline]] static void prefetch_ahead_range(const attn_rows_ahead& r, std::size_t row, std::size_t count) noexcept {
        if (row >= r.rows) return;
        if (count > r.rows - row) count = r.rows - row;
        if (r.stride_bytes != r.row_bytes) {
            for (std::size_t u = 0; u < count; ++u) prefetch_ahead(r, row + u);
            return;
        }
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(r.base) + row * r.stride_bytes;
        for (std::uintptr_t line = at & ~std::uintptr_t{63}; line < at + count * r.row_bytes; line += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
    }

    /// Rows to float, exactly (16-bit ones through arch_ops' widening loads), W lanes at a time, the tail
    /// per element; the rows ahead are asked for as in qk_dot (a cache's rows lie a token stride apart).
    template <class H>
    static void widen_rows(const attn_widen_args& a) noexcept {
        const H* src = static_cast<const H*>(a.src);
        const std::size_t Dw = a.dim / W * W;
        for (std::size_t j = 0; j < a.rows; ++j) {
            const H* s = src + j * a.src_stride;
            float* d = a.dst + j * a.dst_stride;
            prefetch_row(src, j + prefetch_rows, a.src_stride, a.dim);
            std::size_t i = 0;
            for (; i < Dw; i += W) arch_ops<Arch>::load(s + i).store_unaligned(d + i);
            for (; i < a.dim; ++i) d[i] = to_float(s[i]);
        }
    }
    static float to_float(float x) noexcept { return x; }
    static float to_float(bf16 x) noexcept { return detail::bf16_bits_to_float<Arch>(x.bits); }
    static float to_float(fp16 x) noexcept { return detail::fp16_bits_to_float<Arch>(x.bits); }
    static void widen(const attn_widen_args& a) noexcept {
        if (a.type == dtype::bf16)
            widen_rows<bf16>(a);
        else if (a.type == dtype::fp16)
            widen_rows<fp16>(a);
        else  // (float rows packed the same way: rows a token stride apart, one loop for every type)
            widen_rows<float>(a);
    }

    /// Float rows to 16 bits through arch_ops' rounding stores, the tail per element (the same
    /// rounding: round to nearest even).
    template <class H>
    static void narrow_rows(const attn_narrow_args& a) noexcept {
        H* dst = static_cast<H*>(a.dst);
        const std::size_t Dw = a.dim / W * W;
        for (std::size_t j = 0; j < a.rows; ++j) {
            const float* s = a.src + j * a.src_stride;
            H* d = dst + j * a.dst_stride;
            std::size_t i = 0;
            for (; i < Dw; i += W) arch_ops<Arch>::store(d + i, batch::load_unaligned(s + i));
            for (; i < a.dim; ++i) d[i].bits = narrow_bits<H>(s[i]);
        }
    }
    template <class H>
    static std::uint16_t narrow_bits(float x) noexcept {  // (not H's constructor: an inline function the units would share)
        if constexpr (std::is_same_v<H, bf16>)
            return detail::float_to_bf16_bits<Arch>(x);
        else
            return detail::float_to_fp16_bits<Arch>(x);
    }
    static void narrow(const attn_narrow_args& a) noexcept {
        if (a.type == dtype::bf16)
            narrow_rows<bf16>(a);
        else
            narrow_rows<fp16>(a);
    }

    /// A plain loop the compiler vectorises at Arch's width: float → double, one add, double → float
    /// (no product, so no contraction can change the rounding on any architecture); with terms exact
    /// in float, one float add (the same bits, without the conversions).
    static void add_terms(const attn_add_terms_args& a) noexcept {
        float* s = a.s;
        if (a.terms_f) {
            const float* tf = a.terms_f;
            for (std::size_t j = 0; j < a.n; ++j) s[j] += tf[j];
            return;
        }
        const double* t = a.terms;
        for (std::size_t j = 0; j < a.n; ++j) s[j] = static_cast<float>(static_cast<double>(s[j]) + t[j]);
    }

    /// One vector per W scores: p·(dP − Δ), then × factor (separate roundings, no contraction possible);
    /// exactly 0 where p = 0 (a masked key), also when Δ or dP is NaN: a key the row does not see gets
    /// no gradient from it, as a masked tile the loop skips gets none.
    static void grad_ds(const attn_grad_ds_args& a) noexcept {
        constexpr std::size_t BK = attn_key_tile;
        const batch zero(0.0f);
        for (std::size_t r = 0; r < a.rows; ++r) {
            const float* p = a.p + r * BK;
            float* ds = a.ds + r * BK;
            const batch delta(a.delta[r]), f(a.factor ? a.factor[r] : 1.0f);
            for (std::size_t j = 0; j < BK; j += W) {
                const batch pj = batch::load_aligned(p + j);
                batch x = pj * (batch::load_aligned(ds + j) - delta);
                if (a.factor) x = x * f;
                xsimd::select(pj == zero, zero, x).store_aligned(ds + j);
            }
        }
    }
};

template <class Arch>
void attn_widen_functor::operator()(Arch, const attn_widen_args& a) const noexcept {
    attention_convert_steps<Arch>::widen(a);
}
template <class Arch>
void attn_narrow_functor::operator()(Arch, const attn_narrow_args& a) const noexcept {
    attention_convert_steps<Arch>::narrow(a);
}
template <class Arch>
void attn_add_terms_functor::operator()(Arch, const attn_add_terms_args& a) const noexcept {
    attention_convert_steps<Arch>::add_terms(a);
}
template <class Arch>
void attn_grad_ds_functor::operator()(Arch, const attn_grad_ds_args& a) const noexcept {
    attention_convert_steps<Arch>::grad_ds(a);
}

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP
