// POSENC_UNROLL before a loop with a small constant trip count (the vectors of a chunk or tile, at
// most 16): unrolled completely, so that the arrays of vectors it indexes stay in registers; g++ 12
// at -O2 (CMake's RelWithDebInfo) otherwise leaves them rolled, the arrays on the stack, several
// times slower.
//
// No include guard: each kernel header includes this last and #undefs POSENC_UNROLL at its end, so
// the macro does not reach the code that includes posenc.
#ifndef POSENC_UNROLL
#if defined(__clang__)
#define POSENC_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define POSENC_UNROLL _Pragma("GCC unroll 16")
#else
#define POSENC_UNROLL
#endif
#endif
