// posenc-inspect, run as a program: its --json output against HF's golden values and closed forms,
// and its behaviour on bad input (non-zero exit, one line on stderr).
#ifdef POSENC_INSPECT_PATH
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <string>

#include <posenc/hf/families.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/inspect.hpp"
#include "support/readme.hpp"
#include "support/reference.hpp"

using nlohmann::json;

using posenc_test::config_path;
using posenc_test::run_inspect;

TEST_CASE("posenc-inspect --json: Llama 3.1 equals HF's llama3 table, cos/sin at the given positions", "[inspect]") {
    const auto r = run_inspect(config_path("llama-3.1-8b.json") + " --json --positions 0,1,8191,131071");
    REQUIRE(r.exit_code == 0);
    const auto j = json::parse(r.out);  // exactly one JSON object
    CHECK(j.at("rope_type") == "llama3");
    CHECK(j.at("head_dim") == 128);
    CHECK(j.at("rotary_dim") == 128);
    CHECK(j.at("layout") == "half_split");
    CHECK(j.at("attention_factor") == 1.0);
    const auto inv = j.at("inv_freq").get<std::vector<double>>();
    const auto expected = posenc_test::golden_inv_freq("llama3_d128_b5e5_f8_l1_h4_o8192_llama31");
    CHECK(posenc_test::max_rel_diff(inv, expected) <= 1e-12);
    CHECK(j.at("positions") == json::array({0, 1, 8191, 131071}));
    for (std::size_t k = 0; k < 4; ++k) {
        const double p = j.at("positions")[k];
        for (std::size_t i = 0; i < 64; ++i) {
            CHECK(std::abs(j.at("cos")[k][i].get<double>() - std::cos(p * expected[i])) <= 1e-7);
            CHECK(std::abs(j.at("sin")[k][i].get<double>() - std::sin(p * expected[i])) <= 1e-7);
        }
    }
}

TEST_CASE("posenc-inspect --json names where max_position_embeddings came from and what HF ignores", "[inspect]") {
    const auto llama = run_inspect(config_path("llama-3.1-8b.json") + " --json");
    REQUIRE(llama.exit_code == 0);
    const auto l = json::parse(llama.out);
    CHECK(l.at("max_position_embeddings") == 131072);
    CHECK(l.at("max_position_embeddings_source") == "max_position_embeddings");
    CHECK(l.at("notes").empty());
    // GPT-J-6B's file has n_positions 2048 and no rope_theta: nothing ignored, the alias named.
    const auto gptj = json::parse(run_inspect(config_path("gpt-j-6b.json") + " --json").out);
    CHECK(gptj.at("max_position_embeddings_source") == "n_positions");
    CHECK(gptj.at("notes").empty());
}

TEST_CASE("posenc-inspect: --seq-len drives dynamic NTK and LongRoPE, --layout overrides", "[inspect]") {
    const auto short_ctx = json::parse(run_inspect(config_path("phi-3-mini-128k.json") + " --json --seq-len 4096").out);
    const auto long_ctx = json::parse(run_inspect(config_path("phi-3-mini-128k.json") + " --json --seq-len 4097").out);
    CHECK(short_ctx.at("rope_type") == "longrope");
    CHECK(short_ctx.at("inv_freq")[5] != long_ctx.at("inv_freq")[5]);
    CHECK(std::abs(short_ctx.at("attention_factor").get<double>() - std::sqrt(1 + std::log(32.0) / std::log(4096.0))) <= 1e-15);

    const auto j = json::parse(run_inspect(config_path("deepseek-v3.json") + " --json --layout half_split").out);
    CHECK(j.at("layout") == "half_split");
    CHECK(j.at("rotary_dim") == 64);

    const auto g = json::parse(run_inspect(config_path("gemma-3-4b.json") + " --json --layer-type sliding_attention").out);
    CHECK(g.at("rope_type") == "default");
    CHECK(std::abs(g.at("inv_freq")[1].get<double>() - std::pow(10000.0, -2.0 / 256.0)) <= 1e-16);
}

TEST_CASE("posenc-inspect human-readable output names the regime of each pair", "[inspect]") {
    const auto r = run_inspect(config_path("qwen2.5-7b-yarn.json"));
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("extrapolated") != std::string::npos);
    CHECK(r.out.find("interpolated") != std::string::npos);
    CHECK(r.out.find("blended") != std::string::npos);
    CHECK(r.out.find("1.1386294361119891") != std::string::npos);  // 0.1 ln 4 + 1
}

TEST_CASE("posenc-inspect --alibi, --t5, --sinusoidal --json equal the reference implementations", "[inspect][golden]") {
    std::size_t alibi = 0, t5 = 0, sinusoidal = 0;
    for (const auto& e : posenc_test::golden().at("alibi_slopes")) {
        const int n = e.at("n_heads");
        if (n != 12 && n != 7 && n != 128) continue;
        ++alibi;
        const auto j = json::parse(run_inspect("--alibi " + std::to_string(n) + " --json").out);
        CHECK(j.at("encoding") == "alibi");
        CHECK(j.at("n_heads") == n);
        CHECK(posenc_test::max_rel_diff(j.at("slopes").get<std::vector<double>>(),
                                        e.at("slopes_f64").get<std::vector<double>>()) <= 1e-15);
    }
    for (const auto& e : posenc_test::golden().at("t5_relative_buckets")) {
        const bool bi = e.at("bidirectional");
        const std::string args = "--t5 --num-buckets " + std::to_string(e.at("num_buckets").get<int>()) +
                                 " --max-distance " + std::to_string(e.at("max_distance").get<int>()) +
                                 (bi ? " --bidirectional" : " --unidirectional") + " --relative-range " +
                                 std::to_string(e.at("relative_position_first").get<int>()) + ":" +
                                 std::to_string(e.at("relative_position_last").get<int>()) + " --json";
        const auto j = json::parse(run_inspect(args).out);
        CHECK(j.at("encoding") == "t5");
        CHECK(j.at("bidirectional") == bi);
        CHECK(j.at("relative_positions").front() == e.at("relative_position_first"));
        CHECK(j.at("buckets") == e.at("buckets_hf"));
        ++t5;
    }
    for (const auto& e : posenc_test::golden().at("sinusoidal_absolute")) {
        const bool inter = e.at("variant") == "vaswani_interleaved";
        std::string pos;
        for (const auto& p : e.at("positions")) {
            if (!pos.empty()) pos += ',';
            pos += std::to_string(p.get<int>());
        }
        const auto j = json::parse(run_inspect("--sinusoidal " + std::to_string(e.at("d_model").get<int>()) + " --variant " +
                                           (inter ? "interleaved" : "concat") + " --positions " + pos + " --json")
                                       .out);
        CHECK(j.at("encoding") == "sinusoidal");
        CHECK(j.at("variant") == (inter ? "interleaved" : "concat"));
        const auto& expected = e.at("table_f64");
        double worst = 0;
        for (std::size_t k = 0; k < expected.size(); ++k)
            for (std::size_t i = 0; i < expected[k].size(); ++i)
                worst = posenc_test::worst_of(worst, std::abs(j.at("table")[k][i].get<double>() - expected[k][i].get<double>()));
        CHECK(worst <= 1e-6);
        CHECK(expected.size() == 5);
        CHECK(j.at("table").size() == expected.size());
        ++sinusoidal;
    }
    REQUIRE(alibi == 3);
    REQUIRE(t5 == 2);
    REQUIRE(sinusoidal == 4);
}

TEST_CASE("posenc-inspect on BLOOM, MPT, Falcon-ALiBi and T5 configs", "[inspect]") {
    auto slopes_of = [](int n) {
        for (const auto& e : posenc_test::golden().at("alibi_slopes"))
            if (e.at("n_heads") == n) return e.at("slopes_f64").get<std::vector<double>>();
        throw std::runtime_error("no golden slopes");
    };
    const auto bloom = json::parse(run_inspect(config_path("bloom-560m.json") + " --json").out);
    CHECK(bloom.at("n_heads") == 16);
    CHECK(posenc_test::max_rel_diff(bloom.at("slopes").get<std::vector<double>>(), slopes_of(16)) <= 1e-15);
    const auto mpt = json::parse(run_inspect(config_path("mpt-7b.json") + " --json").out);
    CHECK(posenc_test::max_rel_diff(mpt.at("slopes").get<std::vector<double>>(), slopes_of(32)) <= 1e-15);
    CHECK(run_inspect(config_path("falcon-rw-1b.json")).out.find("add_then_scale") != std::string::npos);

    const auto t5 = json::parse(run_inspect(config_path("t5-small.json") + " --relative-range -300:300 --json").out);
    CHECK(t5.at("buckets") == posenc_test::golden_entry("t5_relative_buckets", "t5_bi1_nb32_md128").at("buckets_hf"));
    const auto dec = json::parse(run_inspect(config_path("t5-small.json") + " --unidirectional --relative-range -300:300 --json").out);
    CHECK(dec.at("buckets") == posenc_test::golden_entry("t5_relative_buckets", "t5_bi0_nb32_md128").at("buckets_hf"));
    CHECK(run_inspect(config_path("t5-small.json")).out.find("table shape       [32, 8]") != std::string::npos);
}

TEST_CASE("posenc-inspect rejects bad input with a non-zero exit and one line on stderr", "[inspect]") {
    for (const std::string& args : {std::string("does-not-exist.json"), config_path("llama-3.1-8b.json") + " --seq-len x",
                                    config_path("llama-3.1-8b.json") + " --layout neox", std::string(""),
                                    config_path("llama-3.1-8b.json") + " --bogus", std::string("--alibi 0"),
                                    std::string("--t5 --num-buckets 31 --max-distance 128 --bidirectional"),
                                    std::string("--t5 --num-buckets 32"), std::string("--sinusoidal 0 --variant concat --positions 1"),
                                    std::string("--sinusoidal 8 --variant sine --positions 1"), std::string("--alibi 8 --t5"),
                                    config_path("gemma-3-4b.json") + " --layer-type bogus",
                                    posenc_test::data_path("README.md")}) {
        INFO(args);
        const auto r = run_inspect(args);
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK(!r.err.empty());
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
}
namespace inspect_family_table_test {

/// README.md's family table block, from its begin marker line through its end marker line.
std::string readme_family_table() {
    const std::string readme = posenc_test::read_file(std::string(POSENC_TEST_DATA_DIR) + "/../../README.md");
    const std::string end = "<!-- families table end -->\n";
    const auto b = readme.find("<!-- families table:");
    const auto e = b == std::string::npos ? b : readme.find(end, b);
    return e == std::string::npos ? std::string() : readme.substr(b, e + end.size() - b);
}

/// The table row of `model_type` (without its trailing newline); empty when there is none.
std::string family_row_of(const std::string& table, const std::string& model_type) {
    const auto b = table.find("\n| `" + model_type + "` |");
    if (b == std::string::npos) return {};
    return table.substr(b + 1, table.find('\n', b + 1) - b - 1);
}

}  // namespace inspect_family_table_test

TEST_CASE("posenc-inspect --family-table is README's family table, byte for byte", "[inspect][readme]") {
    const auto r = run_inspect("--family-table");
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    const std::string readme = inspect_family_table_test::readme_family_table();
    REQUIRE_FALSE(readme.empty());
    // On a mismatch, regenerate README's block with build/tools/posenc-inspect --family-table.
    CHECK(readme == r.out);
}

TEST_CASE("posenc-inspect --family-table: one row a family, with HF's config-class defaults", "[inspect]") {
    using inspect_family_table_test::family_row_of;
    const auto r = run_inspect("--family-table");
    REQUIRE(r.exit_code == 0);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 4 + static_cast<std::ptrdiff_t>(std::size(posenc::hf::detail::families)));  // markers, header, rule
    // Defaults as written in transformers' configuration_<model>.py: GPTJConfig(n_embd=4096,
    // n_head=16, rotary_dim=64, n_positions=2048), GPTNeoXConfig(rotary_pct=0.25),
    // MixtralConfig(rope_theta=1e6), Gemma2Config(attn_logit_softcapping=50.0, sliding_window=4096),
    // DeepseekV3Config(qk_rope_head_dim=64), Qwen2_5_VLConfig vision tokens_per_second=4.
    const std::string gptj = family_row_of(r.out, "gptj");
    CHECK(gptj.find("| interleaved |") != std::string::npos);
    CHECK(gptj.find("n_embd 4096, n_head 16") != std::string::npos);
    CHECK(gptj.find("rotary_dim 64") != std::string::npos);
    CHECK(gptj.find("n_positions 2048") != std::string::npos);
    CHECK(family_row_of(r.out, "gpt_neox").find("rotary_pct 0.25") != std::string::npos);
    CHECK(family_row_of(r.out, "mixtral").find("rope_theta 1000000,") != std::string::npos);
    const std::string gemma2 = family_row_of(r.out, "gemma2");
    CHECK(gemma2.find("attn_logit_softcapping 50") != std::string::npos);
    CHECK(gemma2.find("sliding_window 4096") != std::string::npos);
    CHECK(family_row_of(r.out, "deepseek_v3").find("qk_rope_head_dim 64") != std::string::npos);
    CHECK(family_row_of(r.out, "qwen2_5_vl").find("tokens_per_second 4") != std::string::npos);
    CHECK(family_row_of(r.out, "bloom").find("| — (no RoPE: `hf/encoding.hpp`) |") != std::string::npos);
    CHECK(family_row_of(r.out, "llama").find("rope_theta") == std::string::npos);  // LlamaConfig's is the generic 10000

    for (const std::string& args : {std::string("--family-table --json"), std::string("--family-table --alibi 8")}) {
        INFO(args);
        const auto bad = run_inspect(args);
        CHECK(bad.exit_code != 0);
        CHECK(bad.out.empty());
        CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
    }
}
#endif
