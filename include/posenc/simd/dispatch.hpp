#pragma once
// Choosing the SIMD kernels.
//
// Without run-time dispatch (the default), the kernels are compiled for whatever the including
// translation unit targets: xsimd::default_arch, i.e. SSE2 for plain x86-64 and AVX-512 under
// -march=native on an AVX-512 machine.
//
// With run-time dispatch, a binary built for baseline x86-64 uses AVX-512 / AVX2+FMA / SSE4.2 / SSE2
// according to the CPU it runs on. Each architecture's kernels are compiled in their own translation
// unit with that architecture's flags; CMake's posenc_add_simd_dispatch(<target>) adds those units
// to a target and defines POSENC_SIMD_DISPATCH for it (see cmake/posencSimd.cmake). Without CMake:
// compile simd/instantiate.hpp once per architecture as that file explains, and define
// POSENC_SIMD_DISPATCH=1 for every translation unit of the program.

#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "posenc/simd/functors.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/xsimd_compat.hpp"

#if defined(POSENC_SIMD_DISPATCH) && (defined(__x86_64__) || defined(_M_X64))
#define POSENC_SIMD_RUNTIME_DISPATCH 1
#else
#include "posenc/simd/kernels.hpp"
#endif

namespace posenc::simd {

#ifdef POSENC_SIMD_RUNTIME_DISPATCH
/// Best first, as xsimd::dispatch requires.
using dispatch_archs = xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse4_2, xsimd::sse2>;

#define POSENC_SIMD_DECLARE(ARCH)                                                                  \
    extern template void rotate_functor::operator()<ARCH>(ARCH, const rotate_args&) const noexcept; \
    extern template void table_functor::operator()<ARCH>(ARCH, const table_args&) const noexcept;
POSENC_SIMD_DECLARE(xsimd::avx512bw)
POSENC_SIMD_DECLARE(xsimd::fma3<xsimd::avx2>)
POSENC_SIMD_DECLARE(xsimd::sse4_2)
POSENC_SIMD_DECLARE(xsimd::sse2)
#undef POSENC_SIMD_DECLARE

/// For calls that stream through L3/DRAM (see rotate below).
using streaming_archs = xsimd::arch_list<xsimd::fma3<xsimd::avx2>, xsimd::sse4_2, xsimd::sse2>;

/// For fp16 on a CPU that has AVX2 but not F16C (the AVX2 unit is compiled with -mf16c).
using no_f16c_archs = xsimd::arch_list<xsimd::sse4_2, xsimd::sse2>;

[[nodiscard]] inline bool uses_fp16(const rotate_args& a) noexcept {
    for (const auto& v : a.view)
        if (v.src && (v.src_type == dtype::fp16 || v.dst_type == dtype::fp16)) return true;
    return false;
}

[[nodiscard]] inline bool cpu_has_f16c() noexcept {
#if defined(__GNUC__) || defined(__clang__)
    static const bool has = __builtin_cpu_supports("f16c");
    return has;
#else
    return true;
#endif
}

inline void run_rotate(const rotate_args& args, bool streaming) noexcept {
    if (uses_fp16(args) && !cpu_has_f16c())
        xsimd::dispatch<no_f16c_archs>(rotate_functor{})(args);
    else if (streaming)
        xsimd::dispatch<streaming_archs>(rotate_functor{})(args);
    else
        xsimd::dispatch<dispatch_archs>(rotate_functor{})(args);
}
inline void build_table(const table_args& args) noexcept { xsimd::dispatch<dispatch_archs>(table_functor{})(args); }
#else
using dispatch_archs = xsimd::arch_list<xsimd::default_arch>;

inline void run_rotate(const rotate_args& args, bool streaming) noexcept {
    using avx2 = xsimd::fma3<xsimd::avx2>;
    if constexpr (avx2::supported() && (xsimd::default_arch::version() > avx2::version())) {
        if (streaming) return rotate_functor{}(avx2{}, args);
    }
    (void)streaming;
    rotate_functor{}(xsimd::default_arch{}, args);
}
inline void build_table(const table_args& args) noexcept { table_functor{}(xsimd::default_arch{}, args); }
#endif

/// Calls moving more than this many bytes stream through L3/DRAM. Measured on Zen 5 (S1, 80 MiB
/// moved): 256-bit kernels reached the in-place bandwidth limit and 512-bit ones about 70% of it,
/// while for a decode step (40 KiB, L1-resident) the 512-bit kernels were twice as fast. So large
/// calls use AVX2 even where AVX-512 exists; small ones use the widest vectors.
inline constexpr std::size_t streaming_bytes = std::size_t{1} << 20;

/// Bytes a call reads and writes: the rotary lanes of Q and K, every lane when out of place or
/// normalised.
[[nodiscard]] inline std::size_t bytes_moved(const rotate_args& a) noexcept {
    std::size_t bytes = 0;
    for (const auto& v : a.view) {
        if (!v.src) continue;
        const std::size_t lanes = (v.src != v.dst || v.norm_weight) ? a.head_dim : a.rotary_dim;
        bytes += a.tokens * v.heads * lanes * (size_of(v.src_type) + size_of(v.dst_type));
    }
    return bytes;
}

/// Runs one call (or one thread's slice of a call that moves `call_bytes` in all).
inline void rotate(const rotate_args& args, std::size_t call_bytes) noexcept {
    run_rotate(args, call_bytes > streaming_bytes);
}
inline void rotate(const rotate_args& args) noexcept { rotate(args, bytes_moved(args)); }

/// Name of the architecture the dispatcher picks on this CPU (for benchmark reports).
inline const char* active_arch_name() noexcept {
    return xsimd::dispatch<dispatch_archs>([](auto arch) { return decltype(arch)::name(); })();
}

}  // namespace posenc::simd
