// 2-D RoPE of vision encoders against closed forms in double written from HF's definitions:
// Qwen-VL ViT (VisionRotaryEmbedding(head_dim/2): inv_k = θ^(−2k/(head_dim/2)); emb = cat(h·inv, w·inv)
// twice; rotate_half) and Pixtral (f_k = θ^(−2k/head_dim); cat(h·f[::2], w·f[1::2]) twice; rotate_half);
// patch orders written out by hand; the relative-position property in 2-D.
#include <posenc/rope/vision2d.hpp>

#include <cmath>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;
using ids = std::vector<std::int64_t>;

namespace {

// y = x·cos(ang) + rotate_half(x)·sin(ang) per lane, ang of width head_dim (HF's convention).
std::vector<double> rotate_half_ref(const std::vector<double>& x, const std::vector<double>& ang) {
    const std::size_t n = x.size() / 2;
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * std::cos(ang[i]) + (i < n ? -x[i + n] : x[i - n]) * std::sin(ang[i]);
    return y;
}

// HF's per-patch angle rows, width head_dim.
std::vector<double> qwen_angles(std::size_t head_dim, double theta, double h, double w) {
    const std::size_t dim = head_dim / 2;  // VisionRotaryEmbedding(head_dim // 2)
    std::vector<double> freqs;             // cat(freqs_h, freqs_w)
    for (std::size_t k = 0; 2 * k < dim; ++k) freqs.push_back(h / std::pow(theta, static_cast<double>(2 * k) / static_cast<double>(dim)));
    for (std::size_t k = 0; 2 * k < dim; ++k) freqs.push_back(w / std::pow(theta, static_cast<double>(2 * k) / static_cast<double>(dim)));
    std::vector<double> emb = freqs;  // cat(emb, emb)
    emb.insert(emb.end(), freqs.begin(), freqs.end());
    return emb;
}

std::vector<double> pixtral_angles(std::size_t head_dim, double theta, double h, double w) {
    std::vector<double> f;  // 1 / theta^(arange(0, dim, 2) / dim), dim = head_dim
    for (std::size_t k = 0; 2 * k < head_dim; ++k) f.push_back(1.0 / std::pow(theta, static_cast<double>(2 * k) / static_cast<double>(head_dim)));
    std::vector<double> row;
    for (std::size_t k = 0; k < f.size(); k += 2) row.push_back(h * f[k]);  // freqs_h = outer(h, freqs[::2])
    for (std::size_t k = 1; k < f.size(); k += 2) row.push_back(w * f[k]);  // freqs_w = outer(w, freqs[1::2])
    std::vector<double> emb = row;
    emb.insert(emb.end(), row.begin(), row.end());
    return emb;
}

template <class Angles>
std::size_t check_against(const posenc::multi_axis_rotary<posenc::half_split>& rope, std::size_t head_dim, std::size_t heads,
                          const posenc::patch_positions& pos, Angles angles) {
    const std::size_t T = pos.size();
    std::vector<float> x = posenc_test::random_floats(T * heads * head_dim, 21), y = x;
    rope.apply(posenc::heads_view<float>(std::span<float>(y), {T, heads, head_dim}), pos.ids());
    std::size_t compared = 0;
    for (std::size_t t = 0; t < T; ++t) {
        const auto ang = angles(static_cast<double>(pos.h[t]), static_cast<double>(pos.w[t]));
        REQUIRE(ang.size() == head_dim);
        for (std::size_t h = 0; h < heads; ++h) {
            const std::size_t off = (t * heads + h) * head_dim;
            const std::vector<double> xd(x.begin() + static_cast<std::ptrdiff_t>(off), x.begin() + static_cast<std::ptrdiff_t>(off + head_dim));
            const auto ref = rotate_half_ref(xd, ang);
            for (std::size_t i = 0; i < head_dim / 2; ++i) {
                const double len = std::hypot(xd[i], xd[i + head_dim / 2]);
                CHECK(std::abs(y[off + i] - ref[i]) <= 2e-6 * len + 1e-30);
                CHECK(std::abs(y[off + i + head_dim / 2] - ref[i + head_dim / 2]) <= 2e-6 * len + 1e-30);
                ++compared;
            }
        }
    }
    return compared;
}

}  // namespace

TEST_CASE("Qwen-VL ViT patch order: merge blocks row by row, rows then columns inside", "[vision2d]") {
    // One 1 × 4 × 4 grid, spatial_merge_size 2: four 2 × 2 blocks (0,0) (0,1) (1,0) (1,1).
    const std::vector<posenc::patch_grid> g = {{1, 4, 4}};
    const auto p = posenc::qwen_vision_positions(g, 2);
    CHECK(p.h == ids{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
    CHECK(p.w == ids{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3});
    // Two frames of 2 × 4 repeat the frame; a second grid follows.
    const std::vector<posenc::patch_grid> g2 = {{2, 2, 4}, {1, 2, 2}};
    const auto q = posenc::qwen_vision_positions(g2, 2);
    CHECK(q.h == ids{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1});
    CHECK(q.w == ids{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1});
    const std::vector<posenc::patch_grid> bad = {{1, 3, 4}};
    expect_config_error([&] { (void)posenc::qwen_vision_positions(bad, 2); }, "grid.h", "3");
}

TEST_CASE("Qwen-VL ViT patch positions: a width that is not a multiple of spatial_merge_size is rejected", "[vision2d][errors]") {
    // HF's rot_pos_emb reshapes each frame to (h/s, s, w/s, s): h and w must both be multiples of s (vision2d.hpp).
    const std::vector<posenc::patch_grid> bad = {{1, 4, 3}};
    expect_config_error([&] { (void)posenc::qwen_vision_positions(bad, 2); }, "grid.w", "3");
    const std::vector<posenc::patch_grid> second_bad = {{1, 3, 3}, {1, 6, 4}};
    expect_config_error([&] { (void)posenc::qwen_vision_positions(second_bad, 3); }, "grid.w", "4");
}

TEST_CASE("Pixtral patch order: row-major mesh per image", "[vision2d]") {
    const std::vector<posenc::patch_grid> g = {{1, 2, 3}, {1, 1, 2}};
    const auto p = posenc::pixtral_positions(g);
    CHECK(p.h == ids{0, 0, 0, 1, 1, 1, 0, 0});
    CHECK(p.w == ids{0, 1, 2, 0, 1, 2, 0, 1});
}

TEST_CASE("Qwen-VL ViT and Pixtral 2-D RoPE against HF's formulas in double", "[vision2d]") {
    std::size_t compared = 0;
    {
        const std::vector<posenc::patch_grid> g = {{2, 6, 8}};
        const auto pos = posenc::qwen_vision_positions(g, 2);
        for (std::size_t hd : {std::size_t{80}, std::size_t{72}}) {  // Qwen2-VL / 2.5-VL, Qwen3-VL
            const auto rope = posenc::qwen_vision_rotary(hd);
            compared += check_against(rope, hd, 3, pos, [&](double h, double w) { return qwen_angles(hd, 10000.0, h, w); });
        }
    }
    {
        const std::vector<posenc::patch_grid> g = {{1, 5, 7}, {1, 64, 2}};
        const auto pos = posenc::pixtral_positions(g);
        const auto rope = posenc::pixtral_rotary(64, 10000.0);
        compared += check_against(rope, 64, 2, pos, [](double h, double w) { return pixtral_angles(64, 10000.0, h, w); });
    }
    REQUIRE(compared == 96 * 3 * 40 + 96 * 3 * 36 + (35 + 128) * 2 * 32);
}

TEST_CASE("2-D RoPE: qᵀk depends only on (Δh, Δw)", "[vision2d]") {
    const auto rope = posenc::pixtral_rotary(64);
    const std::vector<float> q0 = posenc_test::random_floats(64, 5), k0 = posenc_test::random_floats(64, 6);
    auto dot_at = [&](std::int64_t hq, std::int64_t wq, std::int64_t hk, std::int64_t wk) {
        std::vector<float> q = q0, k = k0;
        const ids qh{hq}, qw{wq}, kh{hk}, kw{wk};
        rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 1, 64}), {posenc::position_ids(qh), posenc::position_ids(qw)});
        rope.apply(posenc::heads_view<float>(std::span<float>(k), {1, 1, 64}), {posenc::position_ids(kh), posenc::position_ids(kw)});
        double s = 0;
        for (std::size_t i = 0; i < 64; ++i) s += static_cast<double>(q[i]) * k[i];
        return s;
    };
    const double a = dot_at(3, 9, 1, 4), b = dot_at(23, 40, 21, 35);  // both (Δh, Δw) = (2, 5)
    CHECK(std::abs(a - b) <= 1e-4);
    const double c = dot_at(3, 9, 1, 5);  // another Δw
    CHECK(std::abs(a - c) > 1e-3);
}

TEST_CASE("2-D RoPE: bad head_dim and positions", "[vision2d][errors]") {
    expect_config_error([] { (void)posenc::qwen_vision_rotary(78); }, "head_dim", "78");
    expect_config_error([] { (void)posenc::pixtral_rotary(0); }, "head_dim", "0");
    const auto rope = posenc::qwen_vision_rotary(80);
    std::vector<float> x(2 * 80, 1.0f);
    const ids a{0, 1}, b{0, 1}, c{0, 1};
    expect_config_error(
        [&] {
            rope.apply(posenc::heads_view<float>(std::span<float>(x), {2, 1, 80}),
                       {posenc::position_ids(a), posenc::position_ids(b), posenc::position_ids(c)});
        },
        "positions", "3 components");
    CHECK(x == std::vector<float>(2 * 80, 1.0f));
}
