#pragma once
// The attention benchmarks' limits and naive baseline, in attention_limit.cpp: the one translation
// unit of posenc-bench that includes Eigen, compiled with -march=native (the bench is built for the
// machine it runs on), so the limit GEMM runs on the widest vectors this CPU has and is the only copy
// of Eigen's code in the program (no COMDAT merging with other flags).
#include <cstddef>

namespace posenc_bench {

/// On each of `threads` threads: one head's Eigen GEMMs S = Q·Kᵀ [T×D]·[D×T] and O = S·V [T×T]·[T×Dv]
/// (dense [T][D] inputs). Returns the FLOPs done: threads·(2·T·T·D + 2·T·T·Dv).
double gemm_pass(const float* q, const float* k, const float* v, std::size_t T, std::size_t D, std::size_t Dv,
                 unsigned threads);

/// The core's FMA peak at the width the attention kernels were dispatched to: on each of `threads`
/// threads, `iterations` rounds of 12 independent FMA chains on 512-bit vectors when `avx512` (and this
/// -march=native unit has them), else on 256-bit ones (limit_avx2.cpp; POSENC_SIMD_MAX_ARCH=avx2 on an
/// AVX-512 CPU). Returns the FLOPs done (2 per lane per FMA).
double fma_peak_pass(std::size_t iterations, unsigned threads, bool avx512);

/// A read pass over n floats (vectorized sum), split over `threads` threads; returns the sum.
float read_pass(const float* x, std::size_t n, unsigned threads);

/// A copy pass of n floats from src to dst (the AVX2 copy per slice, asking for both buffers' lines
/// 8 KiB ahead when `prefetch`; memcpy without AVX2), split over `threads` threads.
void copy_pass(const float* src, float* dst, std::size_t n, unsigned threads, bool prefetch);

/// Materialised attention, what one writes first: per head S = s·Q·Kᵀ (+ ALiBi −m_h(i−j) when slopes),
/// causal −∞ above the diagonal, row softmax, O = P·V. Dense [T][H][D] buffers, Hq multiple of Hkv,
/// queries at positions Tk − Tq.. (the last ones).
void naive_attention(const float* q, const float* k, const float* v, float* out, std::size_t Tq, std::size_t Tk,
                     std::size_t Hq, std::size_t Hkv, std::size_t D, std::size_t Dv, const double* slopes, bool causal,
                     float scale);

/// The same as naive_attention, tiled like posenc's kernel (64 queries × 64 keys, online softmax, fully
/// masked key tiles skipped) with Eigen GEMMs for the tile products: the Eigen variant the attention
/// kernel's xsimd micro-kernels are measured against (eigen-tiles/S5).
void tiled_attention(const float* q, const float* k, const float* v, float* out, std::size_t Tq, std::size_t Tk,
                     std::size_t Hq, std::size_t Hkv, std::size_t D, std::size_t Dv, const double* slopes, bool causal,
                     float scale);

}  // namespace posenc_bench
