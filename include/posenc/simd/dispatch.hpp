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
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "posenc/simd/archs.hpp"
#include "posenc/simd/cpu.hpp"
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
/// xsimd::arch_list of every type after the first (how a comma-led list from POSENC_SIMD_ARCHS
/// becomes one).
template <class Ignored, class... Archs>
struct arch_list_after_first {
    using type = xsimd::arch_list<Archs...>;
};

/// The entries' names, best first, one string for messages.
#define POSENC_SIMD_NAME_OF(name, ARCH, flags) #name,
inline constexpr const char* dispatch_arch_names[] = {POSENC_SIMD_ARCHS(POSENC_SIMD_NAME_OF)};
#undef POSENC_SIMD_NAME_OF
#define POSENC_SIMD_NAME_OF(name, ARCH, flags) " " #name
inline constexpr const char* dispatch_arch_list = POSENC_SIMD_ARCHS(POSENC_SIMD_NAME_OF);
#undef POSENC_SIMD_NAME_OF

/// POSENC_SIMD_ARCHS (simd/archs.hpp), best first, as xsimd::dispatch requires.
#define POSENC_SIMD_TAG_AFTER_COMMA(name, ARCH, flags) , ARCH
using dispatch_archs = arch_list_after_first<void POSENC_SIMD_ARCHS(POSENC_SIMD_TAG_AFTER_COMMA)>::type;
#undef POSENC_SIMD_TAG_AFTER_COMMA

#define POSENC_SIMD_DECLARE(name, ARCH, flags)                                                      \
    extern template void rotate_functor::operator()<ARCH>(ARCH, const rotate_args&) const noexcept; \
    extern template void table_functor::operator()<ARCH>(ARCH, const table_args&) const noexcept;
POSENC_SIMD_ARCHS(POSENC_SIMD_DECLARE)
#undef POSENC_SIMD_DECLARE

/// Arch's position in POSENC_SIMD_ARCHS (0 = the widest), or the list's length for another tag.
template <class Arch>
[[nodiscard]] constexpr std::size_t dispatch_position() noexcept {
    std::size_t i = 0;
#define POSENC_SIMD_POSITION_OF(name, ARCH, flags) \
    if (std::is_same_v<Arch, ARCH>) return i;     \
    ++i;
    POSENC_SIMD_ARCHS(POSENC_SIMD_POSITION_OF)
#undef POSENC_SIMD_POSITION_OF
    return i;
}

/// The position in POSENC_SIMD_ARCHS of the widest entry dispatch may pick: 0, or the entry that
/// `ceiling_name` (the environment variable POSENC_SIMD_MAX_ARCH) names — avx512bw, avx2, sse4_2 or
/// sse2 — to time or test the narrower kernels on a wide CPU, as oneDNN's ONEDNN_MAX_CPU_ISA does.
/// Any other value: 0.
[[nodiscard]] inline std::size_t dispatch_ceiling_for(const char* ceiling_name) noexcept {
    if (ceiling_name == nullptr) return 0;
    const std::string_view wanted(ceiling_name);
    std::size_t i = 0;
#define POSENC_SIMD_CEILING_OF(name, ARCH, flags) \
    if (wanted == #name) return i;              \
    ++i;
    POSENC_SIMD_ARCHS(POSENC_SIMD_CEILING_OF)
#undef POSENC_SIMD_CEILING_OF
    return 0;
}

/// dispatch_ceiling_for this process's environment, read once; a value that names no entry is
/// reported on stderr (the process asked for something it does not get).
[[nodiscard]] inline std::size_t dispatch_ceiling() noexcept {
    static const std::size_t ceiling = [] {
        const char* name = std::getenv("POSENC_SIMD_MAX_ARCH");
        if (name != nullptr && *name != '\0' && dispatch_ceiling_for(name) == 0 &&
            std::string_view(name) != dispatch_arch_names[0]) {
            std::fprintf(stderr, "posenc: POSENC_SIMD_MAX_ARCH=%s is none of%s; ignored\n", name, dispatch_arch_list);
        }
        return dispatch_ceiling_for(name);
    }();
    return ceiling;
}

/// f(Arch{}, args...) for the first Arch of the list (best first) that this CPU runs and that is not
/// wider than dispatch_ceiling() allows; the last entry (SSE2 on x86-64) when none is.
template <class F, class Arch, class... Rest, class... Args>
decltype(auto) dispatch_capped_walk(xsimd::arch_list<Arch, Rest...>, F& f, Args&... args) noexcept {
    if constexpr (sizeof...(Rest) == 0) {
        return f(Arch{}, args...);
    } else {
        if (dispatch_position<Arch>() >= dispatch_ceiling() && compat::cpu_supports<Arch>()) return f(Arch{}, args...);
        return dispatch_capped_walk(xsimd::arch_list<Rest...>{}, f, args...);
    }
}
template <class ArchList, class F, class... Args>
decltype(auto) dispatch_capped(F f, Args&... args) noexcept {
    return dispatch_capped_walk(ArchList{}, f, args...);
}

/// For fp16 on a CPU that has AVX2 but not F16C: the entries of POSENC_SIMD_ARCHS compiled without -mf16c.
using no_f16c_archs = xsimd::arch_list<xsimd::sse4_2, xsimd::sse2>;

[[nodiscard]] inline bool uses_fp16(const rotate_args& a) noexcept {
    for (const auto& v : a.view)
        if (v.src && (v.src_type == dtype::fp16 || v.dst_type == dtype::fp16)) return true;
    return false;
}

using rotate_entry = void (*)(const rotate_args&) noexcept;

template <class Arch>
void rotate_on(const rotate_args& args) noexcept {
    rotate_functor{}(Arch{}, args);
}

/// rotate_on's instance for the architecture dispatch picks.
struct rotate_entry_of {
    template <class Arch>
    rotate_entry operator()(Arch) const noexcept {
        return &rotate_on<Arch>;
    }
};

/// Runs one call (or one thread's slice of a call) on the widest kernels this CPU has, whatever the
/// call's size: with whole-head loads before stores (kernels.hpp) the widest measured fastest at every
/// size, and one width keeps a token's bits independent of the call's size.
inline void rotate(const rotate_args& args) noexcept {
    if (uses_fp16(args) && !cpu_has_f16c()) return dispatch_capped<no_f16c_archs>(rotate_functor{}, args);
    // The choice made once: a one-token call is short enough for the walk to show.
    static const rotate_entry widest = dispatch_capped<dispatch_archs>(rotate_entry_of{});
    widest(args);
}
inline void build_table(const table_args& args) noexcept { dispatch_capped<dispatch_archs>(table_functor{}, args); }
#else
using dispatch_archs = xsimd::arch_list<xsimd::default_arch>;

/// Without run-time dispatch there is one architecture, the including unit's.
template <class ArchList, class F, class... Args>
decltype(auto) dispatch_capped(F f, Args&... args) noexcept {
    return f(xsimd::default_arch{}, args...);
}

inline void rotate(const rotate_args& args) noexcept { rotate_functor{}(xsimd::default_arch{}, args); }
inline void build_table(const table_args& args) noexcept { table_functor{}(xsimd::default_arch{}, args); }
#endif

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

/// Name of the architecture the dispatcher picks on this CPU (for benchmark reports).
inline const char* active_arch_name() noexcept {
    return dispatch_capped<dispatch_archs>([](auto arch) { return decltype(arch)::name(); });
}

}  // namespace posenc::simd
