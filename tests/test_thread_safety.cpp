// Shared, immutable posenc objects (tables, schedules, rotaries, biases, sinusoidal, attention's
// inputs and encodings, a filled kv_cache read through attention) used from many
// std::threads at once, each thread with its own buffers: every thread's result must equal a
// single-thread run bit for bit. The tests are tagged [concurrency]; they are also built alone without
// OpenMP (posenc-thread-tests, the std::thread path of core/detail/parallel.hpp), which .ci/run runs again
// under ThreadSanitizer.
// Each test starts its threads together (support/concurrency.hpp) so that first uses (xsimd's CPU
// detection, the dispatchers) race as they would in a server that starts many workers at once.
// The 16-bit K/V, kv_cache and attention_partial cases are in test_thread_safety_16bit.cpp.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <cstring>

#include "support/catch.hpp"
#include "support/concurrency.hpp"
#include "support/reference.hpp"

#if defined(POSENC_TEST_STD_THREADS) && defined(_OPENMP)
#error "posenc-thread-tests must be built without OpenMP: it tests the std::thread path"
#endif

using posenc_test::on_threads;
using posenc_test::random_floats;
using posenc_test::require_all_equal;

namespace {

constexpr unsigned workers = posenc_test::concurrent_workers;

// 128 tokens × (8 + 2) heads × 128 lanes = 163840 floats: with set_threads(2) each call also splits
// its tokens across two threads of its own (nested inside the workers).
constexpr std::size_t RT = 128, RHQ = 8, RHK = 2, RD = 128;

template <class Rope>
std::vector<float> rope_work(const Rope& rope, const posenc::cos_sin_table& table, unsigned seed) {
    auto q = random_floats(RT * RHQ * RD, 100 + seed), k = random_floats(RT * RHK * RD, 200 + seed);
    posenc::heads_view<float> qv(std::span<float>(q), {RT, RHQ, RD}), kv(std::span<float>(k), {RT, RHK, RD});
    std::vector<std::int64_t> pos64(RT);
    std::vector<std::int32_t> pos32(RT);
    for (std::size_t t = 0; t < RT; ++t) {
        pos64[t] = static_cast<std::int64_t>((t * 37 + seed) % 4096);
        pos32[t] = static_cast<std::int32_t>((t * 11 + 3 * seed) % 4096);
    }
    rope.apply(qv, kv, posenc::position_ids::consecutive(1000 + seed, RT));  // on the fly, recurrence
    rope.apply(table, qv, kv, pos64);                                       // table, int64
    rope.apply(qv, kv, pos32, posenc::rotation::inverse);                   // on the fly, int32, inverse
    rope.apply(table, qv, posenc::position_ids::consecutive(7, RT), posenc::rotation::inverse);
    rope.shift(kv, -static_cast<std::int64_t>(seed) - 5);
    q.insert(q.end(), k.begin(), k.end());
    return q;
}

template <class Layout>
void check_shared_rotary() {
    const posenc::yarn schedule{.base = 500000, .factor = 4, .original_max_position = 8192};
    posenc::rotary<Layout> rope({.head_dim = RD}, schedule);
    const auto table = rope.table(4096);
    rope.set_threads(1);
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(rope_work(rope, table, i));
    rope.set_threads(2);  // set before sharing: set_threads is the one mutating call
    const auto got = on_threads([&](unsigned i) { return rope_work(rope, table, i); });
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

}  // namespace

TEST_CASE("one rotary and one table shared by many threads (each its own Q/K) give single-thread results",
          "[concurrency]") {
    check_shared_rotary<posenc::half_split>();
    check_shared_rotary<posenc::interleaved>();
}

TEST_CASE("any_rotary shared by many threads gives single-thread results", "[concurrency]") {
    for (auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
        posenc::any_rotary rope(layout, {.head_dim = RD, .rotary_dim = 96},
                                posenc::any_schedule{posenc::llama3{.base = 500000, .factor = 8, .original_max_position = 8192}});
        const auto table = rope.table(4096);
        std::vector<std::vector<float>> expected;
        for (unsigned i = 0; i < workers; ++i) expected.push_back(rope_work(rope, table, i));
        rope.set_threads(3);
        const auto got = on_threads([&](unsigned i) { return rope_work(rope, table, i); });
        CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
    }
}

TEST_CASE("schedules evaluated and tables built from many threads at once equal single-thread ones",
          "[concurrency]") {
    const posenc::dynamic_ntk dyn{.base = 10000, .factor = 2, .original_max_position = 2048};
    const posenc::longrope lr{.short_factor = std::vector<double>(32, 1.25), .long_factor = std::vector<double>(32, 4.0),
                              .original_max_position = 4096, .factor = 32};
    const posenc::any_schedule yarn{posenc::yarn{.base = 10000, .factor = 16, .original_max_position = 4096}};
    // Everything a worker derives from the shared schedules, as floats (inv_freq as doubles' bits).
    auto work = [&](unsigned i) {
        std::vector<float> out;
        auto append_freq = [&](const posenc::rope_frequencies& f) {
            const std::size_t at = out.size();
            out.resize(at + 2 * f.inv_freq.size());
            std::memcpy(out.data() + at, f.inv_freq.data(), f.inv_freq.size() * sizeof(double));
            out.push_back(static_cast<float>(f.attention_factor));
        };
        const std::int64_t len = 1000 + 2000 * static_cast<std::int64_t>(i);  // both sides of L₀
        append_freq(dyn.frequencies(64, len));
        append_freq(lr.frequencies(64, len));
        const auto f = posenc::frequencies(yarn, 64, len);
        append_freq(f);
        const posenc::cos_sin_table table(f, 3000);  // SIMD table build, dispatched
        out.insert(out.end(), table.data(), table.data() + 3000 * 64);
        return out;
    };
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(work(i));
    const auto got = on_threads(work);
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

TEST_CASE("xpos_rotary shared by many threads gives single-thread results", "[concurrency]") {
    const posenc::xpos_rotary<posenc::half_split> xh({.head_dim = 64}, posenc::xpos{.center = 2000});
    const posenc::xpos_rotary<posenc::interleaved> xi({.head_dim = 64}, posenc::xpos{.center = 2000});
    auto work = [&](unsigned i) {
        const std::size_t t = 40, h = 4;
        auto q = random_floats(t * h * 64, 300 + i), k = random_floats(t * h * 64, 400 + i);
        posenc::heads_view<float> qv(std::span<float>(q), {t, h, 64}), kv(std::span<float>(k), {t, h, 64});
        const auto pos = posenc::position_ids::consecutive(1990 + 3 * i, t);
        xh.apply(qv, kv, pos);
        xi.apply_queries(qv, pos);
        xi.apply_keys(kv, pos);
        q.insert(q.end(), k.begin(), k.end());
        return q;
    };
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(work(i));
    const auto got = on_threads(work);
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

TEST_CASE("alibi_bias, t5_bias and sinusoidal shared by many threads give single-thread results", "[concurrency]") {
    const posenc::alibi_bias causal({.heads = 12});
    const posenc::alibi_bias symmetric({.heads = 40, .form = posenc::alibi_form::symmetric});
    const auto t5_table = random_floats(32 * 8, 5);
    const posenc::t5_bias t5({.num_buckets = 32, .max_distance = 128, .bidirectional = false}, 8, t5_table);
    const posenc::sinusoidal pe{.d_model = 96};
    const posenc::sinusoidal pe_concat{.d_model = 33, .form = posenc::sinusoidal_form::concatenated};
    auto work = [&](unsigned i) {
        const std::size_t keys = 700;
        std::vector<float> out;
        std::vector<std::int64_t> scattered(keys);
        for (std::size_t j = 0; j < keys; ++j) scattered[j] = static_cast<std::int64_t>((j * 53 + i) % 1000);
        for (std::size_t head = 0; head < 8; ++head) {
            auto s = random_floats(keys, 500 + i);
            const auto query = static_cast<std::int64_t>(600 + 7 * i);
            causal.add_to_scores(head, query, posenc::position_ids::consecutive(0, keys), s);
            symmetric.add_to_scores(head + 30, query, scattered, s);
            t5.add_to_scores(head, query, posenc::position_ids::consecutive(100, keys), s);
            t5.add_to_scores(head, query, scattered, s);
            out.insert(out.end(), s.begin(), s.end());
        }
        auto emb = random_floats(50 * 100, 600 + i);
        pe.add_to(emb, posenc::position_ids::consecutive(i * 1000, 50), 100);
        out.insert(out.end(), emb.begin(), emb.end());
        const auto rows = pe_concat.table(posenc::position_ids::consecutive(i * 77, 64));
        out.insert(out.end(), rows.begin(), rows.end());
        const auto row = pe.row(123456789 + i);
        out.insert(out.end(), row.begin(), row.end());
        return out;
    };
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(work(i));
    const auto got = on_threads(work);
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

TEST_CASE("distinct rotaries set_threads'ed and used on many threads each (nested splits) are deterministic",
          "[concurrency]") {
    // Each worker owns its rotary (set_threads mutates, so it is not shared) and splits its call
    // across up to 4 threads of its own: 8 × 4 std::threads in flight, results as a 1-thread run.
    const posenc::rotary<posenc::half_split> reference({.head_dim = RD}, posenc::default_rope{.base = 10000});
    const auto table = reference.table(4096);
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(rope_work(reference, table, i));
    const auto got = on_threads([&](unsigned i) {
        posenc::rotary<posenc::half_split> own = reference;
        own.set_threads(1 + i % 4);
        return rope_work(own, table, i);
    });
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

namespace {

// Attention: Q [AT, AHQ, AD], K/V [AT, AHK, AD], one problem shared by every worker.
constexpr std::size_t AT = 96, AHQ = 8, AHK = 2, AD = 64;

/// Everything a worker computes with attention over the shared const Q/K/V (its own outputs):
/// RoPE + causal (1 and 2 threads inside the call), ALiBi + sliding window with softcap and sinks,
/// T5 + chunked with packed sequence ids, a table_transform, bf16 K/V, two partial results merged, and
/// a decode split across threads by key segments; the worker's seed picks positions.
std::vector<float> attention_work(const posenc::rotary<posenc::half_split>& rope, const posenc::cos_sin_table& table,
                                  const posenc::alibi_bias& alibi, const posenc::t5_bias& t5,
                                  const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<float>& sinks, const std::vector<std::int32_t>& seq, unsigned seed) {
    const posenc::heads_view<const float> Q(std::span<const float>(q), {AT, AHQ, AD}), K(std::span<const float>(k), {AT, AHK, AD}),
        V(std::span<const float>(v), {AT, AHK, AD});
    const auto pos = posenc::position_ids::consecutive(10 * seed, AT);
    std::vector<float> result;
    auto run = [&](auto&& call) {
        std::vector<float> out(AT * AHQ * AD, -1.0f);
        call(posenc::heads_view<float>(std::span<float>(out), {AT, AHQ, AD}));
        result.insert(result.end(), out.begin(), out.end());
    };
    run([&](posenc::heads_view<float> O) {
        posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, pos, pos, posenc::causal_mask{}, {.threads = 1 + seed % 2});
    });
    run([&](posenc::heads_view<float> O) {
        posenc::attention(posenc::attention_encoding{posenc::nope{}, alibi}, Q, K, V, O, pos, pos,
                          posenc::sliding_window_mask{.window = 17 + seed}, {.softcap = 30.0f, .sinks = sinks});
    });
    run([&](posenc::heads_view<float> O) {
        posenc::attention(posenc::attention_encoding{posenc::nope{}, t5, posenc::fixed_scale{0.2}}, Q, K, V, O, pos, pos,
                          posenc::chunked_mask{.chunk = 32}, {.query_sequence = seq, .key_sequence = seq, .threads = 2});
    });
    run([&](posenc::heads_view<float> O) {
        posenc::attention(posenc::attention_encoding{posenc::table_transform{rope, table}}, Q, K, V, O, pos, pos,
                          posenc::causal_mask{});
    });
    run([&](posenc::heads_view<float> O) {  // bf16 K and V, 2 threads
        std::vector<posenc::bf16> kb(k.size()), vb(v.size());
        for (std::size_t i = 0; i < k.size(); ++i) kb[i] = posenc::bf16(k[i]), vb[i] = posenc::bf16(v[i]);
        posenc::attention(posenc::attention_encoding{rope}, Q, posenc::heads_view<const posenc::bf16>(kb.data(), {AT, AHK, AD}),
                          posenc::heads_view<const posenc::bf16>(vb.data(), {AT, AHK, AD}), O, pos, pos, posenc::causal_mask{},
                          {.threads = 2});
    });
    run([&](posenc::heads_view<float> O) {  // two partial results, merged
        std::vector<float> a(AT * AHQ * AD), b(a.size()), la(AT * AHQ), lb(la.size());
        const posenc::heads_view<float> A(a.data(), {AT, AHQ, AD}), B(b.data(), {AT, AHQ, AD});
        const std::size_t h = AT / 3;
        posenc::attention_partial(posenc::attention_encoding{rope}, Q, K.tokens_slice(0, h), V.tokens_slice(0, h), A, la, pos,
                                  posenc::position_ids::consecutive(10 * seed, h), posenc::causal_mask{}, {.threads = 2});
        posenc::attention_partial(posenc::attention_encoding{rope}, Q, K.tokens_slice(h, AT - h), V.tokens_slice(h, AT - h), B,
                                  lb, pos, posenc::position_ids::consecutive(10 * seed + h, AT - h), posenc::causal_mask{});
        posenc::merge_attention_partials({{A, la}, {B, lb}}, O, {.sinks = sinks});
    });
    {  // decode over 2100 keys of one kv head, split across 2 threads by key segments
        static const auto long_k = random_floats(2100 * AD, 15), long_v = random_floats(2100 * AD, 16);
        const auto dq = random_floats(32 * AD, 17 + seed);
        std::vector<float> out(32 * AD);
        posenc::attention(posenc::attention_encoding{rope}, posenc::heads_view<const float>(dq.data(), {1, 32, AD}),
                          posenc::heads_view<const float>(long_k.data(), {2100, 1, AD}),
                          posenc::heads_view<const float>(long_v.data(), {2100, 1, AD}),
                          posenc::heads_view<float>(out.data(), {1, 32, AD}), posenc::position_ids::constant(2100, 1),
                          posenc::position_ids::consecutive(0, 2100), posenc::causal_mask{}, {.threads = 2});
        result.insert(result.end(), out.begin(), out.end());
    }
    return result;
}

}  // namespace

TEST_CASE("attention over shared const Q/K/V and shared encodings from many threads gives single-thread results",
          "[concurrency][attention]") {
    const posenc::rotary<posenc::half_split> rope({.head_dim = AD}, posenc::llama3{.base = 500000, .factor = 8,
                                                                                   .original_max_position = 8192});
    const auto table = rope.table(1024);
    const posenc::alibi_bias alibi({.heads = AHQ, .order = posenc::bias_order::add_then_scale});
    const auto t5_table = random_floats(32 * AHQ, 9);
    const posenc::t5_bias t5({.num_buckets = 32, .max_distance = 128, .bidirectional = true}, AHQ, t5_table);
    const auto q = random_floats(AT * AHQ * AD, 11), k = random_floats(AT * AHK * AD, 12), v = random_floats(AT * AHK * AD, 13);
    const auto sinks = random_floats(AHQ, 14);
    std::vector<std::int32_t> seq(AT);
    for (std::size_t t = 0; t < AT; ++t) seq[t] = static_cast<std::int32_t>(t / 40);  // three packed sequences
    auto work = [&](unsigned i) { return attention_work(rope, table, alibi, t5, q, k, v, sinks, seq, i); };
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(work(i));
    const auto got = on_threads(work);
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}

namespace {

constexpr std::size_t CT = 80, CH = 2, CD = 32, CG = 4;

/// A worker's own cache of the shared rotary: prefill in two appends, a context shift, then decode
/// steps; returns the cache's keys, values, positions and every decode output.
std::vector<float> own_cache_work(const posenc::rotary<posenc::interleaved>& rope, unsigned seed) {
    posenc::kv_cache cache(rope, {.kv_heads = CH, .head_dim = CD, .capacity = CT + 8});
    const auto k = random_floats(CT * CH * CD, 700 + seed), v = random_floats(CT * CH * CD, 800 + seed);
    const std::size_t first = 50 + seed;
    cache.append(posenc::heads_view<const float>(k.data(), {first, CH, CD}), posenc::heads_view<const float>(v.data(), {first, CH, CD}),
                 posenc::position_ids::consecutive(0, first));
    cache.append(posenc::heads_view<const float>(k.data() + first * CH * CD, {CT - first, CH, CD}),
                 posenc::heads_view<const float>(v.data() + first * CH * CD, {CT - first, CH, CD}),
                 posenc::position_ids::consecutive(static_cast<std::int64_t>(first), CT - first));
    cache.context_shift(4, 40 + seed);
    std::vector<float> result;
    for (std::size_t step = 0; step < 3; ++step) {
        const auto q = random_floats(CH * CG * CD, 900 + seed + step);
        std::vector<float> out(CH * CG * CD);
        posenc::attention(posenc::attention_encoding{cache.transform()},
                          posenc::heads_view<const float>(std::span<const float>(q), {1, CH * CG, CD}), cache,
                          posenc::heads_view<float>(std::span<float>(out), {1, CH * CG, CD}),
                          posenc::position_ids::consecutive(cache.next_position(), 1), posenc::causal_mask{});
        result.insert(result.end(), out.begin(), out.end());
        const auto kn = random_floats(CH * CD, 950 + seed + step), vn = random_floats(CH * CD, 990 + seed + step);
        cache.append(posenc::heads_view<const float>(kn.data(), {1, CH, CD}), posenc::heads_view<const float>(vn.data(), {1, CH, CD}),
                     posenc::position_ids::consecutive(cache.next_position(), 1));
    }
    result.insert(result.end(), cache.key_storage().begin(), cache.key_storage().end());
    result.insert(result.end(), cache.value_storage().begin(), cache.value_storage().end());
    for (std::int64_t p : cache.position_storage()) result.push_back(static_cast<float>(p));
    return result;
}

}  // namespace

TEST_CASE("kv_cache: one filled cache read by many threads at once, and a cache per thread, give single-thread results",
          "[concurrency][kv_cache]") {
    posenc::rotary<posenc::interleaved> rope({.head_dim = CD}, posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 64});
    // Shared: filled once, then only read (attention against a const cache), each worker its own Q and out.
    posenc::kv_cache shared(rope, {.kv_heads = CH, .head_dim = CD, .capacity = 128});
    const auto k = random_floats(CT * CH * CD, 21), v = random_floats(CT * CH * CD, 22);
    shared.append(posenc::heads_view<const float>(std::span<const float>(k), {CT, CH, CD}),
                  posenc::heads_view<const float>(std::span<const float>(v), {CT, CH, CD}), posenc::position_ids::consecutive(0, CT));
    const auto& cache = shared;
    auto read = [&](unsigned i) {
        const std::size_t tq = 1 + i % 3;  // decode and small chunks (both QKᵀ paths of the kernel)
        const auto q = random_floats(tq * CH * CG * CD, 30 + i);
        std::vector<float> out(tq * CH * CG * CD);
        posenc::attention(posenc::attention_encoding{cache.transform(), posenc::alibi_bias({.heads = CH * CG})},
                          posenc::heads_view<const float>(std::span<const float>(q), {tq, CH * CG, CD}), cache,
                          posenc::heads_view<float>(std::span<float>(out), {tq, CH * CG, CD}),
                          posenc::position_ids::consecutive(static_cast<std::int64_t>(CT) - 2 * i, tq), posenc::causal_mask{},
                          {.threads = 1 + i % 2});
        return out;
    };
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < workers; ++i) expected.push_back(read(i));
    const auto got = on_threads(read);
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);

    // Per thread: each worker's own cache (append, context_shift, decode) of the one shared rotary.
    std::vector<std::vector<float>> own_expected;
    for (unsigned i = 0; i < workers; ++i) own_expected.push_back(own_cache_work(rope, i));
    const auto own_got = on_threads([&](unsigned i) { return own_cache_work(rope, i); });
    CHECK(require_all_equal(own_got, [&](unsigned i) { return own_expected[i]; }) == workers);
}

TEST_CASE("attention workspaces, one per thread, reused call after call, give single-thread results", "[concurrency][workspace]") {
    posenc::rotary<posenc::half_split> rope({.head_dim = CD}, posenc::default_rope{});
    posenc::kv_cache shared(rope, {.kv_heads = CH, .head_dim = CD, .capacity = 128});
    const auto k = random_floats(CT * CH * CD, 23), v = random_floats(CT * CH * CD, 24);
    shared.append(posenc::heads_view<const float>(std::span<const float>(k), {CT, CH, CD}),
                  posenc::heads_view<const float>(std::span<const float>(v), {CT, CH, CD}), posenc::position_ids::consecutive(0, CT));
    const auto& cache = shared;
    const posenc::attention_encoding enc{rope};
    // Each worker: decode steps and small chunks against the shared cache through its own workspace
    // (one or two threads per call, the shape changing between calls), all outputs concatenated.
    auto work = [&](unsigned i, bool use_workspace) {
        posenc::attention_workspace ws;
        std::vector<float> all;
        for (unsigned step = 0; step < 6; ++step) {
            const std::size_t tq = 1 + (i + step) % 3;
            const auto q = random_floats(tq * CH * CG * CD, 40 + 7 * i + step);
            std::vector<float> out(tq * CH * CG * CD);
            posenc::attention(enc, posenc::heads_view<const float>(std::span<const float>(q), {tq, CH * CG, CD}), cache,
                              posenc::heads_view<float>(std::span<float>(out), {tq, CH * CG, CD}),
                              posenc::position_ids::consecutive(static_cast<std::int64_t>(CT) - 3, tq), posenc::causal_mask{},
                              {.threads = 1 + (i + step) % 2, .min_fmas_per_thread = 0, .workspace = use_workspace ? &ws : nullptr});
            all.insert(all.end(), out.begin(), out.end());
        }
        return all;
    };
    std::vector<std::vector<float>> expected;  // one thread, no workspace
    for (unsigned i = 0; i < workers; ++i) expected.push_back(work(i, false));
    const auto got = on_threads([&](unsigned i) { return work(i, true); });
    CHECK(require_all_equal(got, [&](unsigned i) { return expected[i]; }) == workers);
}
