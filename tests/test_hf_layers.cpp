// hf::parse_layers: one encoding per layer from config.json, for Gemma-3 (v4 and v5 configs), gpt-oss,
// Mistral, Llama 4 (iRoPE: interval and explicit no_rope_layers). Expected values are the configs'
// own numbers and HF's documented defaults (Gemma3TextConfig, GptOssConfig, Llama4TextConfig), not
// posenc's output.
#include <posenc/hf/layers.hpp>

#include <cmath>
#include <string>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"

using namespace posenc_test;

namespace {
double base_of(const posenc::hf::layer_encoding& l) {
    REQUIRE(l.rope.has_value());
    if (const auto* d = std::get_if<posenc::default_rope>(&l.rope->schedule)) return d->base;
    if (const auto* s = std::get_if<posenc::linear>(&l.rope->schedule)) return s->base;
    if (const auto* y = std::get_if<posenc::yarn>(&l.rope->schedule)) return y->base;
    FAIL("unexpected schedule " << l.rope->rope_type());
    return 0;
}

const char* llama4_interval = R"({"model_type": "llama4_text", "num_attention_heads": 40, "num_key_value_heads": 8,
  "head_dim": 128, "num_hidden_layers": 8, "rope_theta": 500000.0, "attention_chunk_size": 8192,
  "attn_temperature_tuning": true, "floor_scale": 8192, "attn_scale": 0.1, "max_position_embeddings": 10485760})";
}  // namespace

TEST_CASE("hf layers: Gemma-3 4B (v4 config): every 6th layer full, sliding 1024, scale 256^-1/2", "[hf][layers]") {
    const auto m = posenc::hf::load_layers(data_path("configs/gemma-3-4b.json"));
    CHECK(m.heads == 8);  // Gemma3TextConfig defaults (the file's text_config has none)
    CHECK(m.kv_heads == 4);
    CHECK(m.head_dim == 256);
    REQUIRE(m.layers.size() == 34);
    std::size_t full = 0, checked = 0;
    for (std::size_t i = 0; i < m.layers.size(); ++i, ++checked) {
        const auto& l = m.layers[i];
        CHECK(l.scale == 1.0 / 16.0);
        CHECK(l.softcap == 0.0f);
        CHECK_FALSE(l.sinks);
        if ((i + 1) % 6 == 0) {
            ++full;
            CHECK(l.kind == posenc::hf::attention_kind::full);
            CHECK(l.rope->rope_type() == "linear");
            CHECK(base_of(l) == 1e6);
        } else {
            CHECK(l.kind == posenc::hf::attention_kind::sliding);
            CHECK(l.window == 1024);
            CHECK(l.rope->rope_type() == "default");
            CHECK(base_of(l) == 10000.0);
        }
    }
    REQUIRE(checked == 34);
    CHECK(full == 5);
}

TEST_CASE("hf layers: Gemma-3 1B (v5 rope_parameters per layer type), gpt-oss, Mistral", "[hf][layers]") {
    const auto g = posenc::hf::load_layers(data_path("configs/gemma-3-1b-v5.json"));
    CHECK(g.heads == 4);
    CHECK(g.kv_heads == 1);
    REQUIRE(g.layers.size() == 8);
    CHECK(g.layers[0].kind == posenc::hf::attention_kind::sliding);
    CHECK(g.layers[0].window == 512);
    CHECK(base_of(g.layers[0]) == 10000.0);
    CHECK(g.layers[5].kind == posenc::hf::attention_kind::full);
    CHECK(base_of(g.layers[5]) == 1e6);

    const auto o = posenc::hf::load_layers(data_path("configs/gpt-oss-20b.json"));
    CHECK(o.heads == 64);
    CHECK(o.kv_heads == 8);
    CHECK(o.head_dim == 64);
    REQUIRE(o.layers.size() == 24);
    std::size_t checked = 0;
    for (std::size_t i = 0; i < 24; ++i, ++checked) {
        const auto& l = o.layers[i];
        CHECK(l.sinks);
        CHECK(l.scale == 0.125);
        CHECK(l.rope->rope_type() == "yarn");
        CHECK(l.kind == (i % 2 == 0 ? posenc::hf::attention_kind::sliding : posenc::hf::attention_kind::full));
        if (i % 2 == 0) CHECK(l.window == 128);
    }
    REQUIRE(checked == 24);

    const auto n = posenc::hf::load_layers(data_path("configs/mistral-nemo.json"));  // sliding_window: null
    CHECK(n.heads == 32);
    CHECK(n.kv_heads == 8);
    REQUIRE(n.layers.size() == 40);
    CHECK(n.layers[0].kind == posenc::hf::attention_kind::full);
    CHECK(n.layers[39].kind == posenc::hf::attention_kind::full);
    const auto w = posenc::hf::layers_from_string(
        R"({"model_type": "mistral", "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
            "num_hidden_layers": 2, "sliding_window": 4096})");
    REQUIRE(w.layers.size() == 2);
    CHECK(w.layers[1].kind == posenc::hf::attention_kind::sliding);
    CHECK(w.layers[1].window == 4096);
    CHECK(w.layers[1].scale == 1.0 / std::sqrt(128.0));
}

TEST_CASE("hf layers: Llama 4 iRoPE, every 4th layer NoPE with the temperature, the rest chunked RoPE", "[hf][layers]") {
    const auto m = posenc::hf::layers_from_string(llama4_interval);
    CHECK(m.heads == 40);
    CHECK(m.kv_heads == 8);
    REQUIRE(m.layers.size() == 8);
    std::size_t checked = 0;
    for (std::size_t i = 0; i < 8; ++i, ++checked) {
        const auto& l = m.layers[i];
        if ((i + 1) % 4 == 0) {
            CHECK_FALSE(l.rope.has_value());
            CHECK(l.kind == posenc::hf::attention_kind::full);
            REQUIRE(l.temperature.has_value());
            CHECK(l.temperature->floor_scale == 8192.0);
            CHECK(l.temperature->attn_scale == 0.1);
        } else {
            REQUIRE(l.rope.has_value());
            CHECK(l.rope->layout == posenc::rope_layout::interleaved);
            CHECK(base_of(l) == 500000.0);
            CHECK(l.kind == posenc::hf::attention_kind::chunked);
            CHECK(l.chunk == 8192);
            CHECK_FALSE(l.temperature.has_value());
        }
    }
    REQUIRE(checked == 8);
    // An explicit no_rope_layers list (1 = RoPE), and temperature tuning off.
    const auto e = posenc::hf::layers_from_string(
        R"({"model_type": "llama4_text", "num_attention_heads": 8, "head_dim": 64, "num_hidden_layers": 3,
            "no_rope_layers": [0, 1, 1], "attn_temperature_tuning": false, "attention_chunk_size": 16})");
    REQUIRE(e.layers.size() == 3);
    CHECK_FALSE(e.layers[0].rope.has_value());
    CHECK_FALSE(e.layers[0].temperature.has_value());
    CHECK(e.layers[1].rope.has_value());
    CHECK(e.layers[2].chunk == 16);
    CHECK(e.kv_heads == 8);  // default: num_attention_heads
}

TEST_CASE("hf layers: invalid per-layer keys throw config_error naming the key", "[hf][layers][errors]") {
    const std::string base = R"("model_type": "llama4_text", "num_attention_heads": 8, "head_dim": 64, "num_hidden_layers": 3)";
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + base + R"(, "num_key_value_heads": 3})"); },
                        "num_key_value_heads", "3");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + base + R"(, "no_rope_layers": [1, 0]})"); },
                        "no_rope_layers", "2 entries");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + base + R"(, "no_rope_layers": [1, 2, 1]})"); },
                        "no_rope_layers", "2");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + base + R"(, "floor_scale": -1})"); },
                        "floor_scale", "-1");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + base + R"(, "attention_chunk_size": 0})"); },
                        "attention_chunk_size", "0");
    const std::string oss = R"("model_type": "gpt_oss", "num_attention_heads": 8, "head_dim": 64, "num_hidden_layers": 2, "rope_theta": 150000)";
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + oss + "}"); }, "sliding_window", "missing");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + oss + R"(, "sliding_window": 128, "layer_types": ["full_attention"]})"); },
                        "layer_types", "1 entries");
    expect_config_error([&] { (void)posenc::hf::layers_from_string("{" + oss + R"(, "layer_types": ["full_attention", "local"]})"); },
                        "layer_types", "local");
    expect_config_error([&] { (void)posenc::hf::layers_from_string(R"({"model_type": "gemma3_text", "attn_logit_softcapping": -5, "num_hidden_layers": 1})"); },
                        "attn_logit_softcapping", "-5");
    expect_config_error([&] { (void)posenc::hf::layers_from_string(R"({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 1})"); },
                        "num_attention_heads", "missing");
}
