// M-RoPE positions of mixed prompts (HF get_rope_index of Qwen2-VL, Qwen2.5-VL, Qwen3-VL) on small
// grids, the expected ids written out by hand from HF's definition: text at start, start+1, … on all
// axes; a vision block of t × (h/s) × (w/s) tokens at (start + τ_k, start + i, start + j); start =
// largest id + 1; delta = largest id + 1 − tokens.
#include <posenc/rope/mrope_positions.hpp>

#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"

using posenc::prompt_segment;
using posenc_test::expect_config_error;
using ids = std::vector<std::int64_t>;

TEST_CASE("M-RoPE positions: text + one image + text (Qwen2-VL)", "[mrope][positions]") {
    // 3 text tokens, a 1×4×4-patch image merged 2×2 into a 2×2 grid, 2 text tokens.
    const std::vector<prompt_segment> prompt = {prompt_segment::text(3), prompt_segment::image(1, 4, 4), prompt_segment::text(2)};
    const auto p = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_vl, .spatial_merge_size = 2});
    CHECK(p.t == ids{0, 1, 2, 3, 3, 3, 3, 5, 6});
    CHECK(p.h == ids{0, 1, 2, 3, 3, 4, 4, 5, 6});
    CHECK(p.w == ids{0, 1, 2, 3, 4, 3, 4, 5, 6});
    CHECK(p.next_position == 7);
    CHECK(p.delta == -2);
    CHECK(p.ids().axes() == 3);
    CHECK(p.ids().size() == 9);
    // Text only: plain positions, delta 0.
    const auto text = posenc::build_mrope_positions(std::vector{prompt_segment::text(4)}, {});
    CHECK(text.t == ids{0, 1, 2, 3});
    CHECK(text.w == ids{0, 1, 2, 3});
    CHECK(text.delta == 0);
}

TEST_CASE("M-RoPE positions: videos in Qwen2-VL, Qwen2.5-VL (temporal scaling) and Qwen3-VL (per frame)", "[mrope][positions]") {
    // One text token, then a video of 2 × 4 × 6 patches, merge 2: 2 frames of 2 × 3 tokens.
    const std::vector<prompt_segment> prompt = {prompt_segment::text(1), prompt_segment::video(2, 4, 6, 1.0)};
    const auto q2 = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_vl});
    CHECK(q2.t == ids{0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
    CHECK(q2.h == ids{0, 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
    CHECK(q2.w == ids{0, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
    CHECK(q2.next_position == 4);
    CHECK(q2.delta == 4 - 13);

    // Qwen2.5-VL: τ_k = long(k · second_per_grid · tokens_per_second) = 0, 2 (1 s per grid, 2 per second).
    const auto q25 = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 2});
    CHECK(q25.t == ids{0, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3});
    CHECK(q25.h == q2.h);
    CHECK(q25.w == q2.w);
    CHECK(q25.next_position == 4);

    // Fractional steps truncate after the multiplication (HF #48669): 0.75 s per grid, 2 per second →
    // k·1.5 = 0, 1.5, 3, 4.5 → 0, 1, 3, 4. One merged token per frame (2 × 2 patches).
    const auto frac = posenc::build_mrope_positions(std::vector{prompt_segment::video(4, 2, 2, 0.75)},
                                                    {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 2});
    CHECK(frac.t == ids{0, 1, 3, 4});
    CHECK(frac.h == ids{0, 0, 0, 0});
    CHECK(frac.w == ids{0, 0, 0, 0});
    CHECK(frac.next_position == 5);
    CHECK(frac.delta == 1);

    // The product in float32, as HF's tensors take it: 0.3 s per grid, 25 per second, frame 6 is
    // float(float(6·0.3f)·25) = 45 exactly, where double gives 44.999… → 44 (Python's struct rounding
    // to float after each step: 0, 7, 15, 22, 30, 37, 45).
    const auto f32 = posenc::build_mrope_positions(std::vector{prompt_segment::video(7, 2, 2, 0.3)},
                                                   {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 25});
    CHECK(f32.t == ids{0, 7, 15, 22, 30, 37, 45});

    // Qwen2.5-VL images: τ = 0 for every frame (HF uses second_per_grid_t = 0 for images).
    const auto img = posenc::build_mrope_positions(std::vector{prompt_segment::image(2, 2, 4)},
                                                   {.model = posenc::mrope_model::qwen2_5_vl});
    CHECK(img.t == ids{0, 0, 0, 0});
    CHECK(img.h == ids{0, 0, 0, 0});
    CHECK(img.w == ids{0, 1, 0, 1});

    // Qwen3-VL: each frame its own 1 × 2 × 2 block starting at the largest id + 1.
    const auto q3 = posenc::build_mrope_positions(std::vector{prompt_segment::video(2, 4, 4)},
                                                  {.model = posenc::mrope_model::qwen3_vl});
    CHECK(q3.t == ids{0, 0, 0, 0, 2, 2, 2, 2});
    CHECK(q3.h == ids{0, 0, 1, 1, 2, 2, 3, 3});
    CHECK(q3.w == ids{0, 1, 0, 1, 2, 3, 2, 3});
    CHECK(q3.next_position == 4);
    CHECK(q3.delta == -4);

    // Qwen3-VL images keep HF's temporal index arange(t): an image of two frames gets t = 0, 1.
    const auto q3_img = posenc::build_mrope_positions(std::vector{prompt_segment::image(2, 2, 2)},
                                                      {.model = posenc::mrope_model::qwen3_vl});
    CHECK(q3_img.t == ids{0, 1});
    CHECK(q3_img.h == ids{0, 0});
    CHECK(q3_img.w == ids{0, 0});
}

TEST_CASE("M-RoPE positions from HF token ids", "[mrope][positions]") {
    const posenc::vision_token_ids tok{.image = 9, .video = 8, .vision_start = 7};
    // text, <vision_start>, 4 image placeholders, <vision_end>=6, text.
    const ids input = {1, 7, 9, 9, 9, 9, 6, 2};
    const std::vector<std::array<std::int64_t, 3>> images = {{1, 4, 4}};
    const auto seg = posenc::prompt_segments_from_tokens(input, images, {}, {}, tok, 2);
    REQUIRE(seg.size() == 3);
    CHECK(seg[0].tokens == 2);
    CHECK(seg[1].type == prompt_segment::kind::image);
    CHECK(seg[2].tokens == 2);
    const auto p = posenc::build_mrope_positions(seg, {});
    CHECK(p.t == ids{0, 1, 2, 2, 2, 2, 4, 5});
    CHECK(p.h == ids{0, 1, 2, 2, 3, 3, 4, 5});
    CHECK(p.w == ids{0, 1, 2, 3, 2, 3, 4, 5});
    CHECK(p.delta == -2);
    // A video block after the image, with its second_per_grid.
    const ids two = {7, 9, 9, 9, 9, 6, 7, 8, 8, 6};
    const std::vector<std::array<std::int64_t, 3>> videos = {{2, 2, 2}};
    const std::vector<double> spg = {2.0};
    const auto seg2 = posenc::prompt_segments_from_tokens(two, images, videos, spg, tok, 2);
    REQUIRE(seg2.size() == 5);  // text(1) image text(2) video text(1)
    CHECK(seg2[2].tokens == 2);
    CHECK(seg2[3].type == prompt_segment::kind::video);
    CHECK(seg2[3].second_per_grid == 2.0);
    const auto p2 = posenc::build_mrope_positions(seg2, {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 2});
    // text 0; image at 1: (1,1,1) (1,1,2) (1,2,1) (1,2,2); text 3, 4; video at 5: τ = 0, 4; text 10.
    CHECK(p2.t == ids{0, 1, 1, 1, 1, 3, 4, 5, 9, 10});
    CHECK(p2.h == ids{0, 1, 1, 2, 2, 3, 4, 5, 5, 10});
    CHECK(p2.w == ids{0, 1, 2, 1, 2, 3, 4, 5, 5, 10});
    // Two videos, each with its own second_per_grid (1 s and 2 s, 2 per second): text 0, 1; video at 2:
    // τ = 0, 2; text 5, 6; video at 7: τ = 0, 1·2.0·2 = 4; text 12.
    const ids videos2 = {1, 7, 8, 8, 6, 7, 8, 8, 6};
    const std::vector<std::array<std::int64_t, 3>> two_grids = {{2, 2, 2}, {2, 2, 2}};
    const std::vector<double> two_spg = {1.0, 2.0};
    const auto seg3 = posenc::prompt_segments_from_tokens(videos2, {}, two_grids, two_spg, tok, 2);
    REQUIRE(seg3.size() == 5);
    CHECK(seg3[1].second_per_grid == 1.0);
    CHECK(seg3[3].second_per_grid == 2.0);
    const auto p3 = posenc::build_mrope_positions(seg3, {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 2});
    CHECK(p3.t == ids{0, 1, 2, 4, 5, 6, 7, 11, 12});
    CHECK(p3.h == ids{0, 1, 2, 2, 5, 6, 7, 7, 12});
    // Grids and ids that disagree.
    expect_config_error([&] { (void)posenc::prompt_segments_from_tokens(input, {}, {}, {}, tok, 2); }, "image_grids");
    const ids cut = {7, 9, 9, 9};
    expect_config_error([&] { (void)posenc::prompt_segments_from_tokens(cut, images, {}, {}, tok, 2); }, "input_ids");
}

TEST_CASE("M-RoPE positions: invalid segments name the field", "[mrope][positions][errors]") {
    expect_config_error([] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::image(1, 5, 4)}, {}); },
                        "prompt[0].h", "5");
    expect_config_error([] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::image(1, 4, 5)}, {}); },
                        "prompt[0].w", "5");
    expect_config_error(
        [] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::text(1), prompt_segment::video(0, 4, 4)}, {}); },
        "prompt[1].t", "0");
    expect_config_error([] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::text(-1)}, {}); },
                        "prompt[0].tokens", "-1");
    expect_config_error([] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::video(1, 2, 2, -1.0)}, {}); },
                        "prompt[0].second_per_grid");
    // Qwen2.5-VL temporal ids of 2^31 or more (2 · 1e6 s · 2000 per second): rejected, never overflowed.
    expect_config_error(
        [] {
            (void)posenc::build_mrope_positions(std::vector{prompt_segment::video(3, 2, 2, 1e6)},
                                                {.model = posenc::mrope_model::qwen2_5_vl, .tokens_per_second = 2000});
        },
        "prompt[0].second_per_grid");
    expect_config_error([] { (void)posenc::build_mrope_positions(std::vector{prompt_segment::text(1)}, {.spatial_merge_size = 0}); },
                        "spatial_merge_size", "0");
}
