// Shared, immutable posenc objects (tables, schedules, rotaries, biases, sinusoidal) used from many
// std::threads at once, each thread with its own buffers: every thread's result must equal a
// single-thread run bit for bit. The tests are tagged [concurrency]; .ci/run also builds them alone
// under ThreadSanitizer (posenc-thread-tests), with the std::thread fallback of detail/parallel.hpp.
// Each test starts its threads together (a latch) so that first uses (xsimd's CPU detection, the
// dispatchers) race as they would in a server that starts many workers at once.
#include <posenc/posenc.hpp>

#include <cstring>
#include <functional>
#include <latch>
#include <thread>

#include "support/catch.hpp"
#include "support/reference.hpp"

using posenc_test::random_floats;

namespace {

constexpr unsigned workers = 8;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Runs work(i) on `workers` threads started together; returns each thread's result.
std::vector<std::vector<float>> on_threads(const std::function<std::vector<float>(unsigned)>& work) {
    std::vector<std::vector<float>> results(workers);
    std::latch start(workers);
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < workers; ++i)
        pool.emplace_back([&, i] {
            start.arrive_and_wait();
            results[i] = work(i);
        });
    for (auto& t : pool) t.join();
    return results;
}

/// Every thread's result equals `expected(i)` bit for bit; returns how many were compared.
std::size_t require_all_equal(const std::vector<std::vector<float>>& got,
                              const std::function<std::vector<float>(unsigned)>& expected) {
    std::size_t compared = 0;
    for (unsigned i = 0; i < got.size(); ++i) {
        INFO("thread " << i);
        REQUIRE(!got[i].empty());
        CHECK(same_bits(got[i], expected(i)));
        ++compared;
    }
    return compared;
}

// 128 tokens × (8 + 2) heads × 128 lanes = 163840 floats: with set_threads(2) each call also splits
// its tokens across two threads of its own (nested inside the workers).
constexpr std::size_t T = 128, HQ = 8, HK = 2, D = 128;

template <class Rope>
std::vector<float> rope_work(const Rope& rope, const posenc::cos_sin_table& table, unsigned seed) {
    auto q = random_floats(T * HQ * D, 100 + seed), k = random_floats(T * HK * D, 200 + seed);
    posenc::heads_view<float> qv(std::span<float>(q), {T, HQ, D}), kv(std::span<float>(k), {T, HK, D});
    std::vector<std::int64_t> pos64(T);
    std::vector<std::int32_t> pos32(T);
    for (std::size_t t = 0; t < T; ++t) {
        pos64[t] = static_cast<std::int64_t>((t * 37 + seed) % 4096);
        pos32[t] = static_cast<std::int32_t>((t * 11 + 3 * seed) % 4096);
    }
    rope.apply(qv, kv, posenc::position_ids::consecutive(1000 + seed, T));  // on the fly, recurrence
    rope.apply(table, qv, kv, pos64);                                       // table, int64
    rope.apply(qv, kv, pos32, posenc::rotation::inverse);                   // on the fly, int32, inverse
    rope.apply(table, qv, posenc::position_ids::consecutive(7, T), posenc::rotation::inverse);
    rope.shift(kv, -static_cast<std::int64_t>(seed) - 5);
    q.insert(q.end(), k.begin(), k.end());
    return q;
}

template <class Layout>
void check_shared_rotary() {
    const posenc::yarn schedule{.base = 500000, .factor = 4, .original_max_position = 8192};
    posenc::rotary<Layout> rope({.head_dim = D}, schedule);
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
        posenc::any_rotary rope(layout, {.head_dim = D, .rotary_dim = 96},
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
    const posenc::rotary<posenc::half_split> reference({.head_dim = D}, posenc::default_rope{.base = 10000});
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
