// The [concurrency] cases of 16-bit K and V (bf16 and fp16), next to test_thread_safety.cpp's float
// ones and built with it into posenc-thread-tests (run under ThreadSanitizer by .ci/run): attention and
// attention_partial over shared const 16-bit views, 16-bit kv_caches appended on two threads, one
// filled cache read by many threads at once, and a split-KV decode over a long cache. Each concurrent
// run, with threads inside its calls, must equal a one-thread run computed before bit for bit
// (docs/attention.md: each item and key segment runs the same code whatever the thread count).
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <span>
#include <vector>

#include "support/catch.hpp"
#include "support/concurrency.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

#if defined(POSENC_TEST_STD_THREADS) && defined(_OPENMP)
#error "posenc-thread-tests must be built without OpenMP: it tests the std::thread path"
#endif

namespace {

using h16_rope = posenc::rotary<posenc::half_split>;
constexpr unsigned h16_workers = posenc_test::concurrent_workers;

h16_rope h16_make_rope(std::size_t head_dim) {
    return h16_rope({.head_dim = head_dim}, posenc::llama3{.base = 500000, .factor = 8, .original_max_position = 8192});
}

/// Options of every call here: `threads`, and a thread per item or key segment however small the call.
posenc::attention_options h16_options(unsigned threads) { return {.threads = threads, .min_fmas_per_thread = 0}; }

/// Appends a cache's whole storage (bit patterns of K and V, and the positions) to `to`.
template <class Cache>
void h16_append_storage(const Cache& cache, std::vector<float>& to) {
    for (auto x : cache.key_storage()) to.push_back(static_cast<float>(x.bits));
    for (auto x : cache.value_storage()) to.push_back(static_cast<float>(x.bits));
    for (std::int64_t p : cache.position_storage()) to.push_back(static_cast<float>(p));
}

/// Runs `expected(i)` on this thread for every worker, then `work(i)` on all workers at once, and
/// compares.
template <class Reference, class Work>
void h16_compare(const Reference& expected_of, const Work& work) {
    std::vector<std::vector<float>> expected;
    for (unsigned i = 0; i < h16_workers; ++i) expected.push_back(expected_of(i));
    const auto got = posenc_test::on_threads(work);
    CHECK(posenc_test::require_all_equal(got, [&](unsigned i) { return expected[i]; }) == h16_workers);
}

// Views: Q [VT, VHQ, VD], K/V [VT, VHK, VD] in 16 bits, shared by every worker.
constexpr std::size_t h16_VT = 64, h16_VHQ = 8, h16_VHK = 2, h16_VD = 64;

/// A worker's calls over the shared const 16-bit K/V: RoPE + causal, ALiBi + sliding window with
/// softcap and sinks, and two attention_partial shards (out and lse of each) merged.
template <class S>
std::vector<float> h16_view_work(const h16_rope& rope, const std::vector<float>& q, const std::vector<S>& k,
                                 const std::vector<S>& v, const std::vector<float>& sinks, unsigned seed, unsigned threads) {
    const posenc::heads_view<const float> Q(q.data(), {h16_VT, h16_VHQ, h16_VD});
    const posenc::heads_view<const S> K(k.data(), {h16_VT, h16_VHK, h16_VD}), V(v.data(), {h16_VT, h16_VHK, h16_VD});
    const auto pos = posenc::position_ids::consecutive(5 * seed, h16_VT);
    const std::size_t n = h16_VT * h16_VHQ * h16_VD;
    std::vector<float> result, out(n, -1.0f);
    const posenc::heads_view<float> O(out.data(), {h16_VT, h16_VHQ, h16_VD});
    posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, pos, pos, posenc::causal_mask{}, h16_options(threads));
    result.insert(result.end(), out.begin(), out.end());
    auto opt = h16_options(threads);
    opt.softcap = 20.0f;
    opt.sinks = sinks;
    posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = h16_VHQ})}, Q, K, V, O, pos, pos,
                      posenc::sliding_window_mask{.window = 9 + seed}, opt);
    result.insert(result.end(), out.begin(), out.end());
    std::vector<float> a(n), b(n), la(h16_VT * h16_VHQ), lb(la.size());
    const posenc::heads_view<float> A(a.data(), {h16_VT, h16_VHQ, h16_VD}), B(b.data(), {h16_VT, h16_VHQ, h16_VD});
    const std::size_t h = h16_VT / 3 + seed;
    posenc::attention_partial(posenc::attention_encoding{rope}, Q, K.tokens_slice(0, h), V.tokens_slice(0, h), A, la, pos,
                              posenc::position_ids::consecutive(5 * seed, h), posenc::causal_mask{}, h16_options(threads));
    posenc::attention_partial(posenc::attention_encoding{rope}, Q, K.tokens_slice(h, h16_VT - h), V.tokens_slice(h, h16_VT - h),
                              B, lb, pos, posenc::position_ids::consecutive(5 * seed + h, h16_VT - h), posenc::causal_mask{},
                              h16_options(threads));
    posenc::merge_attention_partials({{A, la}, {B, lb}}, O, {.sinks = sinks});
    for (const auto* part : {&a, &la, &b, &lb, &out}) result.insert(result.end(), part->begin(), part->end());
    return result;
}

template <class S>
void h16_check_views() {
    INFO(posenc_test::type_name<S>());
    const auto rope = h16_make_rope(h16_VD);
    const auto q = posenc_test::random_floats(h16_VT * h16_VHQ * h16_VD, 51);
    const auto k = posenc_test::to_storage<S>(posenc_test::random_floats(h16_VT * h16_VHK * h16_VD, 52));
    const auto v = posenc_test::to_storage<S>(posenc_test::random_floats(h16_VT * h16_VHK * h16_VD, 53));
    const auto sinks = posenc_test::random_floats(h16_VHQ, 54);
    h16_compare([&](unsigned i) { return h16_view_work(rope, q, k, v, sinks, i, 1); },
                [&](unsigned i) { return h16_view_work(rope, q, k, v, sinks, i, 2 + i % 2); });
}

// Caches: HK heads of D lanes; every worker's first append (265 or more of the CT tokens) passes
// 2^17 floats, where append takes a second thread (core/detail/parallel.hpp's min_floats_per_thread).
constexpr std::size_t h16_CT = 272, h16_CHK = 4, h16_CD = 128, h16_CG = 4, h16_CHQ = h16_CHK * h16_CG;

/// A worker's own 16-bit cache appended on `threads` (floats, then 16-bit views), decode steps and an
/// attention_partial over it; returns every output, its lse and the cache's storage.
template <class S>
std::vector<float> h16_own_cache_work(const h16_rope& rope, unsigned seed, unsigned threads) {
    posenc::kv_cache<h16_rope, S> cache(rope, {.kv_heads = h16_CHK, .head_dim = h16_CD, .capacity = h16_CT + 32});
    cache.set_threads(threads);
    const std::size_t row = h16_CHK * h16_CD, first = h16_CT - seed, more = 8 + seed;
    const auto k = posenc_test::random_floats(h16_CT * row, 700 + seed), v = posenc_test::random_floats(h16_CT * row, 800 + seed);
    cache.append(posenc::heads_view<const float>(k.data(), {first, h16_CHK, h16_CD}),
                 posenc::heads_view<const float>(v.data(), {first, h16_CHK, h16_CD}), posenc::position_ids::consecutive(0, first));
    const auto k16 = posenc_test::to_storage<S>(posenc_test::random_floats(more * row, 710 + seed));
    const auto v16 = posenc_test::to_storage<S>(posenc_test::random_floats(more * row, 810 + seed));
    cache.append(posenc::heads_view<const S>(k16.data(), {more, h16_CHK, h16_CD}),
                 posenc::heads_view<const S>(v16.data(), {more, h16_CHK, h16_CD}),
                 posenc::position_ids::consecutive(cache.next_position() + 3, more));
    std::vector<float> result;
    for (std::size_t step = 0; step < 3; ++step) {
        const auto q = posenc_test::random_floats(h16_CHQ * h16_CD, 900 + seed + step);
        std::vector<float> out(h16_CHQ * h16_CD);
        posenc::attention(posenc::attention_encoding{cache.transform()}, posenc::heads_view<const float>(q.data(), {1, h16_CHQ, h16_CD}),
                          cache, posenc::heads_view<float>(out.data(), {1, h16_CHQ, h16_CD}),
                          posenc::position_ids::consecutive(cache.next_position(), 1), posenc::causal_mask{}, h16_options(threads));
        result.insert(result.end(), out.begin(), out.end());
        const auto kn = posenc_test::random_floats(row, 950 + seed + step), vn = posenc_test::random_floats(row, 990 + seed + step);
        cache.append(posenc::heads_view<const float>(kn.data(), {1, h16_CHK, h16_CD}),
                     posenc::heads_view<const float>(vn.data(), {1, h16_CHK, h16_CD}),
                     posenc::position_ids::consecutive(cache.next_position(), 1));
    }
    const std::size_t tq = 3;
    const auto q = posenc_test::random_floats(tq * h16_CHQ * h16_CD, 980 + seed);
    std::vector<float> out(tq * h16_CHQ * h16_CD), lse(tq * h16_CHQ);
    posenc::attention_partial(posenc::attention_encoding{cache.transform()},
                              posenc::heads_view<const float>(q.data(), {tq, h16_CHQ, h16_CD}), cache,
                              posenc::heads_view<float>(out.data(), {tq, h16_CHQ, h16_CD}), lse,
                              posenc::position_ids::consecutive(cache.next_position() - 2, tq), posenc::causal_mask{},
                              h16_options(threads));
    result.insert(result.end(), out.begin(), out.end());
    result.insert(result.end(), lse.begin(), lse.end());
    h16_append_storage(cache, result);
    return result;
}

/// Causal attention over a cache (with `bias`), then attention_partial's out and lse (no bias), in one
/// vector: what each concurrent reader computes.
template <class S, class Bias>
std::vector<float> h16_attend_cache(const posenc::kv_cache<h16_rope, S>& cache, const Bias& bias, posenc::heads_view<const float> Q,
                                    const posenc::position_ids& qpos, unsigned threads) {
    std::vector<float> out(Q.tokens() * Q.heads() * Q.head_dim()), lse(Q.tokens() * Q.heads()), result;
    const posenc::heads_view<float> O(out.data(), {Q.tokens(), Q.heads(), Q.head_dim()});
    posenc::attention(posenc::attention_encoding{cache.transform(), bias}, Q, cache, O, qpos, posenc::causal_mask{}, h16_options(threads));
    result.insert(result.end(), out.begin(), out.end());
    posenc::attention_partial(posenc::attention_encoding{cache.transform()}, Q, cache, O, lse, qpos, posenc::causal_mask{},
                              h16_options(threads));
    result.insert(result.end(), out.begin(), out.end());
    result.insert(result.end(), lse.begin(), lse.end());
    return result;
}

/// A worker's reads of a shared const 16-bit cache: attention over a few queries (decode and small
/// chunks) with ALiBi, and an attention_partial (out and lse).
template <class S>
std::vector<float> h16_shared_read_work(const posenc::kv_cache<h16_rope, S>& cache, unsigned seed, unsigned threads) {
    const std::size_t tq = 1 + seed % 3;
    const auto q = posenc_test::random_floats(tq * h16_CHQ * h16_CD, 30 + seed);
    const posenc::heads_view<const float> Q(q.data(), {tq, h16_CHQ, h16_CD});
    const auto qpos = posenc::position_ids::consecutive(static_cast<std::int64_t>(cache.size()) - 5 * seed, tq);
    return h16_attend_cache(cache, posenc::alibi_bias({.heads = h16_CHQ}), Q, qpos, threads);
}

template <class S>
void h16_check_caches() {
    INFO(posenc_test::type_name<S>());
    const auto rope = h16_make_rope(h16_CD);
    h16_compare([&](unsigned i) { return h16_own_cache_work<S>(rope, i, 1); },
                [&](unsigned i) { return h16_own_cache_work<S>(rope, i, 2); });

    posenc::kv_cache<h16_rope, S> filled(rope, {.kv_heads = h16_CHK, .head_dim = h16_CD, .capacity = h16_CT});
    filled.set_threads(2);
    const auto k = posenc_test::random_floats(h16_CT * h16_CHK * h16_CD, 61), v = posenc_test::random_floats(k.size(), 62);
    filled.append(posenc::heads_view<const float>(k.data(), {h16_CT, h16_CHK, h16_CD}),
                  posenc::heads_view<const float>(v.data(), {h16_CT, h16_CHK, h16_CD}), posenc::position_ids::consecutive(0, h16_CT));
    const auto& shared = filled;
    h16_compare([&](unsigned i) { return h16_shared_read_work(shared, i, 1); },
                [&](unsigned i) { return h16_shared_read_work(shared, i, 1 + i % 2); });
}

// Split-KV decode: one query token against LT keys of one kv head, in three key segments.
constexpr std::size_t h16_LT = 2100, h16_LHQ = 8, h16_LD = 64;

/// A worker's decode step over the shared long cache: out of attention, then out and lse of
/// attention_partial.
template <class S>
std::vector<float> h16_split_decode_work(const posenc::kv_cache<h16_rope, S>& cache, unsigned seed, unsigned threads) {
    const auto q = posenc_test::random_floats(h16_LHQ * h16_LD, 70 + seed);
    const posenc::heads_view<const float> Q(q.data(), {1, h16_LHQ, h16_LD});
    const auto qpos = posenc::position_ids::constant(static_cast<std::int64_t>(h16_LT) + seed, 1);
    return h16_attend_cache(cache, posenc::no_bias{}, Q, qpos, threads);
}

template <class S>
void h16_check_split_decode() {
    INFO(posenc_test::type_name<S>());
    const auto rope = h16_make_rope(h16_LD);
    posenc::kv_cache<h16_rope, S> filled(rope, {.kv_heads = 1, .head_dim = h16_LD, .capacity = h16_LT});
    const auto k = posenc_test::random_floats(h16_LT * h16_LD, 71), v = posenc_test::random_floats(k.size(), 72);
    filled.append(posenc::heads_view<const float>(k.data(), {h16_LT, 1, h16_LD}),
                  posenc::heads_view<const float>(v.data(), {h16_LT, 1, h16_LD}), posenc::position_ids::consecutive(0, h16_LT));
    const auto& shared = filled;
    h16_compare([&](unsigned i) { return h16_split_decode_work(shared, i, 1); },
                [&](unsigned i) { return h16_split_decode_work(shared, i, 2 + i % 3); });
}

}  // namespace

TEST_CASE("fp16 and bf16 attention and attention_partial over shared const 16-bit K and V equal a one-thread run",
          "[concurrency][attention]") {
    h16_check_views<posenc::fp16>();
    h16_check_views<posenc::bf16>();
}

TEST_CASE("16-bit kv_caches appended on two threads and read concurrently equal one-thread runs", "[concurrency][kv_cache]") {
    h16_check_caches<posenc::bf16>();
    h16_check_caches<posenc::fp16>();
}

TEST_CASE("a 16-bit split-KV decode over a long shared kv_cache from many threads equals a one-thread decode",
          "[concurrency][kv_cache]") {
    h16_check_split_decode<posenc::bf16>();
    h16_check_split_decode<posenc::fp16>();
}
