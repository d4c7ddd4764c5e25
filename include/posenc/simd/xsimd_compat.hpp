#pragma once
// The one place posenc includes xsimd, and the few xsimd spellings that changed between Debian's 8.1
// and today's 13/14.
//
// POSENC_SIMD_DIAGNOSTICS_PUSH/POP: g++ 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized and
// -Wuninitialized wherever _mm512_undefined_* is inlined (GCC bug 105593; ~1,100 warnings in a user's
// unit built with -march=native -Wall). g++ checks the pragmas at every location of the inlining
// chain, so the kernel headers put their code between these two; the pair around the #include alone
// would help only when posenc is the first to include <immintrin.h>. GCC with AVX-512 only: clang
// does not warn, and the SSE/AVX2 code keeps the warning.

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define POSENC_SIMD_DIAGNOSTICS_PUSH                                     \
    _Pragma("GCC diagnostic push")                                       \
    _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")          \
    _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define POSENC_SIMD_DIAGNOSTICS_POP _Pragma("GCC diagnostic pop")
#else
#define POSENC_SIMD_DIAGNOSTICS_PUSH
#define POSENC_SIMD_DIAGNOSTICS_POP
#endif

POSENC_SIMD_DIAGNOSTICS_PUSH
#include <xsimd/xsimd.hpp>
POSENC_SIMD_DIAGNOSTICS_POP

namespace posenc::simd::compat {

/// An index pattern for xsimd::swizzle: lane i takes lane Gen::get(i, n).
template <class Arch, class Gen>
constexpr auto swizzle_mask() noexcept {
#if XSIMD_VERSION_MAJOR < 9
    return xsimd::make_batch_constant<xsimd::batch<std::uint32_t, Arch>, Gen>();
#elif XSIMD_VERSION_MAJOR < 13
    return xsimd::make_batch_constant<xsimd::batch<std::uint32_t, Arch>, Gen>();
#else
    return xsimd::make_batch_constant<std::uint32_t, Gen, Arch>();
#endif
}

/// Whether the CPU we run on can execute code compiled for Arch (xsimd's own dispatch rule).
template <class Arch>
inline bool cpu_supports() noexcept {
#if XSIMD_VERSION_MAJOR < 11
    return Arch::version() <= xsimd::available_architectures().best;
#else
    return xsimd::available_architectures().has(Arch{});
#endif
}

}  // namespace posenc::simd::compat
