// hf::parse_layers: each family's per-layer rule (which layers rotate, slide, chunk) with non-default
// lists, and the per-layer keys a family does not read rejected. Expected layer lists are written
// here by hand from HF's Python (the file cited at each case), evaluated on the test's own inputs;
// none is computed by posenc.
#include <posenc/hf/layers.hpp>

#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"

using namespace posenc_test;

namespace hf_layer_rules_test {

/// One letter per layer: R (RoPE) or N (NoPE), then f / s / c (full, sliding, chunked).
std::vector<std::string> rules_of(const posenc::hf::model_layers& m) {
    std::vector<std::string> out;
    for (const auto& l : m.layers) {
        std::string s = l.rope ? "R" : "N";
        s += l.kind == posenc::hf::attention_kind::sliding ? "s" : l.kind == posenc::hf::attention_kind::chunked ? "c" : "f";
        out.push_back(s);
    }
    return out;
}

using list = std::vector<std::string>;
const std::string small = R"("hidden_size": 256, "num_attention_heads": 4)";

posenc::hf::model_layers layers(const std::string& body) { return posenc::hf::layers_from_string("{" + body + "}"); }

}  // namespace hf_layer_rules_test

using hf_layer_rules_test::layers;
using hf_layer_rules_test::list;
using hf_layer_rules_test::rules_of;
using hf_layer_rules_test::small;

TEST_CASE("hf layer rules: SmolLM3 no_rope_layers / no_rope_layer_interval / use_sliding_window", "[hf][layer-rules]") {
    // modular_smollm3.py: SmolLM3Attention.use_rope = config.no_rope_layers[layer_idx].
    CHECK(rules_of(layers(R"("model_type": "smollm3", )" + small +
                          R"(, "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0])")) == list{"Rf", "Rf", "Rf", "Nf"});
    CHECK(rules_of(layers(R"("model_type": "smollm3", )" + small +
                          R"(, "num_hidden_layers": 5, "no_rope_layers": [0, 1, 0, 1, 1])")) ==
          list{"Nf", "Rf", "Nf", "Rf", "Rf"});
    // SmolLM3Config.__post_init__, interval 3 over 6 layers: int((i + 1) % 3 != 0) = [1, 1, 0, 1, 1, 0];
    // use_sliding_window and sliding_window set: the NoPE layers (has_rope 0) are sliding_attention.
    const auto slide = layers(R"("model_type": "smollm3", )" + small +
                              R"(, "num_hidden_layers": 6, "no_rope_layer_interval": 3, "use_sliding_window": true,
                                 "sliding_window": 64)");
    CHECK(rules_of(slide) == list{"Rf", "Rf", "Ns", "Rf", "Rf", "Ns"});
    CHECK(slide.layers[2].window == 64);
    CHECK(slide.layers[2].layer_type == "sliding_attention");
    // Defaults: interval 4 (NoPE at 3, 7), use_sliding_window false; 4 kv heads, default_theta 2e6.
    const auto d = layers(R"("model_type": "smollm3", )" + small + R"(, "num_hidden_layers": 8, "max_window_layers": 2)");
    CHECK(rules_of(d) == list{"Rf", "Rf", "Rf", "Nf", "Rf", "Rf", "Rf", "Nf"});
    CHECK(d.kv_heads == 4);
    REQUIRE(d.layers[0].rope.has_value());
    CHECK(std::get<posenc::default_rope>(d.layers[0].rope->schedule).base == 2'000'000.0);
    // max_window_layers is stored by SmolLM3Config and read nowhere: said, not applied.
    const auto cfg = posenc::hf::config_from_string(R"({"model_type": "smollm3", )" + small + R"(, "max_window_layers": 2})");
    REQUIRE(cfg.notes.size() == 1);
    CHECK(cfg.notes[0].find("max_window_layers") != std::string::npos);
    // Explicit layer_types with sliding layers but use_sliding_window false: SmolLM3Attention's window
    // is None (full attention); the rotation still follows no_rope_layers.
    const auto typed = layers(R"("model_type": "smollm3", )" + small +
                              R"(, "num_hidden_layers": 3, "no_rope_layers": [1, 0, 1], "sliding_window": 32,
                                 "layer_types": ["full_attention", "sliding_attention", "sliding_attention"])");
    CHECK(rules_of(typed) == list{"Rf", "Nf", "Rf"});
    const auto typed_on = layers(R"("model_type": "smollm3", )" + small +
                                 R"(, "num_hidden_layers": 3, "no_rope_layers": [1, 0, 1], "sliding_window": 32,
                                    "use_sliding_window": true,
                                    "layer_types": ["full_attention", "sliding_attention", "sliding_attention"])");
    CHECK(rules_of(typed_on) == list{"Rf", "Ns", "Rs"});
    // SmolLM3 tests `no_rope_layers is None`: [] is a list of the wrong length, not "absent".
    expect_config_error([] { (void)layers(R"("model_type": "smollm3", )" + small + R"(, "num_hidden_layers": 2, "no_rope_layers": [])"); },
                        "no_rope_layers", "0 entries");
    expect_config_error([] { (void)layers(R"("model_type": "smollm3", )" + small + R"(, "num_hidden_layers": 2, "no_rope_layers": [1, 0, 1])"); },
                        "no_rope_layers", "3 entries");
}

TEST_CASE("hf layer rules: Cohere2 sliding layers rotate, full layers are NoPE", "[hf][layer-rules]") {
    // modular_cohere2.py: layer_types = sliding_attention if (i + 1) % sliding_window_pattern else
    // full_attention; Cohere2Attention applies RoPE only `if self.sliding_window is not None`.
    const std::string c = R"("model_type": "cohere2", "rope_theta": 50000, )" + small;
    const auto p3 = layers(c + R"(, "num_hidden_layers": 6, "sliding_window_pattern": 3)");
    CHECK(rules_of(p3) == list{"Rs", "Rs", "Nf", "Rs", "Rs", "Nf"});
    CHECK(p3.layers[0].window == 4096);  // Cohere2Config's default
    CHECK(p3.layers[0].rope->layout == posenc::rope_layout::interleaved);
    const auto p4 = layers(c + R"(, "num_hidden_layers": 5, "sliding_window": 512)");
    CHECK(rules_of(p4) == list{"Rs", "Rs", "Rs", "Nf", "Rs"});
    CHECK(p4.layers[4].window == 512);
    const auto typed = layers(c + R"(, "layer_types": ["full_attention", "sliding_attention"])");
    CHECK(rules_of(typed) == list{"Nf", "Rs"});
    // sliding_window None: no layer has a window, so none rotates.
    CHECK(rules_of(layers(c + R"(, "num_hidden_layers": 4, "sliding_window": null)")) == list{"Nf", "Nf", "Nf", "Nf"});
}

TEST_CASE("hf layer rules: Llama 4 layer_types picks the mask, no_rope_layers the rotation", "[hf][layer-rules]") {
    // configuration_llama4.py: layer_types default chunked_attention where no_rope_layers is 1;
    // modeling_llama4.py: use_rope = no_rope_layers[layer_idx], the mask per layer_types.
    const std::string l4 = R"("model_type": "llama4_text", "num_attention_heads": 8, "head_dim": 64, "attention_chunk_size": 16)";
    CHECK(rules_of(layers(l4 + R"(, "num_hidden_layers": 4, "no_rope_layers": [1, 0, 0, 1])")) == list{"Rc", "Nf", "Nf", "Rc"});
    CHECK(rules_of(layers(l4 + R"(, "no_rope_layers": [1, 0, 1],
                                   "layer_types": ["full_attention", "full_attention", "chunked_attention"])")) ==
          list{"Rf", "Nf", "Rc"});
    // interval 2 over 4 layers: int((i + 1) % 2 != 0) = [1, 0, 1, 0].
    CHECK(rules_of(layers(l4 + R"(, "num_hidden_layers": 4, "no_rope_layer_interval": 2)")) == list{"Rc", "Nf", "Rc", "Nf"});
}

TEST_CASE("hf layer rules: Phi-3, Gemma-2, Gemma-3, Qwen2 with non-default lists", "[hf][layer-rules]") {
    // modular_phi3.py: sliding_window=getattr(config, "sliding_window", None) on every layer.
    const auto phi = posenc::hf::load_layers(data_path("configs/phi-3-mini-128k.json"));
    REQUIRE_FALSE(phi.layers.empty());
    for (const auto& l : phi.layers) {
        CHECK(l.kind == posenc::hf::attention_kind::sliding);
        CHECK(l.window == 262144);  // the file's sliding_window
    }
    CHECK(rules_of(layers(R"("model_type": "phi3", "rope_theta": 10000, )" + small + R"(, "num_hidden_layers": 2)")) ==
          list{"Rf", "Rf"});  // Phi3Config: sliding_window None
    // Gemma2Config: layer_types given wins over the alternating default.
    CHECK(rules_of(layers(R"("model_type": "gemma2", "num_hidden_layers": 3,
                              "layer_types": ["full_attention", "full_attention", "sliding_attention"])")) ==
          list{"Rf", "Rf", "Rs"});
    // Gemma3TextConfig: sliding_window_pattern 3 over 6 layers, full where (i + 1) % 3 == 0.
    CHECK(rules_of(layers(R"("model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window_pattern": 3)")) ==
          list{"Rs", "Rs", "Rf", "Rs", "Rs", "Rf"});
    // Qwen2Config: sliding_attention where use_sliding_window and i >= max_window_layers (here 3).
    CHECK(rules_of(layers(R"("model_type": "qwen2", "rope_theta": 10000, )" + small +
                          R"(, "num_hidden_layers": 5, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3)")) ==
          list{"Rf", "Rf", "Rf", "Rs", "Rs"});
}

TEST_CASE("hf layer rules: a per-layer key the family does not read is a config_error naming it", "[hf][layer-rules][errors]") {
    const std::string g = small + R"(, "rope_theta": 10000, "num_hidden_layers": 2)";
    // A model_type posenc has no entry for: sliding_window without layer_types (which layers slide?).
    expect_config_error([&] { (void)posenc::hf::layers_from_string(R"({"model_type": "olmo3", "sliding_window": 4096, )" + g + "}",
                                                                  posenc::rope_layout::half_split); },
                        "sliding_window", "4096");
    expect_config_error([&] { (void)layers(R"("model_type": "qwen3", "no_rope_layers": [1, 0], )" + g); }, "no_rope_layers", "[1, 0]");
    expect_config_error([&] { (void)layers(R"("model_type": "mistral", "max_window_layers": 1, )" + g); }, "max_window_layers", "1");
    expect_config_error([&] { (void)layers(R"("model_type": "qwen3_moe", "layer_types": ["full_attention", "full_attention"], )" + g); },
                        "layer_types", "full_attention");
    expect_config_error([&] { (void)layers(R"("model_type": "gemma3_text", "no_rope_layer_interval": 2, "num_hidden_layers": 2)"); },
                        "no_rope_layer_interval", "2");
    expect_config_error([&] { (void)layers(R"("model_type": "cohere2", "use_sliding_window": true, )" + g); }, "use_sliding_window", "true");
    expect_config_error([&] { (void)layers(R"("model_type": "llama4_text", "sliding_window_pattern": 4, )" + g); },
                        "sliding_window_pattern", "4");
    // load_config rejects it too (text_config keys are named with their prefix).
    expect_config_error(
        [&] { (void)posenc::hf::config_from_string(R"({"model_type": "x", "text_config": {"model_type": "qwen3", "attention_chunk_size": 8, )" + g + "}}"); },
        "text_config.attention_chunk_size", "8");
}

TEST_CASE("hf layer rules: what a family's HF attention never reads is ignored with a note, as HF ignores it", "[hf][layer-rules]") {
    const std::string g = small + R"(, "rope_theta": 10000, "num_hidden_layers": 2)";
    // LlamaAttention / Olmo2Attention / DeepseekV3Attention read no per-layer key: the layers stay full.
    for (const std::string& body : {R"("model_type": "llama", "sliding_window": 16, )" + g,
                                   R"("model_type": "olmo2", "layer_types": ["sliding_attention", "full_attention"], )" + g,
                                   R"("model_type": "llama", "use_sliding_window": true, )" + g}) {
        CHECK(rules_of(layers(body)) == list{"Rf", "Rf"});
        const auto cfg = posenc::hf::config_from_string("{" + body + "}");
        bool noted = false;
        for (const auto& n : cfg.notes) noted = noted || n.find("ignored") != std::string::npos;
        CHECK(noted);
    }
    // false changes nothing anywhere (Qwen-style files carry use_sliding_window: false).
    CHECK(rules_of(layers(R"("model_type": "llama", "use_sliding_window": false, )" + g)) == list{"Rf", "Rf"});
}

TEST_CASE("hf layer rules: Ministral / Mistral layer_types, Qwen3-MoE, null windows, Llama 4's numeric temperature flag", "[hf][layer-rules]") {
    const std::string g = small + R"(, "rope_theta": 10000, "num_hidden_layers": 3, "num_key_value_heads": 2)";
    // MinistralConfig: layer_types when given, else sliding_attention on every layer (sliding_window 4096).
    CHECK(rules_of(layers(R"("model_type": "ministral", "layer_types": ["sliding_attention", "full_attention", "sliding_attention"], "sliding_window": 32, )" + g)) ==
          list{"Rs", "Rf", "Rs"});
    const auto mi = layers(R"("model_type": "ministral", )" + g);
    CHECK(rules_of(mi) == list{"Rs", "Rs", "Rs"});
    CHECK(mi.layers[0].window == 4096);
    // A mistral file with layer_types (Ministral-8B's) is read as ministral, as HF's AutoConfig does.
    CHECK(rules_of(layers(R"("model_type": "mistral", "layer_types": ["full_attention", "sliding_attention", "full_attention"], )" + g)) ==
          list{"Rf", "Rs", "Rf"});
    CHECK(rules_of(layers(R"("model_type": "mistral", "sliding_window": null, )" + g)) == list{"Rf", "Rf", "Rf"});
    // Qwen3MoeAttention: getattr(config, "sliding_window") on every layer, None unless use_sliding_window.
    const auto moe = layers(R"("model_type": "qwen3_moe", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 1, )" + g);
    CHECK(rules_of(moe) == list{"Rs", "Rs", "Rs"});
    CHECK(moe.layers[2].window == 64);
    CHECK(rules_of(layers(R"("model_type": "qwen3_moe", "use_sliding_window": false, "sliding_window": 64, )" + g)) ==
          list{"Rf", "Rf", "Rf"});
    // Gemma2 / gpt-oss: sliding_window null is HF's None: no layer slides.
    CHECK(rules_of(layers(R"("model_type": "gemma2", "num_hidden_layers": 2, "sliding_window": null)")) == list{"Rf", "Rf"});
    CHECK(rules_of(layers(R"("model_type": "gemma3_text", "num_hidden_layers": 2, "sliding_window": null)")) == list{"Rf", "Rf"});
    // Llama 4 Scout's released text_config says "attn_temperature_tuning": 4; HF tests its truth.
    const std::string l4 = R"("model_type": "llama4_text", "num_attention_heads": 8, "head_dim": 64, "num_hidden_layers": 4)";
    CHECK(layers(l4 + R"(, "attn_temperature_tuning": 4)").layers[3].temperature.has_value());
    CHECK_FALSE(layers(l4 + R"(, "attn_temperature_tuning": 0)").layers[3].temperature.has_value());
    expect_config_error([&] { (void)layers(l4 + R"(, "attn_temperature_tuning": "yes")"); }, "attn_temperature_tuning");
}

TEST_CASE("hf layer rules: errors name the key whose value is wrong", "[hf][layer-rules][errors]") {
    // YaRN amplitude mscale(40, 1) / mscale(40, -100): the denominator 0.1·(−100)·ln 40 + 1 < 0 is
    // mscale_all_dim's doing.
    expect_config_error(
        [] {
            (void)posenc::hf::config_from_string(R"({"model_type": "deepseek_v3", "rope_theta": 10000, "max_position_embeddings": 163840,
                "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": 1, "mscale_all_dim": -100}})");
        },
        "rope_scaling.mscale_all_dim", "-100");
    // The numerator is mscale's: mscale −100 with a valid mscale_all_dim stays under mscale.
    expect_config_error(
        [] {
            (void)posenc::hf::config_from_string(R"({"model_type": "deepseek_v3", "rope_theta": 10000, "max_position_embeddings": 163840,
                "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": -100, "mscale_all_dim": 1}})");
        },
        "rope_scaling.mscale");
    // A per-layer rope_parameters whose sliding_attention entry is not an object names that entry.
    expect_config_error(
        [] {
            (void)posenc::hf::config_from_string(R"({"model_type": "gemma3_text",
                "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000}, "sliding_attention": 10000}})");
        },
        "rope_parameters.sliding_attention", "10000");
}
