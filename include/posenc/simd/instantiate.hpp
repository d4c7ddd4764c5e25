#pragma once
// Include this from a translation unit compiled for one architecture, after defining
// POSENC_SIMD_ARCH to its xsimd tag, to compile the kernels for that architecture:
//
//     // posenc_avx2.cpp, compiled with -mavx2 -mfma
//     #define POSENC_SIMD_ARCH xsimd::fma3<xsimd::avx2>
//     #include <posenc/simd/instantiate.hpp>
//
// The four x86-64 units (flags):  avx512bw (-mavx512f -mavx512cd -mavx512dq -mavx512bw -mavx512vl
// -mavx2 -mfma -mf16c), fma3<avx2> (-mavx2 -mfma -mf16c), sse4_2 (-msse4.2), sse2 (none). Without
// -mf16c the fp16 conversions of the AVX2 unit take a per-lane path.
// cmake/posencSimd.cmake's posenc_add_simd_dispatch() writes and adds them for you.

#ifndef POSENC_SIMD_ARCH
#error "define POSENC_SIMD_ARCH to an xsimd architecture tag before including posenc/simd/instantiate.hpp"
#endif

#include "posenc/simd/kernels.hpp"

namespace posenc::simd {
template void rotate_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const rotate_args&) const noexcept;
template void table_functor::operator()<POSENC_SIMD_ARCH>(POSENC_SIMD_ARCH, const table_args&) const noexcept;
}  // namespace posenc::simd
