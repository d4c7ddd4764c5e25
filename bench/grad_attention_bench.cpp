// posenc-bench rows for attention_backward (registered at static initialisation, next to posenc_bench.cpp's):
//
//   attention-backward/S5/threads:N   S5's shape (causal ALiBi, 8 heads, seq 1024, head_dim 64), the
//                                     forward's out and lse computed once outside the timing
//
// FLOP/s counts the backward's useful work, 10·Hq·D per visible (query, key) pair with Dv = D: the
// score recompute s·QKᵀ (2D), dP = dO·Vᵀ (2D), dV += Pᵀ·dO (2D), dK += dSᵀ·Q (2D), dQ += dS·K (2D),
// i.e. 2.5× the forward's 4D (with more threads than kv heads the two passes recompute QKᵀ and dP once
// more for dQ: not counted).
// fma_fraction = that FLOP/s over the core's FMA peak (fma_peak_pass), timed alternately in the same run.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <posenc/attention/partial.hpp>
#include <posenc/bias/alibi.hpp>
#include <posenc/grad/attention.hpp>

#include "attention_limit.hpp"
#include "harness.hpp"

namespace {

struct grad_bench_shape {
    std::size_t T, H, D;
};
constexpr grad_bench_shape grad_s5{1024, 8, 64};
constexpr std::size_t grad_fma_peak_iterations = 100000;

std::vector<float> grad_bench_values(std::size_t n, std::size_t period, float step, float offset) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % period) * step - offset;
    return x;
}

void attention_backward_s5(benchmark::State& state, unsigned threads) {
    using clock = std::chrono::steady_clock;
    const auto [T, H, D] = grad_s5;
    const std::size_t n = T * H * D;
    const std::vector<float> q = grad_bench_values(n, 97, 0.02f, 0.96f), k = grad_bench_values(n, 89, 0.02f, 0.88f),
                             v = grad_bench_values(n, 83, 0.02f, 0.82f), dout = grad_bench_values(n, 79, 0.02f, 0.78f);
    std::vector<float> out(n), lse(T * H), dq(n), dk(n), dv(n);
    const posenc::alibi_bias alibi({.heads = H, .max_bias = 8});
    const posenc::attention_encoding enc{posenc::nope{}, alibi};
    const auto pos = posenc::position_ids::consecutive(0, T);
    const posenc::heads_shape shape{T, H, D};
    const posenc::heads_view<const float> Q(q.data(), shape), K(k.data(), shape), V(v.data(), shape), dO(dout.data(), shape);
    posenc::attention_partial(enc, Q, K, V, posenc::heads_view<float>(out.data(), shape), lse, pos, pos, posenc::causal_mask{});
    const posenc::heads_view<const float> O(out.data(), shape);
    const posenc::attention_options opt{.threads = threads};
    double kernel_seconds = 0, peak_seconds = 0, peak_flops = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        posenc::attention_backward(enc, Q, K, V, O, lse, dO, posenc::heads_view<float>(dq.data(), shape),
                                   posenc::heads_view<float>(dk.data(), shape), posenc::heads_view<float>(dv.data(), shape),
                                   pos, pos, posenc::causal_mask{}, opt);
        benchmark::ClobberMemory();
        const auto t1 = clock::now();
        peak_flops += posenc_bench::fma_peak_pass(grad_fma_peak_iterations, threads, posenc_bench::attention_on_avx512());
        const auto t2 = clock::now();
        kernel_seconds += std::chrono::duration<double>(t1 - t0).count();
        peak_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    }
    const double pairs = static_cast<double>(T) * static_cast<double>(T + 1) / 2.0;  // causal
    const double useful = 10.0 * static_cast<double>(H * D) * pairs;
    state.counters["FLOP/s"] = benchmark::Counter(useful, benchmark::Counter::kIsIterationInvariantRate);
    if (kernel_seconds > 0 && peak_seconds > 0)
        state.counters["fma_fraction"] =
            (useful * static_cast<double>(state.iterations()) / kernel_seconds) / (peak_flops / peak_seconds);
}

[[maybe_unused]] const bool grad_attention_registered = [] {
    for (unsigned t : {1u, 2u})
        benchmark::RegisterBenchmark(("attention-backward/S5/threads:" + std::to_string(t)).c_str(),
                                     [t](benchmark::State& s) { attention_backward_s5(s, t); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
    return true;
}();

}  // namespace
