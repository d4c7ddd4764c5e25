// attention_options::workspace: a call with a workspace gives the bits of the same call without one,
// whatever the workspace's previous calls left in it (other shapes, NaN inputs, other encodings and
// thread counts), for every path a call can take (prefill, decode on one thread and split over keys,
// 16-bit K/V, a kv_cache, partial results with their log-sum-exp); a workspace in use refuses a
// second call with posenc's error and stays usable. (Steady-state decode with a workspace allocates
// nothing: test_attention_alloc.cpp, the program that counts allocations.)
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/attention/workspace.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <latch>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/heads.hpp"

using namespace posenc_test;

namespace {

// One attention call of a kind, into out (and lse where the kind has one), with the given options, on
// its inputs or (poisoned) on inputs of the same shapes whose queries are NaN and values inf.
using call_fn = std::function<void(std::vector<float>& out, std::vector<float>& lse, const posenc::attention_options&, bool poisoned)>;

attn_problem poisoned(attn_problem p) {
    std::fill(p.q.begin(), p.q.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(p.v.begin(), p.v.end(), std::numeric_limits<float>::infinity());
    return p;
}

struct call_kind {
    std::string name;
    std::size_t out_size, lse_size;
    posenc::attention_options opt;
    call_fn run;
};

}  // namespace

TEST_CASE("attention with a workspace equals attention without one, bit for bit, whatever it held", "[attention][workspace]") {
    const std::size_t D = 32;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const attn_problem pre_ok = make_attn_problem(70, 70, 4, 2, D, D, 41);   // prefill: two query tiles per head
    const attn_problem dec_ok = make_attn_problem(1, 300, 8, 2, D, 24, 42);  // decode, Dv ≠ D: several key tiles
    const attn_problem big_ok = make_attn_problem(1, 2100, 4, 1, D, D, 43);  // decode over two key segments
    const attn_problem pre_bad = poisoned(pre_ok), dec_bad = poisoned(dec_ok), big_bad = poisoned(big_ok);
    const posenc::alibi_bias alibi({.heads = 4, .max_bias = 8});
    std::vector<float> sinks{0.5f, -1.0f, 2.0f, 0.0f};
    auto to16 = [](const std::vector<float>& x) { return std::vector<posenc::bf16>(x.begin(), x.end()); };
    const std::vector<posenc::bf16> k16 = to16(dec_ok.k), v16 = to16(dec_ok.v), v16_bad = to16(dec_bad.v);
    auto filled = [&](const attn_problem& p) {
        posenc::kv_cache c(rope, {.kv_heads = 2, .head_dim = D, .value_dim = 24, .capacity = 300});
        c.append(posenc::heads_view<const float>(p.k.data(), {300, 2, D}), posenc::heads_view<const float>(p.v.data(), {300, 2, 24}),
                 posenc::position_ids(p.kpos));
        return c;
    };
    const auto cache_ok = filled(dec_ok), cache_bad = filled(dec_bad);
    auto qv = [](const attn_problem& p) {
        return posenc::heads_view<const float>(p.q.data(), {p.Tq, p.Hq, p.D});
    };
    auto kv = [](const attn_problem& p) {
        return posenc::heads_view<const float>(p.k.data(), {p.Tk, p.Hkv, p.D});
    };
    auto vv = [](const attn_problem& p) {
        return posenc::heads_view<const float>(p.v.data(), {p.Tk, p.Hkv, p.Dv});
    };
    auto ov = [](std::vector<float>& out, const attn_problem& p) {
        return posenc::heads_view<float>(out.data(), {p.Tq, p.Hq, p.Dv});
    };

    std::vector<call_kind> kinds;
    for (unsigned threads : {1u, 3u}) {
        const std::string th = " threads " + std::to_string(threads);
        const posenc::attention_options base{.threads = threads, .min_fmas_per_thread = 0};
        kinds.push_back({"rope causal prefill" + th, pre_ok.Tq * pre_ok.Hq * pre_ok.Dv, 0, base, [&](auto& out, auto&, const auto& o, bool bad) {
                             const attn_problem& pre = bad ? pre_bad : pre_ok;
                             posenc::attention(posenc::attention_encoding{rope}, qv(pre), kv(pre), vv(pre), ov(out, pre),
                                               posenc::position_ids(pre.qpos), posenc::position_ids(pre.kpos),
                                               posenc::causal_mask{}, o);
                         }});
        posenc::attention_options capped = base;
        capped.softcap = 30.0f;
        capped.sinks = sinks;
        kinds.push_back({"alibi, softcap, sinks, no mask" + th, pre_ok.Tq * pre_ok.Hq * pre_ok.Dv, 0, capped,
                         [&](auto& out, auto&, const auto& o, bool bad) {
                             const attn_problem& pre = bad ? pre_bad : pre_ok;
                             posenc::attention(posenc::attention_encoding{posenc::nope{}, alibi}, qv(pre), kv(pre), vv(pre),
                                               ov(out, pre), posenc::position_ids(pre.qpos), posenc::position_ids(pre.kpos),
                                               posenc::no_mask{}, o);
                         }});
        kinds.push_back({"rope decode, Dv 24" + th, dec_ok.Tq * dec_ok.Hq * dec_ok.Dv, 0, base, [&](auto& out, auto&, const auto& o, bool bad) {
                             const attn_problem& dec = bad ? dec_bad : dec_ok;
                             posenc::attention(posenc::attention_encoding{rope}, qv(dec), kv(dec), vv(dec), ov(out, dec),
                                               posenc::position_ids(dec.qpos), posenc::position_ids(dec.kpos),
                                               posenc::causal_mask{}, o);
                         }});
        kinds.push_back({"bf16 K/V decode" + th, dec_ok.Tq * dec_ok.Hq * dec_ok.Dv, 0, base, [&](auto& out, auto&, const auto& o, bool bad) {
                             const attn_problem& dec = bad ? dec_bad : dec_ok;
                             posenc::attention(posenc::attention_encoding{rope}, qv(dec),
                                               posenc::heads_view<const posenc::bf16>(k16.data(), {dec.Tk, dec.Hkv, dec.D}),
                                               posenc::heads_view<const posenc::bf16>((bad ? v16_bad : v16).data(), {dec.Tk, dec.Hkv, dec.Dv}),
                                               ov(out, dec), posenc::position_ids(dec.qpos), posenc::position_ids(dec.kpos),
                                               posenc::causal_mask{}, o);
                         }});
        kinds.push_back({"kv_cache decode" + th, dec_ok.Tq * dec_ok.Hq * dec_ok.Dv, 0, base, [&](auto& out, auto&, const auto& o, bool bad) {
                             const attn_problem& dec = bad ? dec_bad : dec_ok;
                             posenc::attention(posenc::attention_encoding{rope}, qv(dec), bad ? cache_bad : cache_ok, ov(out, dec),
                                               posenc::position_ids(dec.qpos), posenc::causal_mask{}, o);
                         }});
        kinds.push_back({"partial decode over two segments" + th, big_ok.Tq * big_ok.Hq * big_ok.Dv, big_ok.Tq * big_ok.Hq, base,
                         [&](auto& out, auto& lse, const auto& o, bool bad) {
                             const attn_problem& big = bad ? big_bad : big_ok;
                             posenc::attention_partial(posenc::attention_encoding{rope}, qv(big), kv(big), vv(big), ov(out, big),
                                                       lse, posenc::position_ids(big.qpos), posenc::position_ids(big.kpos),
                                                       posenc::causal_mask{}, o);
                         }});
    }

    // Without a workspace: the expected bits.
    std::vector<std::vector<float>> expected_out, expected_lse;
    for (const call_kind& c : kinds) {
        std::vector<float> out(c.out_size), lse(c.lse_size);
        c.run(out, lse, c.opt, false);
        expected_out.push_back(out);
        expected_lse.push_back(lse);
    }

    // One workspace through every kind: each measured call follows the same call on poisoned inputs
    // (its buffers then hold NaN and inf in exactly the places this call uses), and a call of the
    // previous kind (another shape, thread count or path), then comes once more.
    posenc::attention_workspace ws;
    CHECK(ws.bytes() == 0);
    std::size_t compared = 0;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
        const call_kind& c = kinds[i];
        INFO(c.name);
        auto with_ws = [&](posenc::attention_options o) {
            o.workspace = &ws;
            return o;
        };
        for (const bool poisoned_first : {true, false}) {
            if (poisoned_first) {
                const call_kind& prev = kinds[(i + kinds.size() - 1) % kinds.size()];
                std::vector<float> junk(prev.out_size), junk_lse(prev.lse_size);
                prev.run(junk, junk_lse, with_ws(prev.opt), true);
                std::vector<float> junk2(c.out_size), junk2_lse(c.lse_size);
                c.run(junk2, junk2_lse, with_ws(c.opt), true);
                CHECK(std::any_of(junk2.begin(), junk2.end(), [](float x) { return !std::isfinite(x); }));  // poisoned indeed
            }
            std::vector<float> out(c.out_size, -7.0f), lse(c.lse_size, -7.0f);
            c.run(out, lse, with_ws(c.opt), false);
            CHECK(same_bits(out, expected_out[i]));
            CHECK(same_bits(lse, expected_lse[i]));
            CHECK(ws.bytes() > 0);
            ++compared;
        }
    }
    CHECK(compared == 2 * kinds.size());
    // The expected outputs are finite (the poison did not leak into them through another path).
    for (const auto& out : expected_out) CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
}

namespace {

// A user's transform that runs another attention call on the same workspace from inside the call
// (as a policy that itself attends would): the inner call must find the workspace in use.
struct reentrant_transform {
    posenc::attention_workspace* ws = nullptr;
    const attn_problem* p = nullptr;
    void apply(posenc::heads_view<float>, posenc::heads_view<float>, const posenc::position_ids&) const {
        std::vector<float> out(p->Tq * p->Hq * p->Dv);
        posenc::attention(posenc::attention_encoding{posenc::nope{}}, posenc::heads_view<const float>(p->q.data(), {p->Tq, p->Hq, p->D}),
                          posenc::heads_view<const float>(p->k.data(), {p->Tk, p->Hkv, p->D}),
                          posenc::heads_view<const float>(p->v.data(), {p->Tk, p->Hkv, p->Dv}),
                          posenc::heads_view<float>(out.data(), {p->Tq, p->Hq, p->Dv}), posenc::position_ids(p->qpos),
                          posenc::position_ids(p->kpos), posenc::causal_mask{}, {.workspace = ws});
    }
};

}  // namespace

TEST_CASE("a workspace in use refuses a second call, which writes nothing, and is usable afterwards", "[attention][workspace][errors]") {
    const attn_problem p = make_attn_problem(20, 20, 2, 1, 8, 8, 45);
    posenc::attention_workspace ws;
    std::vector<float> out(20 * 2 * 8, 4.0f);
    const posenc::attention_encoding enc{reentrant_transform{&ws, &p}};
    auto q = posenc::heads_view<const float>(p.q.data(), {20, 2, 8});
    auto k = posenc::heads_view<const float>(p.k.data(), {20, 1, 8});
    auto v = posenc::heads_view<const float>(p.v.data(), {20, 1, 8});
    for (unsigned threads : {1u, 2u}) {
        INFO("threads " << threads);
        try {
            posenc::attention(enc, q, k, v, posenc::heads_view<float>(out.data(), {20, 2, 8}), posenc::position_ids(p.qpos),
                              posenc::position_ids(p.kpos), posenc::causal_mask{},
                              {.threads = threads, .min_fmas_per_thread = 0, .workspace = &ws});
            FAIL("no error");
        } catch (const posenc::config_error& e) {
            CHECK(e.key() == "options.workspace");
            CHECK(e.value() == "in use");
        }
        CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 4.0f; }));
    }
    // Released by the failed call: the same workspace serves a plain call, which equals one without it.
    std::vector<float> with(20 * 2 * 8), without(20 * 2 * 8);
    posenc::attention(posenc::attention_encoding{posenc::nope{}}, q, k, v, posenc::heads_view<float>(with.data(), {20, 2, 8}),
                      posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{}, {.workspace = &ws});
    posenc::attention(posenc::attention_encoding{posenc::nope{}}, q, k, v, posenc::heads_view<float>(without.data(), {20, 2, 8}),
                      posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{});
    CHECK(same_bits(with, without));
}

namespace {

// A transform that, inside the call, signals that it holds the workspace and waits for the go-ahead.
struct waiting_transform {
    std::latch* inside = nullptr;
    std::latch* go = nullptr;
    std::atomic<bool>* waited = nullptr;
    void apply(posenc::heads_view<float>, posenc::heads_view<float>, const posenc::position_ids& pos) const {
        // Once, in the computation (the checks before it probe one position at a time).
        if (pos.size() > 1 && !waited->exchange(true)) {
            inside->count_down();
            go->wait();
        }
    }
};

}  // namespace

TEST_CASE("a workspace held by one thread's call refuses another thread's call", "[attention][workspace][errors][threads]") {
    const attn_problem p = make_attn_problem(20, 20, 2, 1, 8, 8, 46);
    auto q = posenc::heads_view<const float>(p.q.data(), {20, 2, 8});
    auto k = posenc::heads_view<const float>(p.k.data(), {20, 1, 8});
    auto v = posenc::heads_view<const float>(p.v.data(), {20, 1, 8});
    posenc::attention_workspace ws;
    std::latch inside(1), go(1);
    std::atomic<bool> waited{false};
    std::vector<float> first(20 * 2 * 8), second(20 * 2 * 8, 4.0f), without(20 * 2 * 8);
    bool holder_threw = false;
    std::thread holder([&] {
        try {
            posenc::attention(posenc::attention_encoding{waiting_transform{&inside, &go, &waited}}, q, k, v,
                              posenc::heads_view<float>(first.data(), {20, 2, 8}), posenc::position_ids(p.qpos),
                              posenc::position_ids(p.kpos), posenc::causal_mask{}, {.workspace = &ws});
        } catch (...) {
            holder_threw = true;
        }
        if (!waited.exchange(true)) inside.count_down();  // never reached the wait: do not leave the test hanging
    });
    inside.wait();
    std::string key;
    try {
        posenc::attention(posenc::attention_encoding{posenc::nope{}}, q, k, v, posenc::heads_view<float>(second.data(), {20, 2, 8}),
                          posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{}, {.workspace = &ws});
    } catch (const posenc::config_error& e) {
        key = e.key();
    }
    go.count_down();
    holder.join();
    CHECK_FALSE(holder_threw);
    CHECK(key == "options.workspace");
    CHECK(std::all_of(second.begin(), second.end(), [](float x) { return x == 4.0f; }));
    // The holder's call finished normally, with the bits of a call without a workspace.
    posenc::attention(posenc::attention_encoding{posenc::nope{}}, q, k, v, posenc::heads_view<float>(without.data(), {20, 2, 8}),
                      posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{});
    CHECK(same_bits(first, without));
}

TEST_CASE("a workspace's buffers serve a later call only where every dimension fits", "[attention][workspace]") {
    // 16 query heads over 2 (G = 8: query tiles of 16 tokens, 128 rows) and then 4 over 2 (G = 2:
    // tiles of 64 tokens, also 128 rows), both with ALiBi's distance terms (a stride per tile's query
    // span), each on a fresh workspace after the other: the second call needs longer tiles and terms
    // than the first one's buffers have, though as many rows.
    const std::size_t D = 16;
    const attn_problem g8 = make_attn_problem(70, 70, 16, 2, D, D, 47), g2 = make_attn_problem(70, 70, 4, 2, D, D, 48);
    const posenc::alibi_bias alibi16({.heads = 16, .max_bias = 8}), alibi4({.heads = 4, .max_bias = 8});
    auto run = [&](const attn_problem& p, const posenc::alibi_bias& b, posenc::attention_workspace* ws) {
        std::vector<float> out(p.Tq * p.Hq * p.Dv);
        posenc::attention(posenc::attention_encoding{posenc::nope{}, b}, posenc::heads_view<const float>(p.q.data(), {p.Tq, p.Hq, D}),
                          posenc::heads_view<const float>(p.k.data(), {p.Tk, p.Hkv, D}),
                          posenc::heads_view<const float>(p.v.data(), {p.Tk, p.Hkv, D}),
                          posenc::heads_view<float>(out.data(), {p.Tq, p.Hq, D}), posenc::position_ids(p.qpos),
                          posenc::position_ids(p.kpos), posenc::causal_mask{}, {.workspace = ws});
        return out;
    };
    const std::vector<float> want8 = run(g8, alibi16, nullptr), want2 = run(g2, alibi4, nullptr);
    {
        posenc::attention_workspace ws;
        CHECK(same_bits(run(g8, alibi16, &ws), want8));
        CHECK(same_bits(run(g2, alibi4, &ws), want2));
        CHECK(same_bits(run(g8, alibi16, &ws), want8));
    }
    {
        posenc::attention_workspace ws;
        CHECK(same_bits(run(g2, alibi4, &ws), want2));
        CHECK(same_bits(run(g8, alibi16, &ws), want8));
    }
}

TEST_CASE("a workspace's split-KV states grow for a call that needs more of them", "[attention][workspace][threads]") {
    // A prefill on 8 threads first gives the workspace tile buffers for every call below, so that only
    // the split states can grow after it. Then decode over 2100 keys (3 segments): 1 kv head on 3
    // threads (3 units, 1 total), then 4 kv heads on 8 threads (12 units in one wave, 4 totals), then
    // the first again. A counting executor shows that the decodes split (one kv head alone would run
    // on the caller's thread).
    const std::size_t D = 16, Tk = 2100;
    const attn_problem pre = make_attn_problem(70, 70, 16, 4, D, D, 51);
    const attn_problem one = make_attn_problem(1, Tk, 4, 1, D, D, 49), four = make_attn_problem(1, Tk, 16, 4, D, D, 50);
    std::size_t tasks = 0;
    const posenc::executor counting = [&tasks](std::size_t n, const std::function<void(std::size_t)>& task) {
        tasks += n;
        for (std::size_t i = 0; i < n; ++i) task(i);
    };
    auto run = [&](const attn_problem& p, unsigned threads, posenc::attention_workspace* ws) {
        std::vector<float> out(p.Tq * p.Hq * D);
        posenc::attention_options opt{.threads = threads, .min_fmas_per_thread = 0, .workspace = ws};
        opt.executor = counting;
        tasks = 0;
        posenc::attention(posenc::attention_encoding{posenc::nope{}}, posenc::heads_view<const float>(p.q.data(), {p.Tq, p.Hq, D}),
                          posenc::heads_view<const float>(p.k.data(), {p.Tk, p.Hkv, D}),
                          posenc::heads_view<const float>(p.v.data(), {p.Tk, p.Hkv, D}),
                          posenc::heads_view<float>(out.data(), {p.Tq, p.Hq, D}), posenc::position_ids(p.qpos),
                          posenc::position_ids(p.kpos), posenc::causal_mask{}, opt);
        return out;
    };
    const std::vector<float> want1 = run(one, 3, nullptr), want4 = run(four, 8, nullptr);
    posenc::attention_workspace ws;
    CHECK(same_bits(run(pre, 8, &ws), run(pre, 8, nullptr)));
    const std::size_t tiles = ws.bytes();
    CHECK(same_bits(run(one, 3, &ws), want1));
    CHECK(tasks == 3);
    const std::size_t with_one = ws.bytes();
    CHECK(with_one > tiles);
    CHECK(same_bits(run(four, 8, &ws), want4));
    CHECK(tasks == 8);
    CHECK(ws.bytes() > with_one);
    CHECK(same_bits(run(one, 3, &ws), want1));
}

TEST_CASE("a workspace grows for a key copy, a wider V or a move that its earlier calls lacked", "[attention][workspace]") {
    // Each pair on a fresh workspace: the first call's buffers lack what the second needs (a copy of
    // the keys to rotate, wider values) and little else; the second must equal the call without a
    // workspace (a buffer kept too small writes past its end: ASan's builds fail it, and a key copy
    // that was never allocated fails any build), and afterwards the workspace holds at least the
    // bytes that a fresh one holds after the second call alone (what any build can see of a buffer
    // kept too small).
    const std::size_t D = 16;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const attn_problem narrow = make_attn_problem(1, 300, 4, 2, D, 8, 52), wide = make_attn_problem(1, 300, 4, 2, D, 40, 53);
    auto run = [&](const attn_problem& p, bool rotate, posenc::attention_workspace* ws) {
        std::vector<float> out(p.Tq * p.Hq * p.Dv);
        const posenc::heads_view<const float> q(p.q.data(), {p.Tq, p.Hq, D}), k(p.k.data(), {p.Tk, p.Hkv, D}),
            v(p.v.data(), {p.Tk, p.Hkv, p.Dv});
        const posenc::heads_view<float> o(out.data(), {p.Tq, p.Hq, p.Dv});
        const posenc::attention_options opt{.workspace = ws};
        if (rotate)
            posenc::attention(posenc::attention_encoding{rope}, q, k, v, o, posenc::position_ids(p.qpos), posenc::position_ids(p.kpos),
                              posenc::causal_mask{}, opt);
        else
            posenc::attention(posenc::attention_encoding{posenc::nope{}}, q, k, v, o, posenc::position_ids(p.qpos),
                              posenc::position_ids(p.kpos), posenc::causal_mask{}, opt);
        return out;
    };
    const std::vector<float> want_rotated = run(narrow, true, nullptr), want_wide = run(wide, false, nullptr);
    auto fresh_bytes = [&](const attn_problem& p, bool rotate) {
        posenc::attention_workspace alone;
        (void)run(p, rotate, &alone);
        return alone.bytes();
    };
    {
        posenc::attention_workspace ws;  // NoPE reads the keys in place; RoPE copies them to rotate
        (void)run(narrow, false, &ws);
        CHECK(same_bits(run(narrow, true, &ws), want_rotated));
        CHECK(ws.bytes() >= fresh_bytes(narrow, true));
    }
    {
        posenc::attention_workspace ws;  // Dv 8, then Dv 40 (D, heads and tokens the same)
        (void)run(narrow, false, &ws);
        CHECK(same_bits(run(wide, false, &ws), want_wide));
        CHECK(ws.bytes() >= fresh_bytes(wide, false));
    }
    {
        // Prefill packs each V tile (its rows lie a token stride apart) into a buffer of Dv columns:
        // Dv 8, then 16, whose accumulator rows are as long (both round up to 16 floats).
        const attn_problem pre8 = make_attn_problem(70, 70, 4, 2, D, 8, 54), pre16 = make_attn_problem(70, 70, 4, 2, D, 16, 55);
        const std::vector<float> want16 = run(pre16, false, nullptr);
        posenc::attention_workspace ws;
        (void)run(pre8, false, &ws);
        CHECK(same_bits(run(pre16, false, &ws), want16));
        CHECK(ws.bytes() >= fresh_bytes(pre16, false));
    }
    {
        posenc::attention_workspace big, small;  // move-assigned: the target describes the buffers it took
        (void)run(wide, true, &big);
        (void)run(narrow, false, &small);
        big = std::move(small);
        CHECK(same_bits(run(wide, false, &big), want_wide));
        CHECK(big.bytes() >= fresh_bytes(wide, false));
        CHECK(same_bits(run(narrow, true, &big), want_rotated));
        CHECK(big.bytes() >= fresh_bytes(narrow, true));
    }
}
