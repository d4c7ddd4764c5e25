// posenc-bench's attention family: prefill (S5: ALiBi; S5-rope: RoPE on the fly, from a table, or keys
// rotated first) and decode (S6 over a kv_cache, plain buffers, a caller's pool, 16-bit K and V)
// against Eigen GEMMs, a read pass and the core's FMA peak measured in the same run; the naive and
// Eigen-tiled baselines; and kv_cache::append against a copy of the same bytes.
#include "harness.hpp"

#include <map>
#include <optional>
#include <type_traits>

#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>

#include "attention_limit.hpp"

namespace posenc_bench {
namespace {

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
/// S6's heads per kv head and head size over a 16-bit cache of 512 KiB, which stays in an L2 of 1 MiB
/// or more (Zen 4/5, Intel server cores): decode's arithmetic without its read from memory
/// (fma_fraction is the row's point; limit_fraction is against a read pass from L2).
constexpr attn_def S6_L2{"S6-L2", 1, 512, 8, 2, 128, true, false};

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
/// FMA rounds per peak measurement: ~0.2-0.5 ms on one AVX-512 core, timed next to every kernel run;
/// a fifth of that next to decode on the benchmark's own threads (its kernels take 0.015–3 ms).
constexpr std::size_t fma_peak_iterations = 100000, decode_fma_peak_iterations = 20000;

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
void attention_bench(benchmark::State& state, const attn_def& s, unsigned threads, rope_variant rv, bool pooled = false,
                     bool with_workspace = false) {
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
    posenc::attention_workspace workspace;  // used by the /workspace rows: tile buffers kept between calls
    auto kernel = [&] {
        posenc::attention_options opt{.threads = threads};
        if (with_workspace) opt.workspace = &workspace;
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
    // S6-200 is below attention's work threshold: its kernel runs on the caller's thread whatever
    // `threads` asks, so its limits are one thread's too.
    const unsigned limit_threads = &s == &S6_short ? 1 : threads;
    const bool limit_pooled = pooled && limit_threads > 1;
    double limit_seconds = 0, kernel_seconds = 0, limit_work = 0, peak_rate_sum = 0;
    float sink = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        if (decode) {  // a read pass over the same bytes (16-bit storage read as floats of the same bytes)
            const void* kr = cache ? static_cast<const void*>(cache->key_storage().data()) : b.k.data();
            const void* vr = cache ? static_cast<const void*>(cache->value_storage().data()) : b.v.data();
            const std::size_t floats = b.k.size() * sizeof(H) / sizeof(float);
            if (limit_pooled) {  // on the pool's threads, as the kernel (OpenMP's spinning workers would take its core)
                float part[2] = {};
                attention_pool().run(2, [&](std::size_t half_index) {
                    for (const void* base : {kr, vr}) {
                        const float* f = static_cast<const float*>(base) + floats * half_index / 2;
                        part[half_index] += posenc_bench::read_pass(f, floats * (half_index + 1) / 2 - floats * half_index / 2, 1);
                    }
                });
                sink += part[0] + part[1];
            } else {
                sink += posenc_bench::read_pass(static_cast<const float*>(kr), floats, limit_threads);
                sink += posenc_bench::read_pass(static_cast<const float*>(vr), floats, limit_threads);
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
        if (limit_pooled) {  // on the pool's threads, as the read pass: each half timed by itself, the rates
            // added (a half the caller runs after its own, before the worker wakes, still counts as a thread's)
            double rate[2] = {};
            attention_pool().run(2, [&](std::size_t half_index) {
                const auto p0 = clock::now();
                const double flops = posenc_bench::fma_peak_pass(fma_peak_iterations, 1, posenc_bench::attention_on_avx512());
                rate[half_index] = flops / std::chrono::duration<double>(clock::now() - p0).count();
            });
            peak_rate_sum += rate[0] + rate[1];
        } else {
            const double flops = posenc_bench::fma_peak_pass(decode ? decode_fma_peak_iterations : fma_peak_iterations,
                                                             limit_threads, posenc_bench::attention_on_avx512());
            peak_rate_sum += flops / std::chrono::duration<double>(clock::now() - t2).count();
        }
        limit_seconds += std::chrono::duration<double>(t1 - t0).count();
        kernel_seconds += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
    }
    benchmark::DoNotOptimize(sink);
    const double iters = static_cast<double>(state.iterations());
    // Decode is bound by the read of the cache or by its FMAs, whichever takes longer (16-bit K/V
    // halve the bytes, not the FLOPs): it reports both ratios; the larger is the fraction of that
    // combined bound reached (1 = at it, with the read and the FMAs fully overlapped).
    state.counters["FLOP/s"] = benchmark::Counter(useful_flops(s), benchmark::Counter::kIsIterationInvariantRate);
    if (decode) state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes * iters));
    if (kernel_seconds > 0) {
        const double work = decode ? kv_bytes : useful_flops(s);
        state.counters["limit_fraction"] = (work * iters / kernel_seconds) / (limit_work / limit_seconds);
        state.counters["fma_fraction"] = (useful_flops(s) * iters / kernel_seconds) / (peak_rate_sum / iters);
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

}  // namespace

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
        if (t == 1)  // the same calls keeping their tile buffers in an attention_workspace
            benchmark::RegisterBenchmark("attention/S6-200/workspace", [](benchmark::State& st) {
                attention_bench(st, S6_short, 1, rope_variant::on_the_fly, false, true);
            })->Unit(benchmark::kMicrosecond)->UseManualTime();
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
        if (t == 1) {  // through a workspace: no per-call allocation in the time
            benchmark::RegisterBenchmark("attention/S6-L2-bf16/threads:1", [](benchmark::State& st) {
                attention_bench<posenc::bf16>(st, S6_L2, 1, rope_variant::on_the_fly, false, true);
            })->Unit(benchmark::kMicrosecond)->UseManualTime();
            benchmark::RegisterBenchmark("attention/S6-L2-fp16/threads:1", [](benchmark::State& st) {
                attention_bench<posenc::fp16>(st, S6_L2, 1, rope_variant::on_the_fly, false, true);
            })->Unit(benchmark::kMicrosecond)->UseManualTime();
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

}  // namespace posenc_bench
