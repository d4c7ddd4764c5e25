// Strided views over the caller's memory (fused QKV rows, heads-major layouts, the rotary slice of a
// wider head) and the Q/K weight permutation between layouts.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/reference.hpp"

using posenc_test::random_floats;

TEST_CASE("Q inside a fused QKV row: only Q's lanes change", "[views]") {
    // Row per token: Q (4 heads × 64) | K (2 heads × 64) | V (2 heads × 64).
    const std::size_t T = 5, D = 64, row = (4 + 2 + 2) * D;
    const auto original = random_floats(T * row, 21);
    std::vector<float> qkv = original;
    posenc::heads_view<float> q(std::span<float>(qkv), {T, 4, D}, {.token = row});
    posenc::heads_view<float> k(std::span<float>(qkv).subspan(4 * D), {T, 2, D}, {.token = row});
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const auto pos = posenc::position_ids::consecutive(1000, T);
    rope.apply(q, k, pos);

    // Same result as rotating dense copies.
    std::vector<float> dq, dk;
    for (std::size_t t = 0; t < T; ++t) {
        dq.insert(dq.end(), original.begin() + long(t * row), original.begin() + long(t * row + 4 * D));
        dk.insert(dk.end(), original.begin() + long(t * row + 4 * D), original.begin() + long(t * row + 6 * D));
    }
    rope.apply(posenc::heads_view<float>(std::span<float>(dq), {T, 4, D}),
               posenc::heads_view<float>(std::span<float>(dk), {T, 2, D}), pos);
    for (std::size_t t = 0; t < T; ++t) {
        for (std::size_t j = 0; j < 4 * D; ++j) CHECK(qkv[t * row + j] == dq[t * 4 * D + j]);
        for (std::size_t j = 0; j < 2 * D; ++j) CHECK(qkv[t * row + 4 * D + j] == dk[t * 2 * D + j]);
        for (std::size_t j = 6 * D; j < row; ++j) CHECK(qkv[t * row + j] == original[t * row + j]);  // V untouched
    }
}

TEST_CASE("heads-major layout and the rotary slice of a wider head", "[views]") {
    // [heads, tokens, head_dim] storage: token stride = head_dim, head stride = tokens × head_dim.
    const std::size_t T = 3, H = 2, D = 32;
    const auto x = random_floats(H * T * D, 8);
    std::vector<float> hm = x;
    posenc::heads_view<float> v(std::span<float>(hm), {T, H, D}, {.token = D, .head = T * D});
    const posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
    rope.apply(v, std::vector<std::int64_t>{3, 9, 27});
    const auto inv = rope.frequencies().inv_freq;
    const std::int64_t pos[] = {3, 9, 27};
    for (std::size_t h = 0; h < H; ++h)
        for (std::size_t t = 0; t < T; ++t) {
            const std::size_t o = h * T * D + t * D;
            const auto ref = posenc_test::reference_rotate({x.begin() + long(o), x.begin() + long(o + D)}, D, true, inv,
                                                           pos[t]);
            CHECK(posenc_test::max_abs_diff({hm.begin() + long(o), hm.begin() + long(o + D)}, ref) <= 1e-6);
        }

    // DeepSeek style: heads of 192 lanes = 128 without position | 64 rotary; view the rotary slices.
    const auto wide = random_floats(2 * 192, 12);
    std::vector<float> w = wide;
    posenc::heads_view<float> pe(std::span<float>(w).subspan(128), {1, 2, 64}, {.head = 192});
    posenc::rotary<posenc::interleaved>({.head_dim = 64}, posenc::default_rope{}).apply(pe, std::vector<std::int64_t>{4242});
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t j = 0; j < 128; ++j) CHECK(w[h * 192 + j] == wide[h * 192 + j]);
}

TEST_CASE("tokens_slice of a fused QKV view keeps its strides and rejects ranges past the end", "[views]") {
    // K inside fused rows Q (2 heads) | K (2 heads) | V (2 heads) of D lanes: head h of token t of K starts at
    // t·row + 2·D + h·D in the buffer, whichever slice it is reached through.
    const std::size_t T = 6, D = 8, row = 6 * D;
    std::vector<float> qkv(T * row);
    const posenc::heads_view<float> k(std::span<float>(qkv).subspan(2 * D), {T, 2, D}, {.token = row});
    const auto s = k.tokens_slice(2, 3);
    CHECK(s.tokens() == 3);
    CHECK(s.heads() == 2);
    CHECK(s.head_dim() == D);
    CHECK(s.token_stride() == row);
    CHECK(s.head_stride() == D);
    for (std::size_t t = 0; t < 3; ++t)
        for (std::size_t h = 0; h < 2; ++h) CHECK(s.row(t, h) == qkv.data() + (2 + t) * row + 2 * D + h * D);
    // tensor.hpp: tokens [first, first + count) of the view; a range past tokens() throws.
    CHECK(k.tokens_slice(3, 3).tokens() == 3);
    CHECK(k.tokens_slice(6, 0).tokens() == 0);
    CHECK_THROWS_AS(k.tokens_slice(4, 3), posenc::range_error);
    CHECK_THROWS_AS(k.tokens_slice(5, 6), posenc::range_error);
    CHECK_THROWS_AS(k.tokens_slice(7, 0), posenc::range_error);
}

TEST_CASE("weight permutation: half_split(P W x) == P interleaved(W x)", "[convert]") {
    for (std::size_t rotary : {64u, 32u}) {
        const std::size_t H = 3, D = 64, C = 40;
        const posenc::rope_dims dims{.head_dim = D, .rotary_dim = rotary};
        const auto W = random_floats(H * D * C, 31), x = random_floats(C, 32);
        const auto f = posenc::default_rope{}.frequencies(rotary);
        const auto pos = std::vector<std::int64_t>{31337};

        auto q_inter = posenc_test::matvec(W, x);  // interleaved model
        posenc::rotary<posenc::interleaved>(dims, f).apply(posenc::heads_view<float>(std::span<float>(q_inter), {1, H, D}), pos);

        auto PW = W;
        posenc::interleaved_to_half_split(std::span<float>(PW), H, dims, C);
        auto q_half = posenc_test::matvec(PW, x);  // converted model
        posenc::rotary<posenc::half_split>(dims, f).apply(posenc::heads_view<float>(std::span<float>(q_half), {1, H, D}), pos);

        auto Pq = q_inter;
        posenc::interleaved_to_half_split(std::span<float>(Pq), H, dims, 1);
        for (std::size_t i = 0; i < Pq.size(); ++i) CHECK(std::abs(Pq[i] - q_half[i]) <= 1e-5f);

        // And without the permutation the result is wrong (the converter bug class).
        auto q_wrong = posenc_test::matvec(W, x);
        posenc::rotary<posenc::half_split>(dims, f).apply(posenc::heads_view<float>(std::span<float>(q_wrong), {1, H, D}), pos);
        double worst = 0;
        for (std::size_t i = 0; i < Pq.size(); ++i) worst = posenc_test::worst_of(worst, double(std::abs(Pq[i] - q_wrong[i])));
        CHECK(worst > 0.1);

        // The inverse permutation restores the weights exactly.
        posenc::half_split_to_interleaved(std::span<float>(PW), H, dims, C);
        CHECK(PW == W);
    }
    CHECK(posenc::interleaved_lane_of_half_split(1, 8) == 2);
    CHECK(posenc::interleaved_lane_of_half_split(4, 8) == 1);
    CHECK(posenc::interleaved_lane_of_half_split(9, 8) == 9);
}
