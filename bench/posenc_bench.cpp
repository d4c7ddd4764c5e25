// posenc-bench: the rotary hot loop against the machine's in-place bandwidth limit and against the
// scalar loop a user would write first, all in one run (shapes: docs/benchmark-shapes.md).
//
//   limit/S1/threads:N          x ← a·x over the same Q and K buffers (the least work an in-place pass can do)
//   scalar/S1/<layout>          plain scalar loop over a cos/sin table
//   rope/S1/<layout>/threads:N  posenc, cached table          (Q [2048,32,128], K [2048,8,128])
//   rope/S1-yarn/...            the same with YaRN ×4 over 8192
//   rope/S2/<layout>            decode: one token at position 100000, cos/sin included
//   rope/call-overhead/<layout>[/table]  what S2's call (or S2 from a table, checked) costs beyond its
//                               kernel: the public call against the same call made straight to the SIMD
//                               kernels; time = the difference per call, limit_fraction = kernel ÷ call
//   rope/S3/<layout>/threads:N  S1 with cos/sin computed per token inside the timed region
//   table/S4                    cos/sin table of 131072 positions × 64 pairs, YaRN ×4
//   attention/S5/threads:N      causal ALiBi attention, 8 heads, seq 1024, head_dim 64, max_bias 8
//   attention/S5-rope/threads:N causal, GQA 32/8, seq 2048, head_dim 128, RoPE inside (cos/sin per tile)
//   attention/S5-rope-table/... the same with cos/sin from a table (table_transform)
//   attention/S5-rope-prerotated/... K rotated once into a copy first (timed), then keys_transformed
//   attention/S6/threads:N      decode: 1 query at 8191 over a kv_cache of 8192 rotated keys (head-major), 32/8, dim 128
//   attention/S6-token-major/... the same keys in a plain [token][kv head][dim] buffer
//   attention/S6-head-major/... a plain buffer laid out [kv head][token][dim] (what kv_cache stores)
//   attention/S6/executor:pool2, S6-bf16/...  S6 with threads = 2 on the caller's persistent pool
//                               (options.executor); limit: the read pass on the same pool
//   attention/S6-200/threads:N, executor:pool2   S6 against 200 cached tokens: below the work threshold,
//                               so threads = 2 runs on the caller's thread
//   attention/<S5|S5-rope|S6>-bf16, -fp16/threads:N   K and V in 16 bits: S5 and S5-rope (with a cos/sin
//                               table) over converted copies, S6 over a kv_cache<rotary, bf16/fp16>
//   kv_cache/append/threads:N   kv_cache::append of S1's K [2048,8,128] (rotated, RoPE base 10000) and a V
//                               of the same shape into an empty cache; limit: a copy of the same bytes
//   kv_cache/append-bf16, -fp16 the same into a 16-bit cache; limit: floats read, 16-bit values written (truncated)
//   limit/S5, limit/S5-rope     one head's Eigen GEMMs QKᵀ and PV per thread (-march=native): FLOP/s
//   limit/S6                    a read pass over the cache's K and V: bytes/s
//   naive/<shape>               materialised scores and softmax (Eigen GEMMs), 1 thread
//   eigen-tiles/S5              S5 tiled like the kernel with Eigen GEMMs for the tile products, 1 thread,
//                               timed alternately with attention/S5: posenc_speedup, max_abs_diff
//
// Attention reports FLOP/s of the useful work (4·heads·D·visible pairs: causal counts the unmasked
// part), limit_fraction = its FLOP/s over the limit GEMM's and fma_fraction = its FLOP/s over the
// core's FMA peak (an FMA loop of 12 independent chains, fma_peak_pass), each timed alternately with
// the kernel in the same benchmark; S6 reports bytes/s (K and V read) against the read pass over the
// same bytes.
//   rope/S1-bf16, S1-fp16/<layout>/threads:N   S1 in 16-bit storage; limit: x ^= sign over the same 16-bit buffers
//   rope/L2-bf16, L2-fp16/<layout>  the same for 64 tokens (640 KiB: in L2), 1 thread: the kernel's arithmetic
//                               without S1's memory traffic; ns_per_head, limit as above over those buffers
//   kv/append/<layout>          S1's K rotated from a source buffer into a cache slot; limit: a copy of the same bytes
//                               (an AVX2 loop)
//   rope/S1-qknorm/<layout>     fused per-head RMSNorm + RoPE in place (limit as S1)
//   rope/S1-qknorm-2pass/<layout>  the same as two passes (norm pass: the kernel at position 0, then RoPE)
//   threads/spawn-join          starting and joining one std::thread (what set_threads costs per call without OpenMP)
//   rope/S1-mrope/half_split    S1 with Qwen2-VL's M-RoPE over a text + 32×32 image + text prompt, rows
//                               gathered from a table per token (/on-the-fly: built from the components);
//                               rope/S1-mrope-interleaved/... the same with Qwen3-VL's interleave; limit as S1
//   rope/S1/<layout>/executor:spawn2, executor:pool2   S1 split in 2 on a caller's executor: a std::thread per
//                               slice per call, or a persistent pool
//
// Every rope/scalar benchmark reports bytes_per_second (Q+K read + written) and limit_fraction: its
// bytes/s over the limit pass's on the same buffers with the same thread count, the two measured
// alternately within the benchmark (see paired_loop); the limit pass is the faster of its prefetching
// and plain variants (limit_clock). limit/S1 also runs on its own: the prefetching pass only (faster
// than the plain one for S1 on the machines measured; the fractions use whichever was faster). A summary table
// follows Google Benchmark's own output, on stderr. Every S1 benchmark starts from S1's own values
// (no benchmark measures what an earlier one left in the buffers), and one whose data drifted into
// subnormal or non-finite values reports an error instead of a time (see representative_data).
#include <posenc/posenc.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/rope/mrope.hpp>
#include <posenc/rope/mrope_positions.hpp>

#include "attention_limit.hpp"
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
        fill();
    }
    void fill() {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 97) * 0.01f;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 89) * 0.01f;
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(float)); }
};

/// S1's Q and K, refilled for every benchmark run: what one benchmark leaves in them (see
/// representative_data) must not decide what the next one measures.
buffers& s1_buffers() {
    static buffers b(S1_tokens, S1_q_heads, S1_kv_heads, S1_head_dim);
    b.fill();
    return b;
}

/// Whether the values a benchmark ran on stayed normal floats (or zero), as the kernels compute with
/// them (16-bit values widened to float). Subnormals cost a microcode assist per operation on Intel
/// cores (the limit pass too): a run over them times the assists. The fused norm's weights, applied
/// again and again, drained lanes of S1's heads into subnormals within a few hundred iterations; on a
/// Xeon that made the fused-norm rows up to 20× slower and every later benchmark on the same buffers
/// up to 6× (rope/S1/interleaved: 11.4 ms against 1.8). (A bf16 subnormal widens to a float
/// subnormal; an fp16 one to a normal float, and F16C converts fp16 subnormals both ways at full speed,
/// measured on the Xeon: fp16 rotations make such values by cancellation, and they cost nothing.)
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

posenc::heads_view<float> view(aligned_vector& v, std::size_t tokens, std::size_t heads) {
    return {std::span<float>(v), {tokens, heads, S1_head_dim}};
}

/// The limit passes' time: each pass runs with software prefetch (8 KiB ahead) on one iteration and
/// without it on the next, and the limit is the faster of the two on average. Which one wins depends
/// on the machine and the buffers (Zen 5, 2026-12-02: the in-place passes ~1.3× faster with it, the
/// copy faster without), and a limit slower than the best pass would flatter the kernels. (Until that
/// day every limit pass ran without prefetch on g++ 12: the compiler had deleted the prefetch helper's
/// calls, see limit_avx2.cpp.) Reports limit_prefetch: 1 when the prefetching pass was the faster.
/// (The smaller of two noisy means reads a little low over few iterations: a limit that is if
/// anything too fast, never one that flatters the kernel.)
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
// The limit pass then follows that copy rather than the kernel (the kernel still follows the limit
// pass, as in every row): on the Xeon of 2026-12-02 (docs/engine-performance.md) the limit pass took
// ~1.5% longer there (1570 against 1545 µs), so those rows' limit_fraction reads ~0.015 high; more
// where S1 fits the last-level cache but S1 and its pristine copy do not.
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

void limit_s1(benchmark::State& state, unsigned threads) {
    auto& b = s1_buffers();
    for (auto _ : state) {
        posenc_bench::scale_in_place(b.q.data(), b.q.size(), 1.0f, threads, true);
        posenc_bench::scale_in_place(b.k.data(), b.k.size(), 1.0f, threads, true);
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
    limit_clock limit;
    double kernel_seconds = 0;
    constexpr int rounds = 200, calls = 64;
    for (int round = 0; round < rounds; ++round) {
        limit.time([&](bool prefetch) {
            for (int i = 0; i < calls; ++i) {
                posenc_bench::scale_in_place(b.q.data(), b.q.size(), 1.0f, 1, prefetch);
                posenc_bench::scale_in_place(b.k.data(), b.k.size(), 1.0f, 1, prefetch);
                benchmark::ClobberMemory();
            }
        });
        const auto t1 = clock::now();
        for (int i = 0; i < calls; ++i) {
            rope.apply(q, k, pos);
            benchmark::ClobberMemory();
        }
        kernel_seconds += std::chrono::duration<double>(clock::now() - t1).count();
    }
    for (auto _ : state) {
        rope.apply(q, k, pos);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(b.bytes_moved() * static_cast<double>(state.iterations())));
    limit.report(state, kernel_seconds, rounds);
}

/// rope/call-overhead: blocks of `calls` public calls (rope.apply: checks, job, slices, dispatch)
/// alternate with blocks of the same call made straight to the SIMD kernels (simd::rotate on
/// rotate_args built here: the cos/sin row and the rotation, nothing else), on S2's data. An
/// iteration's time is the median over its rounds of the two blocks' difference per call (clamped at
/// 0); call_ns, kernel_ns and overhead_ns are the run's medians (overhead_ns unclamped), and
/// limit_fraction = kernel_ns ÷ call_ns (1: the call costs nothing beyond its kernel). A fixed number of
/// iterations: each runs 2·rounds·calls calls for ~20 ns of manual time.
template <class Layout>
void rope_call_overhead(benchmark::State& state, bool use_table) {
    static buffers b(1, S1_q_heads, S1_kv_heads, S1_head_dim);
    b.fill();
    const posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    constexpr std::int64_t position = 100000;
    const auto pos = posenc::position_ids::consecutive(position, 1);
    std::optional<posenc::cos_sin_table> table;
    if (use_table) table.emplace(rope.table(position + 1));
    const auto q = view(b.q, 1, S1_q_heads), k = view(b.k, 1, S1_kv_heads);
    posenc::simd::rotate_args args;
    const auto in_place = [](posenc::simd::view_args& v, const posenc::heads_view<float>& x) {
        v.src = v.dst = x.data();
        v.heads = x.heads();
        v.src_token_stride = v.dst_token_stride = x.token_stride();
        v.src_head_stride = v.dst_head_stride = x.head_stride();
    };
    in_place(args.view[0], q);
    in_place(args.view[1], k);
    args.tokens = 1;
    args.pos_start = position;
    args.head_dim = args.rotary_dim = S1_head_dim;
    args.layout = std::is_same_v<Layout, posenc::interleaved> ? posenc::simd::layout_id::interleaved
                                                               : posenc::simd::layout_id::half_split;
    args.table = use_table ? table->data() : nullptr;
    args.inv_freq = rope.frequencies().inv_freq.data();
    args.amplitude = rope.frequencies().attention_factor;
    args.prefetch_16bit = posenc::simd::prefetch_16bit();
    const auto call = [&] {
        if (use_table)
            rope.apply(*table, q, k, pos);
        else
            rope.apply(q, k, pos);
    };
    const auto kernel = [&] { posenc::simd::rotate(args); };
    {  // The two do the same work: the same bits from the same data.
        const buffers start = b;
        call();
        const buffers via_call = b;
        b = start;
        kernel();
        if (b.q != via_call.q || b.k != via_call.k) return state.SkipWithError("the kernel call differs from the public call");
    }
    using clock = std::chrono::steady_clock;
    constexpr int calls = 64, rounds = 16;
    const auto block = [&](const auto& f) {
        const auto t0 = clock::now();
        for (int i = 0; i < calls; ++i) {
            f();
            benchmark::ClobberMemory();
        }
        return std::chrono::duration<double>(clock::now() - t0).count() / calls;
    };
    const auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
    };
    // Medians, not means: on a shared machine a block that lost the core to another process would
    // otherwise decide the difference of two ~250 ns calls.
    std::vector<double> call_t, kernel_t, overhead_t, round_overhead(rounds);
    for (auto* v : {&call_t, &kernel_t, &overhead_t}) v->reserve(static_cast<std::size_t>(state.max_iterations) * rounds);
    for (auto _ : state) {
        for (int r = 0; r < rounds; ++r) {  // each block first on alternate rounds
            double c, kk;
            if (r % 2) {
                c = block(call);
                kk = block(kernel);
            } else {
                kk = block(kernel);
                c = block(call);
            }
            call_t.push_back(c);
            kernel_t.push_back(kk);
            overhead_t.push_back(c - kk);
            round_overhead[static_cast<std::size_t>(r)] = c - kk;
        }
        state.SetIterationTime(std::max(median(round_overhead), 0.0));
    }
    const double call_s = median(call_t), kernel_s = median(kernel_t);
    state.counters["call_ns"] = call_s * 1e9;
    state.counters["kernel_ns"] = kernel_s * 1e9;
    state.counters["overhead_ns"] = median(overhead_t) * 1e9;
    if (call_s > 0) state.counters["limit_fraction"] = kernel_s / call_s;
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
    std::size_t tokens;
    explicit buffers16(std::size_t t = S1_tokens) : q(t * S1_q_heads * S1_head_dim), k(t * S1_kv_heads * S1_head_dim), tokens(t) {
        fill();
    }
    void fill() {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = T(static_cast<float>(i % 97) * 0.01f);
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = T(static_cast<float>(i % 89) * 0.01f);
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(T)); }
};

template <class T>
buffers16<T>& s1_buffers16() {  // refilled for every run, as s1_buffers
    static buffers16<T> b;
    b.fill();
    return b;
}

/// S1's heads for L2_tokens tokens: 40 heads × 256 bytes × 64 = 640 KiB, in L2 on the machines measured.
constexpr std::size_t L2_tokens = 64;
template <class T>
buffers16<T>& l2_buffers16() {
    static buffers16<T> b(L2_tokens);
    b.fill();
    return b;
}

/// In place over 16-bit buffers (S1's, or the L2-sized ones), against x ^= sign over the same bytes.
template <class Layout, class T>
void rope_16(benchmark::State& state, buffers16<T>& b, unsigned threads) {
    const std::size_t tokens = b.tokens;
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    rope.set_threads(threads);
    const auto table = rope.table(static_cast<std::int64_t>(tokens));
    posenc::heads_view<T> q(std::span<T>(b.q), {tokens, S1_q_heads, S1_head_dim});
    posenc::heads_view<T> k(std::span<T>(b.k), {tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(0, tokens);
    const double seconds = paired(
        state, b.bytes_moved(),
        [&](bool prefetch) {
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.q.data()), b.q.size(), threads, prefetch);
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.k.data()), b.k.size(), threads, prefetch);
        },
        [&] { rope.apply(table, q, k, pos); });
    const double heads = static_cast<double>(tokens * (S1_q_heads + S1_kv_heads)) * static_cast<double>(state.iterations());
    if (heads > 0) state.counters["ns_per_head"] = seconds / heads * 1e9;
    require_representative(state, b);
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
        state, 2.0 * static_cast<double>(n * sizeof(float)), [&](bool prefetch) { posenc_bench::copy_pass(src.data(), dst, n, 1, prefetch); },
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
    // Normalising with the same weights again and again would drain the lanes of small weight towards
    // subnormals (see representative_data): every iteration starts from S1's data.
    static const buffers pristine(S1_tokens, S1_q_heads, S1_kv_heads, S1_head_dim);
    paired_loop(
        state, b, 1,
        [&] {
            if (two_passes) {
                rope.apply_normed(table, qn, q, kn, k, at_zero);
                rope.apply(table, q, k, pos);
            } else {
                rope.apply_normed(table, qn, q, kn, k, pos);
            }
        },
        1.0f, &pristine);
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
    // The limit pass runs on the pool's two threads, not on OpenMP's: OpenMP's workers spin for a
    // while after each region, and on a 2-vCPU machine they took the executor's core (measured on a
    // Xeon: pool2 at 0.49–0.74 of the limit that way, 1.03 with OMP_WAIT_POLICY=passive).
    const auto limit = [&](bool prefetch) {
        workers.run(2, [&](std::size_t slice) {
            for (auto* v : {&b.q, &b.k}) {
                const std::size_t from = v->size() * slice / 2, to = v->size() * (slice + 1) / 2;
                posenc_bench::scale_in_place(v->data() + from, to - from, 1.0f, 1, prefetch);
            }
        });
    };
    paired(state, b.bytes_moved(), limit, [&] { rope.apply(table, q, k, pos); });
    require_representative(state, b);
}

// ---- M-RoPE ----------------------------------------------------------------------------------
// S1's shapes with Qwen2-VL's M-RoPE (sections [16, 24, 24], base 1e6) over the (t, h, w) ids of 512
// text tokens, one image of 32 × 32 merged tokens (64 × 64 patches, merge 2) and 512 text tokens.
// `table`: rows gathered from a cached table per token; else built per token from its components.
void rope_s1_mrope(benchmark::State& state, bool interleaved, bool table_rows) {
    auto& b = s1_buffers();
    const std::vector<posenc::prompt_segment> prompt = {posenc::prompt_segment::text(512),
                                                        posenc::prompt_segment::image(1, 64, 64),
                                                        posenc::prompt_segment::text(512)};
    const auto pos = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_vl});
    if (pos.size() != S1_tokens) {
        state.SkipWithError("S1-mrope: the prompt does not have S1's 2048 tokens");
        return;
    }
    const posenc::mrope m = interleaved ? posenc::mrope{.section = {24, 20, 20}, .interleaved = true}
                                        : posenc::mrope{.section = {16, 24, 24}};
    posenc::mrope_rotary<posenc::half_split> rope({.head_dim = S1_head_dim}, posenc::default_rope{.base = 1e6}, m);
    const auto table = rope.table(pos.next_position);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto ids = pos.ids();
    if (table_rows)
        paired_loop(state, b, 1, [&] { rope.apply(table, q, k, ids); });
    else
        paired_loop(state, b, 1, [&] { rope.apply(q, k, ids); });
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
    for (bool use_table : {false, true})
        benchmark::RegisterBenchmark(("rope/call-overhead/" + name + (use_table ? "/table" : "")).c_str(),
                                     [use_table](benchmark::State& s) { rope_call_overhead<Layout>(s, use_table); })
            ->Unit(benchmark::kNanosecond)
            ->UseManualTime()
            ->Iterations(400);
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("rope/S1-bf16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_16<Layout>(s, s1_buffers16<posenc::bf16>(), t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope/S1-fp16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_16<Layout>(s, s1_buffers16<posenc::fp16>(), t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
    }
    // The arithmetic alone: the same kernels with the data in L2 (ns_per_head), against the same pass there.
    benchmark::RegisterBenchmark(("rope/L2-bf16/" + name).c_str(),
                                 [](benchmark::State& s) { rope_16<Layout>(s, l2_buffers16<posenc::bf16>(), 1); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("rope/L2-fp16/" + name).c_str(),
                                 [](benchmark::State& s) { rope_16<Layout>(s, l2_buffers16<posenc::fp16>(), 1); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
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

// ---- attention -------------------------------------------------------------------------------

struct attn_def {
    const char* name;
    std::size_t Tq, Tk, Hq, Hkv, D;
    bool rope, alibi;
};
constexpr attn_def S5{"S5", 1024, 1024, 8, 8, 64, false, true};
constexpr attn_def S5_rope{"S5-rope", 2048, 2048, 32, 8, 128, true, false};
constexpr attn_def S6{"S6", 1, 8192, 32, 8, 128, true, false};
/// A short decode (200 cached tokens): with threads = 2 it stays on the caller's thread (too little work).
constexpr attn_def S6_short{"S6-200", 1, 200, 32, 8, 128, true, false};

struct attn_data {
    aligned_vector q, k, v, out, lq, lk, lv;  // l*: one dense head for the limit GEMM
    explicit attn_data(const attn_def& s)
        : q(s.Tq * s.Hq * s.D), k(s.Tk * s.Hkv * s.D), v(s.Tk * s.Hkv * s.D), out(s.Tq * s.Hq * s.D),
          lq(s.Tk * s.D), lk(s.Tk * s.D), lv(s.Tk * s.D) {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 97) * 0.02f - 0.96f;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 89) * 0.02f - 0.88f;
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 83) * 0.02f - 0.82f;
        for (std::size_t i = 0; i < lq.size(); ++i) lq[i] = lk[i] = lv[i] = static_cast<float>(i % 79) * 0.02f - 0.78f;
    }
};

attn_data& data_for(const attn_def& s) {
    static std::map<std::string, attn_data> all;
    auto it = all.find(s.name);
    if (it == all.end()) it = all.emplace(s.name, attn_data(s)).first;
    return it->second;
}

/// 4·Hq·D per visible (query, key) pair; causal: query t (at position Tk − Tq + t) sees Tk − Tq + t + 1 keys.
double useful_flops(const attn_def& s) {
    double pairs = 0;
    for (std::size_t t = 0; t < s.Tq; ++t) pairs += static_cast<double>(s.Tk - s.Tq + t + 1);
    return 4.0 * static_cast<double>(s.Hq * s.D) * pairs;
}

enum class rope_variant { on_the_fly, table, prerotated, head_major, token_major };
/// FMA rounds per peak measurement: ~0.2-0.5 ms on one AVX-512 core, timed next to every kernel run.
constexpr std::size_t fma_peak_iterations = 100000;

/// K and V converted to 16 bits once (the prefill rows' inputs).
template <class H>
struct kv16_data {
    std::vector<H> k, v;
    explicit kv16_data(const attn_data& b) : k(b.k.size()), v(b.v.size()) {
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = H(b.k[i]);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = H(b.v[i]);
    }
};
template <class H>
kv16_data<H>& kv16_for(const attn_def& s) {
    static std::map<std::string, kv16_data<H>> all;
    auto it = all.find(s.name);
    if (it == all.end()) it = all.emplace(s.name, kv16_data<H>(data_for(s))).first;
    return it->second;
}

/// The caller's pool of attention/S6*/executor:pool2 (one worker and the caller, as rope's executor rows).
pool& attention_pool() {
    static pool workers(1);
    return workers;
}

template <class H = float>
void attention_bench(benchmark::State& state, const attn_def& s, unsigned threads, rope_variant rv, bool pooled = false) {
    auto& b = data_for(s);
    using clock = std::chrono::steady_clock;
    constexpr bool half = !std::is_same_v<H, float>;
    const posenc::rotary<posenc::half_split> rope({.head_dim = s.D}, posenc::default_rope{});
    const auto table = rope.table(static_cast<std::int64_t>(s.Tk));
    const posenc::alibi_bias alibi({.heads = s.Hq, .max_bias = 8});
    const auto qpos = posenc::position_ids::consecutive(static_cast<std::int64_t>(s.Tk - s.Tq), s.Tq);
    const auto kpos = posenc::position_ids::consecutive(0, s.Tk);
    auto Q = posenc::heads_view<float>(std::span<float>(b.q), {s.Tq, s.Hq, s.D});
    // head_major: the cache laid out [Hkv][Tk][D] (token stride D, head stride Tk·D): each kv head's
    // rows are contiguous, instead of a token stride of Hkv·D (4 KiB at 8 heads of 128).
    const posenc::heads_strides kv_strides =
        rv == rope_variant::head_major ? posenc::heads_strides{s.D, s.Tk * s.D} : posenc::heads_strides{};
    auto K = posenc::heads_view<float>(std::span<float>(b.k), {s.Tk, s.Hkv, s.D}, kv_strides);
    auto V = posenc::heads_view<float>(std::span<float>(b.v), {s.Tk, s.Hkv, s.D}, kv_strides);
    auto O = posenc::heads_view<float>(std::span<float>(b.out), {s.Tq, s.Hq, s.D});
    aligned_vector kcopy(rv == rope_variant::prerotated ? b.k.size() : 0);
    const bool decode = s.Tq == 1;
    // S6 proper: a kv_cache filled once (untimed) with the keys rotated at their positions.
    std::optional<posenc::kv_cache<posenc::rotary<posenc::half_split>, H>> cache;
    if (decode && rv == rope_variant::on_the_fly) {
        cache.emplace(rope, posenc::kv_cache_shape{.kv_heads = s.Hkv, .head_dim = s.D, .capacity = s.Tk});
        cache->append(K, V, kpos);
    }
    auto kernel = [&] {
        posenc::attention_options opt{.threads = threads};
        if (pooled)
            opt.executor = [](std::size_t n, const std::function<void(std::size_t)>& task) { attention_pool().run(n, task); };
        if constexpr (half) {
            if (cache) {
                posenc::attention(posenc::attention_encoding{rope}, Q, *cache, O, qpos, posenc::causal_mask{}, opt);
            } else {  // prefill over 16-bit K and V
                auto& h = kv16_for<H>(s);
                const posenc::heads_view<const H> Kh(h.k.data(), {s.Tk, s.Hkv, s.D}), Vh(h.v.data(), {s.Tk, s.Hkv, s.D});
                if (s.alibi)
                    posenc::attention(posenc::attention_encoding{posenc::nope{}, alibi}, Q, Kh, Vh, O, qpos, kpos,
                                      posenc::causal_mask{}, opt);
                else
                    posenc::attention(posenc::attention_encoding{posenc::table_transform{rope, table}}, Q, Kh, Vh, O, qpos,
                                      kpos, posenc::causal_mask{}, opt);
            }
        } else if (s.alibi) {
            posenc::attention(posenc::attention_encoding{posenc::nope{}, alibi}, Q, K, V, O, qpos, kpos, posenc::causal_mask{}, opt);
        } else if (cache) {
            posenc::attention(posenc::attention_encoding{rope}, Q, *cache, O, qpos, posenc::causal_mask{}, opt);
        } else if (decode) {  // the buffer holds rotated keys: only the query is rotated
            opt.keys_transformed = true;
            posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, qpos, kpos, posenc::causal_mask{}, opt);
        } else if (rv == rope_variant::table) {
            posenc::attention(posenc::attention_encoding{posenc::table_transform{rope, table}}, Q, K, V, O, qpos, kpos,
                              posenc::causal_mask{}, opt);
        } else if (rv == rope_variant::prerotated) {
            std::copy(b.k.begin(), b.k.end(), kcopy.begin());
            auto Kc = posenc::heads_view<float>(std::span<float>(kcopy), {s.Tk, s.Hkv, s.D});
            rope.apply(table, Kc, kpos);
            opt.keys_transformed = true;
            posenc::attention(posenc::attention_encoding{rope}, Q, Kc, V, O, qpos, kpos, posenc::causal_mask{}, opt);
        } else {
            posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, qpos, kpos, posenc::causal_mask{}, opt);
        }
    };
    // The bytes decode reads: the cache's storage (capacity = Tk) in its element type.
    const double kv_bytes = static_cast<double>((b.k.size() + b.v.size()) * sizeof(H));
    double limit_seconds = 0, kernel_seconds = 0, limit_work = 0, peak_seconds = 0, peak_flops = 0;
    float sink = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        if (decode) {  // a read pass over the same bytes (16-bit storage read as floats of the same bytes)
            const void* kr = cache ? static_cast<const void*>(cache->key_storage().data()) : b.k.data();
            const void* vr = cache ? static_cast<const void*>(cache->value_storage().data()) : b.v.data();
            const std::size_t floats = b.k.size() * sizeof(H) / sizeof(float);
            if (pooled) {  // on the pool's threads, as the kernel (OpenMP's spinning workers would take its core)
                float part[2] = {};
                attention_pool().run(2, [&](std::size_t half_index) {
                    for (const void* base : {kr, vr}) {
                        const float* f = static_cast<const float*>(base) + floats * half_index / 2;
                        part[half_index] += posenc_bench::read_pass(f, floats * (half_index + 1) / 2 - floats * half_index / 2, 1);
                    }
                });
                sink += part[0] + part[1];
            } else {
                sink += posenc_bench::read_pass(static_cast<const float*>(kr), floats, threads);
                sink += posenc_bench::read_pass(static_cast<const float*>(vr), floats, threads);
            }
            limit_work += kv_bytes;
        } else {
            limit_work += posenc_bench::gemm_pass(b.lq.data(), b.lk.data(), b.lv.data(), s.Tk, s.D, s.D, threads);
        }
        benchmark::ClobberMemory();
        const auto t1 = clock::now();
        kernel();
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        if (!decode) peak_flops += posenc_bench::fma_peak_pass(fma_peak_iterations, threads);
        const auto t3 = clock::now();
        limit_seconds += std::chrono::duration<double>(t1 - t0).count();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
        peak_seconds += std::chrono::duration<double>(t3 - t2).count();
        state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
    }
    benchmark::DoNotOptimize(sink);
    const double iters = static_cast<double>(state.iterations());
    if (decode) {
        state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes * iters));
        if (kernel_seconds > 0) state.counters["limit_fraction"] = (kv_bytes * iters / kernel_seconds) / (limit_work / limit_seconds);
    } else {
        state.counters["FLOP/s"] = benchmark::Counter(useful_flops(s), benchmark::Counter::kIsIterationInvariantRate);
        if (kernel_seconds > 0) {
            state.counters["limit_fraction"] = (useful_flops(s) * iters / kernel_seconds) / (limit_work / limit_seconds);
            state.counters["fma_fraction"] = (useful_flops(s) * iters / kernel_seconds) / (peak_flops / peak_seconds);
        }
    }
}

void attention_limit(benchmark::State& state, const attn_def& s, unsigned threads) {
    auto& b = data_for(s);
    double work = 0;
    float sink = 0;
    for (auto _ : state) {
        if (s.Tq == 1) {
            sink += posenc_bench::read_pass(b.k.data(), b.k.size(), threads);
            sink += posenc_bench::read_pass(b.v.data(), b.v.size(), threads);
            work += static_cast<double>((b.k.size() + b.v.size()) * sizeof(float));
        } else {
            work += posenc_bench::gemm_pass(b.lq.data(), b.lk.data(), b.lv.data(), s.Tk, s.D, s.D, threads);
        }
        benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(sink);
    if (s.Tq == 1)
        state.SetBytesProcessed(static_cast<std::int64_t>(work));
    else
        state.counters["FLOP/s"] = benchmark::Counter(work, benchmark::Counter::kIsRate);
}

void attention_naive(benchmark::State& state, const attn_def& s) {
    auto& b = data_for(s);
    const posenc::rotary<posenc::half_split> rope({.head_dim = s.D}, posenc::default_rope{});
    const auto slopes = posenc::alibi_slopes(s.Hq, 8.0);
    aligned_vector q(b.q.size()), k(b.k.size());
    for (auto _ : state) {
        const float* qp = b.q.data();
        const float* kp = b.k.data();
        if (s.rope) {  // rotate copies of Q and K first, as a user would
            std::copy(b.q.begin(), b.q.end(), q.begin());
            std::copy(b.k.begin(), b.k.end(), k.begin());
            rope.apply(posenc::heads_view<float>(std::span<float>(q), {s.Tq, s.Hq, s.D}),
                       posenc::position_ids::consecutive(static_cast<std::int64_t>(s.Tk - s.Tq), s.Tq));
            rope.apply(posenc::heads_view<float>(std::span<float>(k), {s.Tk, s.Hkv, s.D}),
                       posenc::position_ids::consecutive(0, s.Tk));
            qp = q.data();
            kp = k.data();
        }
        posenc_bench::naive_attention(qp, kp, b.v.data(), b.out.data(), s.Tq, s.Tk, s.Hq, s.Hkv, s.D, s.D,
                                      s.alibi ? slopes.data() : nullptr, true, static_cast<float>(1.0 / std::sqrt(double(s.D))));
        benchmark::ClobberMemory();
    }
    state.counters["FLOP/s"] = benchmark::Counter(useful_flops(s), benchmark::Counter::kIsIterationInvariantRate);
}

// eigen-tiles/S5: the tiled online-softmax attention with Eigen GEMMs for the tile products (the design
// the attention issue named first), timed alternately with posenc's kernel on the same S5 inputs.
// Counters: FLOP/s (useful FLOPs, as attention/S5), posenc_speedup (Eigen-tiles time ÷ posenc time)
// and max_abs_diff (the two outputs, so that both compute the same attention).
void attention_eigen_tiles(benchmark::State& state) {
    const attn_def& s = S5;
    auto& b = data_for(s);
    using clock = std::chrono::steady_clock;
    const auto slopes = posenc::alibi_slopes(s.Hq, 8.0);
    const posenc::alibi_bias alibi({.heads = s.Hq, .max_bias = 8});
    auto Q = posenc::heads_view<float>(std::span<float>(b.q), {s.Tq, s.Hq, s.D});
    auto K = posenc::heads_view<float>(std::span<float>(b.k), {s.Tk, s.Hkv, s.D});
    auto V = posenc::heads_view<float>(std::span<float>(b.v), {s.Tk, s.Hkv, s.D});
    aligned_vector eigen_out(b.out.size());
    auto O = posenc::heads_view<float>(std::span<float>(b.out), {s.Tq, s.Hq, s.D});
    const auto pos = posenc::position_ids::consecutive(0, s.Tk);
    double eigen_seconds = 0, posenc_seconds = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        posenc_bench::tiled_attention(b.q.data(), b.k.data(), b.v.data(), eigen_out.data(), s.Tq, s.Tk, s.Hq, s.Hkv, s.D, s.D,
                                      slopes.data(), true, static_cast<float>(1.0 / std::sqrt(double(s.D))));
        benchmark::ClobberMemory();
        const auto t1 = clock::now();
        posenc::attention(posenc::attention_encoding{posenc::nope{}, alibi}, Q, K, V, O, pos, pos, posenc::causal_mask{});
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        eigen_seconds += std::chrono::duration<double>(t1 - t0).count();
        posenc_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    }
    float diff = 0;
    for (std::size_t i = 0; i < b.out.size(); ++i) diff = std::max(diff, std::abs(b.out[i] - eigen_out[i]));
    state.counters["FLOP/s"] = benchmark::Counter(useful_flops(s), benchmark::Counter::kIsIterationInvariantRate);
    if (posenc_seconds > 0) state.counters["posenc_speedup"] = eigen_seconds / posenc_seconds;
    state.counters["max_abs_diff"] = diff;
}

// kv_cache/append: S1's K and a V of the same shape appended to an empty cache (K rotated on the way in, one
// read and one write), against a copy pass of the same bytes (K and V, source to a separate buffer),
// timed alternately. bytes/s counts read + written.
// In a 16-bit cache (kv_cache/append-bf16, -fp16) each value is read as a float and written as 16 bits;
// the limit then reads the same floats and writes the same 16-bit bytes, truncating (narrow16_pass).
template <class H = float>
void kv_cache_append(benchmark::State& state, unsigned threads) {
    auto& b = s1_buffers();
    static aligned_vector v(b.k.size(), 0.5f), copy_dst(2 * b.k.size());
    static std::vector<std::uint16_t> narrow_dst(2 * b.k.size());
    posenc::rotary<posenc::half_split> rope({.head_dim = S1_head_dim}, posenc::default_rope{.base = 10000});
    rope.set_threads(threads);
    posenc::kv_cache<posenc::rotary<posenc::half_split>, H> cache(
        rope, {.kv_heads = S1_kv_heads, .head_dim = S1_head_dim, .capacity = S1_tokens});
    const posenc::heads_view<const float> K(b.k.data(), {S1_tokens, S1_kv_heads, S1_head_dim});
    const posenc::heads_view<const float> V(v.data(), {S1_tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    const double bytes = static_cast<double>((b.k.size() + v.size()) * (sizeof(float) + sizeof(H)));
    paired(
        state, bytes,
        [&](bool prefetch) {
            if constexpr (std::is_same_v<H, float>) {
                posenc_bench::copy_pass(b.k.data(), copy_dst.data(), b.k.size(), threads, prefetch);
                posenc_bench::copy_pass(v.data(), copy_dst.data() + b.k.size(), v.size(), threads, prefetch);
            } else {
                posenc_bench::narrow16_pass(b.k.data(), narrow_dst.data(), b.k.size(), threads, prefetch);
                posenc_bench::narrow16_pass(v.data(), narrow_dst.data() + b.k.size(), v.size(), threads, prefetch);
            }
        },
        [&] {
            cache.clear();
            cache.append(K, V, pos);
        });
    benchmark::DoNotOptimize(cache.key_storage().data());
}

void register_attention() {
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        for (const attn_def* s : {&S5, &S5_rope, &S6}) {
            benchmark::RegisterBenchmark((std::string("limit/") + s->name + th).c_str(),
                                         [s, t](benchmark::State& st) { attention_limit(st, *s, t); })
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            benchmark::RegisterBenchmark((std::string("attention/") + s->name + th).c_str(),
                                         [s, t](benchmark::State& st) { attention_bench(st, *s, t, rope_variant::on_the_fly); })
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime();
        }
        benchmark::RegisterBenchmark(("attention/S6-200" + th).c_str(),
                                     [t](benchmark::State& st) { attention_bench(st, S6_short, t, rope_variant::on_the_fly); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        if (t == 2) {  // decode on the caller's pool (opt.executor)
            benchmark::RegisterBenchmark("attention/S6-200/executor:pool2",
                                         [](benchmark::State& st) { attention_bench(st, S6_short, 2, rope_variant::on_the_fly, true); })
                ->Unit(benchmark::kMicrosecond)
                ->UseManualTime();
            benchmark::RegisterBenchmark("attention/S6/executor:pool2",
                                         [](benchmark::State& st) { attention_bench(st, S6, 2, rope_variant::on_the_fly, true); })
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime();
            benchmark::RegisterBenchmark("attention/S6-bf16/executor:pool2", [](benchmark::State& st) {
                attention_bench<posenc::bf16>(st, S6, 2, rope_variant::on_the_fly, true);
            })->Unit(benchmark::kMillisecond)->UseManualTime();
        }
        for (const attn_def* s : {&S5, &S5_rope, &S6}) {
            benchmark::RegisterBenchmark((std::string("attention/") + s->name + "-bf16" + th).c_str(),
                                         [s, t](benchmark::State& st) { attention_bench<posenc::bf16>(st, *s, t, rope_variant::on_the_fly); })
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime();
            benchmark::RegisterBenchmark((std::string("attention/") + s->name + "-fp16" + th).c_str(),
                                         [s, t](benchmark::State& st) { attention_bench<posenc::fp16>(st, *s, t, rope_variant::on_the_fly); })
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime();
        }
        benchmark::RegisterBenchmark(("attention/S5-rope-table" + th).c_str(),
                                     [t](benchmark::State& st) { attention_bench(st, S5_rope, t, rope_variant::table); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("attention/S6-token-major" + th).c_str(),
                                     [t](benchmark::State& st) { attention_bench(st, S6, t, rope_variant::token_major); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("kv_cache/append" + th).c_str(), [t](benchmark::State& st) { kv_cache_append(st, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("kv_cache/append-bf16" + th).c_str(),
                                     [t](benchmark::State& st) { kv_cache_append<posenc::bf16>(st, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("kv_cache/append-fp16" + th).c_str(),
                                     [t](benchmark::State& st) { kv_cache_append<posenc::fp16>(st, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("attention/S6-head-major" + th).c_str(),
                                     [t](benchmark::State& st) { attention_bench(st, S6, t, rope_variant::head_major); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("attention/S5-rope-prerotated" + th).c_str(),
                                     [t](benchmark::State& st) { attention_bench(st, S5_rope, t, rope_variant::prerotated); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
    }
    benchmark::RegisterBenchmark("eigen-tiles/S5", attention_eigen_tiles)->Unit(benchmark::kMillisecond)->UseManualTime();
    for (const attn_def* s : {&S5, &S5_rope, &S6})
        benchmark::RegisterBenchmark((std::string("naive/") + s->name).c_str(),
                                     [s](benchmark::State& st) { attention_naive(st, *s); })
            ->Unit(benchmark::kMillisecond);
}

/// Google Benchmark's own output (console, JSON or CSV, as --benchmark_format says) on stdout, then
/// one summary table on stderr, so that --benchmark_format=json output stays valid JSON.
template <class Base>
class summary_reporter : public Base {
public:
    using Run = benchmark::BenchmarkReporter::Run;
    void ReportRuns(const std::vector<Run>& runs) override {
        Base::ReportRuns(runs);
        for (const auto& r : runs) {
            if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
            const auto bps = r.counters.find("bytes_per_second");
            const auto flops = r.counters.find("FLOP/s");
            const auto frac = r.counters.find("limit_fraction");
            const auto fma = r.counters.find("fma_fraction");
            std::string name = r.run_name.str();  // without Google Benchmark's timing suffix
            for (const char* suffix : {"/manual_time", "/real_time"})
                if (const auto at = name.find(suffix); at != std::string::npos) name.erase(at, std::string(suffix).size());
            // A benchmark that reported an error has no aggregates: one row for its repetitions.
            if (r.GetAdjustedRealTime() <= 0 && !rows_.empty() && rows_.back().name == name && rows_.back().time <= 0) continue;
            rows_.push_back({name, r.GetAdjustedRealTime(), benchmark::GetTimeUnitString(r.time_unit),
                             bps == r.counters.end() ? 0.0 : double(bps->second) / 1e9,
                             flops == r.counters.end() ? 0.0 : double(flops->second) / 1e9,
                             frac == r.counters.end() ? -1.0 : double(frac->second),
                             fma == r.counters.end() ? -1.0 : double(fma->second)});
        }
    }
    void Finalize() override {
        Base::Finalize();
        std::fprintf(stderr, "\nposenc-bench summary (kernels: %s, 16-bit prefetch %s, attention: %s; limits: x <- a*x over "
                             "the same Q and K, a copy, each the faster of prefetching and plain; Eigen GEMMs; a read pass)\n",
                     posenc::simd::active_arch_name(), posenc::simd::prefetch_16bit() ? "on" : "off",
                     posenc::simd::attention_kernels().arch);
        std::fprintf(stderr, "%-38s %12s %10s %10s %15s %13s\n", "benchmark", "time", "GB/s", "GFLOP/s", "limit_fraction",
                     "fma_fraction");
        for (const auto& row : rows_) {
            char frac[32] = "", gb[32] = "", gf[32] = "", fma[32] = "";
            if (row.fraction >= 0) std::snprintf(frac, sizeof frac, "%.2f", row.fraction);
            if (row.fma_fraction >= 0) std::snprintf(fma, sizeof fma, "%.2f", row.fma_fraction);
            if (row.gbps > 0) std::snprintf(gb, sizeof gb, "%.1f", row.gbps);
            if (row.gflops > 0) std::snprintf(gf, sizeof gf, "%.1f", row.gflops);
            if (row.time <= 0) {  // the benchmark reported an error (printed above) instead of a time
                std::fprintf(stderr, "%-38s %12s\n", row.name.c_str(), "error");
                continue;
            }
            std::fprintf(stderr, "%-38s %9.2f %-2s %10s %10s %15s %13s\n", row.name.c_str(), row.time, row.unit.c_str(), gb,
                         gf, frac, fma);
        }
    }

private:
    struct row {
        std::string name;
        double time;
        std::string unit;
        double gbps, gflops, fraction, fma_fraction;
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
    for (bool interleaved : {false, true})
        for (bool table_rows : {true, false})
            benchmark::RegisterBenchmark((std::string(interleaved ? "rope/S1-mrope-interleaved" : "rope/S1-mrope") +
                                          "/half_split" + (table_rows ? "" : "/on-the-fly"))
                                             .c_str(),
                                         [interleaved, table_rows](benchmark::State& st) {
                                             rope_s1_mrope(st, interleaved, table_rows);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->UseManualTime();
    benchmark::RegisterBenchmark("table/S4", table_s4)->Unit(benchmark::kMillisecond);
    register_attention();
    benchmark::RegisterBenchmark("threads/spawn-join", spawn_join)->Unit(benchmark::kMicrosecond)->UseRealTime();

    // The format Google Benchmark would pick (its flag is parsed by Initialize, which removes it).
    std::string format = "console";
    for (int i = 1; i < argc; ++i)
        if (std::string a = argv[i]; a.rfind("--benchmark_format=", 0) == 0) format = a.substr(19);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (format == "json") {
        summary_reporter<benchmark::JSONReporter> reporter;
        benchmark::RunSpecifiedBenchmarks(&reporter);
    } else if (format != "console") {
        benchmark::RunSpecifiedBenchmarks();  // csv: Google Benchmark's own reporter, no summary
    } else {
        summary_reporter<benchmark::ConsoleReporter> reporter;
        benchmark::RunSpecifiedBenchmarks(&reporter);
    }
    benchmark::Shutdown();
}
