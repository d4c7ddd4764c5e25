// Eigen limits and naive baseline for the attention benchmarks (see attention_limit.hpp).
#define EIGEN_DONT_PARALLELIZE  // one GEMM per thread, threads are ours
#include <Eigen/Core>

#include <posenc/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention_limit.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace posenc_bench {

using rowmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using cmap = Eigen::Map<const rowmat, 0, Eigen::OuterStride<>>;

double gemm_pass(const float* q, const float* k, const float* v, std::size_t T, std::size_t D, std::size_t Dv,
                 unsigned threads) {
    const auto t = static_cast<Eigen::Index>(T), d = static_cast<Eigen::Index>(D), dv = static_cast<Eigen::Index>(Dv);
    static thread_local rowmat s, o;
    auto one = [&] {
        s.resize(t, t);
        o.resize(t, dv);
        const cmap Q(q, t, d, Eigen::OuterStride<>(d)), K(k, t, d, Eigen::OuterStride<>(d));
        const cmap V(v, t, dv, Eigen::OuterStride<>(dv));
        s.noalias() = Q * K.transpose();
        o.noalias() = s * V;
    };
    if (threads <= 1)
        one();
    else
        posenc::detail::parallel_slices(threads, threads, [&](std::size_t, std::size_t) { one(); });
    return static_cast<double>(threads) * 2.0 * static_cast<double>(T) * static_cast<double>(T) *
           static_cast<double>(D + Dv);
}

// In limit_avx2.cpp (limit.hpp, whose inline functions must not be compiled here: the COMDAT rule).
void copy_avx2(const float* src, float* dst, std::size_t n, bool prefetch) noexcept;

void copy_pass(const float* src, float* dst, std::size_t n, unsigned threads, bool prefetch) {
    auto run = [&](std::size_t b, std::size_t e) {
#if defined(__AVX2__)  // this unit is compiled for the build machine (-march=native)
        copy_avx2(src + b, dst + b, e - b, prefetch);
#else
        (void)prefetch;
        std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
#endif
    };
    if (threads <= 1)
        run(0, n);
    else
        posenc::detail::parallel_slices(threads, n, run);
}

// In limit_avx2.cpp: one thread's 12 chains of 256-bit FMAs; returns their sum (kept live).
float fma_chains_avx2(std::size_t iterations) noexcept;

double fma_peak_pass(std::size_t iterations, unsigned threads, bool avx512) {
    float sums[64] = {};
    if (threads > 64) threads = 64;
    constexpr std::size_t chains = 12;  // ≥ FMA latency × FMA ports on current x86 cores
#if defined(__AVX2__) && defined(__FMA__)
    std::size_t lanes = 8;
    auto run = [&](std::size_t slot) { sums[slot] = fma_chains_avx2(iterations); };
#else
    std::size_t lanes = 1;
    auto run = [&](std::size_t slot) {
        float acc[chains];
        for (std::size_t c = 0; c < chains; ++c) acc[c] = 1.0f + 0.01f * static_cast<float>(c);
        for (std::size_t i = 0; i < iterations; ++i)
            for (std::size_t c = 0; c < chains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
        for (float x : acc) sums[slot] += x;
    };
#endif
#if defined(__AVX512F__)
    auto run512 = [&](std::size_t slot) {
        __m512 acc[chains];
        for (std::size_t c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(c));
        const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
        for (std::size_t i = 0; i < iterations; ++i)
            for (std::size_t c = 0; c < chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
        __m512 t = acc[0];
        for (std::size_t c = 1; c < chains; ++c) t = _mm512_add_ps(t, acc[c]);
        sums[slot] = _mm512_reduce_add_ps(t);
    };
    if (avx512) lanes = 16;
    auto one = [&](std::size_t slot) { avx512 ? run512(slot) : run(slot); };
#else
    (void)avx512;
    auto one = run;
#endif
    if (threads <= 1)
        one(0);
    else
        posenc::detail::parallel_slices(threads, threads, [&](std::size_t b, std::size_t) { one(b); });
    volatile float sink = 0;
    for (float x : sums) sink = sink + x;
    return 2.0 * static_cast<double>(lanes * chains * iterations * threads);
}

float read_pass(const float* x, std::size_t n, unsigned threads) {
    float sums[64] = {};  // (no std::vector here: its code would be shared with the baseline units)
    if (threads > 64) threads = 64;
    // 8 KiB blocks, the next one prefetched while this one is summed (as the kernels prefetch: a limit
    // without it would flatter them).
    auto run = [&](std::size_t b, std::size_t e, std::size_t slot) {
        constexpr std::size_t block = 2048;  // floats
        float sum = 0;
        for (std::size_t i = b; i < e; i += block) {
            const std::size_t n = e - i < block ? e - i : block;
            if (i + block < e)
                for (std::size_t f = 0; f < block && i + block + f < e; f += 16) __builtin_prefetch(x + i + block + f);
            sum += Eigen::Map<const Eigen::VectorXf>(x + i, static_cast<Eigen::Index>(n)).sum();
        }
        sums[slot] = sum;
    };
    if (threads <= 1)
        run(0, n, 0);
    else
        posenc::detail::parallel_slices(threads, threads, [&](std::size_t b, std::size_t) {
            run(n * b / threads, n * (b + 1) / threads, b);
        });
    float total = 0;
    for (float s : sums) total += s;
    return total;
}

namespace {
/// Scores of the query at position qi against keys k0 … k0 + n − 1: + ALiBi's −m·(qi − j) when a
/// slope is given, −∞ for keys after the query when causal.
void bias_and_mask(float* row, Eigen::Index n, Eigen::Index qi, Eigen::Index k0, const double* slope, bool causal) {
    for (Eigen::Index j = 0; j < n; ++j) {
        if (slope) row[j] += static_cast<float>(-*slope * static_cast<double>(qi - (k0 + j)));
        if (causal && k0 + j > qi) row[j] = -std::numeric_limits<float>::infinity();
    }
}
}  // namespace

void naive_attention(const float* q, const float* k, const float* v, float* out, std::size_t Tq, std::size_t Tk,
                     std::size_t Hq, std::size_t Hkv, std::size_t D, std::size_t Dv, const double* slopes, bool causal,
                     float scale) {
    const auto tq = static_cast<Eigen::Index>(Tq), tk = static_cast<Eigen::Index>(Tk);
    const auto d = static_cast<Eigen::Index>(D), dv = static_cast<Eigen::Index>(Dv);
    const std::size_t G = Hq / Hkv;
    rowmat s(tq, tk);
    for (std::size_t h = 0; h < Hq; ++h) {
        const cmap Q(q + h * D, tq, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hq * D)));
        const cmap K(k + (h / G) * D, tk, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hkv * D)));
        const cmap V(v + (h / G) * Dv, tk, dv, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hkv * Dv)));
        s.noalias() = scale * (Q * K.transpose());
        for (Eigen::Index i = 0; i < tq; ++i) {
            const Eigen::Index qi = tk - tq + i;  // the query's position
            bias_and_mask(s.data() + i * tk, tk, qi, 0, slopes ? &slopes[h] : nullptr, causal);
            auto r = s.row(i).array();
            const float m = r.maxCoeff();
            r = (r - m).exp();
            r /= r.sum();
        }
        Eigen::Map<rowmat, 0, Eigen::OuterStride<>> O(out + h * Dv, tq, dv, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hq * Dv)));
        O.noalias() = s * V;
    }
}

void tiled_attention(const float* q, const float* k, const float* v, float* out, std::size_t Tq, std::size_t Tk,
                     std::size_t Hq, std::size_t Hkv, std::size_t D, std::size_t Dv, const double* slopes, bool causal,
                     float scale) {
    constexpr Eigen::Index B = 64;  // query and key tiles, as posenc's kernel
    const auto tq = static_cast<Eigen::Index>(Tq), tk = static_cast<Eigen::Index>(Tk);
    const auto d = static_cast<Eigen::Index>(D), dv = static_cast<Eigen::Index>(Dv);
    const std::size_t G = Hq / Hkv;
    const float ninf = -std::numeric_limits<float>::infinity();
    rowmat s(B, B), acc(B, dv);
    Eigen::ArrayXf m(B), l(B);
    for (std::size_t h = 0; h < Hq; ++h) {
        const cmap Q(q + h * D, tq, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hq * D)));
        const cmap K(k + (h / G) * D, tk, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hkv * D)));
        const cmap V(v + (h / G) * Dv, tk, dv, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hkv * Dv)));
        Eigen::Map<rowmat, 0, Eigen::OuterStride<>> O(out + h * Dv, tq, dv, Eigen::OuterStride<>(static_cast<Eigen::Index>(Hq * Dv)));
        for (Eigen::Index q0 = 0; q0 < tq; q0 += B) {
            const Eigen::Index nq = std::min(B, tq - q0);
            m.setConstant(ninf);
            l.setZero();
            acc.setZero();
            const Eigen::Index end = causal ? std::min(tk, tk - tq + q0 + nq) : tk;  // keys any row of the tile sees
            for (Eigen::Index k0 = 0; k0 < end; k0 += B) {
                const Eigen::Index nk = std::min(B, tk - k0);
                auto S = s.topLeftCorner(nq, nk);
                S.noalias() = scale * (Q.middleRows(q0, nq) * K.middleRows(k0, nk).transpose());
                for (Eigen::Index i = 0; i < nq; ++i) {
                    const Eigen::Index qi = tk - tq + q0 + i;
                    bias_and_mask(&S(i, 0), nk, qi, k0, slopes ? &slopes[h] : nullptr, causal);
                    const float mi = std::max(m(i), S.row(i).maxCoeff());  // finite: key 0 is visible in tile 0
                    S.row(i) = (S.row(i).array() - mi).exp().matrix();
                    const float correction = std::exp(m(i) - mi);
                    l(i) = l(i) * correction + S.row(i).sum();
                    acc.row(i) *= correction;
                    m(i) = mi;
                }
                acc.topRows(nq).noalias() += S * V.middleRows(k0, nk);
            }
            O.middleRows(q0, nq) = (acc.topRows(nq).array().colwise() / l.head(nq)).matrix();
        }
    }
}

}  // namespace posenc_bench
