// attention's extra memory is O(tile), independent of the sequence length: this translation unit
// replaces the global operator new (for the whole test program; it only counts while a counter is
// armed; every form is replaced so that new and delete always pair, also under AddressSanitizer) and
// compares the allocations of T = 1024 and T = 8192 for every transform and bias kind (and the
// backward's with Shaw's tables, T = 256 and 2048), then the same on 2 threads: prefill, and split-KV
// decode at T = 8192 and 32768. The one-token rotary call's none is counted here too (the program's
// only counting operator new).
#include <posenc/attention/attention.hpp>
#include <posenc/attention/layer.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/grad/attention.hpp>
#include <posenc/posenc.hpp>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/storage16.hpp"

namespace {
std::atomic<bool> armed{false};
std::atomic<std::size_t> count{0}, bytes{0};
void note(std::size_t n) noexcept {
    if (armed.load(std::memory_order_relaxed)) {
        count.fetch_add(1, std::memory_order_relaxed);
        bytes.fetch_add(n, std::memory_order_relaxed);
    }
}
// When ≥ 0: the number of further allocations that succeed before one throws std::bad_alloc.
std::atomic<long> fail_after{-1};
void* allocate(std::size_t n, std::size_t align) {
    if (fail_after.load(std::memory_order_relaxed) >= 0 && fail_after.fetch_sub(1, std::memory_order_relaxed) == 0) {
        fail_after = -1;
        throw std::bad_alloc();
    }
    note(n);
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n ? n : 1)
                                                 : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return allocate(n, alignof(std::max_align_t));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return allocate(n, static_cast<std::size_t>(a));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept { return operator new(n, a, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
struct usage {
    std::size_t count, bytes;
};

/// The allocations and bytes f() asks for.
template <class F>
usage counted(const F& f) {
    count = 0;
    bytes = 0;
    armed = true;
    f();
    armed = false;
    return {count.load(), bytes.load()};
}

/// The allocations of call(Q, K, V, O, positions) over T tokens, 4 query heads over Hkv kv heads
/// stored as KV (the prefill calls use a sliding window so that T = 8192 stays quick; the decode
/// calls take the last query only).
template <class KV, class Call>
usage measure(const Call& call, std::size_t T, std::size_t Hkv, std::size_t D) {
    const std::size_t Hq = 4;
    const auto p = posenc_test::make_attn_problem(T, T, Hq, Hkv, D, D, 3);
    std::vector<float> q = p.q, out(T * Hq * D);
    const std::vector<KV> k = posenc_test::to_storage<KV>(p.k), v = posenc_test::to_storage<KV>(p.v);
    const auto pos = posenc::position_ids::consecutive(0, T);
    const posenc::heads_view<const float> Q(q.data(), {T, Hq, D});
    const posenc::heads_view<const KV> K(k.data(), {T, Hkv, D}), V(v.data(), {T, Hkv, D});
    const posenc::heads_view<float> O(std::span<float>(out), {T, Hq, D});
    return counted([&] { call(Q, K, V, O, pos); });
}

/// posenc::attention with `enc` and a sliding window, as a call for measure.
template <class Enc>
auto windowed(const Enc& enc) {
    return [&enc](const auto& Q, const auto& K, const auto& V, const auto& O, const posenc::position_ids& pos) {
        posenc::attention(enc, Q, K, V, O, pos, pos, posenc::sliding_window_mask{.window = 200});
    };
}

void check_flat(const char* what, const usage& small, const usage& large, std::size_t bound) {
    INFO(what << ": smaller T: " << small.count << " allocations, " << small.bytes << " bytes; larger T: " << large.count
              << ", " << large.bytes);
    CHECK(small.count > 0);  // the counter sees the kernel's scratch
    CHECK(large.count <= small.count);
    CHECK(large.bytes <= small.bytes);
    CHECK(small.bytes < bound);  // O(tile)
}

template <class KV = float, class Call>
void check_tile_memory(const char* what, const Call& call, std::size_t Hkv, std::size_t D, std::size_t bound) {
    check_flat(what, measure<KV>(call, 1024, Hkv, D), measure<KV>(call, 8192, Hkv, D), bound);
}

/// 64 queries at the end of a bf16 kv_cache of T tokens (filled before counting starts).
usage measure_cache(std::size_t T) {
    const std::size_t Hq = 4, Hkv = 2, D = 64, Tq = 64;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const auto p = posenc_test::make_attn_problem(Tq, T, Hq, Hkv, D, D, 5);
    posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> cache(
        rope, posenc::kv_cache_shape{.kv_heads = Hkv, .head_dim = D, .capacity = T});
    cache.append(posenc::heads_view<const float>(p.k.data(), {T, Hkv, D}),
                 posenc::heads_view<const float>(p.v.data(), {T, Hkv, D}), posenc::position_ids::consecutive(0, T));
    std::vector<float> out(Tq * Hq * D);
    return counted([&] {
        posenc::attention(posenc::attention_encoding{rope}, posenc::heads_view<const float>(p.q.data(), {Tq, Hq, D}), cache,
                          posenc::heads_view<float>(std::span<float>(out), {Tq, Hq, D}),
                          posenc::position_ids::consecutive(static_cast<std::int64_t>(T - Tq), Tq), posenc::causal_mask{});
    });
}
}  // namespace

TEST_CASE("attention allocates no more for T = 8192 than for T = 1024", "[attention][memory]") {
    // The bound is a few tiles' scratch (Q, K, S and accumulator tiles, the K tile's transpose): today
    // 171-204 KB for these shapes. The checks against T = 1024 are what catches a per-tile allocation.
    const std::size_t bound = 256 * 1024;
    // GQA 4:1 with RoPE: K tiles rotated in scratch, query tiles of 64 tokens.
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = 32}, posenc::default_rope{});
    const posenc::alibi_bias alibi({.heads = 4});
    const posenc::attention_encoding rope_alibi{rope, alibi};
    check_tile_memory("any_rotary, alibi, GQA 4:1", windowed(rope_alibi), 1, 32, bound);
    // MHA at D 64, query tiles of 128 rows: every transform and bias kind (each is called per tile).
    const std::size_t D = 64;
    const posenc::attention_encoding nope_alibi{posenc::nope{}, alibi};
    check_tile_memory("nope, alibi", windowed(nope_alibi), 4, D, bound);
    const posenc::rotary<posenc::interleaved> typed({.head_dim = D}, posenc::yarn{.factor = 4, .original_max_position = 2048});
    const posenc::attention_encoding typed_enc{typed};
    check_tile_memory("rotary<interleaved>, YaRN", windowed(typed_enc), 4, D, bound);
    check_tile_memory<posenc::bf16>("rotary<interleaved>, bf16 K/V", windowed(typed_enc), 4, D, bound);
    check_tile_memory<posenc::fp16>("rotary<interleaved>, fp16 K/V", windowed(typed_enc), 4, D, bound);
    const auto table = typed.table(8192);
    const posenc::attention_encoding table_enc{posenc::table_transform{typed, table}};
    check_tile_memory("table_transform", windowed(table_enc), 4, D, bound);
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
    const posenc::attention_encoding xpos_enc{xp};
    check_tile_memory("xpos", windowed(xpos_enc), 4, D, bound);
    const std::vector<float> t5_table(32 * 4, 0.125f);
    const posenc::t5_bias t5({.num_buckets = 32, .max_distance = 20, .bidirectional = false}, 4, t5_table);
    const posenc::attention_encoding t5_enc{posenc::nope{}, t5, posenc::fixed_scale{1.0}};
    check_tile_memory("t5", windowed(t5_enc), 4, D, bound);
    const std::vector<float> ak(7 * D, 0.01f), av(7 * D, 0.02f);
    const posenc::shaw_rpr shaw({.max_distance = 3}, ak, D, av, D);
    const posenc::attention_encoding shaw_enc{posenc::nope{}, shaw};
    check_tile_memory("shaw", windowed(shaw_enc), 4, D, bound);
    // The partial form (out and the log-sum-exp of each row, a buffer made before counting starts).
    std::vector<float> lse(8192 * 4);
    check_tile_memory(
        "attention_partial",
        [&](const auto& Q, const auto& K, const auto& V, const auto& O, const posenc::position_ids& pos) {
            posenc::attention_partial(shaw_enc, Q, K, V, O, std::span<float>(lse.data(), Q.tokens() * Q.heads()), pos, pos,
                                      posenc::sliding_window_mask{.window = 200});
        },
        4, D, bound);
    // A bf16 kv_cache: 64 queries against its T tokens.
    check_flat("kv_cache<bf16>", measure_cache(1024), measure_cache(8192), bound);
}

TEST_CASE("attention on several threads allocates no more for longer sequences", "[attention][memory][threads]") {
    // The caller's executor runs the threads' work inline, so that what is counted is posenc's own
    // scratch (per thread, per wave of key segments), not a thread library's.
    std::size_t runs = 0;  // executor calls: the threads' paths are really taken
    const posenc::executor inline_pool = [&runs](std::size_t n, const std::function<void(std::size_t)>& task) {
        ++runs;
        for (std::size_t i = 0; i < n; ++i) task(i);
    };
    const std::size_t bound = 256 * 1024;
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = 32}, posenc::default_rope{});
    const posenc::alibi_bias alibi({.heads = 4});
    const posenc::attention_encoding rope_alibi{rope, alibi};
    const std::vector<float> sinks{0.5f, -1.0f, 0.25f, 2.0f};
    // Prefill: (kv head, query tile) items on 2 threads, with sinks and soft-capping (each thread has
    // its own tiles' scratch: twice the one-thread bound).
    check_tile_memory(
        "2 threads, sinks, softcap",
        [&](const auto& Q, const auto& K, const auto& V, const auto& O, const posenc::position_ids& pos) {
            posenc::attention(rope_alibi, Q, K, V, O, pos, pos, posenc::sliding_window_mask{.window = 200},
                              {.softcap = 30.0f, .sinks = sinks, .threads = 2, .min_fmas_per_thread = 0, .executor = inline_pool});
        },
        1, 32, 2 * bound);
    CHECK(runs == 2);  // one executor call per measured call
    // Split-KV decode: the last query over all T keys, one item split into key segments of 1024, run in
    // waves of 4 · threads segments (sizes tied to attn_segment_keys and that cap): one wave of 8 at
    // T = 8192, four at 32768. A wave's states stop growing at 8, and the waves themselves (one executor
    // call each) add nothing.
    const auto decode = [&](const auto& Q, const auto& K, const auto& V, const auto& O, const posenc::position_ids& pos) {
        const std::size_t T = Q.tokens();
        posenc::attention(rope_alibi, Q.tokens_slice(T - 1, 1), K, V, O.tokens_slice(T - 1, 1),
                          posenc::position_ids::consecutive(static_cast<std::int64_t>(T - 1), 1), pos, posenc::causal_mask{},
                          {.sinks = sinks, .threads = 2, .min_fmas_per_thread = 0, .executor = inline_pool});
    };
    runs = 0;
    const usage decode_small = measure<float>(decode, 8192, 1, 32);
    CHECK(runs == 1);
    runs = 0;
    const usage decode_large = measure<float>(decode, 32768, 1, 32);
    CHECK(runs == 4);
    check_flat("split-KV decode, 2 threads", decode_small, decode_large, bound);
    check_flat("split-KV decode, 2 threads, bf16 K/V", measure<posenc::bf16>(decode, 8192, 1, 32),
               measure<posenc::bf16>(decode, 32768, 1, 32), bound);
}

namespace {
/// Allocations made by `calls` while the counter is armed (each run once first, unarmed: statics).
template <class... Calls>
std::size_t allocations_of(const Calls&... calls) {
    (calls(), ...);
    count = 0;
    armed = true;
    (calls(), ...);
    armed = false;
    return count.load();
}
}  // namespace

TEST_CASE("a one-token rotary call allocates nothing and never reaches the executor", "[rope][memory][decode]") {
    // Decode: one token of Q [1, 32, 128] and K [1, 8, 128] at position 3001, every public form of the
    // call, split allowed (4 threads, a caller's executor): the checks build their messages only when
    // they throw, and one token is one slice, run on the caller's thread.
    const std::size_t D = 128, HQ = 32, HK = 8;
    std::vector<float> q(HQ * D, 0.5f), k(HK * D, 0.25f), cache(HK * D);
    std::vector<posenc::bf16> qb(HQ * D, posenc::bf16(0.5f)), kb(HK * D, posenc::bf16(0.25f));
    const posenc::heads_view<float> qv(std::span<float>(q), {1, HQ, D}), kv(std::span<float>(k), {1, HK, D}),
        cv(std::span<float>(cache), {1, HK, D});
    const posenc::heads_view<posenc::bf16> qbv(std::span<posenc::bf16>(qb), {1, HQ, D}),
        kbv(std::span<posenc::bf16>(kb), {1, HK, D});
    const auto pos = posenc::position_ids::consecutive(3001, 1);
    const std::vector<std::int64_t> list{3001};
    const std::vector<std::int32_t> list32{3001};
    for (auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
        posenc::any_rotary rope(layout, {.head_dim = D},
                                posenc::yarn{.base = 500000, .factor = 4, .original_max_position = 8192});
        std::size_t executor_runs = 0;
        rope.set_threads(4);
        rope.set_executor([&executor_runs](std::size_t n, const std::function<void(std::size_t)>& task) {
            ++executor_runs;
            for (std::size_t i = 0; i < n; ++i) task(i);
        });
        const auto table = rope.table(4096);
        const std::size_t allocations = allocations_of(
            [&] { rope.apply(qv, kv, pos); }, [&] { rope.apply(qv, kv, list); }, [&] { rope.apply(qv, kv, list32); },
            [&] { rope.apply(kv, pos, posenc::rotation::inverse); }, [&] { rope.apply(table, qv, kv, pos); },
            [&] { rope.apply(table, kv, list); }, [&] { rope.apply_unchecked(table, qv, kv, pos); },
            [&] { rope.apply(qbv, kbv, pos); }, [&] { rope.apply(table, qbv, kbv, pos); },
            [&] { rope.apply_into(table, posenc::heads_view<const float>(kv), cv, pos); },
            [&] { rope.apply_into(kv, cv, pos); });
        INFO("layout " << (layout == posenc::rope_layout::interleaved ? "interleaved" : "half_split"));
        CHECK(allocations == 0);
        CHECK(executor_runs == 0);
    }
    // Positive control: the counter sees an allocation made while it is armed.
    std::vector<std::unique_ptr<float>> kept;
    CHECK(allocations_of([&] { kept.push_back(std::make_unique<float>(1.0f)); }) >= 1);
}

TEST_CASE("attention_backward's Shaw parameter gradients in waves need memory independent of the query count", "[grad][memory]") {
    // With no room for per-item buffers (max_grad_buffer_bytes = 0) the a^K and a^V gradients run in
    // waves that reuse a few buffers; one per query tile would add 28 tiles · 2 heads · 2·(2·64+1)·16
    // floats (0.92 MB) from T = 256 to T = 2048. What does grow with T is per-row data (Δ, 4 bytes a
    // row): bounded here by 64 bytes per (token, head), 0.23 MB.
    const std::size_t D = 16, H = 2, kmax = 64;
    const std::vector<float> ak((2 * kmax + 1) * D, 0.01f), av(ak.size(), 0.02f);
    const posenc::shaw_rpr shaw({.max_distance = kmax}, ak, D, av, D);
    const posenc::attention_encoding enc{posenc::nope{}, shaw};
    auto bytes_for = [&](std::size_t T) {
        std::vector<float> q(T * H * D, 0.1f), k(q.size(), 0.2f), v(q.size(), 0.3f), out(q.size()), lse(T * H),
            dout(q.size(), 0.05f), dq(q.size()), dk(q.size()), dv(q.size()), gk((2 * kmax + 1) * D), gv(gk.size());
        const posenc::heads_view<const float> qv(q.data(), {T, H, D}), kv(k.data(), {T, H, D}), vv(v.data(), {T, H, D});
        const auto pos = posenc::position_ids::consecutive(0, T);
        posenc::attention_partial(enc, qv, kv, vv, posenc::heads_view<float>(out.data(), {T, H, D}), lse, pos, pos,
                                  posenc::causal_mask{});
        auto backward = [&] {
            posenc::attention_backward(enc, qv, kv, vv, posenc::heads_view<const float>(out.data(), {T, H, D}), lse,
                                       posenc::heads_view<const float>(dout.data(), {T, H, D}),
                                       posenc::heads_view<float>(dq.data(), {T, H, D}), posenc::heads_view<float>(dk.data(), {T, H, D}),
                                       posenc::heads_view<float>(dv.data(), {T, H, D}), pos, pos, posenc::causal_mask{},
                                       {.max_grad_buffer_bytes = 0}, {.shaw_keys = gk, .shaw_values = gv});
        };
        backward();
        bytes = 0;
        armed = true;
        backward();
        armed = false;
        return bytes.load();
    };
    const std::size_t small = bytes_for(256), large = bytes_for(2048);
    INFO("T=256: " << small << " bytes; T=2048: " << large << " bytes");
    CHECK(small > 0);
    CHECK(large <= small + 64 * (2048 - 256) * H);
}

TEST_CASE("decode with a warmed workspace allocates nothing", "[attention][memory][decode][workspace]") {
    // An engine's steady state: one token's 8 query heads against a float and a bf16 kv_cache of 300
    // tokens (RoPE, causal) on the caller's thread. The same call without a workspace allocates: the
    // count sees it.
    const std::size_t Hq = 8, Hkv = 2, D = 64, T = 300;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const auto p = posenc_test::make_attn_problem(1, T, Hq, Hkv, D, D, 9);
    posenc::kv_cache cache(rope, posenc::kv_cache_shape{.kv_heads = Hkv, .head_dim = D, .capacity = T});
    posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> cache16(
        rope, posenc::kv_cache_shape{.kv_heads = Hkv, .head_dim = D, .capacity = T});
    cache.append(posenc::heads_view<const float>(p.k.data(), {T, Hkv, D}), posenc::heads_view<const float>(p.v.data(), {T, Hkv, D}),
                 posenc::position_ids::consecutive(0, T));
    cache16.append(posenc::heads_view<const float>(p.k.data(), {T, Hkv, D}), posenc::heads_view<const float>(p.v.data(), {T, Hkv, D}),
                   posenc::position_ids::consecutive(0, T));
    std::vector<float> out(Hq * D);
    const posenc::heads_view<const float> Q(p.q.data(), {1, Hq, D});
    const posenc::heads_view<float> O(std::span<float>(out), {1, Hq, D});
    const auto qpos = posenc::position_ids::consecutive(static_cast<std::int64_t>(T - 1), 1);
    const posenc::attention_encoding enc{rope};  // made once, as an engine's layer holds it (a copy allocates)
    posenc::attention_workspace ws;
    const posenc::attention_options with{.workspace = &ws};
    const auto decode = [&] { posenc::attention(enc, Q, cache, O, qpos, posenc::causal_mask{}, with); };
    const auto decode16 = [&] { posenc::attention(enc, Q, cache16, O, qpos, posenc::causal_mask{}, with); };
    CHECK(allocations_of(decode) == 0);
    CHECK(allocations_of(decode16) == 0);
    CHECK(allocations_of(decode, decode16) == 0);  // both element types in turn: one workspace serves them
    // One token, then a chunk of 3 (speculative decoding): the buffers grow to hold both shapes once.
    std::vector<float> q3(3 * Hq * D, 0.25f), out3(3 * Hq * D);
    const auto chunk = [&] {
        posenc::attention(enc, posenc::heads_view<const float>(q3.data(), {3, Hq, D}), cache,
                          posenc::heads_view<float>(std::span<float>(out3), {3, Hq, D}),
                          posenc::position_ids::consecutive(static_cast<std::int64_t>(T - 3), 3), posenc::causal_mask{}, with);
    };
    CHECK(allocations_of(decode, chunk, decode, chunk) == 0);
    const auto without = [&] { posenc::attention(enc, Q, cache, O, qpos, posenc::causal_mask{}); };
    CHECK(allocations_of(without) > 0);
}

TEST_CASE("a decode split over key segments on an engine's threads allocates nothing with a warmed workspace",
          "[attention][memory][decode][workspace][threads]") {
    // 4 threads for 2 kv heads against 3000 cached keys: the items are fewer than the threads, so the
    // call splits the keys (3 segments) and folds the segments' softmax states, kept in the workspace.
    // The executor is the engine's: here it runs the tasks on the calling thread, and allocates nothing.
    const std::size_t Hq = 8, Hkv = 2, D = 64, T = 3000;
    const auto p = posenc_test::make_attn_problem(1, T, Hq, Hkv, D, D, 17);
    const auto k16 = posenc_test::to_storage<posenc::bf16>(p.k), v16 = posenc_test::to_storage<posenc::bf16>(p.v);
    std::vector<float> out(Hq * D), plain(Hq * D);
    std::size_t tasks = 0;
    const posenc::executor serial = [&tasks](std::size_t n, const std::function<void(std::size_t)>& task) {
        tasks += n;
        for (std::size_t i = 0; i < n; ++i) task(i);
    };
    const posenc::attention_encoding enc{posenc::nope{}};
    posenc::attention_workspace ws;
    posenc::attention_options opt{.threads = 4, .min_fmas_per_thread = 0};
    opt.executor = serial;
    const auto decode = [&](std::vector<float>& o) {
        posenc::attention(enc, posenc::heads_view<const float>(p.q.data(), {1, Hq, D}),
                          posenc::heads_view<const posenc::bf16>(k16.data(), {T, Hkv, D}),
                          posenc::heads_view<const posenc::bf16>(v16.data(), {T, Hkv, D}),
                          posenc::heads_view<float>(o.data(), {1, Hq, D}), posenc::position_ids::consecutive(T - 1, 1),
                          posenc::position_ids::consecutive(0, T), posenc::causal_mask{}, opt);
    };
    decode(plain);
    CHECK(tasks == 4);  // the call split: 2 items alone would take 2 threads
    opt.workspace = &ws;
    tasks = 0;
    CHECK(allocations_of([&] { decode(out); }) == 0);
    CHECK(tasks == 2 * 4);  // (allocations_of runs the call twice)
    CHECK(std::memcmp(out.data(), plain.data(), out.size() * sizeof(float)) == 0);
}

TEST_CASE("a decode step through attention_layers sharing a warmed workspace allocates nothing", "[attention][memory][decode][workspace]") {
    // An engine's step over its layers (a RoPE layer with a sliding window, a NoPE layer, bf16 caches):
    // each layer appends the token's K/V and attends on 2 threads of the engine's executor (one that
    // holds its pool by shared_ptr: not trivially copyable, so std::function stores it on the heap);
    // one workspace serves both.
    const std::size_t H = 8, Hkv = 2, D = 64, T = 200;
    const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    const posenc::attention_layer_shape shape{.heads = H, .kv_heads = Hkv, .head_dim = D, .value_dim = 0, .capacity = T + 8};
    const auto p = posenc_test::make_attn_problem(T + 4, T + 4, H, Hkv, D, D, 13);
    posenc::attention_workspace ws;
    auto tasks = std::make_shared<std::size_t>(0);
    const posenc::executor pool = [tasks](std::size_t n, const std::function<void(std::size_t)>& task) {
        *tasks += n;
        for (std::size_t i = 0; i < n; ++i) task(i);
    };
    const posenc::attention_layer_options opt{.threads = 2, .executor_fn = pool, .min_fmas_per_thread = 0, .workspace = &ws};
    std::vector<posenc::basic_attention_layer<posenc::bf16>> layers;
    layers.emplace_back(rope, posenc::sliding_window_mask{.window = 128}, posenc::any_scale{}, shape, opt);
    layers.emplace_back(std::nullopt, posenc::causal_mask{}, posenc::any_scale{}, shape, opt);
    std::vector<float> out((T + 4) * H * D);
    std::size_t t0 = 0;  // the next token
    const auto step = [&](std::size_t n) {
        const auto pos = posenc::position_ids::consecutive(static_cast<std::int64_t>(t0), n);
        for (auto& layer : layers) {
            layer.append(posenc::heads_view<const float>(p.k.data() + t0 * Hkv * D, {n, Hkv, D}),
                         posenc::heads_view<const float>(p.v.data() + t0 * Hkv * D, {n, Hkv, D}), pos);
            layer.attend(posenc::heads_view<const float>(p.q.data() + t0 * H * D, {n, H, D}), pos,
                         posenc::heads_view<float>(out.data() + t0 * H * D, {n, H, D}));
        }
        t0 += n;
    };
    step(T);  // the prompt
    *tasks = 0;
    CHECK(allocations_of([&] { step(1); }) == 0);  // (its first step, uncounted, fits the buffers to a decode)
    CHECK(t0 == T + 2);
    CHECK(*tasks == 2 * 2 * 2);  // 2 steps × 2 layers × 2 threads
}

TEST_CASE("a workspace whose buffers fail to grow keeps the old ones and stays usable", "[attention][memory][workspace][errors]") {
    // A workspace holding one-thread decode buffers; a prefill on 2 threads (larger tiles, more threads)
    // fails at its 1st, 2nd, ... allocation: each time the call throws bad_alloc, out keeps its values,
    // and the next decode through the workspace gives the bits of a decode without one.
    const std::size_t Hq = 4, Hkv = 1, D = 32, T = 160;
    const auto p = posenc_test::make_attn_problem(T, T, Hq, Hkv, D, D, 11);
    const posenc::heads_view<const float> Q(p.q.data(), {T, Hq, D}), K(p.k.data(), {T, Hkv, D}), V(p.v.data(), {T, Hkv, D});
    const auto pos = posenc::position_ids::consecutive(0, T);
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    posenc::attention_workspace ws;
    std::vector<float> one(Hq * D), plain(Hq * D), big(T * Hq * D, 4.0f);
    const auto decode = [&](std::vector<float>& o, posenc::attention_workspace* w) {
        posenc::attention(enc, Q.tokens_slice(T - 1, 1), K, V, posenc::heads_view<float>(o.data(), {1, Hq, D}),
                          posenc::position_ids::consecutive(T - 1, 1), pos, posenc::causal_mask{}, {.workspace = w});
    };
    decode(plain, nullptr);
    decode(one, &ws);
    // OpenMP's runtime starts at its first parallel region, so it starts here: in clang's ASan build
    // libomp 14 then loads LLVM's OMPT tool (libarcher), which calls operator new, and after a throw
    // there libomp spins on its own initialisation lock forever (OMP_TOOL=disabled also avoids it).
    posenc::attention(enc, Q, K, V, posenc::heads_view<float>(big.data(), {T, Hq, D}), pos, pos, posenc::causal_mask{},
                      {.threads = 2, .min_fmas_per_thread = 0});
    std::fill(big.begin(), big.end(), 4.0f);
    std::size_t failures = 0;
    for (long n = 0; n < 200; ++n) {
        fail_after = n;
        bool failed = false;
        try {
            posenc::attention(enc, Q, K, V, posenc::heads_view<float>(big.data(), {T, Hq, D}), pos, pos, posenc::causal_mask{},
                              {.threads = 2, .min_fmas_per_thread = 0, .workspace = &ws});
        } catch (const std::bad_alloc&) {
            failed = true;
        }
        fail_after = -1;
        if (!failed) break;  // enough allocations succeeded: the call went through
        ++failures;
        INFO("failing allocation " << n);
        CHECK(std::all_of(big.begin(), big.end(), [](float x) { return x == 4.0f; }));
        std::fill(one.begin(), one.end(), -1.0f);
        decode(one, &ws);  // not left in use, its buffers whole
        CHECK(std::memcmp(one.data(), plain.data(), one.size() * sizeof(float)) == 0);
    }
    CHECK(failures > 10);  // the growth's allocations were each made to fail
    // The same for a decode split over two key segments, whose softmax states grow in the workspace.
    const auto d = posenc_test::make_attn_problem(1, 1100, Hq, Hkv, D, D, 12);
    const auto dpos = posenc::position_ids::consecutive(0, 1100);
    std::vector<float> split_out(Hq * D, 4.0f);
    std::size_t split_failures = 0;
    for (long n = 0; n < 20; ++n) {
        fail_after = n;
        bool failed = false;
        try {
            posenc::attention(enc, posenc::heads_view<const float>(d.q.data(), {1, Hq, D}),
                              posenc::heads_view<const float>(d.k.data(), {1100, Hkv, D}),
                              posenc::heads_view<const float>(d.v.data(), {1100, Hkv, D}),
                              posenc::heads_view<float>(split_out.data(), {1, Hq, D}), posenc::position_ids::consecutive(1099, 1),
                              dpos, posenc::causal_mask{}, {.threads = 2, .min_fmas_per_thread = 0, .workspace = &ws});
        } catch (const std::bad_alloc&) {
            failed = true;
        }
        fail_after = -1;
        if (!failed) break;
        ++split_failures;
        CHECK(std::all_of(split_out.begin(), split_out.end(), [](float x) { return x == 4.0f; }));
        std::fill(one.begin(), one.end(), -1.0f);
        decode(one, &ws);
        CHECK(std::memcmp(one.data(), plain.data(), one.size() * sizeof(float)) == 0);
    }
    CHECK(split_failures >= 1);
    CHECK(std::none_of(split_out.begin(), split_out.end(), [](float x) { return x == 4.0f; }));  // then it went through
}
