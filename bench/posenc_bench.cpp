// posenc-bench: the rotary hot loop against the machine's in-place bandwidth limit and against the
// scalar loop a user would write first, all in one run (shapes from shared/bench.md).
//
//   limit/S1/threads:N          x ← a·x over the same Q and K buffers (the least work an in-place pass can do)
//   scalar/S1/<layout>          plain scalar loop over a cos/sin table
//   rope/S1/<layout>/threads:N  posenc, cached table          (Q [2048,32,128], K [2048,8,128])
//   rope/S1-yarn/...            the same with YaRN ×4 over 8192
//   rope/S2/<layout>            decode: one token at position 100000, cos/sin included
//   rope/S3/<layout>/threads:N  S1 with cos/sin computed per token inside the timed region
//   table/S4                    cos/sin table of 131072 positions × 64 pairs, YaRN ×4
//   rope/S1-bf16, S1-fp16/<layout>/threads:N   S1 in 16-bit storage; limit: x ^= sign over the same 16-bit buffers
//   kv/append/<layout>          S1's K rotated from a source buffer into a cache slot; limit: memcpy of the same bytes
//   rope/S1-qknorm/<layout>     fused per-head RMSNorm + RoPE in place (limit as S1)
//   rope/S1-qknorm-2pass/<layout>  the same as two passes (norm pass: the kernel at position 0, then RoPE)
//   threads/spawn-join          starting and joining one std::thread (what set_threads costs per call without OpenMP)
//   rope/S1/<layout>/executor:spawn2, executor:pool2   S1 split in 2 on a caller's executor: a std::thread per
//                               slice per call, or a persistent pool
//
// Every rope/scalar benchmark reports bytes_per_second (Q+K read + written) and limit_fraction: its
// bytes/s over the limit pass's on the same buffers with the same thread count, the two measured
// alternately within the benchmark (see paired_loop). limit/S1 also runs on its own. A summary table
// follows Google Benchmark's own output.
#include <posenc/posenc.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <map>
#include <string>
#include <vector>

#include "limit.hpp"

namespace {

constexpr std::size_t S1_tokens = 2048, S1_q_heads = 32, S1_kv_heads = 8, S1_head_dim = 128;

// 64-byte aligned, as an inference engine allocates its activations (unaligned 256-bit accesses
// that straddle cache lines cost ~10% at these sizes, in the limit pass and the kernels alike).
using aligned_vector = std::vector<float, xsimd::aligned_allocator<float, 64>>;

struct buffers {
    aligned_vector q, k;
    buffers(std::size_t tokens, std::size_t q_heads, std::size_t kv_heads, std::size_t head_dim)
        : q(tokens * q_heads * head_dim), k(tokens * kv_heads * head_dim) {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 97) * 0.01f;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 89) * 0.01f;
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(float)); }
};

buffers& s1_buffers() {
    static buffers b(S1_tokens, S1_q_heads, S1_kv_heads, S1_head_dim);
    return b;
}

posenc::heads_view<float> view(aligned_vector& v, std::size_t tokens, std::size_t heads) {
    return {std::span<float>(v), {tokens, heads, S1_head_dim}};
}

// Times `body` per iteration (the benchmark's time and bytes/s) and, right before each iteration,
// the limit pass over the same buffers with the same thread count. limit_fraction = limit time ÷
// kernel time over the whole run: measured side by side, so that the drift of a shared machine
// between two benchmarks does not distort the ratio.
//
// `limit_scale` is the a of the limit pass: 1/amplitude for a rotation that scales by amplitude, so
// that the buffers stay bounded over millions of iterations (the two passes cost the same for any a).
template <class F>
void paired_loop(benchmark::State& state, buffers& b, unsigned threads, F&& body, float limit_scale = 1.0f) {
    using clock = std::chrono::steady_clock;
    double limit_seconds = 0, kernel_seconds = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        posenc_bench::scale_in_place(b.q.data(), b.q.size(), limit_scale, threads);
        posenc_bench::scale_in_place(b.k.data(), b.k.size(), limit_scale, threads);
        benchmark::ClobberMemory();
        const auto t1 = clock::now();
        body();
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        limit_seconds += std::chrono::duration<double>(t1 - t0).count();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(b.bytes_moved() * static_cast<double>(state.iterations())));
    if (kernel_seconds > 0) state.counters["limit_fraction"] = limit_seconds / kernel_seconds;
}

void limit_s1(benchmark::State& state, unsigned threads) {
    auto& b = s1_buffers();
    for (auto _ : state) {
        posenc_bench::scale_in_place(b.q.data(), b.q.size(), 1.0f, threads);
        posenc_bench::scale_in_place(b.k.data(), b.k.size(), 1.0f, threads);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(b.bytes_moved() * static_cast<double>(state.iterations())));
}

template <class Layout>
void scalar_s1(benchmark::State& state) {
    // What a user writes first: per token, per head, per pair, from a float cos/sin table.
    auto& b = s1_buffers();
    const std::size_t half = S1_head_dim / 2;
    const auto table = posenc::rotary<Layout>({.head_dim = S1_head_dim}, posenc::default_rope{}).table(S1_tokens);
    paired_loop(state, b, 1, [&] {
        for (auto* buf : {&b.q, &b.k}) {
            const std::size_t heads = buf == &b.q ? S1_q_heads : S1_kv_heads;
            for (std::size_t t = 0; t < S1_tokens; ++t) {
                const auto c = table.cos(static_cast<std::int64_t>(t)), s = table.sin(static_cast<std::int64_t>(t));
                for (std::size_t h = 0; h < heads; ++h) {
                    float* x = buf->data() + (t * heads + h) * S1_head_dim;
                    for (std::size_t i = 0; i < half; ++i) {
                        const std::size_t i1 = Layout::first(i, S1_head_dim), i2 = Layout::second(i, S1_head_dim);
                        const float x1 = x[i1], x2 = x[i2];
                        x[i1] = x1 * c[i] - x2 * s[i];
                        x[i2] = x2 * c[i] + x1 * s[i];
                    }
                }
            }
        }
    });
}

template <class Layout, class Schedule>
void rope_table(benchmark::State& state, Schedule schedule, unsigned threads) {
    auto& b = s1_buffers();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, schedule);
    rope.set_threads(threads);
    const auto table = rope.table(S1_tokens);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    paired_loop(state, b, threads, [&] { rope.apply(table, q, k, pos); },
                static_cast<float>(1.0 / rope.frequencies().attention_factor));
}

template <class Layout>
void rope_s3(benchmark::State& state, unsigned threads) {
    auto& b = s1_buffers();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    rope.set_threads(threads);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    paired_loop(state, b, threads, [&] { rope.apply(q, k, pos); });
}

template <class Layout>
void rope_s2(benchmark::State& state) {
    static buffers b(1, S1_q_heads, S1_kv_heads, S1_head_dim);
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    auto q = view(b.q, 1, S1_q_heads), k = view(b.k, 1, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(100000, 1);
    // A call takes ~0.2 µs, too short to time one by one: the limit pairing alternates blocks of
    // calls before the timed loop, which then times plain calls.
    using clock = std::chrono::steady_clock;
    double limit_seconds = 0, kernel_seconds = 0;
    for (int round = 0; round < 200; ++round) {
        const auto t0 = clock::now();
        for (int i = 0; i < 64; ++i) {
            posenc_bench::scale_in_place(b.q.data(), b.q.size(), 1.0f, 1);
            posenc_bench::scale_in_place(b.k.data(), b.k.size(), 1.0f, 1);
            benchmark::ClobberMemory();
        }
        const auto t1 = clock::now();
        for (int i = 0; i < 64; ++i) {
            rope.apply(q, k, pos);
            benchmark::ClobberMemory();
        }
        const auto t2 = clock::now();
        limit_seconds += std::chrono::duration<double>(t1 - t0).count();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
    }
    for (auto _ : state) {
        rope.apply(q, k, pos);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(b.bytes_moved() * static_cast<double>(state.iterations())));
    state.counters["limit_fraction"] = limit_seconds / kernel_seconds;
}

void table_s4(benchmark::State& state) {
    const auto freq = posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 8192}.frequencies(128);
    for (auto _ : state) {
        posenc::cos_sin_table table(freq, 131072);
        benchmark::DoNotOptimize(table.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(131072.0 * 64 * 2 * sizeof(float)) * state.iterations());
}

// ---- 16-bit storage ------------------------------------------------------------------------------

template <class T>
struct buffers16 {
    std::vector<T, xsimd::aligned_allocator<T, 64>> q, k;
    buffers16() : q(S1_tokens * S1_q_heads * S1_head_dim), k(S1_tokens * S1_kv_heads * S1_head_dim) {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = T(static_cast<float>(i % 97) * 0.01f);
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = T(static_cast<float>(i % 89) * 0.01f);
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(T)); }
};

template <class T>
buffers16<T>& s1_buffers16() {
    static buffers16<T> b;
    return b;
}

/// As paired_loop, with any limit pass.
template <class Limit, class F>
void paired(benchmark::State& state, double bytes, Limit&& limit, F&& body) {
    using clock = std::chrono::steady_clock;
    double limit_seconds = 0, kernel_seconds = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        limit();
        benchmark::ClobberMemory();
        const auto t1 = clock::now();
        body();
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        limit_seconds += std::chrono::duration<double>(t1 - t0).count();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
    if (kernel_seconds > 0) state.counters["limit_fraction"] = limit_seconds / kernel_seconds;
}

template <class Layout, class T>
void rope_s1_16(benchmark::State& state, unsigned threads) {
    auto& b = s1_buffers16<T>();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    rope.set_threads(threads);
    const auto table = rope.table(S1_tokens);
    posenc::heads_view<T> q(std::span<T>(b.q), {S1_tokens, S1_q_heads, S1_head_dim});
    posenc::heads_view<T> k(std::span<T>(b.k), {S1_tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    paired(
        state, b.bytes_moved(),
        [&] {
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.q.data()), b.q.size(), threads);
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.k.data()), b.k.size(), threads);
        },
        [&] { rope.apply(table, q, k, pos); });
}

// ---- KV-cache append: out of place into a cache slot ------------------------------------------------

template <class Layout>
void kv_append(benchmark::State& state) {
    constexpr std::size_t cache_tokens = 2 * S1_tokens, slot = 1000;
    const std::size_t n = S1_tokens * S1_kv_heads * S1_head_dim;
    static aligned_vector src = [&] {
        aligned_vector v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 89) * 0.01f;
        return v;
    }();
    static aligned_vector cache(cache_tokens * S1_kv_heads * S1_head_dim, 0.0f);
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    const auto table = rope.table(slot + S1_tokens);
    float* dst = cache.data() + slot * S1_kv_heads * S1_head_dim;
    const posenc::heads_view<const float> sv(std::span<const float>(src), {S1_tokens, S1_kv_heads, S1_head_dim});
    const posenc::heads_view<float> dv(dst, {S1_tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(slot, S1_tokens);
    paired(
        state, 2.0 * static_cast<double>(n * sizeof(float)), [&] { std::memcpy(dst, src.data(), n * sizeof(float)); },
        [&] { rope.apply_into(table, sv, dv, pos); });
}

// ---- fused QK-norm + RoPE ----------------------------------------------------------------------------

template <class Layout>
void rope_qknorm(benchmark::State& state, bool two_passes) {
    auto& b = s1_buffers();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{.base = 1000000});
    const auto table = rope.table(S1_tokens);
    std::vector<float> w(S1_head_dim);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9f + 0.001f * static_cast<float>(i);
    const posenc::head_rms_norm qn(w, 1e-6), kn(w, 1e-6, posenc::rms_weight::offset_one);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    const auto at_zero = posenc::position_ids::constant(0, S1_tokens);  // the identity rotation
    paired_loop(state, b, 1, [&] {
        if (two_passes) {
            rope.apply_normed(table, qn, q, kn, k, at_zero);
            rope.apply(table, q, k, pos);
        } else {
            rope.apply_normed(table, qn, q, kn, k, pos);
        }
    });
}

// ---- threads: what a call pays to split -------------------------------------------------------------

void spawn_join(benchmark::State& state) {
    for (auto _ : state) {
        std::thread t([] { benchmark::ClobberMemory(); });
        t.join();
    }
}

/// A persistent pool of `workers` threads (plus the caller) that runs an executor's tasks.
class pool {
public:
    explicit pool(unsigned workers) {
        for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    }
    ~pool() {
        {
            std::lock_guard<std::mutex> l(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    void run(std::size_t n, const std::function<void(std::size_t)>& task) {
        {
            std::lock_guard<std::mutex> l(m_);
            task_ = &task;
            n_ = n;
            next_ = 0;
            remaining_ = n;
            ++generation_;
        }
        cv_.notify_all();
        drain();
        std::unique_lock<std::mutex> l(m_);
        done_.wait(l, [&] { return remaining_ == 0; });
        task_ = nullptr;
    }

private:
    void drain() {
        for (;;) {
            std::size_t i;
            const std::function<void(std::size_t)>* task;
            {
                std::lock_guard<std::mutex> l(m_);
                if (!task_ || next_ >= n_) return;
                i = next_++;
                task = task_;
            }
            (*task)(i);
            std::lock_guard<std::mutex> l(m_);
            if (--remaining_ == 0) done_.notify_all();
        }
    }
    void work() {
        unsigned seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> l(m_);
                cv_.wait(l, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
            }
            drain();
        }
    }
    std::vector<std::thread> threads_;
    std::mutex m_;
    std::condition_variable cv_, done_;
    const std::function<void(std::size_t)>* task_ = nullptr;
    std::size_t n_ = 0, next_ = 0, remaining_ = 0;
    unsigned generation_ = 0;
    bool stop_ = false;
};

template <class Layout>
void rope_s1_executor(benchmark::State& state, bool persistent) {
    auto& b = s1_buffers();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    rope.set_threads(2);
    static pool workers(1);
    if (persistent)
        rope.set_executor([](std::size_t n, const std::function<void(std::size_t)>& task) { workers.run(n, task); });
    else
        rope.set_executor([](std::size_t n, const std::function<void(std::size_t)>& task) {
            std::vector<std::thread> ts;
            for (std::size_t i = 1; i < n; ++i) ts.emplace_back([&task, i] { task(i); });
            task(0);
            for (auto& t : ts) t.join();
        });
    const auto table = rope.table(S1_tokens);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    paired_loop(state, b, 2, [&] { rope.apply(table, q, k, pos); });
}

const posenc::yarn s1_yarn{.base = 10000, .factor = 4, .original_max_position = 8192, .beta_fast = 32, .beta_slow = 1};

template <class Layout>
void register_layout(const std::string& name) {
    benchmark::RegisterBenchmark(("scalar/S1/" + name).c_str(), scalar_s1<Layout>)
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("rope/S1/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_table<Layout>(s, posenc::default_rope{}, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope/S1-yarn/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_table<Layout>(s, s1_yarn, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope/S3/" + name + th).c_str(), [t](benchmark::State& s) { rope_s3<Layout>(s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
    }
    benchmark::RegisterBenchmark(("rope/S2/" + name).c_str(), rope_s2<Layout>)->Unit(benchmark::kNanosecond);
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("rope/S1-bf16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_s1_16<Layout, posenc::bf16>(s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope/S1-fp16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_s1_16<Layout, posenc::fp16>(s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
    }
    benchmark::RegisterBenchmark(("kv/append/" + name).c_str(), kv_append<Layout>)->Unit(benchmark::kMicrosecond)->UseManualTime();
    benchmark::RegisterBenchmark(("rope/S1-qknorm/" + name).c_str(), [](benchmark::State& s) { rope_qknorm<Layout>(s, false); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("rope/S1-qknorm-2pass/" + name).c_str(),
                                 [](benchmark::State& s) { rope_qknorm<Layout>(s, true); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    for (bool persistent : {false, true})
        benchmark::RegisterBenchmark(("rope/S1/" + name + (persistent ? "/executor:pool2" : "/executor:spawn2")).c_str(),
                                     [persistent](benchmark::State& s) { rope_s1_executor<Layout>(s, persistent); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
}

/// Google Benchmark's console output, then one table: each benchmark's GB/s against the limit's.
class summary_reporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs) {
            if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
            const auto bps = r.counters.find("bytes_per_second");
            const auto frac = r.counters.find("limit_fraction");
            std::string name = r.run_name.str();  // without Google Benchmark's timing suffix
            for (const char* suffix : {"/manual_time", "/real_time"})
                if (const auto at = name.find(suffix); at != std::string::npos) name.erase(at, std::string(suffix).size());
            rows_.push_back({name, r.GetAdjustedRealTime(), GetTimeUnitString(r.time_unit),
                             bps == r.counters.end() ? 0.0 : double(bps->second) / 1e9,
                             frac == r.counters.end() ? -1.0 : double(frac->second)});
        }
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        std::printf("\nposenc-bench summary (kernels: %s; limit = x <- a*x over the same Q and K)\n",
                    posenc::simd::active_arch_name());
        std::printf("%-38s %12s %10s %15s\n", "benchmark", "time", "GB/s", "limit_fraction");
        for (const auto& row : rows_) {
            char frac[32] = "";
            if (row.fraction >= 0) std::snprintf(frac, sizeof frac, "%.2f", row.fraction);
            std::printf("%-38s %9.2f %-2s %10.1f %15s\n", row.name.c_str(), row.time, row.unit.c_str(), row.gbps, frac);
        }
    }

private:
    struct row {
        std::string name;
        double time;
        std::string unit;
        double gbps, fraction;
    };
    std::vector<row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
    for (unsigned t : {1u, 2u})
        benchmark::RegisterBenchmark(("limit/S1/threads:" + std::to_string(t)).c_str(),
                                     [t](benchmark::State& s) { limit_s1(s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    register_layout<posenc::half_split>("half_split");
    register_layout<posenc::interleaved>("interleaved");
    benchmark::RegisterBenchmark("table/S4", table_s4)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("threads/spawn-join", spawn_join)->Unit(benchmark::kMicrosecond)->UseRealTime();

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    summary_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
}
