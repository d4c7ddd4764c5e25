#pragma once
// POSENC_UNROLL before a loop with a small constant trip count (the vectors of a chunk or tile):
// unrolled completely, so that the arrays of vectors it indexes stay in registers. Without it g++ 12
// at -O2 (CMake's RelWithDebInfo) left such loops rolled and the arrays on the stack: on Zen 5 the
// rotary kernels ran 2–2.5× and the attention kernel 2.7× slower than at -O3.
#if defined(__clang__)
#define POSENC_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define POSENC_UNROLL _Pragma("GCC unroll 16")
#else
#define POSENC_UNROLL
#endif
