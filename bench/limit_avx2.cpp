// x ← a·x, x ^= sign and dst ← src with 256-bit vectors, four at a time, with or without asking for
// the lines 8 KiB ahead (software prefetch): the benchmarks take the faster of the two as the limit
// (harness.hpp, limit_clock), since which one wins depends on the machine. Only xsimd code
// templated on fma3<avx2> here, so nothing compiled with -mavx2 can be shared with baseline code
// (the COMDAT trap).
#include <cstdint>

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

#include "limit.hpp"

namespace posenc_bench {

namespace {
constexpr std::size_t prefetch_distance = 8192;  // bytes
/// The 128 bytes at offset + prefetch_distance of a buffer of `size` bytes, when inside it.
/// Always inlined: out of line, g++ 12 (IPA modref / pure-const, -O2 and -O3) finds it free of side
/// effects and deletes every call (as it did the kernels' helpers, simd/kernels.hpp).
[[gnu::always_inline]] inline void prefetch_ahead(const void* base, std::size_t offset, std::size_t size) noexcept {
    if (offset + prefetch_distance + 128 > size) return;
    const char* at = static_cast<const char*>(base) + offset + prefetch_distance;
    __builtin_prefetch(at);
    __builtin_prefetch(at + 64);
}
}  // namespace

void scale_avx2(float* x, std::size_t n, float a, bool prefetch) noexcept {
    using batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = batch::size;
    const batch av(a);
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {  // 128 bytes
        if (prefetch) prefetch_ahead(x, i * sizeof(float), n * sizeof(float));
        const batch v0 = batch::load_unaligned(x + i), v1 = batch::load_unaligned(x + i + W);
        const batch v2 = batch::load_unaligned(x + i + 2 * W), v3 = batch::load_unaligned(x + i + 3 * W);
        (v0 * av).store_unaligned(x + i);
        (v1 * av).store_unaligned(x + i + W);
        (v2 * av).store_unaligned(x + i + 2 * W);
        (v3 * av).store_unaligned(x + i + 3 * W);
    }
    for (; i < n; ++i) x[i] *= a;
}

void flip16_avx2(std::uint16_t* x, std::size_t n, bool prefetch) noexcept {
    using batch = xsimd::batch<std::uint16_t, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = batch::size;
    const batch sign(static_cast<std::uint16_t>(0x8000u));
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {  // 128 bytes
        if (prefetch) prefetch_ahead(x, i * sizeof(std::uint16_t), n * sizeof(std::uint16_t));
        const batch v0 = batch::load_unaligned(x + i), v1 = batch::load_unaligned(x + i + W);
        const batch v2 = batch::load_unaligned(x + i + 2 * W), v3 = batch::load_unaligned(x + i + 3 * W);
        (v0 ^ sign).store_unaligned(x + i);
        (v1 ^ sign).store_unaligned(x + i + W);
        (v2 ^ sign).store_unaligned(x + i + 2 * W);
        (v3 ^ sign).store_unaligned(x + i + 3 * W);
    }
    for (; i < n; ++i) x[i] ^= 0x8000u;
}

void narrow16_avx2(const float* src, std::uint16_t* dst, std::size_t n, bool prefetch) noexcept {
    using fbatch = xsimd::batch<std::uint32_t, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = fbatch::size;
    std::size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {  // 64 bytes read, 32 written
        if (prefetch) {
            prefetch_ahead(src, i * sizeof(float), n * sizeof(float));
            prefetch_ahead(dst, i * sizeof(std::uint16_t), n * sizeof(std::uint16_t));
        }
        const __m256i a = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), 16);
        const __m256i b = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + W)), 16);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);  // lanes back in order
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
    }
    for (; i < n; ++i) dst[i] = static_cast<std::uint16_t>(__builtin_bit_cast(std::uint32_t, src[i]) >> 16);
}

void copy_avx2(const float* src, float* dst, std::size_t n, bool prefetch) noexcept {
    using batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
    constexpr std::size_t W = batch::size;
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {  // 128 bytes
        if (prefetch) {
            prefetch_ahead(src, i * sizeof(float), n * sizeof(float));
            prefetch_ahead(dst, i * sizeof(float), n * sizeof(float));
        }
        const batch v0 = batch::load_unaligned(src + i), v1 = batch::load_unaligned(src + i + W);
        const batch v2 = batch::load_unaligned(src + i + 2 * W), v3 = batch::load_unaligned(src + i + 3 * W);
        v0.store_unaligned(dst + i);
        v1.store_unaligned(dst + i + W);
        v2.store_unaligned(dst + i + 2 * W);
        v3.store_unaligned(dst + i + 3 * W);
    }
    for (; i < n; ++i) dst[i] = src[i];
}

float fma_chains_avx2(std::size_t iterations) noexcept {
    constexpr std::size_t chains = 12;  // as attention_limit.cpp's fma_peak_pass
    __m256 acc[chains];
    for (std::size_t c = 0; c < chains; ++c) acc[c] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(c));
    const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    for (std::size_t i = 0; i < iterations; ++i)
        for (std::size_t c = 0; c < chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
    __m256 t = acc[0];
    for (std::size_t c = 1; c < chains; ++c) t = _mm256_add_ps(t, acc[c]);
    alignas(32) float lane[8];
    _mm256_store_ps(lane, t);
    float sum = 0;
    for (float x : lane) sum += x;
    return sum;
}

}  // namespace posenc_bench
