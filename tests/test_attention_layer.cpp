// posenc::attention_layer (attention/layer.hpp) and hf::make_attention_layers (hf/attention_layer.hpp).
//
// Expected values: the typed templates (attention<Transform, no_bias, Scale, Mask> and kv_cache<Transform>,
// tested against a double reference in test_attention.cpp and test_kv_cache.cpp), called with the
// mask, scale and layout written here from each config file's own numbers (Gemma-3 1B: window 512,
// query_pre_attn_scalar default 256; gpt-oss: window 128, 1/√64, sinks; Llama-4 Scout: chunk 8192,
// NoPE every 4th layer with temperature floor_scale 8192, attn_scale 0.1; Qwen2.5 with
// use_sliding_window: window 4096 from max_window_layers), not taken from the layer object. The
// rotary of the typed call is rotary<Layout> over the config's schedule (the layout named here), so
// the layer's any_rotary and run-time mask/scale must reproduce the typed kernel bit for bit.
//
// Decode through the layer's cache is compared with the typed cache's decode (bit for bit) and with
// a full typed recompute of all tokens (to the attention tests' bound 2e-6·max|v|: with ≤ 8 query
// rows the kernel sums QKᵀ in another order, see test_kv_cache.cpp).
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/layer.hpp>
#include <posenc/attention/workspace.hpp>
#include <posenc/hf/attention_layer.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

namespace posenc_test_layer {

using posenc::heads_view;
using posenc_test::same_bits;  // a bool: a failing CHECK does not print thousands of floats

// Llama-4 Scout's text config, 4 layers (no_rope_layers as the released file lists them: every 4th NoPE).
const char* llama4_scout = R"({"model_type": "llama4_text", "num_attention_heads": 40, "num_key_value_heads": 8,
  "head_dim": 128, "num_hidden_layers": 4, "rope_theta": 500000.0, "no_rope_layers": [1, 1, 1, 0],
  "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192},
  "attention_chunk_size": 8192, "attn_temperature_tuning": true, "floor_scale": 8192, "attn_scale": 0.1,
  "max_position_embeddings": 10485760})";

// qwen2.5-7b-yarn.json with sliding windows on: layers >= max_window_layers (26) slide over 4096.
std::string qwen2_sliding() {
    std::ifstream in(posenc_test::config_path("qwen2.5-7b-yarn.json"));
    nlohmann::json j = nlohmann::json::parse(in);
    j["use_sliding_window"] = true;
    j["sliding_window"] = 4096;
    j["max_window_layers"] = 26;
    return j.dump();
}

struct problem {
    std::size_t T, H, Hkv, D;
    std::vector<float> q, k, v;
    std::vector<std::int64_t> pos;
};

problem make_problem(std::size_t T, std::size_t H, std::size_t Hkv, std::size_t D, std::int64_t start, std::int64_t stride,
                     unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    problem p{T, H, Hkv, D, std::vector<float>(T * H * D), std::vector<float>(T * Hkv * D), std::vector<float>(T * Hkv * D), {}};
    for (auto* x : {&p.q, &p.k, &p.v})
        for (float& f : *x) f = u(gen);
    for (std::size_t t = 0; t < T; ++t) p.pos.push_back(start + static_cast<std::int64_t>(t) * stride);
    return p;
}

heads_view<float> view_of(std::vector<float>& x, std::size_t t0, std::size_t n, std::size_t H, std::size_t D) {
    return {x.data() + t0 * H * D, {n, H, D}};
}
heads_view<const float> cview_of(const std::vector<float>& x, std::size_t t0, std::size_t n, std::size_t H, std::size_t D) {
    return {x.data() + t0 * H * D, {n, H, D}};
}
std::vector<std::int64_t> pos_of(const problem& p, std::size_t t0, std::size_t n) {
    return {p.pos.begin() + static_cast<std::ptrdiff_t>(t0), p.pos.begin() + static_cast<std::ptrdiff_t>(t0 + n)};
}

std::vector<float> random_sinks(std::size_t H) {
    std::mt19937 gen(99);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> s(H);
    for (float& x : s) x = u(gen);
    return s;
}

template <class Layout>
posenc::rotary<Layout> typed_rotary(const posenc::hf::layer_encoding& l) {
    REQUIRE(l.rope.has_value());
    const auto& spec = *l.rope;
    constexpr auto want = std::is_same_v<Layout, posenc::half_split> ? posenc::rope_layout::half_split : posenc::rope_layout::interleaved;
    REQUIRE(spec.layout == want);
    return posenc::rotary<Layout>(spec.dims, posenc::frequencies(spec.schedule, spec.dims.rotary(), 0));
}

/// The layer's prefill and decode steps against the typed calls with (transform, mask, scale).
template <class Transform, class Mask, class Scale>
void check_layer(const posenc::hf::model_layers& model, std::size_t index, const Transform& tr, const Mask& mask,
                 const Scale& scale, const problem& p, std::span<const float> sinks, std::size_t& compared) {
    const std::size_t T = p.T, H = p.H, Hkv = p.Hkv, D = p.D;
    const posenc::attention_options opt{.softcap = 0.0f, .sinks = sinks, .query_sequence = {}, .key_sequence = {},
                                        .keys_transformed = false, .threads = 1};
    const posenc::attention_encoding enc(tr, posenc::no_bias{}, scale);

    // The typed full recompute: the transform inside attention, every token at once.
    std::vector<float> full(T * H * D);
    posenc::attention(enc, cview_of(p.q, 0, T, H, D), cview_of(p.k, 0, T, Hkv, D), cview_of(p.v, 0, T, Hkv, D),
                      view_of(full, 0, T, H, D), p.pos, p.pos, mask, opt);
    // The problem exercises the window, chunk or temperature: causal with 1/√D gives something else.
    std::vector<float> plain(T * H * D);
    posenc::attention(posenc::attention_encoding{tr}, cview_of(p.q, 0, T, H, D), cview_of(p.k, 0, T, Hkv, D),
                      cview_of(p.v, 0, T, Hkv, D), view_of(plain, 0, T, H, D), p.pos, p.pos, posenc::causal_mask{}, opt);
    if constexpr (!std::is_same_v<Mask, posenc::causal_mask> || std::is_same_v<Scale, posenc::temperature_scale>)
        CHECK_FALSE(same_bits(plain, full));

    // 1. Prefill of every token through the layer: the typed call, bit for bit.
    {
        posenc::attention_layer layer = posenc::hf::make_attention_layer(model, index, T);
        if (!sinks.empty()) layer.set_sinks(sinks);
        std::vector<float> out(T * H * D);
        layer.prefill(cview_of(p.q, 0, T, H, D), cview_of(p.k, 0, T, Hkv, D), cview_of(p.v, 0, T, Hkv, D), p.pos,
                      view_of(out, 0, T, H, D));
        CHECK(same_bits(out, full));
        compared += out.size();
    }

    // 2. A prompt, then one token at a time: the typed cache's decode bit for bit, the full
    // recompute's rows to 2e-6·max|v|.
    const std::size_t prompt = T - 10;
    posenc::attention_layer layer = posenc::hf::make_attention_layer(model, index, T);
    if (!sinks.empty()) layer.set_sinks(sinks);
    posenc::kv_cache typed_cache(tr, {.kv_heads = Hkv, .head_dim = D, .value_dim = 0, .capacity = T});
    std::vector<float> out(prompt * H * D);
    layer.prefill(cview_of(p.q, 0, prompt, H, D), cview_of(p.k, 0, prompt, Hkv, D), cview_of(p.v, 0, prompt, Hkv, D),
                  pos_of(p, 0, prompt), view_of(out, 0, prompt, H, D));
    CHECK(same_bits(out, std::vector<float>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(prompt * H * D))));
    typed_cache.append(cview_of(p.k, 0, prompt, Hkv, D), cview_of(p.v, 0, prompt, Hkv, D), pos_of(p, 0, prompt));
    CHECK(layer.size() == prompt);
    CHECK(layer.next_position() == p.pos[prompt - 1] + 1);
    double worst = 0;
    for (std::size_t t = prompt; t < T; ++t) {
        const auto pt = pos_of(p, t, 1);
        layer.append(cview_of(p.k, t, 1, Hkv, D), cview_of(p.v, t, 1, Hkv, D), pt);
        typed_cache.append(cview_of(p.k, t, 1, Hkv, D), cview_of(p.v, t, 1, Hkv, D), pt);
        std::vector<float> o(H * D), typed(H * D);
        layer.attend(cview_of(p.q, t, 1, H, D), pt, view_of(o, 0, 1, H, D));
        posenc::attention(enc, cview_of(p.q, t, 1, H, D), typed_cache, view_of(typed, 0, 1, H, D), pt, mask, opt);
        CHECK(same_bits(o, typed));
        for (std::size_t i = 0; i < o.size(); ++i)
            worst = posenc_test::worst_of(worst, std::abs(static_cast<double>(o[i]) - full[t * H * D + i]));
        compared += o.size();
    }
    CHECK(worst <= 2e-6);  // |v| <= 1
    CHECK(layer.size() == T);
    // The cached keys are the typed cache's (rotated once on append).
    const auto lk = layer.keys(), tk = typed_cache.keys();
    bool same_keys = lk.tokens() == tk.tokens();
    for (std::size_t t = 0; same_keys && t < T; ++t)
        for (std::size_t h = 0; h < Hkv; ++h) same_keys = same_keys && std::memcmp(lk.row(t, h), tk.row(t, h), D * sizeof(float)) == 0;
    CHECK(same_keys);

    // 3. Context shift: the typed cache's shift, then a decode step, bit for bit.
    const std::size_t n_sink = 4, n_recent = T - 30;
    CHECK(layer.context_shift(n_sink, n_recent) == typed_cache.context_shift(n_sink, n_recent));
    const std::int64_t next = layer.next_position();
    REQUIRE(next == typed_cache.next_position());
    const std::vector<float> k1(Hkv * D, 0.25f), v1(Hkv * D, -0.5f);
    const auto p1 = posenc::position_ids::consecutive(next, 1);
    layer.append(cview_of(k1, 0, 1, Hkv, D), cview_of(v1, 0, 1, Hkv, D), p1);
    typed_cache.append(cview_of(k1, 0, 1, Hkv, D), cview_of(v1, 0, 1, Hkv, D), p1);
    std::vector<float> o(H * D), typed(H * D);
    layer.attend(cview_of(p.q, 0, 1, H, D), p1, view_of(o, 0, 1, H, D));
    posenc::attention(enc, cview_of(p.q, 0, 1, H, D), typed_cache, view_of(typed, 0, 1, H, D), p1, mask, opt);
    CHECK(same_bits(o, typed));
    compared += o.size();
}

}  // namespace posenc_test_layer

using namespace posenc_test_layer;

TEST_CASE("attention_layer: each layer kind of real configs equals the typed call, prefill and decode", "[attention_layer]") {
    std::size_t compared = 0, expected = 0;
    auto count = [&](const problem& p) { expected += (p.T + 10 + 1) * p.H * p.D; };

    SECTION("Gemma-3 1B: sliding (512, base 1e4) and full (base 1e6) layers, scale 256^-1/2") {
        const auto m = posenc::hf::load_layers(posenc_test::config_path("gemma-3-1b-v5.json"));
        const problem p = make_problem(96, 4, 1, 256, 5, 8, 1);  // positions 5..765: key distance 512 = W occurs
        check_layer(m, 0, typed_rotary<posenc::half_split>(m.layers[0]), posenc::sliding_window_mask{.window = 512},
                    posenc::fixed_scale{1.0 / 16.0}, p, {}, compared);
        check_layer(m, 5, typed_rotary<posenc::half_split>(m.layers[5]), posenc::causal_mask{}, posenc::fixed_scale{1.0 / 16.0},
                    p, {}, compared);
        count(p), count(p);
    }
    SECTION("gpt-oss 20B: sliding (128) and full YaRN layers with sinks, scale 1/8") {
        const auto m = posenc::hf::load_layers(posenc_test::config_path("gpt-oss-20b.json"));
        const problem p = make_problem(80, 64, 8, 64, 0, 4, 2);  // positions 0..316: distance 128 = W occurs
        const auto sinks = random_sinks(64);
        check_layer(m, 0, typed_rotary<posenc::half_split>(m.layers[0]), posenc::sliding_window_mask{.window = 128},
                    posenc::fixed_scale{0.125}, p, sinks, compared);
        check_layer(m, 1, typed_rotary<posenc::half_split>(m.layers[1]), posenc::causal_mask{}, posenc::fixed_scale{0.125}, p,
                    sinks, compared);
        count(p), count(p);
    }
    SECTION("Llama-4 Scout: chunked (8192) interleaved RoPE layer, NoPE layer with temperature") {
        const auto m = posenc::hf::layers_from_string(llama4_scout);
        const problem p = make_problem(64, 40, 8, 128, 7392, 100, 3);  // 7392..13692: 8192 starts a chunk
        check_layer(m, 0, typed_rotary<posenc::interleaved>(m.layers[0]), posenc::chunked_mask{.chunk = 8192},
                    posenc::inverse_sqrt_scale{}, p, {}, compared);
        check_layer(m, 3, posenc::nope{}, posenc::causal_mask{},
                    posenc::temperature_scale{{.floor_scale = 8192, .attn_scale = 0.1}}, p, {}, compared);
        count(p), count(p);
    }
    SECTION("Qwen2.5 7B with use_sliding_window: full layer 0, sliding (4096) layer 27, YaRN") {
        const auto m = posenc::hf::layers_from_string(qwen2_sliding());
        const problem p = make_problem(80, 28, 4, 128, 11, 64, 4);  // positions 11..5067: distance 4096 = W occurs
        const double s = 1.0 / std::sqrt(128.0);
        check_layer(m, 0, typed_rotary<posenc::half_split>(m.layers[0]), posenc::causal_mask{}, posenc::fixed_scale{s}, p, {},
                    compared);
        check_layer(m, 27, typed_rotary<posenc::half_split>(m.layers[27]), posenc::sliding_window_mask{.window = 4096},
                    posenc::fixed_scale{s}, p, {}, compared);
        count(p), count(p);
    }
    REQUIRE(compared == expected);
}

TEST_CASE("attention_layer: a model's layers from its config", "[attention_layer]") {
    const auto g = posenc::hf::load_layers(posenc_test::config_path("gemma-3-1b-v5.json"));
    const auto layers = posenc::hf::make_attention_layers(g, 32);
    REQUIRE(layers.size() == 8);
    for (std::size_t i = 0; i < 8; ++i) {
        CHECK(layers[i].mask().kind() == (i == 5 ? "causal" : "sliding_window"));
        CHECK(layers[i].capacity() == 32);
        CHECK(layers[i].shape().heads == 4);
        CHECK(layers[i].shape().kv_heads == 1);
        CHECK(layers[i].shape().head_dim == 256);
        REQUIRE(layers[i].rope() != nullptr);
        CHECK(layers[i].rope()->layout() == posenc::rope_layout::half_split);
    }
    CHECK(layers[0].mask().get_if<posenc::sliding_window_mask>()->window == 512);

    const auto l4 = posenc::hf::make_attention_layers(posenc::hf::layers_from_string(llama4_scout), 16);
    CHECK(l4[3].is_nope());
    CHECK(l4[3].rope() == nullptr);
    REQUIRE(l4[3].scale().get_if<posenc::temperature_scale>() != nullptr);
    CHECK(l4[3].scale().get_if<posenc::temperature_scale>()->temperature.floor_scale == 8192.0);
    CHECK(l4[0].rope()->layout() == posenc::rope_layout::interleaved);
    CHECK(l4[0].mask().get_if<posenc::chunked_mask>()->chunk == 8192);

    // gpt-oss: the sinks are weights, not in config.json; the layer refuses to attend without them.
    const auto o = posenc::hf::load_layers(posenc_test::config_path("gpt-oss-20b.json"));
    auto layer = posenc::hf::make_attention_layer(o, 0, 4);
    std::vector<float> q(64 * 64, 0.5f), k(8 * 64, 0.25f), v(8 * 64, 0.75f), out(64 * 64, 7.0f);
    const auto pos = posenc::position_ids::consecutive(0, 1);
    posenc_test::expect_config_error(
        [&] { layer.prefill(cview_of(q, 0, 1, 64, 64), cview_of(k, 0, 1, 8, 64), cview_of(v, 0, 1, 8, 64), pos, view_of(out, 0, 1, 64, 64)); },
        "sinks", "none");
    CHECK(layer.size() == 0);
    CHECK(same_bits(out, std::vector<float>(64 * 64, 7.0f)));
    layer.set_sinks(random_sinks(64));
    layer.prefill(cview_of(q, 0, 1, 64, 64), cview_of(k, 0, 1, 8, 64), cview_of(v, 0, 1, 8, 64), pos, view_of(out, 0, 1, 64, 64));
    CHECK(layer.size() == 1);

    CHECK_THROWS_AS(posenc::hf::make_attention_layer(o, 24, 4), posenc::range_error);
    posenc_test::expect_config_error(
        [] { (void)posenc::hf::make_attention_layers(posenc::hf::load_layers(posenc_test::config_path("deepseek-v3.json")), 4); },
        "model_type", "deepseek_v3");
}

TEST_CASE("attention_layer: Gemma-2 layers take the config's logit softcap in place of the options' one", "[attention_layer]") {
    // Gemma2Config: attn_logit_softcapping = 50.0 by default, an explicit value replaces it, null turns it off;
    // hf/attention_layer.hpp: softcap and sinks come from the config, the options' ones are replaced.
    const std::string g = R"({"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 2304)";
    const auto by_default = posenc::hf::make_attention_layers(posenc::hf::layers_from_string(g + "}"), 8);
    REQUIRE(by_default.size() == 2);
    for (const auto& l : by_default) CHECK(l.softcap() == 50.0f);
    posenc::attention_layer_options o;
    o.softcap = 7.0f;
    const auto set = posenc::hf::make_attention_layers(posenc::hf::layers_from_string(g + R"(, "attn_logit_softcapping": 30.0})"), 8, 0, o);
    for (const auto& l : set) CHECK(l.softcap() == 30.0f);
    const auto off = posenc::hf::make_attention_layers(posenc::hf::layers_from_string(g + R"(, "attn_logit_softcapping": null})"), 8, 0, o);
    for (const auto& l : off) CHECK(l.softcap() == 0.0f);
}

TEST_CASE("attention_layer: bad input throws naming the field, nothing written", "[attention_layer][errors]") {
    const std::size_t H = 4, Hkv = 2, D = 16;
    const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{.base = 10000});
    const posenc::attention_layer_shape shape{.heads = H, .kv_heads = Hkv, .head_dim = D, .value_dim = 0, .capacity = 8};
    using posenc_test::expect_config_error;

    SECTION("construction") {
        auto make = [&](posenc::attention_layer_shape s, posenc::any_mask m = posenc::causal_mask{},
                        posenc::any_scale sc = {}, posenc::attention_layer_options o = {}) {
            return posenc::attention_layer(rope, m, sc, s, std::move(o));
        };
        auto with = [&](auto f) {
            auto s = shape;
            f(s);
            return s;
        };
        expect_config_error([&] { (void)make(with([](auto& s) { s.heads = 0; })); }, "heads", "0");
        expect_config_error([&] { (void)make(with([](auto& s) { s.kv_heads = 3; })); }, "kv_heads", "3");
        expect_config_error([&] { (void)make(with([](auto& s) { s.head_dim = 32; })); }, "head_dim", "32");
        expect_config_error([&] { (void)make(with([](auto& s) { s.capacity = 0; })); }, "capacity", "0");
        expect_config_error([&] { (void)make(shape, posenc::sliding_window_mask{.window = 0}); }, "sliding_window", "0");
        expect_config_error([&] { (void)make(shape, posenc::chunked_mask{.chunk = -2}); }, "attention_chunk_size", "-2");
        expect_config_error([&] { (void)make(shape, posenc::causal_mask{}, posenc::fixed_scale{0.0}); }, "lambda", "0");
        expect_config_error(
            [&] { (void)make(shape, posenc::causal_mask{}, posenc::temperature_scale{{.floor_scale = -1.0, .attn_scale = 0.1}}); },
            "floor_scale", "-1");
        expect_config_error([&] { (void)make(shape, posenc::causal_mask{}, {}, {.softcap = -1.0f, .sinks = {}, .needs_sinks = false, .threads = 1}); },
                            "softcap", "-1");
        expect_config_error([&] { (void)make(shape, posenc::causal_mask{}, {}, {.softcap = 0.0f, .sinks = {1.0f}, .needs_sinks = false, .threads = 1}); },
                            "sinks", "of 1 values");
        posenc::attention_layer ok = make(shape);
        const std::vector<float> nan_sinks{0.0f, 0.0f, std::nanf(""), 0.0f};
        expect_config_error([&] { ok.set_sinks(nan_sinks); }, "sinks", "nan");
        CHECK(ok.sinks().empty());
    }

    SECTION("calls: the cache and out are unchanged after every throw") {
        std::vector<float> q(4 * H * D, 0.5f), k(4 * Hkv * D, 0.25f), v(4 * Hkv * D, -0.25f);
        posenc::attention_layer layer(rope, posenc::causal_mask{}, posenc::any_scale{}, shape);
        std::vector<float> out(2 * H * D);
        layer.prefill(cview_of(q, 0, 2, H, D), cview_of(k, 0, 2, Hkv, D), cview_of(v, 0, 2, Hkv, D),
                      posenc::position_ids::consecutive(10, 2), view_of(out, 0, 2, H, D));
        const std::vector<float> keys(layer.keys().data(), layer.keys().data() + D);
        std::vector<float> o(4 * H * D, 3.0f);
        const std::vector<float> o0 = o;
        auto unchanged = [&] {
            CHECK(layer.size() == 2);
            CHECK(layer.next_position() == 12);
            CHECK(std::memcmp(layer.keys().data(), keys.data(), D * sizeof(float)) == 0);
            CHECK(same_bits(o, o0));
        };
        const auto p12 = posenc::position_ids::consecutive(12, 1);
        // queries with the wrong head count: the layer's own check, before the append
        std::vector<float> q2(2 * D, 0.5f);
        expect_config_error([&] { layer.prefill(cview_of(q2, 0, 1, 2, D), cview_of(k, 0, 1, Hkv, D), cview_of(v, 0, 1, Hkv, D), p12,
                                                view_of(o, 0, 1, H, D)); },
                            "q.heads", "2");
        unchanged();
        // queries of the wrong head_dim, also on a NoPE layer (no transform width to tell): q is named
        std::vector<float> q_half(H * D / 2, 0.5f);
        expect_config_error([&] { layer.attend(cview_of(q_half, 0, 1, H, D / 2), p12, view_of(o, 0, 1, H, D)); }, "q.head_dim",
                            std::to_string(D / 2));
        posenc::attention_layer nope_layer(std::nullopt, posenc::causal_mask{}, posenc::any_scale{}, shape);
        expect_config_error([&] { nope_layer.attend(cview_of(q_half, 0, 1, H, D / 2), p12, view_of(o, 0, 1, H, D)); }, "q.head_dim",
                            std::to_string(D / 2));
        unchanged();
        // out of the wrong length: attention's check, run before the append
        expect_config_error([&] { layer.prefill(cview_of(q, 0, 1, H, D), cview_of(k, 0, 1, Hkv, D), cview_of(v, 0, 1, Hkv, D), p12,
                                                view_of(o, 0, 2, H, D)); },
                            "out.tokens", "2");
        unchanged();
        // a position not past the cached ones: the cache's check
        expect_config_error([&] { layer.prefill(cview_of(q, 0, 1, H, D), cview_of(k, 0, 1, Hkv, D), cview_of(v, 0, 1, Hkv, D),
                                                posenc::position_ids::consecutive(11, 1), view_of(o, 0, 1, H, D)); },
                            "positions[0]", "11");
        unchanged();
        // more tokens than the capacity left (6 of 8)
        std::vector<float> q7(7 * H * D, 0.5f), k7(7 * Hkv * D, 0.25f), v7(7 * Hkv * D, -0.25f), o7(7 * H * D, 3.0f);
        CHECK_THROWS_AS(layer.prefill(cview_of(q7, 0, 7, H, D), cview_of(k7, 0, 7, Hkv, D), cview_of(v7, 0, 7, Hkv, D),
                                      posenc::position_ids::consecutive(20, 7), view_of(o7, 0, 7, H, D)),
                        posenc::range_error);
        CHECK(same_bits(o7, std::vector<float>(7 * H * D, 3.0f)));
        unchanged();
        // a K of the wrong head count through append
        expect_config_error([&] { layer.append(cview_of(k, 0, 1, 1, D), cview_of(v, 0, 1, Hkv, D), p12); }, "k shape", "1x1x16");
        unchanged();
        CHECK_THROWS_AS(layer.context_shift(3, 0), posenc::range_error);
        unchanged();
        expect_config_error([&] { layer.set_softcap(std::nanf("")); }, "softcap", "nan");
        CHECK(layer.softcap() == 0.0f);
    }

    SECTION("a NoPE temperature layer: a negative position fails the scale before the cache takes it") {
        posenc::attention_layer layer(std::nullopt, posenc::causal_mask{}, posenc::temperature_scale{}, shape);
        std::vector<float> q(H * D, 0.5f), k(Hkv * D, 0.25f), v(Hkv * D, -0.25f), o(H * D, 3.0f);
        CHECK_THROWS_AS(layer.prefill(cview_of(q, 0, 1, H, D), cview_of(k, 0, 1, Hkv, D), cview_of(v, 0, 1, Hkv, D),
                                      posenc::position_ids::consecutive(-5, 1), view_of(o, 0, 1, H, D)),
                        posenc::range_error);
        CHECK(layer.size() == 0);
        CHECK(same_bits(o, std::vector<float>(H * D, 3.0f)));
    }
}

TEST_CASE("attention_layer<bf16>: a bf16 cache and the engine's executor give the typed 16-bit call's bits", "[attention_layer][16bit]") {
    using namespace posenc_test_layer;
    const auto g = posenc::hf::load_layers(posenc_test::config_path("gemma-3-1b-v5.json"));
    const std::size_t T = 2100, H = 4, Hkv = 1, D = 256;  // enough work for 2 threads in decode (split-KV)
    const problem p = make_problem(T, H, Hkv, D, 3, 1, 77);
    std::size_t tasks = 0;
    posenc::attention_layer_options o{.threads = 2};
    o.executor_fn = [&tasks](std::size_t n, const std::function<void(std::size_t)>& task) {
        for (std::size_t i = 0; i < n; ++i, ++tasks) task(i);
    };
    auto layers = posenc::hf::make_attention_layers<posenc::bf16>(g, T + 4, 0, o);  // the engine's pool for every layer
    auto& pooled = layers[5];  // a full-attention layer (causal)
    REQUIRE(pooled.mask().kind() == "causal");
    pooled.append(cview_of(p.k, 0, T, Hkv, D), cview_of(p.v, 0, T, Hkv, D), posenc::position_ids(p.pos));
    CHECK(tasks > 0);  // the append's rotation ran on the executor
    tasks = 0;
    std::vector<float> out(H * D), ref(H * D);
    const std::vector<std::int64_t> next{p.pos.back() + 1};
    pooled.attend(cview_of(p.q, 0, 1, H, D), posenc::position_ids(next), view_of(out, 0, 1, H, D));
    // The typed call: kv_cache<rotary<half_split>, bf16> with the same rotary, mask and scale.
    posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> cache(typed_rotary<posenc::half_split>(g.layers[5]),
                                                                             {.kv_heads = Hkv, .head_dim = D, .capacity = T + 4});
    cache.append(cview_of(p.k, 0, T, Hkv, D), cview_of(p.v, 0, T, Hkv, D), posenc::position_ids(p.pos));
    posenc::attention(posenc::attention_encoding(cache.transform(), posenc::no_bias{}, posenc::fixed_scale{g.layers[5].scale}),
                      cview_of(p.q, 0, 1, H, D), cache, view_of(ref, 0, 1, H, D), posenc::position_ids(next), posenc::causal_mask{});
    CHECK(same_bits(out, ref));
    CHECK(tasks > 0);  // so did the attention
    static_assert(std::is_same_v<decltype(pooled.keys()), posenc::heads_view<const posenc::bf16>>);
}

TEST_CASE("attention_layers sharing one workspace give the bits of layers without one", "[attention_layer][workspace]") {
    // An engine's loop: a RoPE layer with a sliding window and a NoPE layer (different tile shapes
    // through one workspace), float and bf16 caches, a prompt of 40 tokens then decode steps, on 1 and
    // 3 threads; the same layers without a workspace give the expected bits.
    const std::size_t H = 8, Hkv = 2, D = 32, T = 40, steps = 3;
    const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{.base = 10000});
    const posenc::attention_layer_shape shape{.heads = H, .kv_heads = Hkv, .head_dim = D, .value_dim = 0, .capacity = 64};
    const problem p = make_problem(T + steps, H, Hkv, D, 0, 1, 53);
    auto run = [&]<class Storage>(posenc::attention_workspace* ws, unsigned threads, Storage) {
        std::vector<posenc::basic_attention_layer<Storage>> layers;
        layers.emplace_back(rope, posenc::sliding_window_mask{.window = 16}, posenc::any_scale{}, shape,
                            posenc::attention_layer_options{.threads = threads, .workspace = ws});
        layers.emplace_back(std::nullopt, posenc::causal_mask{}, posenc::any_scale{}, shape);
        layers.back().set_threads(threads);
        layers.back().set_workspace(ws);
        std::vector<float> out((T + steps) * H * D);
        for (auto& layer : layers) {
            CHECK(layer.workspace() == ws);
            layer.prefill(cview_of(p.q, 0, T, H, D), cview_of(p.k, 0, T, Hkv, D), cview_of(p.v, 0, T, Hkv, D),
                          posenc::position_ids::consecutive(0, T), view_of(out, 0, T, H, D));
            for (std::size_t t = T; t < T + steps; ++t) {
                const auto pos = posenc::position_ids::consecutive(static_cast<std::int64_t>(t), 1);
                layer.append(cview_of(p.k, t, 1, Hkv, D), cview_of(p.v, t, 1, Hkv, D), pos);
                layer.attend(cview_of(p.q, t, 1, H, D), pos, view_of(out, t, 1, H, D));
            }
        }
        return out;
    };
    for (unsigned threads : {1u, 3u}) {
        INFO("threads " << threads);
        posenc::attention_workspace ws;
        CHECK(same_bits(run(&ws, threads, float{}), run(nullptr, threads, float{})));
        CHECK(same_bits(run(&ws, threads, posenc::bf16{}), run(nullptr, threads, posenc::bf16{})));
        CHECK(ws.bytes() > 0);
    }
}
