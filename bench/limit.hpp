#pragma once
// The bandwidth limit of an in-place pass: x ← a·x, vectorized, over the same buffers RoPE touches.
// 256-bit vectors: on Zen 5 a plain 512-bit loop reached only about half of this at L3/DRAM sizes.
#include <posenc/core/detail/parallel.hpp>
#include <posenc/simd/xsimd_compat.hpp>

#include <cstddef>
#include <cstdint>

namespace posenc_bench {

/// In limit_avx2.cpp, compiled with -mavx2 -mfma; call only where the CPU has AVX2. `prefetch`: ask
/// for the lines 8 KiB ahead (both buffers of a copy).
void scale_avx2(float* x, std::size_t n, float a, bool prefetch) noexcept;
/// dst ← src: the copy limit of kv/append and kv_cache/append (through copy_pass in attention_limit.hpp).
void copy_avx2(const float* src, float* dst, std::size_t n, bool prefetch) noexcept;
/// dst ← the top 16 bits of src (truncation: the least work that reads floats and writes 16-bit
/// values): the limit of appending float K/V to a 16-bit cache.
void narrow16_avx2(const float* src, std::uint16_t* dst, std::size_t n, bool prefetch) noexcept;

inline void narrow16_pass(const float* src, std::uint16_t* dst, std::size_t n, unsigned threads, bool prefetch) {
    static const bool avx2 = posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>();
    auto run = [&](std::size_t b, std::size_t e) {
        if (avx2) return narrow16_avx2(src + b, dst + b, e - b, prefetch);
        for (std::size_t i = b; i < e; ++i) dst[i] = static_cast<std::uint16_t>(__builtin_bit_cast(std::uint32_t, src[i]) >> 16);
    };
    if (threads <= 1) return run(0, n);
    posenc::detail::parallel_slices(threads, n, run);
}

/// x ^= 0x8000 over 16-bit values (flips the sign of bf16/fp16): the in-place pass of S1-bf16/fp16.
void flip16_avx2(std::uint16_t* x, std::size_t n, bool prefetch) noexcept;

inline void flip16_in_place(std::uint16_t* x, std::size_t n, unsigned threads, bool prefetch) {
    static const bool avx2 = posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>();
    auto run = [&](std::size_t b, std::size_t e) {
        if (avx2) return flip16_avx2(x + b, e - b, prefetch);
        for (std::size_t i = b; i < e; ++i) x[i] ^= 0x8000u;
    };
    if (threads <= 1) return run(0, n);
    posenc::detail::parallel_slices(threads, n, run);
}

inline void scale_in_place(float* x, std::size_t n, float a, unsigned threads, bool prefetch) {
    static const bool avx2 = posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>();
    auto run = [&](std::size_t b, std::size_t e) {
        if (avx2) return scale_avx2(x + b, e - b, a, prefetch);
        for (std::size_t i = b; i < e; ++i) x[i] *= a;
    };
    if (threads <= 1) return run(0, n);
    posenc::detail::parallel_slices(threads, n, run);
}

}  // namespace posenc_bench
