#pragma once
// Compiles the attention steps for POSENC_SIMD_ARCH (see simd/instantiate.hpp; the units that
// posenc_add_simd_dispatch() generates include both).

#ifndef POSENC_SIMD_ARCH
#error "define POSENC_SIMD_ARCH to an xsimd architecture tag before including posenc/attention/instantiate.hpp"
#endif

#include "posenc/attention/kernels.hpp"

namespace posenc::simd {
template void attn_qk_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_qk_args&) const noexcept;
template void attn_softmax_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_softmax_args&) const noexcept;
template void attn_pv_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_pv_args&) const noexcept;
template void attn_widen_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_widen_args&) const noexcept;
template void attn_narrow_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_narrow_args&) const noexcept;
template void attn_add_terms_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_add_terms_args&) const noexcept;
template void attn_grad_ds_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const attn_grad_ds_args&) const noexcept;
}  // namespace posenc::simd
