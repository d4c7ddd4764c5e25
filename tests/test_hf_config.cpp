// HF config.json → RoPE. Expected values come from the golden HF data (same configs) or from closed
// forms; the configs under tests/data/configs are written in the shape HF writes them.
#include <posenc/hf/encoding.hpp>

#include <fstream>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using nlohmann::json;
using posenc_test::expect_config_error;
using posenc_test::data_path;
using posenc_test::golden_entry;
using posenc_test::golden_inv_freq;
using posenc_test::load_bundled_config;

namespace {

void check_inv(const posenc::hf::rope_spec& spec, const std::vector<double>& expected, std::int64_t seq_len = 0) {
    const auto f = posenc::frequencies(spec.schedule, spec.dims.rotary(), seq_len);
    REQUIRE(f.inv_freq.size() == expected.size());
    CHECK(posenc_test::max_rel_diff(f.inv_freq, expected) <= 1e-12);
}

// Builds a config.json from a golden entry's params, using HF's key names only, in the transformers
// v4 shape (rope_scaling, rope_theta at top level) or the v5 shape (rope_parameters holds rope_theta).
json config_from_golden(const json& e, bool v5) {
    const auto& p = e.at("params");
    const std::string type = e.at("rope_type");
    json cfg{{"model_type", "llama"}, {"head_dim", p.at("head_dim")}, {"hidden_size", 4096}, {"num_attention_heads", 32}};
    json rope{{"rope_type", type}};
    if (p.contains("max_position_embeddings")) cfg["max_position_embeddings"] = p.at("max_position_embeddings");
    if (p.contains("partial_rotary_factor") && !p.at("partial_rotary_factor").is_null()) cfg["partial_rotary_factor"] = p.at("partial_rotary_factor");
    for (const char* k : {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
                          "mscale_all_dim", "truncate", "low_freq_factor", "high_freq_factor", "short_factor", "long_factor"})
        if (p.contains(k)) rope[k] = p.at(k);
    if (p.contains("config_original_max_position_embeddings"))  // Phi-3 keeps it at top level
        cfg["original_max_position_embeddings"] = p.at("config_original_max_position_embeddings");
    if (v5) {
        rope["rope_theta"] = p.at("base");
        cfg["rope_parameters"] = rope;
    } else {
        cfg["rope_theta"] = p.at("base");
        if (type != "default") cfg["rope_scaling"] = rope;
    }
    return cfg;
}


}  // namespace

TEST_CASE("every golden RoPE config read as a v4 and a v5 config.json gives HF's inv_freq", "[hf][golden]") {
    std::size_t compared = 0;
    for (const auto& e : posenc_test::golden().at("rope_inv_freq")) {
        for (bool v5 : {false, true}) {
            INFO(e.at("id").get<std::string>() << (v5 ? " (v5)" : " (v4)"));
            const auto cfg = posenc::hf::parse_config(config_from_golden(e, v5));
            CHECK(cfg.rope.rope_type() == e.at("rope_type").get<std::string>());  // HF's names are posenc's
            CHECK(cfg.rope.dims.rotary() == e.at("params").at("rotary_dim").get<std::size_t>());
            const std::int64_t seq_len = e.at("seq_len").is_null() ? 0 : e.at("seq_len").get<std::int64_t>();
            check_inv(cfg.rope, e.at("inv_freq_f64").get<std::vector<double>>(), seq_len);
            const auto rot = cfg.rope.make_rotary(seq_len);
            CHECK(std::abs(rot.frequencies().attention_factor - e.at("attention_factor").get<double>()) <= 1e-12);
            ++compared;
        }
    }
    REQUIRE(compared == 2 * 28);
}

TEST_CASE("Llama 3.1: llama3 scaling, half_split, head_dim from hidden_size / heads", "[hf]") {
    const auto cfg = load_bundled_config("llama-3.1-8b.json");
    CHECK(cfg.model_type == "llama");
    CHECK(cfg.max_position_embeddings == 131072);
    CHECK(cfg.rope.layout == posenc::rope_layout::half_split);
    CHECK(cfg.rope.dims.head_dim == 128);
    CHECK(cfg.rope.rope_type() == "llama3");
    check_inv(cfg.rope, golden_inv_freq("llama3_d128_b5e5_f8_l1_h4_o8192_llama31"));
}

TEST_CASE("Qwen2.5 YaRN with max_position_embeddings == original keeps factor 4", "[hf]") {
    const auto cfg = load_bundled_config("qwen2.5-7b-yarn.json");
    const auto& y = std::get<posenc::yarn>(cfg.rope.schedule);
    CHECK(y.factor == 4.0);
    CHECK(y.original_max_position == 32768);
    const auto& div = golden_entry("rope_yarn_version_divergence", "yarn_qwen25_style_maxpos_eq_orig");
    check_inv(cfg.rope, div.at("newer_A_effective").at("inv_freq_f64").get<std::vector<double>>());
    CHECK(std::abs(y.amplitude() - div.at("newer_A_effective").at("attention_factor").get<double>()) <= 1e-15);
}

TEST_CASE("DeepSeek-V3 / V2: rope head dim, interleaved pairs, mscale pairs and softmax multiplier", "[hf]") {
    const auto v3 = load_bundled_config("deepseek-v3.json");
    CHECK(v3.rope.dims.head_dim == 64);
    CHECK(v3.rope.layout == posenc::rope_layout::interleaved);
    check_inv(v3.rope, golden_inv_freq("yarn_d64_b1e4_f40_o4096_mscale1_1_deepseekv3"));
    CHECK(v3.rope.make_rotary().frequencies().attention_factor == 1.0);
    CHECK(std::abs(v3.rope.softmax_scale_multiplier() - std::pow(0.1 * std::log(40.0) + 1, 2)) <= 1e-14);

    const auto v2 = load_bundled_config("deepseek-v2-lite.json");
    CHECK(v2.rope.layout == posenc::rope_layout::interleaved);
    CHECK(std::abs(v2.rope.make_rotary().frequencies().attention_factor - 1.0) <= 1e-15);  // 0.707 / 0.707
    CHECK(std::abs(v2.rope.softmax_scale_multiplier() - std::pow(0.0707 * std::log(40.0) + 1, 2)) <= 1e-14);
}

TEST_CASE("gpt-oss: yarn without truncation", "[hf]") {
    const auto cfg = load_bundled_config("gpt-oss-20b.json");
    CHECK_FALSE(std::get<posenc::yarn>(cfg.rope.schedule).truncate);
    check_inv(cfg.rope, golden_inv_freq("yarn_d64_b15e4_f32_o4096_notrunc_gptoss"));
}

TEST_CASE("GPT-NeoX rotary_pct and GPT-J rotary_dim: partial rotary", "[hf]") {
    const auto neox = load_bundled_config("gpt-neox-20b.json");
    CHECK(neox.rope.dims.head_dim == 96);
    CHECK(neox.rope.dims.rotary() == 24);
    CHECK(neox.rope.layout == posenc::rope_layout::half_split);
    std::vector<double> expected;
    for (int i = 0; i < 12; ++i) expected.push_back(std::pow(10000.0, -2.0 * i / 24.0));
    check_inv(neox.rope, expected);

    const auto gptj = load_bundled_config("gpt-j-6b.json");
    CHECK(gptj.rope.dims.head_dim == 256);
    CHECK(gptj.rope.dims.rotary() == 64);
    CHECK(gptj.rope.layout == posenc::rope_layout::interleaved);
    CHECK(gptj.max_position_embeddings == 2048);
    check_inv(gptj.rope, golden_inv_freq("default_d64_b1e4"));
}

TEST_CASE("Mistral Nemo: explicit head_dim wins over hidden_size / heads", "[hf]") {
    const auto cfg = load_bundled_config("mistral-nemo.json");
    CHECK(cfg.rope.dims.head_dim == 128);
    CHECK(std::get<posenc::default_rope>(cfg.rope.schedule).base == 1e6);
}

TEST_CASE("Phi-3 LongRoPE: top-level original length, factor = max / original, short/long switch", "[hf]") {
    const auto cfg = load_bundled_config("phi-3-mini-128k.json");
    const auto& l = std::get<posenc::longrope>(cfg.rope.schedule);
    CHECK(l.original_max_position == 4096);
    CHECK(l.factor == 32.0);
    std::ifstream in(data_path("configs/phi-3-mini-128k.json"));
    const auto raw = json::parse(in);
    const auto sf = raw.at("rope_scaling").at("short_factor").get<std::vector<double>>();
    const auto lf = raw.at("rope_scaling").at("long_factor").get<std::vector<double>>();
    for (std::int64_t L : {0, 4096, 4097}) {
        const auto& ext = L > 4096 ? lf : sf;
        std::vector<double> expected;
        for (std::size_t i = 0; i < 48; ++i) expected.push_back(1.0 / (ext[i] * std::pow(10000.0, 2.0 * double(i) / 96.0)));
        check_inv(cfg.rope, expected, L);
    }
    CHECK(std::abs(cfg.rope.make_rotary().frequencies().attention_factor -
                   std::sqrt(1 + std::log(32.0) / std::log(4096.0))) <= 1e-15);

    const auto partial = load_bundled_config("phi-4-mini-partial.json");
    CHECK(partial.rope.dims.head_dim == 128);
    CHECK(partial.rope.dims.rotary() == 96);
}

TEST_CASE("Gemma-3: text_config, global layers scaled, sliding layers on the local base", "[hf]") {
    const auto cfg = load_bundled_config("gemma-3-4b.json");
    CHECK(cfg.model_type == "gemma3_text");
    CHECK(cfg.rope.dims.head_dim == 256);
    const auto& full = cfg.rope_for("full_attention");
    const auto& lin = std::get<posenc::linear>(full.schedule);
    CHECK(lin.base == 1e6);
    CHECK(lin.factor == 8.0);
    const auto& local = std::get<posenc::default_rope>(cfg.rope_for("sliding_attention").schedule);
    CHECK(local.base == 10000.0);
    REQUIRE(cfg.layer_types.size() == 34);
    CHECK(cfg.layer_types[5] == "full_attention");
    CHECK(cfg.layer_types[4] == "sliding_attention");
    CHECK(cfg.layer_types[11] == "full_attention");
    CHECK_THROWS_AS(cfg.rope_for("chunked_attention"), posenc::config_error);

    const auto v5 = load_bundled_config("gemma-3-1b-v5.json");
    CHECK(std::get<posenc::default_rope>(v5.rope_for("full_attention").schedule).base == 1e6);
    CHECK(std::get<posenc::default_rope>(v5.rope_for("sliding_attention").schedule).base == 1e4);
    CHECK(std::get<posenc::default_rope>(v5.rope.schedule).base == 1e6);
    CHECK(v5.layer_types.size() == 8);
}

TEST_CASE("bad configs name the offending key", "[hf][errors]") {
    const json base{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                    {"max_position_embeddings", 8192}, {"rope_theta", 10000.0}};
    auto with = [&](const json& patch) {
        json c = base;
        c.merge_patch(patch);
        return c;
    };
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"rope_scaling", {{"rope_type", "mrope"}}}})); },
                     "rope_scaling.rope_type");
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"rope_scaling", {{"type", "su"}}}})); }, "rope_scaling.type");
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"rope_scaling", {{"rope_type", "linear"}}}})); },
                     "rope_scaling.factor");
    expect_config_error(
        [&] { (void)posenc::hf::parse_config(with({{"rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}}}})); },
        "rope_scaling.factor");
    expect_config_error(
        [&] { (void)posenc::hf::parse_config(with({{"rope_scaling", {{"rope_type", "linear"}, {"factor", -2.0}}}})); },
        "rope_scaling.factor");
    expect_config_error(
        [&] {
            (void)posenc::hf::parse_config(with({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}, {"finetuned", true}}}}));
        },
        "rope_scaling.finetuned");
    expect_config_error(
        [&] {
            (void)posenc::hf::parse_config(with({{"rope_scaling",
                                                  {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 1.0}, {"beta_slow", 2.0}}}}));
        },
        "rope_scaling.beta_fast");
    expect_config_error(
        [&] {
            (void)posenc::hf::parse_config(
                with({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}}}}));
        },
        "rope_scaling.high_freq_factor");
    expect_config_error(
        [&] {
            (void)posenc::hf::parse_config(with(
                {{"rope_scaling", {{"type", "longrope"}, {"short_factor", std::vector<double>(3, 1.0)}, {"long_factor", std::vector<double>(64, 1.0)}}}}));
        },
        "rope_scaling.short_factor");
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"rope_theta", 1.0}})); }, "rope_theta");
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"rope_theta", "big"}})); }, "rope_theta");
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"partial_rotary_factor", 0.25}, {"head_dim", 100}})); },
                     "partial_rotary_factor", "25");  // int(100 × 0.25) = 25 is odd: named by the key in the file
    expect_config_error([&] { (void)posenc::hf::parse_config(with({{"hidden_size", 4000}, {"num_attention_heads", 48}})); },
                     "hidden_size");
    expect_config_error([&] { (void)posenc::hf::parse_config(json{{"model_type", "llama"}}); }, "hidden_size");
    expect_config_error([&] { (void)posenc::hf::parse_config(json::array()); }, "config");
    expect_config_error([] { (void)posenc::hf::load_config(data_path("configs/does-not-exist.json")); }, "config");
    expect_config_error([] { (void)posenc::hf::load_config(data_path("README.md")); }, "config");  // not JSON
}

TEST_CASE("ALiBi and T5 models: read as their encoding, rejected as RoPE", "[hf]") {
    const auto bloom = std::get<posenc::hf::alibi_model>(posenc::hf::load_position_encoding(data_path("configs/bloom-560m.json")));
    CHECK(bloom.params.heads == 16);
    CHECK(bloom.params.order == posenc::bias_order::scale_then_add);
    const auto mpt = std::get<posenc::hf::alibi_model>(posenc::hf::load_position_encoding(data_path("configs/mpt-7b.json")));
    CHECK(mpt.params.heads == 32);
    CHECK(mpt.params.max_bias == 8.0);
    const auto falcon = std::get<posenc::hf::alibi_model>(posenc::hf::load_position_encoding(data_path("configs/falcon-rw-1b.json")));
    CHECK(falcon.params.order == posenc::bias_order::add_then_scale);
    const auto t5 = std::get<posenc::hf::t5_model>(posenc::hf::load_position_encoding(data_path("configs/t5-small.json")));
    CHECK(t5.heads == 8);
    CHECK(t5.encoder.bidirectional);
    CHECK_FALSE(t5.decoder.bidirectional);
    CHECK(t5.encoder.num_buckets == 32);
    CHECK(t5.encoder.max_distance == 128);
    // RoPE configs come back as model_config.
    CHECK(std::holds_alternative<posenc::hf::model_config>(posenc::hf::load_position_encoding(data_path("configs/llama-3.1-8b.json"))));
    expect_config_error([] { (void)load_bundled_config("bloom-560m.json"); }, "model_type");
    expect_config_error([] { (void)load_bundled_config("t5-small.json"); }, "model_type");
    json mpt_learned{{"model_type", "mpt"}, {"n_heads", 32}, {"attn_config", {{"alibi", false}}}};
    expect_config_error([&] { (void)posenc::hf::parse_position_encoding(mpt_learned); }, "attn_config.alibi");
    json t5_odd{{"model_type", "t5"}, {"relative_attention_num_buckets", 31}};
    expect_config_error([&] { (void)posenc::hf::parse_position_encoding(t5_odd); }, "relative_attention_num_buckets");
}

TEST_CASE("layout by family: interleaved for GPT-J, DeepSeek, Llama-4, Cohere, GLM, unknown families need one", "[hf]") {
    const json base{{"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 500000.0}};
    auto with_type = [&](const std::string& t) {
        json c = base;
        c["model_type"] = t;
        return c;
    };
    for (const char* t : {"llama4_text", "cohere", "cohere2", "glm"})
        CHECK(posenc::hf::parse_config(with_type(t)).rope.layout == posenc::rope_layout::interleaved);
    for (const char* t : {"llama", "qwen3", "gemma2", "falcon"})
        CHECK(posenc::hf::parse_config(with_type(t)).rope.layout == posenc::rope_layout::half_split);
    expect_config_error([&] { (void)posenc::hf::parse_config(with_type("my_new_model")); }, "model_type", "my_new_model");
    expect_config_error([&] { (void)posenc::hf::parse_config(base); }, "model_type");  // none given
    CHECK(posenc::hf::parse_config(with_type("my_new_model"), posenc::rope_layout::interleaved).rope.layout ==
          posenc::rope_layout::interleaved);
    CHECK(posenc::hf::parse_config(with_type("llama"), posenc::rope_layout::interleaved).rope.layout ==
          posenc::rope_layout::interleaved);  // an explicit layout wins
}

TEST_CASE("keys HF accepts: dynamic's original length, default's factor 1, Phi-3's legacy su/yarn names", "[hf]") {
    const json base{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                    {"max_position_embeddings", 4096}};
    auto with = [&](const json& patch) {
        json c = base;
        c.merge_patch(patch);
        return posenc::hf::parse_config(c);
    };
    const auto dyn = with({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 2048}}}});
    CHECK(std::get<posenc::dynamic_ntk>(dyn.rope.schedule).original_max_position == 4096);  // as HF computes it
    CHECK(with({{"rope_scaling", {{"rope_type", "default"}, {"factor", 1.0}}}}).rope.rope_type() == "default");
    expect_config_error([&] { (void)with({{"rope_scaling", {{"rope_type", "default"}, {"factor", 2.0}}}}); },
                        "rope_scaling.factor");
    json phi = base;
    phi["model_type"] = "phi3";
    phi["original_max_position_embeddings"] = 2048;
    phi["rope_scaling"] = {{"type", "su"}, {"short_factor", std::vector<double>(64, 1.0)}, {"long_factor", std::vector<double>(64, 2.0)}};
    CHECK(posenc::hf::parse_config(phi).rope.rope_type() == "longrope");
}

TEST_CASE("head sizes must be positive integers, named in the error", "[hf][errors]") {
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "gptj"}, {"n_head", 0}}); }, "n_head", "0");
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "llama"}, {"head_dim", -128}}); }, "head_dim",
                        "-128");
    expect_config_error(
        [] { (void)posenc::hf::parse_config(json{{"model_type", "deepseek_v3"}, {"qk_rope_head_dim", 0}}); }, "qk_rope_head_dim");
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "gptj"}, {"rotary_dim", -64}}); }, "rotary_dim");
    const auto cfg = load_bundled_config("llama-3.1-8b.json");
    CHECK(&cfg.rope_for("full_attention") == &cfg.rope);
    expect_config_error([&] { (void)cfg.rope_for("bogus"); }, "layer_type", "bogus");
}

TEST_CASE("layout of every family the reader knows", "[hf][layout]") {
    // Written from each family's HF modeling code: rotate_half (half_split) or pairs (2i, 2i+1).
    const std::vector<std::string> half_split{"llama",    "mistral",   "mixtral",    "ministral", "qwen2",       "qwen2_moe",
                                              "qwen3",    "qwen3_moe", "phi",        "phi3",      "phimoe",      "gemma",
                                              "gemma2",   "gemma3",    "gemma3_text", "gpt_neox", "falcon",      "starcoder2",
                                              "olmo",     "olmo2",     "stablelm",   "granite",   "granitemoe",  "gpt_oss",
                                              "nemotron", "smollm3"};
    const std::vector<std::string> interleaved{"gptj", "llama4", "llama4_text", "cohere", "cohere2", "glm", "glm4",
                                               "deepseek_v2", "deepseek_v3"};
    auto layout_of = [](const std::string& t) {
        const json c{{"model_type", t}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 500000.0},
                     {"max_position_embeddings", 8192}};
        return posenc::hf::parse_config(c).rope.layout;
    };
    std::size_t checked = 0;
    for (const auto& t : half_split) {
        INFO(t);
        CHECK(layout_of(t) == posenc::rope_layout::half_split);
        ++checked;
    }
    for (const auto& t : interleaved) {
        INFO(t);
        CHECK(layout_of(t) == posenc::rope_layout::interleaved);
        ++checked;
    }
    REQUIRE(checked == 26 + 9);
    // DeepSeek follows rope_interleave.
    const json ds{{"model_type", "deepseek_v3"}, {"qk_rope_head_dim", 64}, {"rope_interleave", false}, {"rope_theta", 10000}};
    CHECK(posenc::hf::parse_config(ds).rope.layout == posenc::rope_layout::half_split);
    // The same family inside a multimodal config's text_config.
    const json mm{{"model_type", "llava"}, {"text_config", {{"model_type", "cohere"}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 10000}}}};
    CHECK(posenc::hf::parse_config(mm).rope.layout == posenc::rope_layout::interleaved);
}

TEST_CASE("GPT-NeoX and GPT-J aliases are read, with values that differ from every default", "[hf][aliases]") {
    // GPT-NeoX defaults: rotary_pct 0.25, rotary_emb_base 10000. Here 0.5 and 20000, head_dim 2048/16 = 128.
    const json neox{{"model_type", "gpt_neox"}, {"hidden_size", 2048}, {"num_attention_heads", 16},
                    {"rotary_pct", 0.5}, {"rotary_emb_base", 20000}, {"max_position_embeddings", 4096}};
    const auto n = posenc::hf::parse_config(neox);
    CHECK(n.rope.dims.head_dim == 128);
    CHECK(n.rope.dims.rotary() == 64);
    CHECK(n.rope.layout == posenc::rope_layout::half_split);
    CHECK(n.max_position_embeddings == 4096);
    check_inv(n.rope, posenc_test::closed_form_inv_freq(20000.0, 64));
    // rotary_pct that does not divide evenly: int(96·0.3) = 28, as HF truncates.
    const json neox_odd{{"model_type", "gpt_neox"}, {"hidden_size", 96 * 4}, {"num_attention_heads", 4}, {"rotary_pct", 0.3}};
    const auto no = posenc::hf::parse_config(neox_odd);
    CHECK(no.rope.dims.rotary() == 28);
    check_inv(no.rope, posenc_test::closed_form_inv_freq(10000.0, 28));

    // GPT-J defaults: n_embd 4096, n_head 16, rotary_dim 64, n_positions 2048. Here 3072 / 24 = 128,
    // rotary_dim 32, n_positions 1024.
    const json gptj{{"model_type", "gptj"}, {"n_embd", 3072}, {"n_head", 24}, {"rotary_dim", 32}, {"n_positions", 1024}};
    const auto j = posenc::hf::parse_config(gptj);
    CHECK(j.rope.dims.head_dim == 128);
    CHECK(j.rope.dims.rotary() == 32);
    CHECK(j.rope.layout == posenc::rope_layout::interleaved);
    CHECK(j.max_position_embeddings == 1024);
    check_inv(j.rope, posenc_test::closed_form_inv_freq(10000.0, 32));

    // Generic partial_rotary_factor with a non-integer product (Phi-style): 96·0.3 → 28.
    const json phi{{"model_type", "phi"}, {"hidden_size", 96 * 8}, {"num_attention_heads", 8}, {"partial_rotary_factor", 0.3},
                   {"rope_theta", 10000.0}};
    CHECK(posenc::hf::parse_config(phi).rope.dims.rotary() == 28);
}
