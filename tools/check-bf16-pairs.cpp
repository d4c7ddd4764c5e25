// Exhaustive check of the bf16 word-pair store (simd::arch_ops::store_pairs) against the per-lane
// store (store(bf16*)): every one of the 2³² float bit patterns goes through the even lanes and,
// in another order, through the odd ones. The two must agree wherever store_pairs' documented
// precondition holds (a NaN is quiet with a zero low half); the NaNs outside it are only counted.
// One architecture per build (POSENC_CHECK_ARCH: xsimd::avx512bw or xsimd::fma3<xsimd::avx2>, the
// file compiled with that architecture's flags); exits 77 (skipped) on a CPU without it.
//   cmake --build build --target posenc-check-bf16-pairs-avx512 && build/tools/posenc-check-bf16-pairs-avx512
// (~10 s for AVX-512 on a 3.6 GHz Xeon.)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include <posenc/simd/arch_ops.hpp>

namespace {

using arch = POSENC_CHECK_ARCH;
using ops = posenc::simd::arch_ops<arch>;
constexpr std::size_t W = ops::W;

bool precondition_holds(std::uint32_t u) {
    const bool nan = (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
    return !nan || ((u & 0xFFFFu) == 0 && (u & 0x00400000u) != 0);
}

struct counts {
    std::uint64_t compared = 0, mismatched = 0, outside = 0;
};

[[gnu::noinline]] counts check_all() {
    counts c;
    for (std::uint64_t base = 0; base < (std::uint64_t{1} << 32); base += W) {
        std::uint32_t ev[W], od[W];
        for (std::size_t k = 0; k < W; ++k) {
            ev[k] = static_cast<std::uint32_t>(base + k);
            od[k] = static_cast<std::uint32_t>(~(base + k) * 2654435761u);  // odd factor: a bijection
        }
        float e[W], o[W];
        std::memcpy(e, ev, sizeof e);
        std::memcpy(o, od, sizeof o);
        const typename ops::fbatch fe = ops::fbatch::load_unaligned(e), fo = ops::fbatch::load_unaligned(o);
        posenc::bf16 pairs[2 * W], even[W], odd[W];
        ops::store_pairs(pairs, fe, fo);
        ops::store(even, fe);
        ops::store(odd, fo);
        for (std::size_t k = 0; k < W; ++k) {
            const std::uint32_t in[2] = {ev[k], od[k]};
            const std::uint16_t got[2] = {pairs[2 * k].bits, pairs[2 * k + 1].bits};
            const std::uint16_t want[2] = {even[k].bits, odd[k].bits};
            for (int j = 0; j < 2; ++j) {
                if (!precondition_holds(in[j])) {
                    ++c.outside;
                    continue;
                }
                ++c.compared;
                if (got[j] != want[j] && c.mismatched++ < 8)
                    std::printf("mismatch: %08x -> %04x, store(bf16*) %04x\n", in[j], got[j], want[j]);
            }
        }
    }
    return c;
}

}  // namespace

int main() {
    if (!ops::has_bf16_pairs) {
        std::printf("%s: no word pairs on this architecture\n", arch::name());
        return 77;
    }
    const bool on_cpu = std::is_same_v<arch, xsimd::avx512bw>
                            ? __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f")
                            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!on_cpu) {
        std::printf("%s: not available on this CPU, skipped\n", arch::name());
        return 77;
    }
    const counts c = check_all();
    std::printf("%s: %llu lanes compared, %llu differ; %llu NaNs outside the precondition not compared\n", arch::name(),
                static_cast<unsigned long long>(c.compared), static_cast<unsigned long long>(c.mismatched),
                static_cast<unsigned long long>(c.outside));
    return c.mismatched == 0 ? 0 : 1;
}
