#pragma once
// The bandwidth limit of an in-place pass: x ← a·x, vectorized, over the same buffers RoPE touches.
// 256-bit vectors: on Zen 5 a plain 512-bit loop reached only about half of this at L3/DRAM sizes.
#include <posenc/detail/parallel.hpp>
#include <posenc/simd/xsimd_compat.hpp>

#include <cstddef>

namespace posenc_bench {

/// In limit_avx2.cpp, compiled with -mavx2 -mfma; call only where the CPU has AVX2.
void scale_avx2(float* x, std::size_t n, float a) noexcept;

inline void scale_in_place(float* x, std::size_t n, float a, unsigned threads) {
    static const bool avx2 = posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>();
    auto run = [&](std::size_t b, std::size_t e) {
        if (avx2) return scale_avx2(x + b, e - b, a);
        for (std::size_t i = b; i < e; ++i) x[i] *= a;
    };
    if (threads <= 1) return run(0, n);
    posenc::detail::parallel_slices(threads, n, run);
}

}  // namespace posenc_bench
