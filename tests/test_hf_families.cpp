// The HF config reader's per-family rules: the defaults of HF's config classes when a key is absent,
// families that must state rope_theta, family-specific key names (GPT-J's n_head / n_layer), and
// rope dicts per layer type. Expected values are the defaults of HF's config classes
// (configuration_<model>.py, quoted per check) or the configs' own numbers, never posenc's output.
// (The names keep the "hf11b:" prefix they were selected by.)
#include <posenc/hf/layers.hpp>

#include <cmath>
#include <string>

#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace posenc_test;
using posenc::hf::attention_kind;

namespace {
double spec_base(const posenc::hf::rope_spec& r) {
    if (const auto* d = std::get_if<posenc::default_rope>(&r.schedule)) return d->base;
    if (const auto* y = std::get_if<posenc::yarn>(&r.schedule)) return y->base;
    FAIL("unexpected schedule " << r.rope_type());
    return 0;
}
}  // namespace

TEST_CASE("hf11b: family defaults are those of HF's config classes", "[hf][config][layers]") {
    // MixtralConfig: default_theta 1e6, num_key_value_heads 8, max_position_embeddings 4096*32,
    // sliding_window None (absent: every layer full).
    const auto mx = posenc::hf::layers_from_string(
        R"({"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2})");
    REQUIRE(mx.layers.size() == 2);
    CHECK(spec_base(*mx.layers[0].rope) == 1e6);
    CHECK(mx.kv_heads == 8);
    CHECK(mx.layers[1].kind == attention_kind::full);
    CHECK(posenc::hf::config_from_string(R"({"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32})")
              .max_position_embeddings == 131072);
    // PhimoeConfig: rope_theta 1e6.
    CHECK(spec_base(posenc::hf::config_from_string(R"({"model_type": "phimoe", "hidden_size": 4096, "num_attention_heads": 32})")
                      .rope) == 1e6);
    // Llama4TextConfig: default_theta 500000, num_key_value_heads 8.
    const auto l4 = posenc::hf::layers_from_string(
        R"({"model_type": "llama4_text", "num_attention_heads": 40, "head_dim": 128, "num_hidden_layers": 4})");
    CHECK(l4.kv_heads == 8);
    CHECK(spec_base(*l4.layers[0].rope) == 500000.0);
    // GemmaConfig: head_dim 256 (not hidden_size / heads = 3072 / 16 = 192).
    CHECK(posenc::hf::config_from_string(R"({"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16})")
              .rope.dims.head_dim == 256);
    // MistralConfig: sliding_window 4096, so without the key every layer slides; null: none does.
    const auto ms = posenc::hf::layers_from_string(
        R"({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 3})");
    CHECK(ms.kv_heads == 8);
    std::size_t compared = 0;
    for (const auto& l : ms.layers) {
        CHECK(l.kind == attention_kind::sliding);
        CHECK(l.window == 4096);
        ++compared;
    }
    REQUIRE(compared == 3);
    const auto mn = posenc::hf::layers_from_string(
        R"({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 3,
            "sliding_window": null})");
    CHECK(mn.layers[2].kind == attention_kind::full);
    // Qwen3MoeConfig (v5): 4 kv heads, max_position_embeddings 32768; sliding only with
    // use_sliding_window, then on every layer (Qwen3MoeAttention: getattr(config, "sliding_window");
    // v5's class has no max_window_layers) with 4096.
    const char* qm = R"({"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "head_dim": 128,
                         "num_hidden_layers": 30, "use_sliding_window": %s})";
    auto qwen3_moe = [&](const char* use) {
        std::string s = qm;
        s.replace(s.find("%s"), 2, use);
        return posenc::hf::layers_from_string(s);
    };
    const auto q_off = qwen3_moe("false");
    CHECK(q_off.kv_heads == 4);
    CHECK(q_off.layers[29].kind == attention_kind::full);
    const auto q_on = qwen3_moe("true");
    CHECK(q_on.layers[0].kind == attention_kind::sliding);
    CHECK(q_on.layers[28].kind == attention_kind::sliding);
    CHECK(q_on.layers[29].window == 4096);
    CHECK(posenc::hf::config_from_string(R"({"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32})")
              .max_position_embeddings == 32768);
}

TEST_CASE("hf11b: a family whose HF class posenc has not checked needs rope_theta", "[hf][config][errors]") {
    // olmo's entry is unchecked: no silent 10000.
    expect_config_error(
        [] { (void)posenc::hf::config_from_string(R"({"model_type": "olmo", "hidden_size": 2048, "num_attention_heads": 16})"); },
        "rope_theta", "olmo");
    // Given at the top level or in the rope dict, it is read.
    CHECK(spec_base(posenc::hf::config_from_string(
                      R"({"model_type": "olmo", "hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 500000})")
                      .rope) == 500000.0);
    CHECK(spec_base(posenc::hf::config_from_string(R"({"model_type": "olmo", "hidden_size": 2048, "num_attention_heads": 16,
                                                     "rope_parameters": {"rope_type": "default", "rope_theta": 20000}})")
                      .rope) == 20000.0);
    // A checked family keeps its class default (LlamaConfig: 10000).
    CHECK(spec_base(posenc::hf::config_from_string(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32})")
                      .rope) == 10000.0);
}

TEST_CASE("hf11b: Qwen3-VL yarn rope dict with mrope_section / mrope_interleaved", "[hf][config][mrope]") {
    const auto cfg = posenc::hf::config_from_string(R"({"model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
        "max_position_embeddings": 262144, "rope_theta": 5000000,
        "rope_scaling": {"rope_type": "yarn", "mrope_section": [24, 20, 20], "mrope_interleaved": true,
                         "factor": 3, "original_max_position_embeddings": 262144}}})");
    REQUIRE(cfg.rope.rope_type() == "yarn");
    const auto& y = std::get<posenc::yarn>(cfg.rope.schedule);
    CHECK(y.factor == 3.0);
    CHECK(y.original_max_position == 262144);
    CHECK(y.base == 5e6);
    REQUIRE(cfg.rope.is_mrope());
    CHECK(cfg.rope.mrope_section == std::vector<std::int64_t>{24, 20, 20});
    CHECK(cfg.rope.mrope_interleaved);
    const auto rope = cfg.rope.make_mrope();
    CHECK(rope.params().section == std::array<std::size_t, 3>{24, 20, 20});
    // The section is still checked against rotary_dim / 2 = 64 with a yarn schedule.
    expect_config_error([] {
        (void)posenc::hf::config_from_string(R"({"model_type": "qwen3_vl_text", "hidden_size": 4096, "num_attention_heads": 32,
            "rope_scaling": {"rope_type": "yarn", "mrope_section": [24, 20, 19], "factor": 3,
                             "original_max_position_embeddings": 4096}})");
    }, "rope_scaling.mrope_section", "19");
    // A family without M-RoPE still rejects the keys.
    expect_config_error([] {
        (void)posenc::hf::config_from_string(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
            "rope_scaling": {"rope_type": "linear", "factor": 2, "mrope_section": [16, 24, 24]}})");
    }, "rope_scaling.mrope_section");
}

TEST_CASE("hf11b: parse_layers reads GPT-J's n_head / n_layer", "[hf][layers]") {
    const auto m = posenc::hf::layers_from_string(
        R"({"model_type": "gptj", "n_embd": 4096, "n_head": 32, "n_layer": 5, "rotary_dim": 64, "n_positions": 2048})");
    CHECK(m.heads == 32);
    CHECK(m.kv_heads == 32);
    CHECK(m.head_dim == 128);  // n_embd / n_head
    CHECK(m.layers.size() == 5);
    expect_config_error(
        [] { (void)posenc::hf::layers_from_string(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 32, "rotary_dim": 64})"); },
        "n_layer");
}

TEST_CASE("hf11b: per-layer-type rope dicts ignore the top-level original_max_position_embeddings", "[hf][config]") {
    // HF v5 standardize_rope_params, per-layer case: setdefault(original_max_position_embeddings,
    // max_position_embeddings) in each dict; the top-level value has no priority there.
    const auto cfg = posenc::hf::config_from_string(R"({"model_type": "gemma3_text", "hidden_size": 1152,
        "num_attention_heads": 4, "head_dim": 256, "max_position_embeddings": 32768,
        "original_max_position_embeddings": 8192, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4, "rope_theta": 1000000},
                            "sliding_attention": {"rope_type": "yarn", "factor": 2, "rope_theta": 10000,
                                                  "original_max_position_embeddings": 4096}}})");
    CHECK(std::get<posenc::yarn>(cfg.rope_for("full_attention").schedule).original_max_position == 32768);
    CHECK(std::get<posenc::yarn>(cfg.rope_for("sliding_attention").schedule).original_max_position == 4096);
    // One dict: the top-level value wins (HF's Phi-3 exception, as before).
    const auto one = posenc::hf::config_from_string(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "max_position_embeddings": 32768, "original_max_position_embeddings": 8192,
        "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096}})");
    CHECK(std::get<posenc::yarn>(one.rope.schedule).original_max_position == 8192);
}

TEST_CASE("hf11b: Qwen2 layer_types without use_sliding_window attend fully", "[hf][layers]") {
    // Qwen2Config.__post_init__: sliding_window = None unless use_sliding_window; a sliding_attention
    // layer then runs with window None.
    const char* text = R"({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "rope_theta": 1000000, "sliding_window": 1024, "use_sliding_window": %s,
        "layer_types": ["full_attention", "sliding_attention"]})";
    auto layers = [&](const char* use) {
        std::string s = text;
        s.replace(s.find("%s"), 2, use);
        return posenc::hf::layers_from_string(s);
    };
    const auto off = layers("false");
    CHECK(off.layers[1].layer_type == "sliding_attention");
    CHECK(off.layers[1].kind == attention_kind::full);
    CHECK(off.layers[1].window == 0);
    const auto on = layers("true");
    CHECK(on.layers[1].kind == attention_kind::sliding);
    CHECK(on.layers[1].window == 1024);
    CHECK(on.layers[0].kind == attention_kind::full);
}
