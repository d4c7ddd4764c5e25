// attention_backward against central finite differences in double (support/grad_attention_check.hpp:
// the independent model, the method and the tolerance) where query heads, query tiles and per-token
// values must be told apart: T5's table under GQA over several query tiles, a per-position logit scale,
// sinks under GQA, softcap after a bias. check_encoding has posenc add every parameter gradient to a
// span of ones, so an assignment in place of the addition fails too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "posenc/attention/options.hpp"
#include "posenc/bias/alibi.hpp"
#include "posenc/bias/t5.hpp"
#include "posenc/grad/attention.hpp"
#include "posenc/rope/default.hpp"
#include "posenc/rope/rotary.hpp"
#include "support/attention_reference.hpp"
#include "support/grad_attention_check.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"

namespace grad_attention_cases_test {

using namespace posenc_test;
using namespace grad_attention_test;

/// Llama 4's attention temperature as HF's Llama4TextAttention writes it:
/// log(floor((cache_position + 1) / floor_scale) + 1) · attn_scale + 1, over √D.
double llama4_closed_scale(std::int64_t pos, double floor_scale, double attn_scale, std::size_t D) {
    const double s = std::log(std::floor((static_cast<double>(pos) + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0;
    return s / std::sqrt(static_cast<double>(D));
}

}  // namespace grad_attention_cases_test

using namespace grad_attention_cases_test;

TEST_CASE("attention_backward equals finite differences: T5's table under GQA over several query tiles", "[grad]") {
    // Hq = 4 on Hkv = 2 (G = 2): query tiles of 64/G = 32 tokens, so 70 tokens make three, and each kv
    // head's rows hold two query heads whose table columns must stay apart. 20 as max_distance with 70
    // tokens: exact and logarithmic buckets both occur, and the last (clipped) one.
    const std::size_t Hq = 4, n = 8;
    const posenc::t5_buckets buckets{.num_buckets = 8, .max_distance = 20, .bidirectional = true};
    std::vector<float> table = random_floats(n * Hq, 131, 1.0f);
    const posenc::t5_bias b(buckets, Hq, table);
    std::vector<param_check> params{{"bias_table", &table, std::vector<float>(table.size())}};
    // q, k, v at every 13th element (53rd under a sanitizer: each difference is two double-model
    // runs); the table at every element.
    const std::size_t stride = posenc_test::sanitized ? 53 : 13;
    const std::size_t compared = check_encoding(
        "t5 gqa tiles", posenc::attention_encoding{posenc::nope{}, b, posenc::fixed_scale{0.5}},
        [&] { return t5_model(&table, Hq, 8, 20, 0.5); }, {}, {.Tq = 70, .Tk = 70, .Hq = Hq, .Hkv = 2, .D = 8, .Dv = 6, .offset = 3, .stride = stride}, {}, params);
    CHECK(compared >= 4 * (n * Hq + (posenc_test::sanitized ? 80 : 320)));  // 81 and 325 of q, k, v per mask
}

TEST_CASE("attention_backward equals finite differences: a per-position logit scale (temperature_scale)", "[grad]") {
    // floor_scale 2 over positions 7..13: the scale changes every other token, inside one query tile.
    const std::size_t D = 8, Hq = 4;
    const posenc::temperature_scale ts{.temperature = {.floor_scale = 2, .attn_scale = 0.8}};
    const auto closed = [](std::int64_t pos) { return llama4_closed_scale(pos, 2, 0.8, 8); };
    REQUIRE(closed(7) != closed(13));
    const case_shape gqa{.Tq = 7, .Tk = 9, .Hq = Hq, .Hkv = 2, .D = D, .Dv = 6, .offset = 5};
    std::size_t compared = check_encoding("temperature_scale", posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, ts},
                                          [&] {
                                              attn_model m;
                                              m.scale = closed;
                                              return m;
                                          },
                                          {}, gqa);
    // With ALiBi added before the scale, the bias's term is scaled per position too.
    const posenc::alibi_bias alibi({.heads = Hq, .max_bias = 8, .order = posenc::bias_order::add_then_scale});
    compared += check_encoding("temperature_scale + alibi add_then_scale", posenc::attention_encoding{posenc::nope{}, alibi, ts},
                               [&] {
                                   attn_model m;
                                   m.scale = closed;
                                   m.add_then_scale = true;
                                   m.bias = [](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
                                       return alibi_closed_slope(h, Hq, 8.0) * static_cast<double>(j - i);
                                   };
                                   return m;
                               },
                               {}, gqa);
    CHECK(compared > 2 * 4 * 400);
}

TEST_CASE("attention_backward equals finite differences: sinks under GQA, softcap after ALiBi in both orders", "[grad]") {
    const std::size_t D = 8, Hq = 4;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 100});
    const auto inv = closed_form_inv_freq(100, D);
    const case_shape gqa{.Tq = 7, .Tk = 9, .Hq = Hq, .Hkv = 2, .D = D, .Dv = 6, .offset = 5};
    std::size_t compared = 0;
    {  // one sink per query head, two query heads per kv head
        std::vector<float> sinks = {0.5f, -1.0f, 0.2f, 2.0f};
        std::vector<param_check> params{{"sinks", &sinks, std::vector<float>(Hq)}};
        compared += check_encoding(
            "sinks gqa", posenc::attention_encoding{rope},
            [&] {
                attn_model m;
                m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
                m.sinks.assign(sinks.begin(), sinks.end());
                return m;
            },
            {}, gqa, {}, params, &sinks);
    }
    for (const auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale}) {
        // softcap 0.9 on logits of a few units (queries × 4): 1 − tanh² applies to scale and bias together
        const posenc::alibi_bias alibi({.heads = Hq, .max_bias = 8, .form = posenc::alibi_form::symmetric, .order = order});
        const bool add_then_scale = order == posenc::bias_order::add_then_scale;
        compared += check_encoding(
            std::string("softcap + alibi ") + (add_then_scale ? "add_then_scale" : "scale_then_add"),
            posenc::attention_encoding{rope, alibi},
            [&] {
                attn_model m;
                m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
                m.add_then_scale = add_then_scale;
                m.softcap = 0.9;
                m.bias = [](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
                    return -alibi_closed_slope(h, Hq, 8.0) * std::abs(static_cast<double>(j - i));
                };
                return m;
            },
            {.softcap = 0.9f}, gqa, [](attn_problem& p) { for (float& x : p.q) x *= 4.0f; });
    }
    CHECK(compared > 3 * 4 * 400);
}

TEST_CASE("attention_backward with no query rows: dk and dv are zero for any thread setting", "[grad]") {
    // No query sees a key, so every key's gradient is 0; with min_fmas_per_thread = 0 the thread count
    // comes from the (zero) work, which must still leave one worker.
    const std::size_t D = 8, Tk = 20, H = 2;
    const posenc::attention_encoding enc{posenc::nope{}};
    std::vector<float> q, out, lse, dout, dq, k(Tk * H * D, 0.5f), v(k.size(), 0.25f), dk(k.size(), 7.0f), dv(k.size(), 7.0f);
    const auto none = posenc::position_ids::consecutive(0, 0), keys = posenc::position_ids::consecutive(0, Tk);
    for (unsigned threads : {1u, 4u}) {
        std::fill(dk.begin(), dk.end(), 7.0f);
        std::fill(dv.begin(), dv.end(), 7.0f);
        posenc::attention_backward(enc, posenc::heads_view<const float>(q.data(), {0, H, D}),
                                   posenc::heads_view<const float>(k.data(), {Tk, H, D}),
                                   posenc::heads_view<const float>(v.data(), {Tk, H, D}),
                                   posenc::heads_view<const float>(out.data(), {0, H, D}), lse,
                                   posenc::heads_view<const float>(dout.data(), {0, H, D}),
                                   posenc::heads_view<float>(dq.data(), {0, H, D}), posenc::heads_view<float>(dk.data(), {Tk, H, D}),
                                   posenc::heads_view<float>(dv.data(), {Tk, H, D}), none, keys, posenc::no_mask{},
                                   {.threads = threads, .min_fmas_per_thread = 0});
        CHECK(std::all_of(dk.begin(), dk.end(), [](float x) { return x == 0.0f; }));
        CHECK(std::all_of(dv.begin(), dv.end(), [](float x) { return x == 0.0f; }));
    }
}
