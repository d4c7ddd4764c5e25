// HF parity at the edges of what a config may say (issue 11): each expected value is a closed form in
// double written from HF's modeling_rope_utils.py / config classes, or the class's documented default.
#include <posenc/hf/layers.hpp>

#include <cmath>
#include <numbers>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/readme.hpp"
#include "support/reference.hpp"

using nlohmann::json;
using posenc_test::expect_config_error;

namespace {

std::vector<double> inv_of(const posenc::hf::rope_spec& spec, std::int64_t seq_len = 0) {
    return posenc::frequencies(spec.schedule, spec.dims.rotary(), seq_len).inv_freq;
}

// HF's _compute_yarn_parameters in double (find_correction_range, linear_ramp_factor with its +0.001).
std::vector<double> hf_yarn(double base, std::size_t dim, double factor, double beta_fast, double beta_slow, double L0,
                            bool truncate) {
    auto corr = [&](double rot) { return dim * std::log(L0 / (rot * 2 * std::numbers::pi)) / (2 * std::log(base)); };
    double lo = corr(beta_fast), hi = corr(beta_slow);
    if (truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(dim) - 1);
    if (lo == hi) hi += 0.001;
    std::vector<double> inv;
    for (std::size_t i = 0; i < dim / 2; ++i) {
        const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
        const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
        inv.push_back(1.0 / (factor * pos_freq) * ramp + 1.0 / pos_freq * (1.0 - ramp));
    }
    return inv;
}

}  // namespace

TEST_CASE("Llama-4 Scout: llama3 with low_freq_factor == high_freq_factor == 1 is read, no blended band", "[hf][parity]") {
    // The real config's shape (text_config of Llama-4-Scout-17B-16E).
    const json scout{{"model_type", "llama4"},
                     {"text_config",
                      {{"model_type", "llama4_text"}, {"head_dim", 128}, {"hidden_size", 5120}, {"num_attention_heads", 40},
                       {"rope_theta", 500000.0}, {"max_position_embeddings", 10485760},
                       {"rope_scaling",
                        {{"rope_type", "llama3"}, {"factor", 16.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 1.0},
                         {"original_max_position_embeddings", 8192}}}}}};
    const auto cfg = posenc::hf::parse_config(scout);
    const auto inv = inv_of(cfg.rope);
    REQUIRE(inv.size() == 64);
    // HF: wavelen > L0/low → θ/factor; wavelen < L0/high → θ; the band between is empty.
    std::size_t kept = 0, divided = 0;
    for (std::size_t i = 0; i < 64; ++i) {
        const double theta = std::pow(500000.0, -static_cast<double>(2 * i) / 128.0);
        const double wavelen = 2 * std::numbers::pi / theta;
        const double expected = wavelen > 8192.0 ? theta / 16.0 : theta;
        (wavelen > 8192.0 ? divided : kept) += 1;
        CHECK(std::abs(inv[i] - expected) <= 1e-14 * expected);
    }
    CHECK(kept + divided == 64);
    CHECK(kept > 0);
    CHECK(divided > 0);
    // Equal factors other than 1 too; only high < low stays an error.
    CHECK_NOTHROW(posenc::llama3{.factor = 8, .low_freq_factor = 4, .high_freq_factor = 4, .original_max_position = 8192}
                      .frequencies(128));
    expect_config_error(
        [] {
            (void)posenc::llama3{.factor = 8, .low_freq_factor = 4, .high_freq_factor = 2, .original_max_position = 8192}
                .frequencies(128);
        },
        "high_freq_factor", "2");
}

TEST_CASE("yarn with beta_fast == beta_slow equals HF's ramp with its +0.001", "[hf][parity]") {
    struct yarn_case {
        double original, beta;
        bool truncate;
    };
    // The last case puts both correction dims in (-1, 0): floor/ceil and the clamps give low == high == 0,
    // where HF's +0.001 turns the ramp's 0/0 at pair 0 into 0.
    const yarn_case cases[] = {{32768, 8.0, true}, {32768, 8.0, false}, {64, 11.32, true}};
    std::size_t compared = 0;
    for (const auto& [original, beta, truncate] : cases) {
        const json c{{"model_type", "qwen2"}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 1e6},
                     {"max_position_embeddings", 131072},
                     {"rope_scaling",
                      {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", original},
                       {"beta_fast", beta}, {"beta_slow", beta}, {"truncate", truncate}}}};
        const auto inv = inv_of(posenc::hf::parse_config(c).rope);
        const auto expected = hf_yarn(1e6, 128, 4.0, beta, beta, original, truncate);
        REQUIRE(inv.size() == expected.size());
        for (std::size_t i = 0; i < inv.size(); ++i, ++compared) {
            INFO("original " << original << " truncate " << truncate << " pair " << i);
            CHECK(std::isfinite(inv[i]));
            CHECK(std::abs(inv[i] - expected[i]) <= 1e-14 * expected[i]);
        }
    }
    REQUIRE(compared == 192);
}

TEST_CASE("GPT-J: rope_theta and rope_scaling are ignored as HF's GPT-J ignores them, and said so", "[hf][parity]") {
    const json gptj{{"model_type", "gptj"}, {"n_embd", 4096}, {"n_head", 16}, {"rotary_dim", 64}, {"rope_theta", 500000.0},
                    {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}};
    const auto cfg = posenc::hf::parse_config(gptj);
    CHECK(cfg.rope.rope_type() == "default");
    const auto inv = inv_of(cfg.rope);
    const auto expected = posenc_test::closed_form_inv_freq(10000.0, 64);  // modeling_gptj: 10000 ** (arange(0, d, 2) / d)
    REQUIRE(inv.size() == expected.size());
    CHECK(posenc_test::max_rel_diff(inv, expected) <= 1e-15);
    REQUIRE(cfg.notes.size() == 2);
    CHECK(cfg.notes[0].find("rope_theta") != std::string::npos);
    CHECK(cfg.notes[1].find("rope_scaling") != std::string::npos);
    CHECK(cfg.max_position_embeddings == 2048);  // GPTJConfig n_positions default
    CHECK(cfg.max_position_embeddings_source == "default of gptj (2048)");
}

TEST_CASE("Phi-3 without a top-level original_max_position_embeddings takes Phi3Config's 4096", "[hf][parity]") {
    json phi{{"model_type", "phi3"}, {"hidden_size", 3072}, {"num_attention_heads", 32}, {"max_position_embeddings", 131072},
             {"rope_scaling",
              {{"type", "longrope"}, {"short_factor", std::vector<double>(48, 1.0)}, {"long_factor", std::vector<double>(48, 2.0)}}}};
    const auto cfg = posenc::hf::parse_config(phi);
    const auto f = posenc::frequencies(cfg.rope.schedule, cfg.rope.dims.rotary(), 0);
    // factor = 131072 / 4096 = 32; HF: attention_factor = sqrt(1 + ln(factor) / ln(original)).
    const double expected = std::sqrt(1.0 + std::log(32.0) / std::log(4096.0));
    CHECK(std::abs(f.attention_factor - expected) <= 1e-15);
    // What the 4096 default changes: the switch from short_factor (1) to long_factor (2) between
    // seq_len 4096 and 4097. HF longrope: inv_freq = 1 / (ext · base^(2i/d)), head_dim 3072/32 = 96.
    const auto at_4096 = posenc::frequencies(cfg.rope.schedule, cfg.rope.dims.rotary(), 4096);
    const auto at_4097 = posenc::frequencies(cfg.rope.schedule, cfg.rope.dims.rotary(), 4097);
    REQUIRE(at_4096.inv_freq.size() == 48);
    REQUIRE(at_4097.inv_freq.size() == 48);
    std::size_t compared = 0;
    for (std::size_t i = 0; i < 48; ++i, ++compared) {
        const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / 96.0);
        CHECK(std::abs(at_4096.inv_freq[i] - theta) <= 1e-15 * theta);
        CHECK(std::abs(at_4097.inv_freq[i] - theta / 2.0) <= 1e-15 * theta);
    }
    REQUIRE(compared == 48);
}

TEST_CASE("the top-level original_max_position_embeddings wins over the rope dict's in any family (HF v5)", "[hf][parity]") {
    const json c{{"model_type", "llama"}, {"head_dim", 64}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                 {"rope_theta", 10000.0}, {"max_position_embeddings", 65536}, {"original_max_position_embeddings", 4096},
                 {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 8192}}}};
    const auto inv = inv_of(posenc::hf::parse_config(c).rope);
    const auto expected = hf_yarn(10000.0, 64, 8.0, 32.0, 1.0, 4096.0, true);
    REQUIRE(inv.size() == expected.size());
    CHECK(posenc_test::max_rel_diff(inv, expected) <= 1e-14);
    CHECK(posenc_test::max_rel_diff(inv, hf_yarn(10000.0, 64, 8.0, 32.0, 1.0, 8192.0, true)) > 1e-6);  // not the dict's
}

TEST_CASE("hidden_size not a multiple of the heads: floored where HF floors, an error where the class raises", "[hf][parity]") {
    // MistralConfig: head_dim = hidden_size // num_attention_heads → 4100 // 32 = 128.
    const json mistral{{"model_type", "mistral"}, {"hidden_size", 4100}, {"num_attention_heads", 32}};
    const auto m = posenc::hf::parse_config(mistral);
    CHECK(m.rope.dims.head_dim == 128);
    CHECK(posenc_test::max_rel_diff(inv_of(m.rope), posenc_test::closed_form_inv_freq(10000.0, 128)) <= 1e-15);
    // LlamaConfig (v5) validate_architecture raises; GPT-J's attention raises too.
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "llama"}, {"hidden_size", 4100}, {"num_attention_heads", 32}}); },
                        "hidden_size", "4100");
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "gptj"}, {"n_embd", 4100}, {"n_head", 32}}); },
                        "n_embd", "4100");
}

TEST_CASE("a missing max_position_embeddings takes the config class's default and says so", "[hf][parity]") {
    // Qwen2Config max_position_embeddings 32768: yarn without an original length uses it.
    const json qwen{{"model_type", "qwen2"}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 1e6},
                    {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}};
    const auto q = posenc::hf::parse_config(qwen);
    CHECK(q.max_position_embeddings == 32768);
    CHECK(q.max_position_embeddings_source == "default of qwen2 (32768)");
    CHECK(posenc_test::max_rel_diff(inv_of(q.rope), hf_yarn(1e6, 128, 4.0, 32.0, 1.0, 32768.0, true)) <= 1e-14);
    // LlamaConfig 2048 (dynamic NTK's L0); a given key is named as written.
    const json llama{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                     {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}};
    const auto l = posenc::hf::parse_config(llama);
    CHECK(l.max_position_embeddings == 2048);
    const auto& d = std::get<posenc::dynamic_ntk>(l.rope.schedule);
    CHECK(d.original_max_position == 2048);
    json given = llama;
    given["max_position_embeddings"] = 4096;
    CHECK(posenc::hf::parse_config(given).max_position_embeddings_source == "max_position_embeddings");
    // A family whose class default posenc has not checked still needs the key.
    json olmo = llama;
    olmo["model_type"] = "olmo";
    olmo["rope_theta"] = 10000.0;  // (olmo's rope_theta default is unchecked too: required)
    expect_config_error([&] { (void)posenc::hf::parse_config(olmo); }, "max_position_embeddings");
    CHECK(posenc::hf::parse_config(json{{"model_type", "olmo"}, {"hidden_size", 64}, {"num_attention_heads", 1}, {"rope_theta", 1e4}})
              .max_position_embeddings_source.empty());
}

TEST_CASE("dynamic NTK with rotary_dim 2 is rejected at every length, as HF fails at init", "[hf][parity]") {
    const posenc::dynamic_ntk d{.factor = 2.0, .original_max_position = 2048};
    for (const std::int64_t len : {0, 1024, 2048, 4096})
        expect_config_error([&] { (void)d.frequencies(2, len); }, "rotary_dim", "2");
    CHECK_NOTHROW(d.frequencies(4, 4096));
    const json c{{"model_type", "llama"}, {"head_dim", 2}, {"hidden_size", 64}, {"num_attention_heads", 32},
                 {"max_position_embeddings", 2048}, {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}};
    expect_config_error([&] { (void)posenc::hf::parse_config(c); }, "head_dim", "2");
}

TEST_CASE("Qwen2 sliding window: layers >= max_window_layers slide only with use_sliding_window", "[hf][parity][layers]") {
    const json base{{"model_type", "qwen2"}, {"hidden_size", 1024}, {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                    {"num_hidden_layers", 6}, {"max_window_layers", 4}, {"sliding_window", 1024}, {"use_sliding_window", true}};
    const auto on = posenc::hf::parse_layers(base);
    REQUIRE(on.layers.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
        INFO("layer " << i);
        CHECK(on.layers[i].kind == (i >= 4 ? posenc::hf::attention_kind::sliding : posenc::hf::attention_kind::full));
        CHECK(on.layers[i].window == (i >= 4 ? 1024 : 0));
    }
    json off = base;
    off["use_sliding_window"] = false;
    for (const auto& l : posenc::hf::parse_layers(off).layers) CHECK(l.kind == posenc::hf::attention_kind::full);
    json null_window = base;
    null_window["sliding_window"] = nullptr;
    for (const auto& l : posenc::hf::parse_layers(null_window).layers) CHECK(l.kind == posenc::hf::attention_kind::full);
    json default_window = base;  // Qwen2Config: sliding_window 4096, max_window_layers 28
    default_window.erase("sliding_window");
    default_window.erase("max_window_layers");
    default_window["num_hidden_layers"] = 30;
    const auto d = posenc::hf::parse_layers(default_window);
    REQUIRE(d.layers.size() == 30);
    CHECK(d.layers[27].kind == posenc::hf::attention_kind::full);
    CHECK(d.layers[28].kind == posenc::hf::attention_kind::sliding);
    CHECK(d.layers[29].window == 4096);
}

TEST_CASE("Gemma-2: alternating layers, query_pre_attn_scalar and softcapping from Gemma2Config's defaults", "[hf][parity][layers]") {
    const json g{{"model_type", "gemma2"}, {"num_hidden_layers", 4}, {"hidden_size", 2304}};
    const auto m = posenc::hf::parse_layers(g);
    CHECK(m.heads == 8);
    CHECK(m.kv_heads == 4);
    CHECK(m.head_dim == 256);
    REQUIRE(m.layers.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        INFO("layer " << i);
        // Gemma2Config: "sliding_attention" if (i + 1) % 2 else "full_attention".
        CHECK(m.layers[i].kind == (i % 2 == 0 ? posenc::hf::attention_kind::sliding : posenc::hf::attention_kind::full));
        CHECK(m.layers[i].window == (i % 2 == 0 ? 4096 : 0));
        CHECK(m.layers[i].scale == 1.0 / std::sqrt(256.0));
        CHECK(m.layers[i].softcap == 50.0f);
    }
    json off = g;
    off["attn_logit_softcapping"] = nullptr;
    off["query_pre_attn_scalar"] = 144;
    const auto o = posenc::hf::parse_layers(off);
    CHECK(o.layers[0].softcap == 0.0f);
    CHECK(o.layers[0].scale == 1.0 / 12.0);
}

TEST_CASE("Gemma-2 and Gemma-3: query_pre_attn_scalar must be > 0", "[hf][parity][layers]") {
    // The softmax scale is query_pre_attn_scalar^(-1/2) (Gemma2Attention.scaling): 0 would give inf, a negative
    // value NaN; the reader names the key instead.
    for (const char* type : {"gemma2", "gemma3_text"})
        for (const char* value : {"0", "-144"}) {
            INFO(type << " query_pre_attn_scalar " << value);
            json c{{"model_type", type}, {"num_hidden_layers", 2}, {"hidden_size", 2304}};
            c["query_pre_attn_scalar"] = json::parse(value);
            expect_config_error([&] { (void)posenc::hf::parse_layers(c); }, "query_pre_attn_scalar", value);
        }
}

TEST_CASE("Qwen2-VL-7B (flat, v4 file): mrope section read, default schedule, vision token ids", "[hf][parity][mrope]") {
    // The shape of Qwen/Qwen2-VL-7B-Instruct's config.json.
    const json c{{"model_type", "qwen2_vl"}, {"hidden_size", 3584}, {"num_attention_heads", 28}, {"num_key_value_heads", 4},
                 {"num_hidden_layers", 28}, {"max_position_embeddings", 32768}, {"rope_theta", 1000000.0},
                 {"sliding_window", 32768}, {"use_sliding_window", false}, {"max_window_layers", 28},
                 {"vision_start_token_id", 151652}, {"vision_end_token_id", 151653}, {"vision_token_id", 151654},
                 {"image_token_id", 151655}, {"video_token_id", 151656},
                 {"vision_config", {{"depth", 32}, {"embed_dim", 1280}, {"spatial_merge_size", 2}, {"patch_size", 14}}},
                 {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}}}};
    const auto cfg = posenc::hf::parse_config(c);
    CHECK(cfg.rope.rope_type() == "default");
    CHECK(cfg.rope.layout == posenc::rope_layout::half_split);
    CHECK(cfg.rope.dims.rotary() == 128);
    CHECK(cfg.rope.mrope_section == std::vector<std::int64_t>{16, 24, 24});
    CHECK_FALSE(cfg.rope.mrope_interleaved);
    CHECK(posenc_test::max_rel_diff(inv_of(cfg.rope), posenc_test::closed_form_inv_freq(1e6, 128)) <= 1e-15);
    REQUIRE(cfg.vision.has_value());
    CHECK(cfg.vision->spatial_merge_size == 2);
    CHECK_FALSE(cfg.vision->tokens_per_second.has_value());  // Qwen2-VL has no temporal scaling
    CHECK(cfg.vision->image_token_id == 151655);
    CHECK(cfg.vision->video_token_id == 151656);
    CHECK(cfg.vision->vision_start_token_id == 151652);
    // The v5 nested shape of the same model.
    const json v5{{"model_type", "qwen2_vl"}, {"image_token_id", 151655}, {"vision_config", {{"spatial_merge_size", 2}}},
                  {"text_config",
                   {{"model_type", "qwen2_vl_text"}, {"hidden_size", 3584}, {"num_attention_heads", 28},
                    {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}, {"mrope_section", {16, 24, 24}}}}}}};
    const auto n = posenc::hf::parse_config(v5);
    CHECK(n.rope.mrope_section == std::vector<std::int64_t>{16, 24, 24});
    CHECK(n.max_position_embeddings == 32768);  // Qwen2VLTextConfig default
    CHECK(posenc_test::max_rel_diff(inv_of(n.rope), posenc_test::closed_form_inv_freq(1e6, 128)) <= 1e-15);
}

TEST_CASE("Qwen2.5-VL-7B: tokens_per_second from vision_config, class default 4 when absent", "[hf][parity][mrope]") {
    const json c{{"model_type", "qwen2_5_vl"}, {"hidden_size", 3584}, {"num_attention_heads", 28}, {"num_key_value_heads", 4},
                 {"max_position_embeddings", 128000}, {"rope_theta", 1000000.0}, {"image_token_id", 151655},
                 {"video_token_id", 151656}, {"vision_start_token_id", 151652},
                 {"vision_config", {{"spatial_merge_size", 2}, {"tokens_per_second", 2}, {"window_size", 112}}},
                 {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}}}};
    const auto cfg = posenc::hf::parse_config(c);
    CHECK(cfg.rope.mrope_section == std::vector<std::int64_t>{16, 24, 24});
    REQUIRE(cfg.vision.has_value());
    REQUIRE(cfg.vision->tokens_per_second.has_value());
    CHECK(*cfg.vision->tokens_per_second == 2.0);
    json no_tps = c;
    no_tps["vision_config"].erase("tokens_per_second");
    CHECK(*posenc::hf::parse_config(no_tps).vision->tokens_per_second == 4.0);  // Qwen2_5_VLVisionConfig
    no_tps["vision_config"]["tokens_per_second"] = 0;
    expect_config_error([&] { (void)posenc::hf::parse_config(no_tps); }, "vision_config.tokens_per_second", "0");
}

TEST_CASE("Qwen3-VL: text_config, interleaved mrope section, v5 rope keys", "[hf][parity][mrope]") {
    // The shape of Qwen/Qwen3-VL-8B-Instruct's config.json.
    const json c{{"model_type", "qwen3_vl"}, {"image_token_id", 151655}, {"video_token_id", 151656},
                 {"vision_start_token_id", 151652}, {"vision_end_token_id", 151653},
                 {"vision_config", {{"model_type", "qwen3_vl"}, {"spatial_merge_size", 2}, {"patch_size", 16}}},
                 {"text_config",
                  {{"model_type", "qwen3_vl_text"}, {"head_dim", 128}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                   {"num_key_value_heads", 8}, {"num_hidden_layers", 36}, {"max_position_embeddings", 262144},
                   {"rope_theta", 5000000},
                   {"rope_scaling", {{"mrope_interleaved", true}, {"mrope_section", {24, 20, 20}}, {"rope_type", "default"}}}}}};
    const auto cfg = posenc::hf::parse_config(c);
    CHECK(cfg.model_type == "qwen3_vl_text");
    CHECK(cfg.rope.mrope_section == std::vector<std::int64_t>{24, 20, 20});
    CHECK(cfg.rope.mrope_interleaved);
    CHECK(posenc_test::max_rel_diff(inv_of(cfg.rope), posenc_test::closed_form_inv_freq(5e6, 128)) <= 1e-15);
    REQUIRE(cfg.vision.has_value());
    CHECK(cfg.vision->spatial_merge_size == 2);
    CHECK_FALSE(cfg.vision->tokens_per_second.has_value());
    CHECK(cfg.vision->vision_start_token_id == 151652);
    // The layers reader takes the same config.
    CHECK(posenc::hf::parse_layers(c).layers.size() == 36);
}

TEST_CASE("mrope_section is validated and named as written", "[hf][parity][mrope][errors]") {
    auto with_section = [](json section) {
        return json{{"model_type", "qwen2_vl"}, {"hidden_size", 3584}, {"num_attention_heads", 28},
                    {"rope_scaling", {{"type", "mrope"}, {"mrope_section", std::move(section)}}}};
    };
    expect_config_error([&] { (void)posenc::hf::parse_config(with_section({16, 24, 23})); }, "rope_scaling.mrope_section", "23");
    expect_config_error([&] { (void)posenc::hf::parse_config(with_section({40, 24})); }, "rope_scaling.mrope_section", "40");
    expect_config_error([&] { (void)posenc::hf::parse_config(with_section({-8, 36, 36})); }, "rope_scaling.mrope_section", "-8");
    expect_config_error([&] { (void)posenc::hf::parse_config(with_section({16.5, 23.5, 24})); }, "rope_scaling.mrope_section", "16.5");
    expect_config_error([&] { (void)posenc::hf::parse_config(with_section("16,24,24")); }, "rope_scaling.mrope_section");
    // Only the M-RoPE families may carry it (posenc ignores nothing).
    const json llama{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                     {"rope_scaling", {{"rope_type", "default"}, {"mrope_section", {16, 24, 24}}}}};
    expect_config_error([&] { (void)posenc::hf::parse_config(llama); }, "rope_scaling.mrope_section");
    // mrope_interleaved without a section.
    json alone = with_section({16, 24, 24});
    alone["rope_scaling"].erase("mrope_section");
    alone["rope_scaling"]["mrope_interleaved"] = true;
    expect_config_error([&] { (void)posenc::hf::parse_config(alone); }, "rope_scaling.mrope_interleaved", "true");
    // A plain qwen2_vl config without a section is plain RoPE.
    json plain = with_section({16, 24, 24});
    plain.erase("rope_scaling");
    CHECK(posenc::hf::parse_config(plain).rope.mrope_section.empty());
}

TEST_CASE("README lists every model_type of the family table", "[hf][readme]") {
    const std::string readme = posenc_test::read_file(std::string(POSENC_TEST_DATA_DIR) + "/../../README.md");
    std::size_t listed = 0;
    for (const auto& f : posenc::hf::detail::families) {
        INFO(f.model_type);
        CHECK(readme.find("| `" + std::string(f.model_type) + "` |") != std::string::npos);
        ++listed;
    }
    REQUIRE(listed == std::size(posenc::hf::detail::families));
    REQUIRE(listed >= 40);
}

TEST_CASE("Qwen-VL: the interleave follows the model as in HF, and Qwen3-VL's section defaults to [24, 20, 20]",
          "[hf][parity][mrope]") {
    // HF's Qwen3VLTextRotaryEmbedding always runs apply_interleaved_mrope and reads mrope_section with
    // the default [24, 20, 20]; Qwen2-VL's rotary never interleaves. Neither reads mrope_interleaved.
    const json qwen3{{"model_type", "qwen3_vl_text"}, {"head_dim", 128}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                     {"max_position_embeddings", 262144}, {"rope_theta", 5000000}, {"rope_scaling", {{"rope_type", "default"}}}};
    const auto cfg = posenc::hf::parse_config(qwen3);
    CHECK(cfg.rope.mrope_section == std::vector<std::int64_t>{24, 20, 20});
    CHECK(cfg.rope.mrope_interleaved);
    json contradicts = qwen3;
    contradicts["rope_scaling"]["mrope_interleaved"] = false;
    contradicts["rope_scaling"]["mrope_section"] = {24, 20, 20};
    expect_config_error([&] { (void)posenc::hf::parse_config(contradicts); }, "rope_scaling.mrope_interleaved", "false");
    json small = qwen3;  // head_dim 64: the default section does not fit
    small["head_dim"] = 64;
    expect_config_error([&] { (void)posenc::hf::parse_config(small); }, "rope_scaling.mrope_section", "missing");

    const json qwen2{{"model_type", "qwen2_vl"}, {"hidden_size", 3584}, {"num_attention_heads", 28},
                     {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}, {"mrope_interleaved", true}}}};
    expect_config_error([&] { (void)posenc::hf::parse_config(qwen2); }, "rope_scaling.mrope_interleaved", "true");
    json qwen2_ok = qwen2;
    qwen2_ok["rope_scaling"].erase("mrope_interleaved");
    CHECK_FALSE(posenc::hf::parse_config(qwen2_ok).rope.mrope_interleaved);
}
