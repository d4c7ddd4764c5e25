// The M-RoPE / vision 2-D RoPE snippet of docs/rope.md, compiled and run as it stands, and the page's
// block checked to be its text.
#include <posenc/posenc.hpp>

#include <cmath>
#include <sstream>

#include "support/catch.hpp"
#include "support/readme.hpp"

TEST_CASE("README snippet: M-RoPE, positions of a mixed prompt, vision 2-D RoPE", "[readme][mrope]") {
    // --- snippet begin ---
    // Qwen2-VL's text model: M-RoPE, sections [16, 24, 24] (pairs from t, h, w), head_dim 128, base 1e6.
    posenc::mrope_rotary<posenc::half_split> rope({.head_dim = 128}, posenc::default_rope{.base = 1e6},
                                                  posenc::mrope{.section = {16, 24, 24}});
    // (t, h, w) of 3 text tokens, an image of 1×4×4 patches (2×2 tokens after the 2×2 merge), 2 text tokens.
    const std::vector<posenc::prompt_segment> prompt = {posenc::prompt_segment::text(3),
                                                        posenc::prompt_segment::image(1, 4, 4),
                                                        posenc::prompt_segment::text(2)};
    const auto pos = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_vl});
    // pos.t = 0 1 2 3 3 3 3 5 6, pos.h = 0 1 2 3 3 4 4 5 6, pos.w = 0 1 2 3 4 3 4 5 6
    std::vector<float> q(pos.size() * 28 * 128, 0.5f), k(pos.size() * 4 * 128, 0.25f);
    posenc::heads_view<float> qv(std::span<float>(q), {pos.size(), 28, 128});
    posenc::heads_view<float> kv(std::span<float>(k), {pos.size(), 4, 128});
    rope.apply(qv, kv, pos.ids());  // text tokens (t = h = w) get exactly posenc::rotary's result
    // Decoding continues at pos.next_position (7) on every axis: rope.apply(q1, k1, consecutive(7, 1)).

    // The Qwen2-VL ViT (head_dim 80): 2-D RoPE over each patch's (row, column), in the ViT's patch order.
    const std::vector<posenc::patch_grid> grids = {{.t = 1, .h = 4, .w = 4}};
    const auto patches = posenc::qwen_vision_positions(grids, /*spatial_merge_size=*/2);
    const auto vit = posenc::qwen_vision_rotary(/*head_dim=*/80);
    std::vector<float> vq(patches.size() * 16 * 80, 0.5f);
    vit.apply(posenc::heads_view<float>(std::span<float>(vq), {patches.size(), 16, 80}), patches.ids());
    // --- snippet end ---

    CHECK(pos.next_position == 7);
    CHECK(pos.delta == -2);
    // Token 4 = (3, 3, 4), head 0: pair 16 reads h = 3, pair 40 reads w = 4, pair 0 reads t = 3.
    auto rotated = [](double p, std::size_t j) {
        const double a = p * std::pow(1e6, -2.0 * static_cast<double>(j) / 128.0);
        return 0.5 * std::cos(a) - 0.5 * std::sin(a);
    };
    const float* q4 = q.data() + 4 * 28 * 128;
    CHECK(std::abs(q4[0] - rotated(3, 0)) <= 1e-6);
    CHECK(std::abs(q4[16] - rotated(3, 16)) <= 1e-6);
    CHECK(std::abs(q4[40] - rotated(4, 40)) <= 1e-6);
    // ViT patch 5 is (row 0, column 3): pair 0 rotated by 0, pair 20 (first w pair) by 3·θ₀ = 3.
    const float* v5 = vq.data() + 5 * 16 * 80;
    CHECK(patches.h[5] == 0);
    CHECK(patches.w[5] == 3);
    CHECK(v5[0] == 0.5f);
    CHECK(std::abs(v5[20] - (0.5 * std::cos(3.0) - 0.5 * std::sin(3.0))) <= 1e-6);
}

TEST_CASE("docs/rope.md's M-RoPE block is the compiled snippet", "[readme][mrope]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::doc_block("docs/rope.md", "mrope") == snippet);
}
