#pragma once
// The few xsimd spellings that changed between Debian's 8.1 and today's 13/14.

#include <cstdint>

#include <xsimd/xsimd.hpp>

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
