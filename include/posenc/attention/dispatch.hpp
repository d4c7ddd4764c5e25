#pragma once
// Choosing the attention steps' architecture, as simd/dispatch.hpp does for the rotary kernels: with
// POSENC_SIMD_DISPATCH (posenc_add_simd_dispatch), the steps are compiled once per x86-64
// architecture in the generated per-arch units (they include attention/instantiate.hpp) and the
// widest one the CPU runs is picked at run time; otherwise they follow the including unit's target.

#include "posenc/attention/functors.hpp"
#include "posenc/simd/cpu.hpp"
#include "posenc/simd/dispatch.hpp"
#include "posenc/simd/xsimd_compat.hpp"  // xsimd

#ifndef POSENC_SIMD_RUNTIME_DISPATCH
#include "posenc/attention/kernels.hpp"
#endif

namespace posenc::simd {

#ifdef POSENC_SIMD_RUNTIME_DISPATCH
#define POSENC_ATTN_DECLARE(name, ARCH, flags)                                                                        \
    extern template void attn_qk_functor::operator()<ARCH>(ARCH, const attn_qk_args&) const noexcept;           \
    extern template void attn_softmax_functor::operator()<ARCH>(ARCH, const attn_softmax_args&) const noexcept; \
    extern template void attn_pv_functor::operator()<ARCH>(ARCH, const attn_pv_args&) const noexcept;           \
    extern template void attn_widen_functor::operator()<ARCH>(ARCH, const attn_widen_args&) const noexcept;     \
    extern template void attn_narrow_functor::operator()<ARCH>(ARCH, const attn_narrow_args&) const noexcept;   \
    extern template void attn_add_terms_functor::operator()<ARCH>(ARCH, const attn_add_terms_args&) const noexcept; \
    extern template void attn_grad_ds_functor::operator()<ARCH>(ARCH, const attn_grad_ds_args&) const noexcept;
POSENC_SIMD_ARCHS(POSENC_ATTN_DECLARE)  // simd/archs.hpp, via simd/dispatch.hpp
#undef POSENC_ATTN_DECLARE
#endif

/// The steps compiled for Arch (the caller makes sure the CPU runs it; tests force each one).
template <class Arch>
[[nodiscard]] attn_kernels attention_kernels_for() noexcept {
    attn_kernels k;
    k.qk = [](const attn_qk_args& a) noexcept { attn_qk_functor{}(Arch{}, a); };
    k.softmax = [](const attn_softmax_args& a) noexcept { attn_softmax_functor{}(Arch{}, a); };
    k.pv = [](const attn_pv_args& a) noexcept { attn_pv_functor{}(Arch{}, a); };
    k.widen = [](const attn_widen_args& a) noexcept { attn_widen_functor{}(Arch{}, a); };
    k.narrow = [](const attn_narrow_args& a) noexcept { attn_narrow_functor{}(Arch{}, a); };
    k.add_terms = [](const attn_add_terms_args& a) noexcept { attn_add_terms_functor{}(Arch{}, a); };
    k.grad_ds = [](const attn_grad_ds_args& a) noexcept { attn_grad_ds_functor{}(Arch{}, a); };
    k.arch = Arch::name();
    return k;
}

/// Decode's prefetch for a CPU, by vendor: the vendor stands in for the two CPUs it was measured on
/// (docs/performance.md), an AMD Zen 5 (the default) and an Intel Xeon, where the requests for the
/// other stream cost more than they bring and the stream in use is asked for 6 rows ahead.
[[nodiscard]] constexpr attn_decode_prefetch decode_prefetch_for(const cpu_signature& cpu) noexcept {
    return cpu.intel ? attn_decode_prefetch{.stream_rows = 6, .other_stream = false} : attn_decode_prefetch{};
}

/// The widest architecture this CPU runs (of dispatch_archs, at most POSENC_SIMD_MAX_ARCH), with this
/// CPU's decode prefetch, resolved once.
[[nodiscard]] inline attn_kernels attention_kernels() noexcept {
    static const attn_kernels best = [] {
        attn_kernels k = dispatch_capped<dispatch_archs>([](auto arch) { return attention_kernels_for<decltype(arch)>(); });
        k.decode_prefetch = decode_prefetch_for(this_cpu());
        return k;
    }();
    return best;
}

}  // namespace posenc::simd
