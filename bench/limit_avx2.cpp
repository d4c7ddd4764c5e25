// x ← a·x with 256-bit vectors, four at a time. Only xsimd code templated on fma3<avx2> here, so
// nothing compiled with -mavx2 can be shared with baseline code (the COMDAT trap).
#include <xsimd/xsimd.hpp>

#include "limit.hpp"

namespace posenc_bench {

void scale_avx2(float* x, std::size_t n, float a) noexcept {
    using batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = batch::size;
    const batch av(a);
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
        const batch v0 = batch::load_unaligned(x + i), v1 = batch::load_unaligned(x + i + W);
        const batch v2 = batch::load_unaligned(x + i + 2 * W), v3 = batch::load_unaligned(x + i + 3 * W);
        (v0 * av).store_unaligned(x + i);
        (v1 * av).store_unaligned(x + i + W);
        (v2 * av).store_unaligned(x + i + 2 * W);
        (v3 * av).store_unaligned(x + i + 3 * W);
    }
    for (; i < n; ++i) x[i] *= a;
}

void flip16_avx2(std::uint16_t* x, std::size_t n) noexcept {
    using batch = xsimd::batch<std::uint16_t, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = batch::size;
    const batch sign(static_cast<std::uint16_t>(0x8000u));
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
        const batch v0 = batch::load_unaligned(x + i), v1 = batch::load_unaligned(x + i + W);
        const batch v2 = batch::load_unaligned(x + i + 2 * W), v3 = batch::load_unaligned(x + i + 3 * W);
        (v0 ^ sign).store_unaligned(x + i);
        (v1 ^ sign).store_unaligned(x + i + W);
        (v2 ^ sign).store_unaligned(x + i + 2 * W);
        (v3 ^ sign).store_unaligned(x + i + 3 * W);
    }
    for (; i < n; ++i) x[i] ^= 0x8000u;
}

}  // namespace posenc_bench
