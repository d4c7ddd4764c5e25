#pragma once
// Facts about the CPU the program runs on (CPUID), for the choices the kernels cannot make from
// their compile flags: F16C for fp16 under run-time dispatch, and whether 16-bit buffers are
// software-prefetched. Not included by the per-architecture kernel units (the COMDAT rule,
// shared/notes/xsimd.md): the kernels get the answers through rotate_args.

namespace posenc::simd {

/// What the choices below are made from.
struct cpu_signature {
    bool intel = false, amd = false;
    unsigned family = 0;    ///< display family: base, plus extended when base is 0xF
    bool f16c = false;      ///< CPUID.1:ECX bit 29
    bool avx512bw = false;  ///< CPUID.(7,0):EBX bit 30
};

/// From CPUID's registers: leaf 0's EBX, EDX, ECX (the vendor), leaf 1's EAX and ECX, leaf 7's EBX.
[[nodiscard]] constexpr cpu_signature decode_cpuid(unsigned vendor_b, unsigned vendor_d, unsigned vendor_c,
                                                   unsigned leaf1_eax, unsigned leaf1_ecx, unsigned leaf7_ebx) noexcept {
    cpu_signature s;
    s.intel = vendor_b == 0x756E6547u && vendor_d == 0x49656E69u && vendor_c == 0x6C65746Eu;  // "GenuineIntel"
    s.amd = vendor_b == 0x68747541u && vendor_d == 0x69746E65u && vendor_c == 0x444D4163u;    // "AuthenticAMD"
    const unsigned base = (leaf1_eax >> 8) & 0xFu, extended = (leaf1_eax >> 20) & 0xFFu;
    s.family = base == 0xFu ? base + extended : base;
    s.f16c = (leaf1_ecx >> 29) & 1u;
    s.avx512bw = (leaf7_ebx >> 30) & 1u;
    return s;
}

/// Whether the kernels software-prefetch bf16/fp16 sources (the next token's heads while this one is
/// rotated), as they always do float ones — only where that was measured to help. S1-bf16/fp16
/// against their in-place limit, alternating builds with and without: on an Intel Xeon with AVX-512
/// bf16 0.54–0.62 → 0.71–0.76 (six rounds; 0.70–0.79 → 0.84–0.91 in a quieter stretch), fp16 from
/// neutral to +0.04 (0.81–0.89 → 0.92–0.95 in the quieter stretch); on AMD Zen 3 (AVX2 kernels, an
/// earlier build, 2048 tokens) fp16 42 → 28 ns per head, bf16 56 → 50; on AMD Zen 5 (AVX-512) a loss
/// (0.77–0.94 without, 0.59–0.83 with). So: Intel with AVX-512BW, and AMD family 19h without AVX-512
/// (Zen 3; Zen 4 has AVX-512 like the Zen 5); elsewhere, unmeasured, the hardware prefetcher alone.
[[nodiscard]] constexpr bool prefetch_16bit_for(const cpu_signature& c) noexcept {
    if (c.intel) return c.avx512bw;
    if (c.amd) return c.family == 0x19u && !c.avx512bw;
    return false;
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
        unsigned v[4], l1[4] = {}, l7[4] = {};
        read_cpuid(0, 0, v);
        if (v[0] >= 1) read_cpuid(1, 0, l1);
        if (v[0] >= 7) read_cpuid(7, 0, l7);
        return decode_cpuid(v[1], v[3], v[2], l1[0], l1[2], l7[1]);
    }();
    return sig;
#else
    return {};
#endif
}

/// Whether this CPU has F16C; false where CPUID is not available.
[[nodiscard]] inline bool cpu_has_f16c() noexcept { return this_cpu().f16c; }

/// prefetch_16bit_for(this_cpu()); a program compiled with POSENC_PREFETCH_16BIT defined to 0 or 1
/// gets that instead (for a CPU where the other choice measures faster). Results never depend on it.
[[nodiscard]] inline bool prefetch_16bit() noexcept {
#ifdef POSENC_PREFETCH_16BIT
    return POSENC_PREFETCH_16BIT != 0;
#else
    return prefetch_16bit_for(this_cpu());
#endif
}

}  // namespace posenc::simd

#undef POSENC_HAS_CPUID
