// The harness every posenc-bench family shares: S1's buffers, the check that a benchmark's data stayed
// representative, the limit passes' clock and the paired timing loop (limit pass, then kernel, per
// iteration), and the caller's thread pool of the executor rows. Each family's registration is
// declared here and called by main (posenc_bench.cpp) in one fixed order.
#pragma once

#include <posenc/attention/dispatch.hpp>
#include <posenc/posenc.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "limit.hpp"

namespace posenc_bench {

constexpr std::size_t S1_tokens = 2048, S1_q_heads = 32, S1_kv_heads = 8, S1_head_dim = 128;

// 64-byte aligned, as an inference engine allocates its activations (unaligned 256-bit accesses
// that straddle cache lines cost ~10% at these sizes, in the limit pass and the kernels alike).
using aligned_vector = std::vector<float, xsimd::aligned_allocator<float, 64>>;

struct buffers {
    aligned_vector q, k;
    buffers(std::size_t tokens, std::size_t q_heads, std::size_t kv_heads, std::size_t head_dim)
        : q(tokens * q_heads * head_dim), k(tokens * kv_heads * head_dim) {
        fill();
    }
    void fill() {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 97) * 0.01f;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 89) * 0.01f;
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(float)); }
};

/// Whether the attention kernels were dispatched to AVX-512: the FMA peak they are compared with
/// (fma_peak_pass) is then that width's, else AVX2's.
inline bool attention_on_avx512() { return std::string(posenc::simd::attention_kernels().arch) == "avx512bw"; }

/// S1's Q and K, refilled for every benchmark run: what one benchmark leaves in them (see
/// representative_data) must not decide what the next one measures.
inline buffers& s1_buffers() {
    static buffers b(S1_tokens, S1_q_heads, S1_kv_heads, S1_head_dim);
    b.fill();
    return b;
}

/// Whether the values a benchmark ran on stayed normal floats (or zero), as the kernels compute with
/// them (16-bit values widened to float): subnormals cost a microcode assist per operation on Intel
/// cores, so a run over them would time the assists (the fused norm's weights, applied again and
/// again, drained S1's lanes into subnormals and slowed every later benchmark on the same buffers).
template <class T>
bool representative_data(const T* x, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (const float v = static_cast<float>(x[i]); !std::isfinite(v) || std::fpclassify(v) == FP_SUBNORMAL) return false;
    return true;
}

/// A benchmark whose data did not stay representative reports an error instead of a number; false then.
template <class Buffers>
bool require_representative(benchmark::State& state, const Buffers& b) {
    if (representative_data(b.q.data(), b.q.size()) && representative_data(b.k.data(), b.k.size())) return true;
    state.SkipWithError("the data drifted into subnormal or non-finite values");
    return false;
}

inline posenc::heads_view<float> view(aligned_vector& v, std::size_t tokens, std::size_t heads) {
    return {std::span<float>(v), {tokens, heads, S1_head_dim}};
}

/// The limit passes' time: each pass runs with software prefetch (8 KiB ahead) on one iteration and
/// without it on the next, and the limit is the faster of the two on average, because which one wins
/// depends on the machine and the buffers and a limit slower than the best pass would flatter the
/// kernels. Reports limit_prefetch: 1 when the prefetching pass was the faster.
class limit_clock {
public:
    /// Times pass(prefetch), alternating the two variants.
    template <class Pass>
    void time(Pass&& pass) {
        using clock = std::chrono::steady_clock;
        const bool prefetch = runs_[1] <= runs_[0];
        const auto t0 = clock::now();
        pass(prefetch);
        benchmark::ClobberMemory();
        seconds_[prefetch] += std::chrono::duration<double>(clock::now() - t0).count();
        ++runs_[prefetch];
    }
    /// limit_fraction (the kernel's `runs` iterations in `kernel_seconds`) and limit_prefetch.
    void report(benchmark::State& state, double kernel_seconds, double runs) const {
        if (kernel_seconds <= 0 || runs_[1] == 0) return;
        const bool prefetch = runs_[0] == 0 || seconds_[1] / runs_[1] <= seconds_[0] / runs_[0];
        state.counters["limit_fraction"] = seconds_[prefetch] / runs_[prefetch] * runs / kernel_seconds;
        if (runs_[0] > 0) state.counters["limit_prefetch"] = prefetch ? 1 : 0;  // only once both ran
    }

private:
    double seconds_[2] = {0, 0};
    std::size_t runs_[2] = {0, 0};
};

/// The timing loop of every paired benchmark: per iteration `prepare()` (untimed), the limit pass
/// limit_pass(bool prefetch) (limit_clock), then `body` (the iteration's time). Returns the kernel's
/// seconds in all.
template <class Limit, class F, class Prepare = void (*)()>
double paired(benchmark::State& state, double bytes, Limit&& limit_pass, F&& body, Prepare&& prepare = [] {}) {
    using clock = std::chrono::steady_clock;
    limit_clock limit;
    double kernel_seconds = 0;
    for (auto _ : state) {
        prepare();
        limit.time(limit_pass);
        const auto t1 = clock::now();
        body();
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
    limit.report(state, kernel_seconds, static_cast<double>(state.iterations()));
    return kernel_seconds;
}

// Times `body` per iteration (the benchmark's time and bytes/s) and, right before each iteration,
// the limit pass over the same buffers with the same thread count (with and without prefetch on
// alternate iterations, the faster counting: limit_clock). limit_fraction = limit time ÷ kernel time
// over the whole run: measured side by side, so that the drift of a shared machine between two
// benchmarks does not distort the ratio.
//
// `limit_scale` is the a of the limit pass: 1/amplitude for a rotation that scales by amplitude, so
// that the buffers stay bounded over millions of iterations (the two passes cost the same for any a).
//
// `pristine`, when given, is copied into the buffers before each iteration, untimed: for a body that
// does not preserve its data's magnitudes (the fused norm), so that every iteration sees the same data.
// The limit pass then follows that copy rather than the kernel, which makes those rows'
// limit_fraction read slightly high (the copy evicts part of S1 from the caches).
template <class F>
void paired_loop(benchmark::State& state, buffers& b, unsigned threads, F&& body, float limit_scale = 1.0f,
                 const buffers* pristine = nullptr) {
    paired(
        state, b.bytes_moved(),
        [&](bool prefetch) {
            posenc_bench::scale_in_place(b.q.data(), b.q.size(), limit_scale, threads, prefetch);
            posenc_bench::scale_in_place(b.k.data(), b.k.size(), limit_scale, threads, prefetch);
        },
        body,
        [&] {
            if (!pristine) return;
            std::copy(pristine->q.begin(), pristine->q.end(), b.q.begin());
            std::copy(pristine->k.begin(), pristine->k.end(), b.k.begin());
        });
    require_representative(state, b);
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

// ---- registration, one function per family and layout (main calls them in this order) ----------------

void register_limit_s1();                                                    // rotary_bench.cpp
template <class Layout> void register_rotary(const std::string& layout);     // rotary_bench.cpp
template <class Layout> void register_engine16(const std::string& layout);   // engine16_bench.cpp
template <class Layout> void register_rotary_executors(const std::string& layout);  // rotary_bench.cpp
void register_mrope();                                                       // rotary_bench.cpp
void register_table();                                                       // rotary_bench.cpp
void register_attention();                                                   // attention_bench.cpp
void register_threads();                                                     // rotary_bench.cpp

}  // namespace posenc_bench
