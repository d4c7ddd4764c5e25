#pragma once
// Include this from a translation unit compiled for one architecture, after defining
// POSENC_SIMD_ARCH to its xsimd tag, to compile the kernels for that architecture:
//
//     // posenc_avx2.cpp, compiled with -mavx2 -mfma
//     #define POSENC_SIMD_ARCH xsimd::fma3<xsimd::avx2>
//     #include <posenc/simd/instantiate.hpp>
//
// One unit per entry of POSENC_SIMD_ARCHS (simd/archs.hpp: the xsimd tag and that unit's flags);
// cmake/posencSimd.cmake's posenc_add_simd_dispatch() writes and adds them for you.

#ifndef POSENC_SIMD_ARCH
#error "define POSENC_SIMD_ARCH to an xsimd architecture tag before including posenc/simd/instantiate.hpp"
#endif

#include "posenc/simd/kernels.hpp"

namespace posenc::simd {
template void rotate_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const rotate_args&) const noexcept;
template void table_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const table_args&) const noexcept;
}  // namespace posenc::simd
