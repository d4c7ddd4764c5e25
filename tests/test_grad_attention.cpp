// attention_backward against central finite differences of L = Σ dOut ⊙ attention(...) in double
// (support/grad_attention_check.hpp: the model, the method and the tolerance).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "posenc/attention/dispatch.hpp"
#include "posenc/attention/partial.hpp"
#include "posenc/bias/alibi.hpp"
#include "posenc/bias/t5.hpp"
#include "posenc/grad/attention.hpp"
#include "posenc/rope/any_rotary.hpp"
#include "posenc/rope/default.hpp"
#include "posenc/rope/mrope.hpp"
#include "posenc/rope/rotary.hpp"
#include "posenc/rope/yarn.hpp"
#include "posenc/xpos/xpos.hpp"
#include "support/attention_reference.hpp"
#include "support/each_arch.hpp"
#include "support/grad_attention_check.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"

using namespace posenc_test;
using namespace grad_attention_test;

TEST_CASE("attention_backward equals finite differences: NoPE, RoPE (both layouts, YaRN's amplitude), xPos", "[grad]") {
    std::size_t compared = 0;
    const std::size_t D = 8;
    compared += check_encoding("nope", posenc::attention_encoding{posenc::nope{}}, plain_model);
    {
        const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 100});
        const auto inv = closed_form_inv_freq(100, D);
        compared += check_encoding("rope half_split", posenc::attention_encoding{rope}, [&] {
            attn_model m;
            m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
            return m;
        });
    }
    {
        const posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{.base = 100});
        const auto inv = closed_form_inv_freq(100, D);
        compared += check_encoding("rope interleaved", posenc::attention_encoding{rope}, [&] {
            attn_model m;
            m.rot_q = m.rot_k = rope_rot(D, true, inv, 1.0);
            return m;
        });
    }
    {  // YaRN: amplitude ≠ 1 on both q and k (its frequencies are tested elsewhere; here the chain rule)
        const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D},
                                      posenc::yarn{.base = 100, .factor = 4, .original_max_position = 8}, 64);
        const auto freq = rope.frequencies();
        REQUIRE(freq.attention_factor != 1.0);
        compared += check_encoding("yarn any_rotary", posenc::attention_encoding{rope}, [&] {
            attn_model m;
            m.rot_q = m.rot_k = rope_rot(D, false, freq.inv_freq, freq.attention_factor);
            return m;
        });
    }
    {  // xPos: queries scaled ζ^(n/512), keys ζ^(−m/512); offset positions so the scales differ from 1
        const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
        compared += check_encoding("xpos", posenc::attention_encoding{xp}, [&] {
            attn_model m;
            m.rot_q = xpos_half_split_rot(D, 1.0);
            m.rot_k = xpos_half_split_rot(D, -1.0);
            return m;
        }, {}, {.offset = 300});
    }
    REQUIRE(compared > 5 * 4 * 300);
}

TEST_CASE("attention_backward equals finite differences: ALiBi, T5 (with its table's gradient), Shaw (with a^K, a^V)",
          "[grad]") {
    std::size_t compared = 0;
    const std::size_t D = 8, Dv = 6, Hq = 2;
    for (auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale}) {
        const posenc::alibi_bias b({.heads = Hq, .max_bias = 8, .form = posenc::alibi_form::symmetric, .order = order});
        compared += check_encoding("alibi", posenc::attention_encoding{posenc::nope{}, b}, [&] {
            attn_model m;
            m.add_then_scale = order == posenc::bias_order::add_then_scale;
            m.bias = [](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
                return -alibi_closed_slope(h, Hq, 8.0) * std::abs(static_cast<double>(j - i));
            };
            return m;
        });
    }
    {  // 8 buckets bidirectional, max_distance 6: exact and logarithmic buckets both occur
        const posenc::t5_buckets buckets{.num_buckets = 8, .max_distance = 6, .bidirectional = true};
        std::vector<float> table = random_floats(8 * Hq, 31, 1.0f);
        const posenc::t5_bias b(buckets, Hq, table);
        std::vector<param_check> params{{"bias_table", &table, std::vector<float>(table.size())}};
        compared += check_encoding(
            "t5", posenc::attention_encoding{posenc::nope{}, b, posenc::fixed_scale{0.5}},
            [&] { return t5_model(&table, Hq, 8, 6, 0.5); }, {}, {}, {}, params);
    }
    {  // Shaw with RoPE on q and k (the a^K term sees the rotated query)
        const std::int64_t kmax = 2;
        std::vector<float> ak = random_floats(5 * D, 41, 0.5f), av = random_floats(5 * Dv, 42, 1.0f);
        const posenc::shaw_rpr shaw({.max_distance = kmax}, ak, D, av, Dv);
        const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 100});
        const auto inv = closed_form_inv_freq(100, D);
        std::vector<param_check> params{{"shaw_keys", &ak, std::vector<float>(ak.size())},
                                        {"shaw_values", &av, std::vector<float>(av.size())}};
        compared += check_encoding(
            "shaw + rope", posenc::attention_encoding{rope, shaw},
            [&] {
                attn_model m = shaw_model(ak, D, av, Dv, kmax);
                m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
                return m;
            },
            {}, {}, {}, params);
    }
    REQUIRE(compared > 4 * 4 * 300);
}

TEST_CASE("attention_backward equals finite differences: softcap, sinks, sequence ids, GQA, keys_transformed", "[grad]") {
    std::size_t compared = 0;
    const std::size_t D = 8;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 100});
    const auto inv = closed_form_inv_freq(100, D);
    const auto rope_model = [&] {
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
        return m;
    };
    {  // softcap 0.7: logits of a few units are capped hard, so 1 − tanh² matters
        compared += check_encoding("softcap", posenc::attention_encoding{rope}, [&] {
            attn_model m = rope_model();
            m.softcap = 0.7;
            return m;
        }, {.softcap = 0.7f}, {.Tq = 7, .Tk = 9, .Hq = 2, .Hkv = 2, .D = D, .Dv = 6, .offset = 5},
            [](attn_problem& p) { for (float& x : p.q) x *= 4.0f; });
    }
    {  // sinks, with their own gradient
        std::vector<float> sinks = {0.5f, -1.0f};
        std::vector<param_check> params{{"sinks", &sinks, std::vector<float>(2)}};
        compared += check_encoding(
            "sinks", posenc::attention_encoding{rope},
            [&] {
                attn_model m = rope_model();
                m.sinks.assign(sinks.begin(), sinks.end());
                return m;
            },
            {}, {}, {}, params, &sinks);
    }
    {  // two packed sequences, positions restarting at 0 in the second
        compared += check_encoding("sequence ids", posenc::attention_encoding{rope}, rope_model, {},
                                   {.Tq = 9, .Tk = 9, .Hq = 2, .Hkv = 2, .D = D, .Dv = 6, .offset = 0},
                                   [](attn_problem& p) {
                                       for (std::size_t t = 0; t < 9; ++t) {
                                           const std::int32_t s = t < 4 ? 0 : 1;
                                           p.qseq.push_back(s);
                                           p.kseq.push_back(s);
                                           p.qpos[t] = p.kpos[t] = s == 0 ? static_cast<std::int64_t>(t)
                                                                          : static_cast<std::int64_t>(t - 4);
                                       }
                                   });
    }
    {  // packed sequences over several tiles: 70 + 80 tokens, so key tiles start mid-sequence and a key
       // tile's first id equals a query tile's last (each q, k, v element 5 apart compared)
        constexpr std::size_t T = 150, first = 70;
        compared += check_encoding("sequence ids, several tiles", posenc::attention_encoding{rope}, rope_model, {},
                                   {.Tq = T, .Tk = T, .Hq = 1, .Hkv = 1, .D = D, .Dv = 4, .offset = 0, .stride = 5},
                                   [](attn_problem& p) {
                                       for (std::size_t t = 0; t < T; ++t) {
                                           const std::int32_t s = t < first ? 0 : 1;
                                           p.qseq.push_back(s);
                                           p.kseq.push_back(s);
                                           p.qpos[t] = p.kpos[t] = static_cast<std::int64_t>(s == 0 ? t : t - first);
                                       }
                                   });
    }
    {  // GQA: 4 query heads on 2 kv heads (dK, dV sum both heads of a group)
        compared += check_encoding("gqa", posenc::attention_encoding{rope}, rope_model, {},
                                   {.Tq = 6, .Tk = 8, .Hq = 4, .Hkv = 2, .D = D, .Dv = 6, .offset = 3});
    }
    {  // keys_transformed: K is taken as already rotated, so dK is with respect to it (no key rotation)
        compared += check_encoding("keys_transformed", posenc::attention_encoding{rope}, [&] {
            attn_model m;
            m.rot_q = rope_rot(D, false, inv, 1.0);
            return m;
        }, {.keys_transformed = true});
    }
    REQUIRE(compared > 5 * 4 * 250);
}

TEST_CASE("attention_backward: a query row that sees no key gets zero gradient", "[grad]") {
    const posenc::t5_buckets buckets{.num_buckets = 8, .max_distance = 6, .bidirectional = true};
    std::vector<float> table = random_floats(8 * 2, 51, 1.0f);
    const posenc::t5_bias b(buckets, 2, table);
    const posenc::attention_encoding enc{posenc::nope{}, b, posenc::fixed_scale{0.5}};
    attn_problem p = make_attn_problem(5, 6, 2, 2, 4, 4, 52, 10);
    p.qpos[0] = p.kpos[0] - 1;  // before every key: causal sees nothing
    const std::vector<float> dout = random_floats(5 * 2 * 4, 53, 1.0f);
    const grad_result g = run_backward(p, enc, posenc::causal_mask{}, {}, dout, {});
    for (std::size_t i = 0; i < 2 * 4; ++i) CHECK(g.dq[i] == 0.0f);  // token 0's rows
    std::vector<param_check> none;
    const std::size_t compared = compare_with_differences(
        "empty row", p, [&] { return t5_model(&table, 2, 8, 6, 0.5); }, see_causal, dout, g, none);
    CHECK(compared == p.q.size() + p.k.size() + p.v.size());
}

TEST_CASE("attention_backward over several tiles: finite differences on a sample, bit-identical for 1, 2, 3 threads",
          "[grad]") {
    // 150 tokens, G = 2: query tiles of 32 tokens and key tiles of 64 keys, so the masks' tile
    // classification (none, partial, all) and the per-item sums run over many tiles. With 2 kv heads,
    // 1 and 2 threads run one sweep per kv head and 3 threads the two passes: the same bits either way.
    const std::size_t D = 8;
    const posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{.base = 1000});
    const auto inv = closed_form_inv_freq(1000, D);
    const posenc::alibi_bias alibi({.heads = 4, .max_bias = 8});
    const posenc::attention_encoding enc{rope, alibi};
    attn_problem p = make_attn_problem(150, 150, 4, 2, D, 8, 61, 0);
    const std::vector<float> dout = random_floats(150 * 4 * 8, 62, 1.0f);
    const auto model_of = [&] {
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(D, true, inv, 1.0);
        m.bias = [](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
            return alibi_closed_slope(h, 4, 8.0) * static_cast<double>(j - i);
        };
        return m;
    };
    std::vector<grad_result> by_threads;
    for (unsigned threads : {1u, 2u, 3u}) {
        posenc::attention_options o;
        o.threads = threads;
        o.min_fmas_per_thread = 0;
        by_threads.push_back(run_backward(p, enc, posenc::sliding_window_mask{70}, o, dout, {}));
    }
    // Tasks run one after another, the last first: its thread takes every unit into one scratch.
    for (unsigned threads : {2u, 3u}) {
        posenc::attention_options o;
        o.threads = threads;
        o.min_fmas_per_thread = 0;
        o.executor = [](std::size_t n, const std::function<void(std::size_t)>& task) {
            for (std::size_t i = n; i-- > 0;) task(i);
        };
        by_threads.push_back(run_backward(p, enc, posenc::sliding_window_mask{70}, o, dout, {}));
    }
    for (std::size_t i = 1; i < by_threads.size(); ++i) {
        CHECK(same_bits(by_threads[i].dq, by_threads[0].dq));
        CHECK(same_bits(by_threads[i].dk, by_threads[0].dk));
        CHECK(same_bits(by_threads[i].dv, by_threads[0].dv));
    }
    const visible_fn window = [](std::int64_t i, std::int64_t j) { return j <= i && i - j < 70; };
    std::vector<param_check> none;
    // Every 37th element (every 149th under a sanitizer: each difference is two double-model runs).
    const std::size_t stride = posenc_test::sanitized ? 149 : 37;
    const std::size_t compared = compare_with_differences("tiles", p, model_of, window, dout, by_threads[0], none, stride);
    CHECK(compared >= (posenc_test::sanitized ? 60 : 250));  // 67 and 260 elements
}

TEST_CASE("attention_backward: T5 and Shaw parameter gradients and sinks are bit-identical for 1, 2, 3 threads", "[grad]") {
    const std::size_t D = 8, Dv = 8, T = 140;
    std::vector<float> ak = random_floats(9 * D, 71, 0.5f), av = random_floats(9 * Dv, 72, 1.0f);
    const posenc::shaw_rpr shaw({.max_distance = 4}, ak, D, av, Dv);
    const posenc::t5_bias t5({.num_buckets = 8, .max_distance = 20, .bidirectional = false}, 2, random_floats(8 * 2, 75, 1.0f));
    // One kv head with G = 2 (five query tiles of 32 tokens), and five kv heads with G = 1 (three tiles
    // of 64). T5: 1 thread runs the single sweep, 2 and 3 threads the two passes (a table buffer per
    // query tile, summed in order). Shaw, with its buffers allowed (the single sweep on 1 thread) and
    // with none (waves of ⌊4·threads/Hkv⌋ tiles: several waves, a kv head's buffers inside each).
    const auto run_threads = [&](const attn_problem& p, const std::vector<float>& dout, const auto& enc, unsigned threads,
                                 std::size_t buffer_bytes, posenc::attention_param_grads pg) {
        posenc::attention_options o;
        o.threads = threads;
        o.min_fmas_per_thread = 0;
        o.max_grad_buffer_bytes = buffer_bytes;
        const std::vector<float> sinks = random_floats(p.Hq, 76, 1.0f);
        o.sinks = sinks;
        const grad_result g = run_backward(p, enc, posenc::causal_mask{}, o, dout, pg);
        std::vector<float> all = g.dq;
        for (const std::vector<float>* x : {&g.dk, &g.dv}) all.insert(all.end(), x->begin(), x->end());
        for (const std::span<float> x : {pg.bias_table, pg.shaw_keys, pg.shaw_values, pg.sinks}) all.insert(all.end(), x.begin(), x.end());
        return all;
    };
    for (const auto& [Hq, Hkv] : {std::pair<std::size_t, std::size_t>{2, 1}, {5, 5}}) {
        INFO("Hq " << Hq << ", Hkv " << Hkv);
        const attn_problem p = make_attn_problem(T, T, Hq, Hkv, D, Dv, 73, 0);
        const std::vector<float> dout = random_floats(T * Hq * Dv, 74, 1.0f);
        std::vector<std::vector<float>> shaw_results, t5_results;
        for (unsigned threads : {1u, 2u, 3u})
            for (std::size_t buffer_bytes : {std::size_t{64} << 20, std::size_t{0}}) {
                std::vector<float> gk(ak.size(), 1.0f), gv(av.size(), 1.0f), gs(Hq, 1.0f), gt(8 * 2, 1.0f);
                shaw_results.push_back(run_threads(p, dout, posenc::attention_encoding{posenc::nope{}, shaw}, threads,
                                                   buffer_bytes, {.shaw_keys = gk, .shaw_values = gv, .sinks = gs}));
                std::fill(gs.begin(), gs.end(), 1.0f);
                if (Hq == 2)
                    t5_results.push_back(run_threads(p, dout, posenc::attention_encoding{posenc::nope{}, t5, posenc::fixed_scale{0.5}},
                                                     threads, buffer_bytes, {.bias_table = gt, .sinks = gs}));
            }
        for (std::size_t i = 1; i < shaw_results.size(); ++i) CHECK(same_bits(shaw_results[i], shaw_results[0]));
        for (std::size_t i = 1; i < t5_results.size(); ++i) CHECK(same_bits(t5_results[i], t5_results[0]));
    }
}

TEST_CASE("attention_backward with bf16 K and V equals the float call on the same values", "[grad]") {
    const std::size_t D = 8;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    attn_problem p = make_attn_problem(20, 30, 2, 1, D, D, 81, 0);
    std::vector<posenc::bf16> kh, vh;
    for (float& x : p.k) kh.emplace_back(x), x = static_cast<float>(kh.back());
    for (float& x : p.v) vh.emplace_back(x), x = static_cast<float>(vh.back());
    const std::vector<float> dout = random_floats(20 * 2 * D, 82, 1.0f);
    const grad_result want = run_backward(p, enc, posenc::causal_mask{}, {}, dout, {});
    std::vector<float> out(20 * 2 * D), lse(40), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
    const posenc::position_ids qpos(std::span<const std::int64_t>(p.qpos)), kpos(std::span<const std::int64_t>(p.kpos));
    posenc::heads_view<const float> q(p.q.data(), {20, 2, D});
    posenc::heads_view<const posenc::bf16> k(kh.data(), {30, 1, D}), v(vh.data(), {30, 1, D});
    posenc::attention_partial(enc, q, k, v, posenc::heads_view<float>(out.data(), {20, 2, D}), lse, qpos, kpos,
                              posenc::causal_mask{});
    posenc::attention_backward(enc, q, k, v, posenc::heads_view<const float>(out.data(), {20, 2, D}), lse,
                               posenc::heads_view<const float>(dout.data(), {20, 2, D}),
                               posenc::heads_view<float>(dq.data(), {20, 2, D}), posenc::heads_view<float>(dk.data(), {30, 1, D}),
                               posenc::heads_view<float>(dv.data(), {30, 1, D}), qpos, kpos, posenc::causal_mask{});
    CHECK(same_bits(dq, want.dq));
    CHECK(same_bits(dk, want.dk));
    CHECK(same_bits(dv, want.dv));
}

TEST_CASE("attention_backward: positions given as position_ids::consecutive give the bits of the same positions as an array",
          "[grad]") {
    // Consecutive key positions let a tile the mask cuts through be masked by two fills per row
    // (visible_keys) instead of a test per key: the same keys hidden, so the same bits, for masks whose
    // edges cross tiles at offsets that are not multiples of the tile (the array call is the one the
    // finite-difference tests check).
    const std::size_t D = 8, T = 150;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    const attn_problem p = make_attn_problem(T, T, 4, 2, D, D, 97, -40);
    const std::vector<float> dout = random_floats(T * 4 * D, 98, 1.0f);
    std::size_t checked = 0;
    auto check = [&](const auto& mask) {
        std::vector<float> want_lse;
        const grad_result want = run_backward(p, enc, mask, {}, dout, {}, &want_lse);
        const auto pos = posenc::position_ids::consecutive(p.qpos[0], T);
        std::vector<float> out(T * 4 * D), lse(T * 4), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
        const posenc::heads_view<const float> q(p.q.data(), {T, 4, D}), k(p.k.data(), {T, 2, D}), v(p.v.data(), {T, 2, D});
        posenc::attention_partial(enc, q, k, v, posenc::heads_view<float>(out.data(), {T, 4, D}), lse, pos, pos, mask);
        posenc::attention_backward(enc, q, k, v, posenc::heads_view<const float>(out.data(), {T, 4, D}), lse,
                                   posenc::heads_view<const float>(dout.data(), {T, 4, D}),
                                   posenc::heads_view<float>(dq.data(), {T, 4, D}), posenc::heads_view<float>(dk.data(), {T, 2, D}),
                                   posenc::heads_view<float>(dv.data(), {T, 2, D}), pos, pos, mask);
        INFO(mask.name);
        CHECK(same_bits(lse, want_lse));
        CHECK(same_bits(dq, want.dq));
        CHECK(same_bits(dk, want.dk));
        CHECK(same_bits(dv, want.dv));
        ++checked;
    };
    check(posenc::causal_mask{});
    check(posenc::sliding_window_mask{.window = 70});
    check(posenc::chunked_mask{.chunk = 50});
    REQUIRE(checked == 3);
}

TEST_CASE("attention_backward rejects bad input before writing anything", "[grad]") {
    const std::size_t T = 4, H = 2, D = 4;
    const posenc::t5_buckets buckets{.num_buckets = 8, .max_distance = 6, .bidirectional = true};
    const posenc::t5_bias t5(buckets, H, random_floats(8 * H, 91, 1.0f));
    const posenc::attention_encoding enc{posenc::nope{}, t5, posenc::fixed_scale{1.0}};
    const std::vector<float> q = random_floats(T * H * D, 92), k = random_floats(T * H * D, 93), v = random_floats(T * H * D, 94),
                             dout = random_floats(T * H * D, 95);
    std::vector<float> out(T * H * D), lse(T * H);
    const auto pos = posenc::position_ids::consecutive(0, T);
    const posenc::heads_view<const float> qv(q.data(), {T, H, D}), kv(k.data(), {T, H, D}), vv(v.data(), {T, H, D});
    posenc::attention_partial(enc, qv, kv, vv, posenc::heads_view<float>(out.data(), {T, H, D}), lse, pos, pos);
    const posenc::heads_view<const float> ov(out.data(), {T, H, D}), dov(dout.data(), {T, H, D});
    std::vector<float> dq(T * H * D, 7.0f), dk(T * H * D, 7.0f), dv(T * H * D, 7.0f), table(8 * H, 7.0f), sinks(H, 7.0f),
        sinks_long(H + 1, 7.0f);
    const posenc::heads_view<float> dqv(dq.data(), {T, H, D}), dkv(dk.data(), {T, H, D}), dvv(dv.data(), {T, H, D});
    auto untouched = [&] {
        for (const auto* x : {&dq, &dk, &dv, &table, &sinks, &sinks_long})
            for (float f : *x)
                if (f != 7.0f) return false;
        return true;
    };
    using Catch::Matchers::Contains;
    const posenc::attention_param_grads tbl{.bias_table = table};
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, std::span<const float>(lse).first(3), dov, dqv, dkv,
                                                 dvv, pos, pos, posenc::no_mask{}, {}, tbl),
                      Contains("lse"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov,
                                                 posenc::heads_view<float>(dq.data(), {T, H, D - 1}), dkv, dvv, pos, pos,
                                                 posenc::no_mask{}, {}, tbl),
                      Contains("dq shape"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, posenc::heads_view<const float>(dout.data(), {T - 1, H, D}),
                                                 dqv, dkv, dvv, pos, pos, posenc::no_mask{}, {}, tbl),
                      Contains("dout shape"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dqv, dvv, pos, pos, posenc::no_mask{}, {}, tbl),
                      Contains("overlaps dk"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos, posenc::no_mask{}, {},
                                                 {.bias_table = std::span<float>(table).first(5)}),
                      Contains("param_grads.bias_table"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos, posenc::no_mask{}, {},
                                                 {.sinks = sinks}),
                      Contains("param_grads.sinks"));
    // With sinks in the options, their gradient needs exactly one entry per query head (not more).
    const std::vector<float> sink_logits(H, 0.5f);
    const posenc::attention_options with_sinks{.sinks = sink_logits};
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos, posenc::no_mask{}, with_sinks,
                                                 {.bias_table = table, .sinks = sinks_long}),
                      Contains("param_grads.sinks"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos,
                                                 posenc::position_ids::consecutive(0, T - 1), posenc::no_mask{}, {}, tbl),
                      Contains("k.tokens"));
    CHECK_THROWS_WITH(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos,
                                                 posenc::sliding_window_mask{0}, {}, tbl),
                      Contains("sliding_window"));
    const posenc::attention_encoding plain{posenc::nope{}};
    CHECK_THROWS_WITH(posenc::attention_backward(plain, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos, posenc::no_mask{}, {}, tbl),
                      Contains("has no table"));
    CHECK(untouched());
    CHECK_NOTHROW(posenc::attention_backward(enc, qv, kv, vv, ov, lse, dov, dqv, dkv, dvv, pos, pos, posenc::no_mask{}, {}, tbl));
    CHECK_FALSE(untouched());  // the checks' inputs were valid apart from the one each broke
}

namespace grad_attention_test {
/// A transform grad/transform.hpp has no backward for: a library transform behind a type of the
/// test's own, declared linear in x, so attention_backward takes its Jacobian from the forward.
/// Wrapping xPos gives a linear transform whose query and key maps differ (its key scales are the
/// inverse of its query scales), so a Jacobian taken with the two maps swapped is wrong.
template <class Transform>
struct linear_wrapper {
    static constexpr bool linear_in_x = true;
    Transform inner;
    void apply(posenc::heads_view<float> q, posenc::heads_view<float> k, const posenc::position_ids& pos) const {
        inner.apply(q, k, pos);
    }
};
using wrapped_rope = linear_wrapper<posenc::rotary<posenc::half_split>>;
using wrapped_xpos = linear_wrapper<posenc::xpos_rotary<posenc::half_split>>;
/// The same without the declaration (attention_backward rejects it at compile time), and one that
/// declares itself not linear (QK-norm before the rotation, as rotary::apply_normed).
struct undeclared_rope {
    posenc::rotary<posenc::half_split> rope;
    void apply(posenc::heads_view<float> q, posenc::heads_view<float> k, const posenc::position_ids& pos) const {
        rope.apply(q, k, pos);
    }
};
struct normed_rope_not_linear {
    static constexpr bool linear_in_x = false;
};
static_assert(posenc::declares_linear_in_x<wrapped_rope>);
static_assert(!posenc::declares_linear_in_x<undeclared_rope>);
static_assert(!posenc::declares_linear_in_x<normed_rope_not_linear>);
static_assert(!posenc::has_transform_backward<wrapped_rope> && !posenc::has_transform_backward<undeclared_rope>);
}  // namespace grad_attention_test

TEST_CASE("attention_backward equals finite differences: a custom transform declared linear, without a backward of its own",
          "[grad]") {
    const std::size_t D = 8;
    const grad_attention_test::wrapped_rope wrapped{posenc::rotary<posenc::half_split>({.head_dim = D}, posenc::default_rope{.base = 100})};
    const auto inv = closed_form_inv_freq(100, D);
    const std::size_t compared = check_encoding("custom transform", posenc::attention_encoding{wrapped}, [&] {
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
        return m;
    });
    CHECK(compared > 4 * 300);
    const grad_attention_test::wrapped_xpos xpos_wrapped{posenc::xpos_rotary<posenc::half_split>({.head_dim = D}, posenc::xpos{})};
    const std::size_t xpos_compared = check_encoding("custom transform, xPos inside", posenc::attention_encoding{xpos_wrapped}, [&] {
        attn_model m;
        m.rot_q = xpos_half_split_rot(D, 1.0);
        m.rot_k = xpos_half_split_rot(D, -1.0);
        return m;
    }, {}, {.offset = 300});
    CHECK(xpos_compared > 4 * 300);
}

TEST_CASE("attention_backward equals finite differences: M-RoPE on text positions (its own backward)", "[grad]") {
    // With one position per token every axis rotates by the same position, so the closed form is RoPE's.
    const std::size_t D = 8;
    const posenc::mrope_rotary<posenc::half_split> mr({.head_dim = D}, posenc::default_rope{.base = 100},
                                                      posenc::mrope{.section = {2, 1, 1}});
    static_assert(posenc::has_transform_backward<posenc::mrope_rotary<posenc::half_split>>);
    const auto inv = closed_form_inv_freq(100, D);
    const std::size_t compared = check_encoding("mrope", posenc::attention_encoding{mr}, [&] {
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
        return m;
    });
    CHECK(compared > 4 * 300);
}

namespace grad_attention_steps_test {

/// The backward's two SIMD steps on one architecture, against sums in double written here:
/// dS = P·(dP − Δ)·f (with and without the row factor) and acc += Pᵀ·V read from a [query][key] block.
/// Returns the number of values compared.
template <class Arch>
std::size_t check_backward_steps_on(Arch) {
    constexpr std::size_t BK = posenc::simd::attn_key_tile;
    const auto ker = posenc::simd::attention_kernels_for<Arch>();
    std::size_t compared = 0;

    // grad_ds over 5 rows: every one of the 64 columns, Δ and the factor per row.
    const std::size_t rows = 5;
    const std::vector<float> p0 = random_floats(rows * BK, 91, 0.3f), dp0 = random_floats(rows * BK, 92, 1.0f);
    const std::vector<float> delta = random_floats(rows, 93, 0.5f), factor = random_floats(rows, 94, 0.4f);
    posenc::detail::attn_floats p(p0.begin(), p0.end());
    for (const bool with_factor : {false, true}) {
        posenc::detail::attn_floats ds(dp0.begin(), dp0.end());
        ker.grad_ds({p.data(), ds.data(), rows, delta.data(), with_factor ? factor.data() : nullptr});
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = 0; j < BK; ++j) {
                const std::size_t at = r * BK + j;
                const double want = static_cast<double>(p0[at]) * (static_cast<double>(dp0[at]) - delta[r]) *
                                    (with_factor ? static_cast<double>(factor[r]) : 1.0);
                CHECK(std::abs(ds[at] - want) <= 4e-7 * std::abs(want) + 1e-30);
                ++compared;
            }
    }

    // The pv step reading the block transposed: 29 keys (the output rows) × 37 query rows, 19 value lanes
    // (a tail past the vectors), the accumulator's own values kept.
    const std::size_t keys = 29, queries = 37, dv = 19, stride = 32;
    const std::vector<float> block = random_floats(queries * BK, 95, 0.5f), vals = random_floats(queries * dv, 96, 1.0f);
    const std::vector<float> acc0 = random_floats(keys * stride, 97, 1.0f);
    posenc::detail::attn_floats pb(block.begin(), block.end()), acc(acc0.begin(), acc0.end());
    ker.pv({pb.data(), keys, queries, vals.data(), dv, dv, acc.data(), stride, posenc::dtype::f32, true});
    for (std::size_t j = 0; j < keys; ++j)
        for (std::size_t c = 0; c < dv; ++c) {
            double want = acc0[j * stride + c], size = std::abs(want);
            for (std::size_t r = 0; r < queries; ++r) {
                const double term = static_cast<double>(block[r * BK + j]) * vals[r * dv + c];
                want += term;
                size += std::abs(term);
            }
            CHECK(std::abs(acc[j * stride + c] - want) <= 1e-5 * size);
            ++compared;
        }
    return compared;
}

}  // namespace grad_attention_steps_test

TEST_CASE("attention_backward's SIMD steps on every architecture: dS and the transposed pv against double sums", "[grad]") {
    std::size_t compared = 0;
    const auto check = [&](auto arch) { compared += grad_attention_steps_test::check_backward_steps_on(arch); };
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, check) >= 1);
    CHECK(compared > 2 * 5 * 64);
}
