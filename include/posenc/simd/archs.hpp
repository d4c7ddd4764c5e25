#pragma once
// The one list of x86-64 architectures posenc compiles its kernels for under run-time dispatch, best
// first (xsimd::dispatch tries them in order). Each entry is X(name, xsimd tag, compiler flags of its
// unit). Both dispatchers (simd/dispatch.hpp, attention/dispatch.hpp) declare their kernels from it,
// and cmake/posencSimd.cmake reads these lines to write one translation unit per entry, named
// posenc_simd_<name>.cpp and compiled with those flags. One entry per line, in this exact shape: CMake
// parses them. Without -mf16c the fp16 conversions of the AVX2 unit would take a per-lane path.
// Macros only, no code: the per-architecture units include it (the COMDAT rule, rotate_args.hpp).

// clang-format off
#define POSENC_SIMD_ARCHS(X)                                                                                   \
    X(avx512bw, xsimd::avx512bw, "-mavx512f -mavx512cd -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma -mf16c") \
    X(avx2, xsimd::fma3<xsimd::avx2>, "-mavx2 -mfma -mf16c")                                                    \
    X(sse4_2, xsimd::sse4_2, "-msse4.2")                                                                        \
    X(sse2, xsimd::sse2, "")
// clang-format on
