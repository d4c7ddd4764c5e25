// posenc-bench's rotary backward rows (issue 32): transform_backward (posenc/grad/transform.hpp), the
// transposed rotation a·R(−θ) written over the gradients in place, on the forward rows' data and
// against the same limit (x ← a·x over the same buffers, with and without prefetch on alternate
// iterations, the faster counting; kernel and limit alternate inside one run):
//   rope_backward/S1/<layout>/threads:N       S1's dQ [2048,32,128], dK [2048,8,128], cos/sin from a cached table
//   rope_backward/S1-yarn/<layout>/threads:N  the same with YaRN ×4 over 8192 (amplitude ≠ 1)
//   rope_backward/S2/<layout>                 one token at position 100000, cos/sin computed in the call
// Each reports bytes_per_second (dQ and dK read and written) and limit_fraction, as rope/S1 and
// rope/S2 do. A file of its own because posenc_bench.cpp was being split by family when these rows
// were added: they belong in the rotary family's file next to rope/S1 and rope/S2.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include <posenc/grad/transform.hpp>
#include <posenc/rope/yarn.hpp>

#include "limit.hpp"

namespace {

constexpr std::size_t tokens = 2048, q_heads = 32, kv_heads = 8, head_dim = 128;

using aligned_vector = std::vector<float, xsimd::aligned_allocator<float, 64>>;

/// dQ and dK, filled like posenc_bench.cpp's S1 buffers.
struct gradients {
    aligned_vector q, k;
    explicit gradients(std::size_t t) : q(t * q_heads * head_dim), k(t * kv_heads * head_dim) {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 97) * 0.01f;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 89) * 0.01f;
    }
    [[nodiscard]] double bytes() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(float)); }
    [[nodiscard]] posenc::heads_view<float> dq() { return {std::span<float>(q), {q.size() / (q_heads * head_dim), q_heads, head_dim}}; }
    [[nodiscard]] posenc::heads_view<float> dk() { return {std::span<float>(k), {k.size() / (kv_heads * head_dim), kv_heads, head_dim}}; }

    /// The limit pass: x ← a·x over both buffers.
    void limit_pass(float a, unsigned threads, bool prefetch) {
        posenc_bench::scale_in_place(q.data(), q.size(), a, threads, prefetch);
        posenc_bench::scale_in_place(k.data(), k.size(), a, threads, prefetch);
        benchmark::ClobberMemory();
    }
};

/// Seconds of the limit pass with [1] and without [0] prefetch, alternated; the faster variant's mean
/// is the limit.
struct limit_times {
    double seconds[2] = {0, 0};
    std::size_t runs[2] = {0, 0};

    template <class Pass>
    void time(Pass&& pass) {
        const bool prefetch = runs[1] <= runs[0];
        const auto t0 = std::chrono::steady_clock::now();
        pass(prefetch);
        seconds[prefetch] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++runs[prefetch];
    }
    /// limit_fraction of a kernel that took kernel_seconds for `kernel_runs` runs.
    void report(benchmark::State& state, double kernel_seconds, double kernel_runs) const {
        if (kernel_seconds <= 0 || runs[0] == 0 || runs[1] == 0) return;
        const double best = std::min(seconds[0] / static_cast<double>(runs[0]), seconds[1] / static_cast<double>(runs[1]));
        state.counters["limit_fraction"] = best * kernel_runs / kernel_seconds;
    }
};

template <class Layout, class Schedule>
void backward_s1(benchmark::State& state, const Schedule& schedule, unsigned threads) {
    gradients g(tokens);
    posenc::rotary<Layout> rope({.head_dim = head_dim}, schedule);
    rope.set_threads(threads);
    const auto table = rope.table(static_cast<std::int64_t>(tokens));
    const posenc::table_transform transform{rope, table};
    const auto pos = posenc::position_ids::consecutive(0, tokens);
    auto dq = g.dq(), dk = g.dk();
    // The backward scales by the amplitude a as the forward does; the limit's 1/a keeps the data bounded.
    const auto limit_scale = static_cast<float>(1.0 / rope.frequencies().attention_factor);
    limit_times limit;
    double kernel_seconds = 0;
    for (auto _ : state) {
        limit.time([&](bool prefetch) { g.limit_pass(limit_scale, threads, prefetch); });
        const auto t0 = std::chrono::steady_clock::now();
        posenc::transform_backward(transform, dq, dk, pos);
        benchmark::ClobberMemory();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        kernel_seconds += s;
        state.SetIterationTime(s);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(g.bytes() * static_cast<double>(state.iterations())));
    limit.report(state, kernel_seconds, static_cast<double>(state.iterations()));
}

template <class Layout>
void backward_s2(benchmark::State& state) {
    gradients g(1);
    const posenc::rotary<Layout> rope({.head_dim = head_dim}, posenc::default_rope{});
    const auto pos = posenc::position_ids::consecutive(100000, 1);
    auto dq = g.dq(), dk = g.dk();
    // A call takes ~0.2 µs, too short to time one by one: blocks of calls alternate with blocks of the
    // limit pass before the timed loop, which then times plain calls.
    limit_times limit;
    double kernel_seconds = 0;
    constexpr int rounds = 200, calls = 64;
    for (int round = 0; round < rounds; ++round) {
        limit.time([&](bool prefetch) {
            for (int i = 0; i < calls; ++i) g.limit_pass(1.0f, 1, prefetch);
        });
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
            posenc::transform_backward(rope, dq, dk, pos);
            benchmark::ClobberMemory();
        }
        kernel_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    for (auto _ : state) {
        posenc::transform_backward(rope, dq, dk, pos);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(g.bytes() * static_cast<double>(state.iterations())));
    limit.report(state, kernel_seconds, rounds);
}

template <class Layout>
void register_backward(const std::string& name) {
    static const posenc::yarn s1_yarn{.base = 10000, .factor = 4, .original_max_position = 8192};
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("rope_backward/S1/" + name + th).c_str(),
                                     [t](benchmark::State& s) { backward_s1<Layout>(s, posenc::default_rope{}, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope_backward/S1-yarn/" + name + th).c_str(),
                                     [t](benchmark::State& s) { backward_s1<Layout>(s, s1_yarn, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
    }
    benchmark::RegisterBenchmark(("rope_backward/S2/" + name).c_str(), backward_s2<Layout>)->Unit(benchmark::kNanosecond);
}

// Registered before main runs (posenc_bench.cpp's main registers its own rows, then runs them all).
[[maybe_unused]] const bool registered = [] {
    register_backward<posenc::half_split>("half_split");
    register_backward<posenc::interleaved>("interleaved");
    return true;
}();

}  // namespace
