// posenc-bench's rotary family: the in-place limit pass, the scalar loop a user writes first, posenc's
// rotary over S1..S4 (cached table, YaRN, per-token cos/sin, decode, the table build), the public
// call's overhead beyond its kernel, M-RoPE, and splitting S1 over a caller's executor.
#include "harness.hpp"

#include <optional>
#include <type_traits>

#include <posenc/rope/mrope.hpp>
#include <posenc/rope/mrope_positions.hpp>

namespace posenc_bench {
namespace {

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

// ---- threads: what a call pays to split -------------------------------------------------------------

void spawn_join(benchmark::State& state) {
    for (auto _ : state) {
        std::thread t([] { benchmark::ClobberMemory(); });
        t.join();
    }
}

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
    // while after each region, and on a 2-vCPU machine they took the executor's core.
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

}  // namespace

void register_limit_s1() {
    for (unsigned t : {1u, 2u})
        benchmark::RegisterBenchmark(("limit/S1/threads:" + std::to_string(t)).c_str(),
                                     [t](benchmark::State& s) { limit_s1(s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
}

template <class Layout>
void register_rotary(const std::string& name) {
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
}

template <class Layout>
void register_rotary_executors(const std::string& name) {
    for (bool persistent : {false, true})
        benchmark::RegisterBenchmark(("rope/S1/" + name + (persistent ? "/executor:pool2" : "/executor:spawn2")).c_str(),
                                     [persistent](benchmark::State& s) { rope_s1_executor<Layout>(s, persistent); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
}

template void register_rotary<posenc::half_split>(const std::string&);
template void register_rotary<posenc::interleaved>(const std::string&);
template void register_rotary_executors<posenc::half_split>(const std::string&);
template void register_rotary_executors<posenc::interleaved>(const std::string&);

void register_mrope() {
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
}

void register_table() { benchmark::RegisterBenchmark("table/S4", table_s4)->Unit(benchmark::kMillisecond); }

void register_threads() {
    benchmark::RegisterBenchmark("threads/spawn-join", spawn_join)->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace posenc_bench
