// One regression test per bug class other positional-encoding implementations shipped
// (docs/peer-bug-classes.md, classes 1-15), each named after its class and able to catch it.
// Expected values: HF's float64 runs (tests/data/hf_golden_public.json), the published configs in
// tests/data/configs/, or closed forms evaluated in double here — never posenc's own output.
#include <posenc/hf/config.hpp>
#include <posenc/hf/encoding.hpp>
#include <posenc/posenc.hpp>

#include <cfloat>
#include <cstring>
#include <numbers>
#include <type_traits>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using nlohmann::json;
using posenc_test::closed_form_inv_freq;
using posenc_test::golden_entry;
using posenc_test::golden_inv_freq;
using posenc_test::load_bundled_config;
using posenc_test::max_rel_diff;
using posenc_test::random_floats;
using posenc_test::same_bits;

TEST_CASE("peer bug 1: dynamic NTK keeps no hidden state between calls", "[peer]") {
    // HF's module caches the largest length seen: after a 6144-token call, a 3072-token call still
    // uses base 51293.79 (golden cache demo). A pure function gives 3072 its own base, 20221.26 —
    // HF's value for 3072 on a fresh module — before and after any long call.
    const auto& demo = golden_entry("rope_dynamic_cache_behavior", "dynamic_d128_b1e4_f2_o2048_cache_demo").at("calls");
    REQUIRE(demo.size() == 6);
    REQUIRE(demo[2].at("max_position_id_plus_1") == 3072);
    REQUIRE(demo[5].at("max_position_id_plus_1") == 3072);
    const double stale = demo[2].at("effective_base_f64_after"), fresh = demo[5].at("effective_base_f64_after");
    REQUIRE(stale != fresh);
    const posenc::dynamic_ntk dyn{.base = 10000, .factor = 2, .original_max_position = 2048};
    const auto before = posenc::rotary<posenc::half_split>({.head_dim = 128}, dyn, 3072).table(64);
    const auto long_call = posenc::rotary<posenc::half_split>({.head_dim = 128}, dyn, 6144).table(64);
    const auto after = posenc::rotary<posenc::half_split>({.head_dim = 128}, dyn, 3072).table(64);
    CHECK(same_bits(before.data(), after.data(), 64 * 128));
    CHECK_FALSE(same_bits(before.data(), long_call.data(), 64 * 128));
    CHECK(std::abs(dyn.effective_base(128, 3072) - fresh) <= 1e-9 * fresh);
    CHECK(std::abs(dyn.effective_base(128, 6144) - double(demo[1].at("effective_base_f64_after"))) <= 1e-9 * stale);
}

TEST_CASE("peer bug 2: dynamic NTK follows its length (not a constant) at several lengths", "[peer]") {
    // Golden HF float64 inverse frequencies at L = 3072, 6144, 20480 (L₀ = 2048, s = 2), and the
    // closed form base' = base·(s·L/L₀ − (s − 1))^(d/(d−2)).
    const posenc::dynamic_ntk dyn{.base = 10000, .factor = 2, .original_max_position = 2048};
    std::vector<std::vector<double>> seen;
    for (std::int64_t L : {3072, 6144, 20480}) {
        INFO("L " << L);
        const auto f = dyn.frequencies(128, L);
        CHECK(max_rel_diff(f.inv_freq, golden_inv_freq("dynamic_d128_b1e4_f2_o2048_L" + std::to_string(L))) <= 1e-12);
        const double closed_base = 10000 * std::pow(2.0 * static_cast<double>(L) / 2048 - 1, 128.0 / 126.0);
        CHECK(max_rel_diff(f.inv_freq, closed_form_inv_freq(closed_base, 128)) <= 1e-12);
        seen.push_back(f.inv_freq);
    }
    CHECK(seen[0] != seen[1]);
    CHECK(seen[1] != seen[2]);
    CHECK(seen[2][63] < seen[1][63]);  // longer → lower frequencies
}

TEST_CASE("peer bug 3: dynamic NTK below the trained length is the default table and finite", "[peer]") {
    // A length below L₀ made (s·L/L₀ − (s − 1)) < 1 — negative for small L — and the base NaN.
    std::size_t lengths = 0;
    for (double s : {2.0, 8.0, 0.5}) {
        const posenc::dynamic_ntk dyn{.base = 10000, .factor = s, .original_max_position = 4096};
        for (std::int64_t L : {0, 1, 2, 100, 1000, 4095, 4096}) {
            INFO("factor " << s << " L " << L);
            const auto f = dyn.frequencies(64, L);
            CHECK(max_rel_diff(f.inv_freq, closed_form_inv_freq(10000, 64)) <= 1e-15);
            const posenc::cos_sin_table t(f, 1024);
            std::size_t finite = 0;
            for (std::size_t j = 0; j < 1024 * 64; ++j) finite += std::isfinite(t.data()[j]) ? 1 : 0;
            CHECK(finite == 1024 * 64);
            ++lengths;
        }
        CHECK(max_rel_diff(dyn.frequencies(64, 4096).inv_freq, golden_inv_freq("dynamic_d64_b1e4_f4_o4096_L4096")) <= 1e-12);
    }
    CHECK(lengths == 21);
}

TEST_CASE("peer bug 4: inv_freq and angles in double, tables in float", "[peer]") {
    static_assert(std::is_same_v<decltype(posenc::rope_frequencies::inv_freq), std::vector<double>>);
    static_assert(std::is_same_v<decltype(std::declval<posenc::cos_sin_table>().data()), const float*>);
    // HF's float32 inv_freq is off by up to 7e-8 relative (golden max_rel_diff_hf_f32_vs_f64); a
    // float32 or bf16 computation cannot pass 1e-12.
    for (const char* id : {"default_d128_b5e5", "yarn_d128_b5e5_f8_o8192", "llama3_d128_b5e5_f8_l1_h4_o8192_llama31"}) {
        INFO(id);
        const auto& e = golden_entry("rope_inv_freq", id);
        REQUIRE(double(e.at("max_rel_diff_hf_f32_vs_f64")) > 1e-8);
    }
    CHECK(max_rel_diff(posenc::default_rope{.base = 500000}.frequencies(128).inv_freq, golden_inv_freq("default_d128_b5e5")) <= 1e-13);
    CHECK(max_rel_diff(posenc::llama3{.base = 500000, .factor = 8, .original_max_position = 8192}.frequencies(128).inv_freq,
                   golden_inv_freq("llama3_d128_b5e5_f8_l1_h4_o8192_llama31")) <= 1e-12);
    // Angles in double: at p = 65537 a float32 angle p·θ is off by up to 2^-24·65537 ≈ 4e-3 rad.
    const auto f = posenc::default_rope{.base = 500000}.frequencies(32);
    const posenc::cos_sin_table table(f, 65538);
    const auto inv32 = closed_form_inv_freq(500000, 32);
    std::size_t compared = 0;
    for (std::int64_t p : {std::int64_t{65537}, std::int64_t{50021}, std::int64_t{40009}})
        for (std::size_t i = 0; i < 16; ++i) {
            const double a = static_cast<double>(p) * inv32[i];
            CHECK(std::abs(double(table.cos(p)[i]) - std::cos(a)) <= 1.5e-7);
            CHECK(std::abs(double(table.sin(p)[i]) - std::sin(a)) <= 1.5e-7);
            ++compared;
        }
    CHECK(compared == 3 * 16);
}

TEST_CASE("peer bug 5: positions are integers, distinct past 2048 and 2^24", "[peer]") {
    // fp16 holds 2048 and 2050 but not 2049; float32 holds 2^24 but not 2^24 + 1. Each position must
    // get its own rotation, equal to the double rotation at that exact integer.
    const std::size_t d = 64;
    const posenc::rotary<posenc::interleaved> rope({.head_dim = d}, posenc::default_rope{.base = 10000});
    const auto inv = closed_form_inv_freq(10000, d);
    const auto x = random_floats(d, 3);
    const std::vector<double> xd(x.begin(), x.end());
    std::size_t compared = 0;
    for (std::int64_t p : {std::int64_t{2049}, std::int64_t{2051}, (std::int64_t{1} << 24) + 1, (std::int64_t{1} << 24) + 3}) {
        auto y = x, y_prev = x;
        rope.apply(posenc::heads_view<float>(std::span<float>(y), {1, 1, d}), std::vector<std::int64_t>{p});
        rope.apply(posenc::heads_view<float>(std::span<float>(y_prev), {1, 1, d}), std::vector<std::int64_t>{p - 1});
        const auto want = posenc_test::reference_rotate(xd, d, true, inv, p);
        INFO("position " << p);
        CHECK(y != y_prev);
        for (std::size_t j = 0; j < d; ++j) CHECK(std::abs(y[j] - want[j]) <= 2e-6);
        ++compared;
    }
    CHECK(compared == 4);
    // int32 positions reach 2^31 − 1 unchanged (no narrowing).
    std::vector<std::int32_t> p32{2147483647};
    auto y32 = x, y64 = x;
    rope.apply(posenc::heads_view<float>(std::span<float>(y32), {1, 1, d}), p32);
    rope.apply(posenc::heads_view<float>(std::span<float>(y64), {1, 1, d}), std::vector<std::int64_t>{2147483647});
    CHECK(y32 == y64);
}

TEST_CASE("peer bug 6: cos/sin caches at float precision or better (HF golden rotations)", "[peer]") {
    // HF's own float32 path is off by up to 9e-3 from its float64 run at these positions (golden
    // max_abs_diff_hf_f32_vs_f64); fp16 caches are off by ~1e-3 everywhere. posenc, from a table and on
    // the fly, stays within 2e-6 of the float64 run.
    std::size_t compared = 0;
    for (const char* id : {"apply_default_d128_b1e4_half_split", "apply_yarn_d128_b1e4_f4_o4096_interleaved"}) {
        const auto& e = golden_entry("rope_apply", id);
        const bool inter = e.at("layout") == "interleaved";
        const auto positions = e.at("positions").get<std::vector<std::int64_t>>();
        const auto& q = e.at("q");
        const auto& out = e.at("out_f64");
        const std::size_t d = e.at("head_dim");
        posenc::any_schedule sched = posenc::default_rope{.base = 10000};
        if (e.at("rope_type") == "yarn") sched = posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 4096};
        const posenc::any_rotary rope(inter ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split, {.head_dim = d},
                                      sched);
        const auto table = rope.table(4097);  // the table path for the positions it holds
        for (std::size_t t = 0; t < positions.size(); ++t)
            for (bool use_table : {false, true}) {
                if (use_table && !table.contains(positions[t])) continue;
                auto x = q.at(t).get<std::vector<float>>();
                const posenc::heads_view<float> v(std::span<float>(x), {1, 1, d});
                if (use_table)
                    rope.apply(table, v, std::vector<std::int64_t>{positions[t]});
                else
                    rope.apply(v, std::vector<std::int64_t>{positions[t]});
                const auto want = out.at(t).get<std::vector<double>>();
                double worst = 0;
                for (std::size_t j = 0; j < d; ++j) worst = posenc_test::worst_of(worst, std::abs(x[j] - want[j]));
                INFO(id << " position " << positions[t] << " table " << use_table);
                CHECK(worst <= 2e-6);
                ++compared;
            }
        CHECK(double(e.at("max_abs_diff_hf_f32_vs_f64")) > 1e-4);  // the golden data can tell the two apart
    }
    CHECK(compared == 2 * (9 + 7));  // positions 0, 1, 2, 7, 100, 4095, 4096 also from the table
}

TEST_CASE("peer bug 7: a layout converter must permute the Q/K rows (interleaved vs half-split)", "[peer]") {
    // HF's Llama conversion: half-split row j takes interleaved row 2j (j < d/2) or 2(j − d/2) + 1.
    const std::vector<std::size_t> expected{0, 2, 4, 6, 1, 3, 5, 7, 8, 9};
    for (std::size_t j = 0; j < expected.size(); ++j) CHECK(posenc::interleaved_lane_of_half_split(j, 8) == expected[j]);
    // Scores qᵀk of a converted model equal the original's; a converter that skips P does not.
    const std::size_t H = 2, D = 16, C = 12;
    const posenc::rope_dims dims{.head_dim = D};
    const auto Wq = random_floats(H * D * C, 41), Wk = random_floats(H * D * C, 42), x = random_floats(C, 43);
    auto scores = [&](const std::vector<float>& wq, const std::vector<float>& wk, bool interleaved) {
        auto q = posenc_test::matvec(wq, x), k = posenc_test::matvec(wk, x);
        const posenc::any_rotary rope(interleaved ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split, dims,
                                      posenc::any_schedule{posenc::default_rope{}});
        rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, H, D}), std::vector<std::int64_t>{1234});
        rope.apply(posenc::heads_view<float>(std::span<float>(k), {1, H, D}), std::vector<std::int64_t>{1000});
        std::vector<double> s(H);
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t j = 0; j < D; ++j) s[h] += double(q[h * D + j]) * k[h * D + j];
        return s;
    };
    auto Pq = Wq, Pk = Wk;
    posenc::interleaved_to_half_split(std::span<float>(Pq), H, dims, C);
    posenc::interleaved_to_half_split(std::span<float>(Pk), H, dims, C);
    const auto original = scores(Wq, Wk, true), converted = scores(Pq, Pk, false), skipped = scores(Wq, Wk, false);
    for (std::size_t h = 0; h < H; ++h) {
        CHECK(std::abs(converted[h] - original[h]) <= 1e-4 * (1 + std::abs(original[h])));
        CHECK(std::abs(skipped[h] - original[h]) > 1e-2);
    }
}

TEST_CASE("peer bug 8: DeepSeek's rope layout (and every family's) is stated by the config reader", "[peer]") {
    // DeepSeek-V3: qk_rope_head_dim 64, interleaved pairs (2i, 2i+1) as in DeepSeek's code.
    const auto ds = load_bundled_config("deepseek-v3.json");
    CHECK(ds.rope.layout == posenc::rope_layout::interleaved);
    CHECK(ds.rope.dims.head_dim == 64);
    CHECK(load_bundled_config("deepseek-v2-lite.json").rope.layout == posenc::rope_layout::interleaved);
    CHECK(load_bundled_config("gpt-j-6b.json").rope.layout == posenc::rope_layout::interleaved);
    for (const char* half : {"llama-3.1-8b.json", "qwen2.5-7b-yarn.json", "gpt-neox-20b.json", "mistral-nemo.json"}) {
        INFO(half);
        CHECK(load_bundled_config(half).rope.layout == posenc::rope_layout::half_split);
    }
    // And the rotary built from it rotates pairs (2i, 2i+1): lane 1 moves with lane 0 only.
    const auto rope = ds.rope.make_rotary();
    std::vector<float> x(64, 0.0f);
    x[1] = 1.0f;
    rope.apply(posenc::heads_view<float>(std::span<float>(x), {1, 1, 64}), std::vector<std::int64_t>{1});
    std::size_t moved = 0;
    for (std::size_t j = 2; j < 64; ++j) moved += x[j] != 0.0f ? 1 : 0;
    CHECK(moved == 0);
    CHECK(x[0] != 0.0f);
}

TEST_CASE("peer bug 9: partial rotary uses rotary_dim for frequencies and pairs, amplitude once", "[peer]") {
    // head_dim 128, rotary_dim 32: θᵢ = base^(−2i/32), pairs (i, i + 16), lanes 32.. untouched; YaRN's
    // amplitude a applied once. At position 0 every one of these bugs is invisible: test far out.
    const std::size_t D = 128, R = 32;
    const posenc::yarn y{.base = 10000, .factor = 4, .original_max_position = 4096, .attention_factor = 1.25};
    const posenc::rotary<posenc::half_split> rope({.head_dim = D, .rotary_dim = R}, y);
    CHECK(rope.frequencies().attention_factor == 1.25);
    const auto x = random_floats(D, 9);
    const std::vector<double> xd(x.begin(), x.end());
    std::size_t compared = 0;
    for (std::int64_t p : {std::int64_t{0}, std::int64_t{4097}, std::int64_t{131071}}) {
        auto got = x;
        rope.apply(posenc::heads_view<float>(std::span<float>(got), {1, 1, D}), std::vector<std::int64_t>{p});
        // Frequencies from the rotary width, checked against HF's yarn for d = 32 separately below.
        const auto want = posenc_test::reference_rotate(xd, R, false, rope.frequencies().inv_freq, p, 1.25);
        INFO("position " << p);
        for (std::size_t j = 0; j < D; ++j) CHECK(std::abs(got[j] - want[j]) <= 2e-6 * (1 + std::abs(want[j])));
        for (std::size_t j = R; j < D; ++j) CHECK(got[j] == x[j]);
        ++compared;
    }
    CHECK(compared == 3);
    // θ from rotary_dim 32: the extrapolated pairs (the highest frequencies) are base^(−2i/32) exactly.
    const auto& inv = rope.frequencies().inv_freq;
    REQUIRE(inv.size() == R / 2);
    CHECK(std::abs(inv[1] - std::pow(10000.0, -2.0 / 32)) <= 1e-15);
    CHECK(std::abs(inv[1] - std::pow(10000.0, -2.0 / 128)) > 0.1);
    // GPT-NeoX's rotary_pct 0.25 of head_dim 96 → 24 rotary lanes.
    CHECK(load_bundled_config("gpt-neox-20b.json").rope.dims.rotary() == 24);
}

TEST_CASE("peer bug 10: YaRN mscale pairs and an explicit attention_factor", "[peer]") {
    auto m = [](double s, double k) { return s <= 1 ? 1.0 : 0.1 * k * std::log(s) + 1; };  // DeepSeek's yarn_get_mscale
    const double s = 40;
    struct pair_case {
        double mscale, all_dim;
    };
    std::size_t checked = 0;
    for (const auto& c : {pair_case{1, 1}, pair_case{1, 0.707}, pair_case{0.707, 0.707}, pair_case{1, 0}}) {
        INFO("mscale " << c.mscale << " mscale_all_dim " << c.all_dim);
        const posenc::yarn y{.base = 10000, .factor = s, .original_max_position = 4096, .mscale = c.mscale, .mscale_all_dim = c.all_dim};
        // HF: both given (non-zero) → mscale(s, mscale)/mscale(s, mscale_all_dim); else 0.1·ln s + 1.
        const double amplitude = c.all_dim != 0 ? m(s, c.mscale) / m(s, c.all_dim) : m(s, 1);
        CHECK(std::abs(y.frequencies(64).attention_factor - amplitude) <= 1e-15);
        // DeepSeek multiplies the softmax scale by mscale(s, mscale_all_dim)² outside the rope code.
        CHECK(std::abs(y.softmax_scale_multiplier() - (c.all_dim != 0 ? m(s, c.all_dim) * m(s, c.all_dim) : 1.0)) <= 1e-15);
        ++checked;
    }
    CHECK(checked == 4);
    // Golden: DeepSeek-V3 (mscale 1 / 1 → amplitude 1) and an explicit attention_factor.
    const auto& ds = golden_entry("rope_inv_freq", "yarn_d64_b1e4_f40_o4096_mscale1_1_deepseekv3");
    const posenc::yarn dsy{.base = 10000, .factor = 40, .original_max_position = 4096, .mscale = 1.0, .mscale_all_dim = 1.0};
    CHECK(dsy.frequencies(64).attention_factor == double(ds.at("attention_factor")));
    CHECK(max_rel_diff(dsy.frequencies(64).inv_freq, ds.at("inv_freq_f64").get<std::vector<double>>()) <= 1e-12);
    const auto& af = golden_entry("rope_inv_freq", "yarn_d128_b1e4_f8_o4096_af1");
    const posenc::yarn afy{.base = 10000, .factor = 8, .original_max_position = 4096,
                           .attention_factor = af.at("params").at("attention_factor").get<double>()};
    CHECK(afy.frequencies(128).attention_factor == double(af.at("attention_factor")));
    CHECK(double(af.at("attention_factor")) != m(8, 1));  // the explicit value, not the computed one
    CHECK(std::abs(load_bundled_config("deepseek-v3.json").rope.softmax_scale_multiplier() - m(40, 1) * m(40, 1)) <= 1e-15);
}

TEST_CASE("peer bug 11: longrope switches at > not >=", "[peer]") {
    const auto& e = golden_entry("rope_inv_freq", "longrope_d64_b1e4_o4096_m131072_L4096");
    const auto& p = e.at("params");
    const posenc::longrope lr{.base = 10000, .short_factor = p.at("short_factor").get<std::vector<double>>(),
                              .long_factor = p.at("long_factor").get<std::vector<double>>(), .original_max_position = 4096,
                              .factor = 131072.0 / 4096};
    const auto at_l0 = golden_inv_freq("longrope_d64_b1e4_o4096_m131072_L4096");
    const auto past_l0 = golden_inv_freq("longrope_d64_b1e4_o4096_m131072_L4097");
    REQUIRE(at_l0 != past_l0);
    CHECK(max_rel_diff(lr.frequencies(64, 4095).inv_freq, at_l0) <= 1e-12);  // L₀ − 1: short
    CHECK(max_rel_diff(lr.frequencies(64, 4096).inv_freq, at_l0) <= 1e-12);  // L₀: still short
    CHECK(max_rel_diff(lr.frequencies(64, 4097).inv_freq, past_l0) <= 1e-12);  // L₀ + 1: long
    // Cached keys across the switch: a table built before it is rejected after it, not silently reused.
    const posenc::rotary<posenc::half_split> short_rope({.head_dim = 64}, lr, 4096), long_rope({.head_dim = 64}, lr, 4097);
    const auto stale = short_rope.table(16);
    std::vector<float> k(64, 1.0f);
    CHECK_THROWS_AS(long_rope.apply(stale, posenc::heads_view<float>(std::span<float>(k), {1, 1, 64}), std::vector<std::int64_t>{3}),
                    posenc::config_error);
}

TEST_CASE("peer bug 12: per-layer RoPE (Gemma-3 local vs global layers)", "[peer]") {
    // Gemma-3 4B: global layers base 1e6 with linear ×8, sliding-window layers base 1e4 unscaled, every
    // sixth layer global (HF sliding_window_pattern 6).
    const auto cfg = load_bundled_config("gemma-3-4b.json");
    REQUIRE(cfg.layer_types.size() == 34);
    const std::size_t d = 256;
    const auto global_inv = [&] {
        auto v = closed_form_inv_freq(1e6, d);
        for (double& f : v) f /= 8;
        return v;
    }();
    const auto local_inv = closed_form_inv_freq(1e4, d);
    const auto x = random_floats(d, 12);
    const std::vector<double> xd(x.begin(), x.end());
    std::size_t globals = 0, locals = 0;
    for (std::size_t layer = 0; layer < cfg.layer_types.size(); ++layer) {
        const auto& spec = cfg.rope_for(cfg.layer_types[layer]);
        const bool global = (layer + 1) % 6 == 0;
        INFO("layer " << layer << " " << cfg.layer_types[layer]);
        CHECK(cfg.layer_types[layer] == (global ? "full_attention" : "sliding_attention"));
        const auto rope = spec.make_rotary();
        auto y = x;
        rope.apply(posenc::heads_view<float>(std::span<float>(y), {1, 1, d}), std::vector<std::int64_t>{5000});
        const auto want = posenc_test::reference_rotate(xd, d, false, global ? global_inv : local_inv, 5000);
        double worst = 0;
        for (std::size_t j = 0; j < d; ++j) worst = posenc_test::worst_of(worst, std::abs(y[j] - want[j]));
        CHECK(worst <= 1e-5);
        (global ? globals : locals) += 1;
    }
    CHECK(globals == 5);
    CHECK(locals == 29);
}

TEST_CASE("peer bug 13: ALiBi decode equals prefill, the scale/bias order, slopes for 12 and 40 heads", "[peer]") {
    // Slopes, closed form: n' = 2^⌊log₂ n⌋ slopes 2^(−8k/n'), k = 1..n', then 2^(−4(2k−1)/n') for the rest.
    auto slope = [](std::size_t h, std::size_t n) {
        std::size_t c = 1;
        while (2 * c <= n) c *= 2;
        if (h < c) return std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(c));
        return std::pow(2.0, -4.0 * static_cast<double>(2 * (h - c) + 1) / static_cast<double>(c));
    };
    std::size_t compared = 0;
    for (std::size_t n : {12u, 40u}) {
        const auto s = posenc::alibi_slopes(n);
        REQUIRE(s.size() == n);
        for (std::size_t h = 0; h < n; ++h) {
            INFO(n << " heads, head " << h);
            CHECK(std::abs(s[h] - slope(h, n)) <= 1e-14 * slope(h, n));
            ++compared;
        }
    }
    CHECK(compared == 52);
    CHECK(posenc::alibi_slopes(12)[8] == std::pow(2.0, -0.5));  // the first non-power-of-two extra slope
    for (const auto& g : posenc_test::golden().at("alibi_slopes"))
        if (g.at("n_heads") == 12) CHECK(posenc::alibi_slopes(12) == g.at("slopes_f64").get<std::vector<double>>());
    // Decode: query 9 against cached keys 0..9, one call, equals row 9 of the prefill and −m·(9 − j).
    const posenc::alibi_bias bias({.heads = 12});
    std::vector<float> prefill(10 * 10, 0.0f);
    for (std::int64_t i = 0; i < 10; ++i)
        bias.add_to_scores(4, i, posenc::position_ids::consecutive(0, 10),
                           std::span<float>(prefill.data() + i * 10, 10));
    std::vector<float> decode(10, 0.0f);
    const std::vector<std::int64_t> cached{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    bias.add_to_scores(4, 9, cached, decode);
    CHECK(same_bits(decode.data(), prefill.data() + 90, 10));
    for (std::size_t j = 0; j < 10; ++j) CHECK(decode[j] == static_cast<float>(-slope(4, 12) * (9.0 - static_cast<double>(j))));
    // The order: BLOOM and MPT add after the 1/√d scale, Falcon before it.
    auto order_of = [](const char* name) {
        const auto enc = posenc::hf::load_position_encoding(posenc_test::config_path(name));
        return std::get<posenc::hf::alibi_model>(enc).params.order;
    };
    CHECK(order_of("bloom-560m.json") == posenc::bias_order::scale_then_add);
    CHECK(order_of("mpt-7b.json") == posenc::bias_order::scale_then_add);
    CHECK(order_of("falcon-rw-1b.json") == posenc::bias_order::add_then_scale);
}

TEST_CASE("peer bug 14: positions past the table are errors, not crashes or garbage", "[peer]") {
    const posenc::rotary<posenc::half_split> rope({.head_dim = 64}, posenc::default_rope{});
    const auto table = rope.table(4096);
    const auto original = random_floats(2 * 64, 14);
    auto x = original;
    const posenc::heads_view<float> v(std::span<float>(x), {2, 1, 64});
    std::size_t rejected = 0;
    for (std::int64_t p : {std::int64_t{4096}, std::int64_t{4097}, std::int64_t{-1}, std::int64_t{1} << 40,
                           std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()}) {
        INFO("position " << p);
        CHECK_THROWS_AS(rope.apply(table, v, std::vector<std::int64_t>{0, p}), posenc::range_error);
        CHECK_THROWS_AS(table.cos(p), posenc::range_error);
        CHECK(x == original);
        ++rejected;
    }
    CHECK(rejected == 6);
    CHECK_NOTHROW(rope.apply(table, v, std::vector<std::int64_t>{0, 4095}));
    CHECK(x != original);
}

TEST_CASE("peer bug 15: unknown rope_scaling types and keys are errors, not ignored", "[peer]") {
    const json base{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                    {"max_position_embeddings", 8192}, {"rope_theta", 10000.0}};
    std::size_t rejected = 0;
    for (const json& scaling : {json{{"rope_type", "ntk"}, {"factor", 2.0}}, json{{"rope_type", "Linear"}, {"factor", 2.0}},
                                json{{"type", "dynamic-ntk"}, {"factor", 2.0}}, json{{"rope_type", ""}, {"factor", 2.0}},
                                json{{"rope_type", "linear"}, {"factor", 2.0}, {"factr", 4.0}}}) {
        json c = base;
        c["rope_scaling"] = scaling;
        INFO(scaling.dump());
        try {
            (void)posenc::hf::parse_config(c);
            FAIL("accepted");
        } catch (const posenc::config_error& e) {
            CHECK(e.key().rfind("rope_scaling.", 0) == 0);
        }
        ++rejected;
    }
    CHECK(rejected == 5);
    json v5 = base;
    v5["rope_parameters"] = {{"rope_type", "mystery"}, {"rope_theta", 10000.0}};
    CHECK_THROWS_AS(posenc::hf::parse_config(v5), posenc::config_error);
}
