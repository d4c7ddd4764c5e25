#pragma once
// Facts about the CPU the program runs on (CPUID), for the choices the kernels cannot make from
// their compile flags (F16C for fp16 under run-time dispatch; the vendor, for attention's decode
// prefetch), and the compile-time switch for the software prefetch of 16-bit buffers. Not included
// by the per-architecture kernel units (the COMDAT rule, docs/simd-and-precision.md): the kernels get
// the answers through rotate_args and the attention steps' args.

namespace posenc::simd {

/// What the choices below are made from.
struct cpu_signature {
    bool f16c = false;   ///< CPUID.1:ECX bit 29
    bool intel = false;  ///< CPUID.0's vendor string (EBX, EDX, ECX) is "GenuineIntel"
};

/// From CPUID leaf 1's ECX and leaf 0's EBX, EDX, ECX (the vendor string's three parts, in that order).
[[nodiscard]] constexpr cpu_signature decode_cpuid(unsigned leaf1_ecx, unsigned vendor_ebx = 0, unsigned vendor_edx = 0,
                                                   unsigned vendor_ecx = 0) noexcept {
    cpu_signature s;
    s.f16c = (leaf1_ecx >> 29) & 1u;
    s.intel = vendor_ebx == 0x756e6547u && vendor_edx == 0x49656e69u && vendor_ecx == 0x6c65746eu;  // "Genu" "ineI" "ntel"
    return s;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define POSENC_HAS_CPUID 1
/// CPUID leaf/subleaf into r = {EAX, EBX, ECX, EDX}. (Inline assembly, not <cpuid.h>: that header's
/// __cpuid macros clash with <intrin.h>'s function of the same name in users' code.)
inline void read_cpuid(unsigned leaf, unsigned subleaf, unsigned (&r)[4]) noexcept {
    asm volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(subleaf));
}
#endif

/// This CPU's signature (all false / 0 where CPUID is not available).
[[nodiscard]] inline cpu_signature this_cpu() noexcept {
#ifdef POSENC_HAS_CPUID
    static const cpu_signature sig = [] {
        unsigned v[4], l1[4] = {};
        read_cpuid(0, 0, v);
        if (v[0] >= 1) read_cpuid(1, 0, l1);
        return decode_cpuid(l1[2], v[1], v[3], v[2]);
    }();
    return sig;
#else
    return {};
#endif
}

/// Whether this CPU has F16C; false where CPUID is not available.
[[nodiscard]] inline bool cpu_has_f16c() noexcept { return this_cpu().f16c; }

/// Whether the kernels software-prefetch bf16/fp16 sources (the next token's heads while this one is
/// rotated), as they always do float ones: yes, unless the program is compiled with
/// POSENC_PREFETCH_16BIT defined to 0. Results never depend on it; it measured faster on every CPU
/// tried (docs/performance.md).
[[nodiscard]] inline bool prefetch_16bit() noexcept {
#ifdef POSENC_PREFETCH_16BIT
    return POSENC_PREFETCH_16BIT != 0;
#else
    return true;
#endif
}

}  // namespace posenc::simd

#undef POSENC_HAS_CPUID
