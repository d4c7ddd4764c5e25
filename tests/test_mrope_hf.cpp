// M-RoPE from a Qwen-VL config.json: rope_spec::make_mrope, hf::mrope_options, and posenc-inspect's
// --positions t:h:w, against closed forms in double (θ_j = base^(−2j/128); pair j reads t, h or w as
// HF's sectioned split or Qwen3-VL's interleave assigns it).
#include <posenc/hf/mrope.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/inspect.hpp"
#include "support/reference.hpp"

using nlohmann::json;
using posenc_test::config_path;
using posenc_test::expect_config_error;
using posenc_test::load_bundled_config;

namespace {

// Component of pair j (0 t, 1 h, 2 w), written from HF's two rules for 64 pairs.
int qwen2_vl_axis(std::size_t j) { return j < 16 ? 0 : j < 40 ? 1 : 2; }                                      // [16, 24, 24]
int qwen3_vl_axis(std::size_t j) { return j < 60 && j % 3 == 1 ? 1 : j < 60 && j % 3 == 2 ? 2 : 0; }  // [24, 20, 20]

}  // namespace

TEST_CASE("Qwen2-VL config: make_mrope, get_rope_index options, text = plain RoPE", "[mrope][hf]") {
    const auto cfg = load_bundled_config("qwen2-vl-7b.json");
    REQUIRE(cfg.rope.is_mrope());
    const auto rope = cfg.rope.make_mrope();
    CHECK(rope.params().section == std::array<std::size_t, 3>{16, 24, 24});
    CHECK_FALSE(rope.params().interleaved);
    const auto opt = posenc::hf::mrope_options(cfg);
    CHECK(opt.model == posenc::mrope_model::qwen2_vl);
    CHECK(opt.spatial_merge_size == 2);
    const auto tok = posenc::hf::mrope_token_ids(cfg);
    CHECK(tok.image == 151655);
    CHECK(tok.video == 151656);
    CHECK(tok.vision_start == 151652);

    // A prompt: 3 text tokens, a 1×4×4 image, 2 text tokens; one head of 128 lanes per token.
    const std::vector<posenc::prompt_segment> prompt = {posenc::prompt_segment::text(3), posenc::prompt_segment::image(1, 4, 4),
                                                        posenc::prompt_segment::text(2)};
    const auto pos = posenc::build_mrope_positions(prompt, opt);
    const std::size_t T = pos.size();
    REQUIRE(T == 9);
    std::vector<float> q = posenc_test::random_floats(T * 128, 3), x = q;
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {T, 1, 128}), pos.ids());
    std::size_t compared = 0;
    for (std::size_t t = 0; t < T; ++t) {
        const double p[3] = {static_cast<double>(pos.t[t]), static_cast<double>(pos.h[t]), static_cast<double>(pos.w[t])};
        for (std::size_t j = 0; j < 64; ++j) {
            const double a = p[qwen2_vl_axis(j)] * std::pow(1e6, -2.0 * static_cast<double>(j) / 128.0);
            const double x1 = x[t * 128 + j], x2 = x[t * 128 + j + 64];
            CHECK(std::abs(q[t * 128 + j] - (x1 * std::cos(a) - x2 * std::sin(a))) <= 2e-6 * std::hypot(x1, x2));
            CHECK(std::abs(q[t * 128 + j + 64] - (x2 * std::cos(a) + x1 * std::sin(a))) <= 2e-6 * std::hypot(x1, x2));
            ++compared;
        }
    }
    REQUIRE(compared == 9 * 64);

    // Text tokens through the M-RoPE rotary are the config's plain rotary, bit for bit.
    std::vector<float> a = posenc_test::random_floats(40 * 128, 9), b = a;
    cfg.rope.make_rotary().apply(posenc::heads_view<float>(std::span<float>(a), {40, 1, 128}),
                                 posenc::position_ids::consecutive(17, 40));
    rope.apply(posenc::heads_view<float>(std::span<float>(b), {40, 1, 128}), posenc::position_ids::consecutive(17, 40));
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("Qwen3-VL config: interleaved M-RoPE, qwen3_vl positions, other configs have no M-RoPE", "[mrope][hf]") {
    const auto cfg = load_bundled_config("qwen3-vl-8b.json");
    const auto rope = cfg.rope.make_mrope();
    CHECK(rope.params().interleaved);
    CHECK(rope.params().section == std::array<std::size_t, 3>{24, 20, 20});
    CHECK(posenc::hf::mrope_options(cfg).model == posenc::mrope_model::qwen3_vl);
    std::size_t checked = 0;
    for (std::size_t j = 0; j < 64; ++j) {
        CHECK(rope.pair_axis()[j] == qwen3_vl_axis(j));
        ++checked;
    }
    REQUIRE(checked == 64);

    const auto llama = load_bundled_config("llama-3.1-8b.json");
    CHECK_FALSE(llama.rope.is_mrope());
    expect_config_error([&] { (void)llama.rope.make_mrope(); }, "mrope_section");
    expect_config_error([&] { (void)posenc::hf::mrope_options(llama); }, "model_type", "llama");
    expect_config_error([&] { (void)cfg.rope.make_mrope<posenc::interleaved>(); }, "layout", "half_split");
}

#ifdef POSENC_INSPECT_PATH

TEST_CASE("posenc-inspect --positions t:h:w on M-RoPE configs", "[mrope][inspect]") {
    std::size_t compared = 0;
    for (const bool qwen3 : {false, true}) {
        const auto r = posenc_test::run_inspect(config_path(qwen3 ? "qwen3-vl-8b.json" : "qwen2-vl-7b.json") + " --json --positions 5,7:3:4");
        REQUIRE(r.exit_code == 0);
        const auto j = json::parse(r.out);
        CHECK(j.at("positions") == json::parse("[5, [7, 3, 4]]"));
        // The split is in the JSON (the files' mrope_section and mrope_interleaved).
        CHECK(j.at("mrope_section") == json::parse(qwen3 ? "[24, 20, 20]" : "[16, 24, 24]"));
        CHECK(j.at("mrope_interleaved") == qwen3);
        const double base = qwen3 ? 5e6 : 1e6;
        for (std::size_t i = 0; i < 64; ++i) {
            const double th = std::pow(base, -2.0 * static_cast<double>(i) / 128.0);
            const int axis = qwen3 ? qwen3_vl_axis(i) : qwen2_vl_axis(i);
            const double p = axis == 0 ? 7.0 : axis == 1 ? 3.0 : 4.0;
            CHECK(std::abs(j.at("cos")[0][i].get<double>() - std::cos(5.0 * th)) <= 1e-7);
            CHECK(std::abs(j.at("cos")[1][i].get<double>() - std::cos(p * th)) <= 1e-7);
            CHECK(std::abs(j.at("sin")[1][i].get<double>() - std::sin(p * th)) <= 1e-7);
            ++compared;
        }
    }
    REQUIRE(compared == 128);
    // Components on a config without M-RoPE, a malformed triple, components without a config: one
    // stderr line, nothing on stdout.
    for (const std::string& args : {config_path("llama-3.1-8b.json") + " --positions 1:2:3", config_path("qwen2-vl-7b.json") + " --positions 1:2",
                                    config_path("qwen2-vl-7b.json") + " --positions 1:2:3:4",
                                    std::string("--sinusoidal 8 --variant concat --positions 1:2:3")}) {
        const auto r = posenc_test::run_inspect(args);
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find("--positions") != std::string::npos);
    }
}
#endif
