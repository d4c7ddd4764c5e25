// Bad input gets posenc's own error naming the field and the value, and loses nothing.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;


TEST_CASE("invalid schedule parameters name the key and the value", "[errors]") {
    expect_config_error([] { (void)posenc::linear{.factor = 0}.frequencies(64); }, "factor", "0");
    expect_config_error([] { (void)posenc::linear{.factor = -2}.frequencies(64); }, "factor", "-2");
    expect_config_error([] { (void)posenc::ntk_aware{.factor = -1}.frequencies(64); }, "factor", "-1");
    expect_config_error([] { (void)posenc::yarn{.factor = 0, .original_max_position = 4096}.frequencies(64); }, "factor", "0");
    expect_config_error([] { (void)posenc::default_rope{.base = 1}.frequencies(64); }, "base", "1");
    expect_config_error([] { (void)posenc::default_rope{.base = 0.5}.frequencies(64); }, "base", "0.5");
    expect_config_error([] { (void)posenc::default_rope{}.frequencies(63); }, "rotary_dim", "63");
    // beta_fast == beta_slow and low_freq_factor == high_freq_factor are accepted as HF accepts them
    // (test_hf_parity.cpp); only the inverted orders are errors.
    expect_config_error([] { (void)posenc::yarn{.factor = 4, .original_max_position = 4096, .beta_fast = 0.5, .beta_slow = 2}.frequencies(64); },
                        "beta_fast", "0.5");
    expect_config_error([] { (void)posenc::llama3{.low_freq_factor = 5, .high_freq_factor = 1, .original_max_position = 8192}.frequencies(64); },
                        "high_freq_factor", "1");
    expect_config_error([] { (void)posenc::dynamic_ntk{.factor = 2, .original_max_position = 0}.frequencies(64, 9); },
                        "original_max_position", "0");
    expect_config_error([] { (void)posenc::ntk_by_parts{.factor = 2, .original_max_position = 4096, .alpha = 3, .beta = 2}.frequencies(64); },
                        "beta", "2");
    expect_config_error(
        [] {
            posenc::longrope l{.short_factor = std::vector<double>(31, 1.0), .long_factor = std::vector<double>(32, 1.0),
                               .original_max_position = 4096};
            (void)l.frequencies(64);
        },
        "short_factor", "31");
    expect_config_error(
        [] {
            posenc::longrope l{.short_factor = std::vector<double>(32, 1.0), .long_factor = std::vector<double>(33, 1.0),
                               .original_max_position = 4096};
            (void)l.frequencies(64);
        },
        "long_factor", "33");
    expect_config_error([] { (void)posenc::rope_dims::partial(128, 1.5); }, "partial_rotary_factor", "1.5");
    // The original context length has no default: a forgotten one is an error, not 2048 or 4096.
    expect_config_error([] { (void)posenc::yarn{.factor = 4}.frequencies(64); }, "original_max_position", "0");
    expect_config_error([] { (void)posenc::llama3{.factor = 8}.frequencies(64); }, "original_max_position", "0");
    expect_config_error([] { (void)posenc::dynamic_ntk{.factor = 2}.frequencies(64, 9000); }, "original_max_position", "0");
}

TEST_CASE("invalid dims are rejected when a rotary is built", "[errors]") {
    using R = posenc::rotary<posenc::half_split>;
    expect_config_error([] { R({.head_dim = 64, .rotary_dim = 31}, posenc::default_rope{}); }, "rotary_dim", "31");
    expect_config_error([] { R({.head_dim = 64, .rotary_dim = 128}, posenc::default_rope{}); }, "rotary_dim", "128");
    expect_config_error([] { R({.head_dim = 0}, posenc::default_rope{}); }, "head_dim", "0");
    expect_config_error([] { R({.head_dim = 64}, posenc::rope_frequencies{.inv_freq = {1.0, 2.0}}); }, "inv_freq", "2");
    expect_config_error([] { (void)posenc::parse_layout("neox"); }, "layout", "neox");
}

TEST_CASE("checked table lookups reject positions outside the table and leave buffers unchanged", "[errors]") {
    const posenc::rotary<posenc::half_split> rope({.head_dim = 64}, posenc::default_rope{});
    const auto table = rope.table(100);
    const auto original = posenc_test::random_floats(3 * 4 * 64, 9);
    std::vector<float> q = original, k = original;
    posenc::heads_view<float> vq(std::span<float>(q), {3, 4, 64}), vk(std::span<float>(k), {3, 4, 64});
    for (const std::vector<std::int64_t>& pos : {std::vector<std::int64_t>{0, 50, 100},
                                                 std::vector<std::int64_t>{-1, 0, 1},
                                                 std::vector<std::int64_t>{99, 1'000'000, 0}}) {
        CHECK_THROWS_AS(rope.apply(table, vq, vk, pos), posenc::range_error);
        CHECK(q == original);
        CHECK(k == original);
    }
    CHECK_THROWS_AS(table.cos(100), posenc::range_error);
    CHECK_THROWS_AS(table.sin(-1), posenc::range_error);
    CHECK_NOTHROW(rope.apply(table, vq, vk, std::vector<std::int64_t>{0, 50, 99}));
    CHECK(q != original);
}

TEST_CASE("mismatched views, positions and tables are errors before any write", "[errors]") {
    const posenc::rotary<posenc::interleaved> rope({.head_dim = 64}, posenc::default_rope{});
    const auto original = posenc_test::random_floats(2 * 64 * 2, 4);
    std::vector<float> buf = original;
    posenc::heads_view<float> v(std::span<float>(buf), {2, 2, 64});
    expect_config_error([&] { rope.apply(v, std::vector<std::int64_t>{1, 2, 3}); }, "x.tokens", "2");
    posenc::heads_view<float> wide(std::span<float>(buf), {2, 1, 128});
    expect_config_error([&] { rope.apply(wide, std::vector<std::int64_t>{1, 2}); }, "x.head_dim", "128");
    expect_config_error([&] { rope.apply(v, wide, std::vector<std::int64_t>{1, 2}); }, "k.head_dim", "128");
    const posenc::rotary<posenc::interleaved> other({.head_dim = 64}, posenc::default_rope{.base = 500000});
    const auto other_table = other.table(10);
    expect_config_error([&] { rope.apply(other_table, v, std::vector<std::int64_t>{1, 2}); }, "table", "32");
    CHECK(buf == original);
}

TEST_CASE("errors name each view as the call's parameters do, whichever tensor it holds", "[errors]") {
    // An engine rotating K through a single-view call must not read "q" in the error.
    const std::size_t T = 3, H = 2, D = 32;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const auto table = rope.table(16);
    std::vector<float> a(T * H * D, 0.5f), b(T * H * D, 0.25f), c(T * H * D), d(T * H * D);
    const auto before_a = a, before_b = b;
    auto view = [&](std::vector<float>& v, std::size_t t, std::size_t h, std::size_t dim) {
        return posenc::heads_view<float>(std::span<float>(v), {t, h, dim});
    };
    auto src = [&](std::vector<float>& v, std::size_t t, std::size_t h, std::size_t dim) {
        return posenc::heads_view<const float>(view(v, t, h, dim));
    };
    const auto pos = posenc::position_ids::consecutive(0, T);
    expect_config_error([&] { rope.apply(table, view(a, T - 1, H, D), pos); }, "x.tokens", "2");
    expect_config_error([&] { rope.apply(view(a, T, H, D), view(b, T - 1, H, D), pos); }, "k.tokens", "2");
    expect_config_error([&] { rope.apply_into(table, src(a, T, H, D), view(c, T, H - 1, D), pos); }, "dst shape", "3x1x32");
    expect_config_error([&] { rope.apply_into(src(a, T, H, D / 2), view(c, T, H, D / 2), pos); }, "src.head_dim", "16");
    expect_config_error([&] { rope.apply_into(src(a, T - 1, H, D), view(c, T - 1, H, D), src(b, T, H, D), view(d, T, H, D), pos); },
                        "q_src.tokens", "2");
    expect_config_error([&] { rope.apply_into(src(a, T, H, D), view(c, T, H, D), src(b, T, H, D), view(d, T, 1, D), pos); },
                        "k_dst shape", "3x1x32");
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
    expect_config_error([&] { xp.apply_keys(view(a, T - 1, H, D), pos); }, "k.tokens", "2");
    expect_config_error([&] { xp.apply_queries_into(src(a, T - 1, H, D), view(c, T - 1, H, D), pos); }, "src.tokens", "2");
    expect_config_error([&] { xp.apply_keys_into(src(a, T, H, D), view(c, T, 1, D), pos); }, "dst shape", "3x1x32");
    CHECK(a == before_a);
    CHECK(b == before_b);
}

TEST_CASE("empty views are checked like others, and Q and K of one in-place call must be different memory", "[errors]") {
    const std::size_t T = 4, H = 2, D = 16;
    const posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
    std::vector<float> q(T * H * D, 0.5f), k(T * H * D, 0.25f);
    const auto q0 = q, k0 = k;
    const auto pos = posenc::position_ids::consecutive(3, T);
    // Zero heads is an empty view (no rows, so no stride to check): a no-op for a call of T positions.
    const posenc::heads_view<float> no_heads(std::span<float>(q), {T, 0, D});
    CHECK(no_heads.empty());
    rope.apply(no_heads, pos);
    CHECK(q == q0);
    // An empty view whose token count is not the call's is the caller's bug, not a no-op.
    expect_config_error([&] { rope.apply(posenc::heads_view<float>(std::span<float>(q), {0, H, D}), pos); }, "x.tokens", "0");
    expect_config_error([&] { rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 0, D}), pos); }, "x.tokens", "1");
    expect_config_error([&] { rope.apply(posenc::heads_view<float>(std::span<float>(q), {T, 0, 2 * D}), pos); }, "x.head_dim", "32");
    expect_config_error([&] { posenc::nope{}.apply(posenc::heads_view<float>(std::span<float>(q), {0, H, D}), pos); }, "x.tokens", "0");
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
    expect_config_error([&] { xp.apply_queries(posenc::heads_view<float>(std::span<float>(q), {0, H, D}), pos); }, "q.tokens", "0");
    // The same memory as Q and K would be rotated twice: rejected before anything is written, for every
    // in-place form (on the fly, table, fused norm, 16-bit, xPos). Q and K inside one fused row stay legal.
    const posenc::heads_view<float> qv(std::span<float>(q), {T, H, D});
    expect_config_error([&] { rope.apply(qv, qv, pos); }, "k", "the memory of q");
    expect_config_error([&] { rope.apply(rope.table(8), qv, qv, pos); }, "k", "the memory of q");
    const posenc::head_rms_norm norm(std::vector<float>(D, 1.0f), 1e-6);
    expect_config_error([&] { rope.apply_normed(norm, qv, norm, qv, pos); }, "k", "the memory of q");
    std::vector<posenc::bf16> q16(T * H * D, posenc::bf16(0.5f));
    const auto q16_0 = q16;
    const posenc::heads_view<posenc::bf16> q16v(std::span<posenc::bf16>(q16), {T, H, D});
    expect_config_error([&] { rope.apply(q16v, q16v, pos); }, "k", "the memory of q");
    expect_config_error([&] { xp.apply(qv, qv, pos); }, "k", "the memory of q");
    CHECK(q == q0);
    CHECK(q16 == q16_0);
    std::vector<float> fused(T * 3 * H * D, 0.5f);  // [token][q heads | k heads | v heads]
    const posenc::heads_view<float> fq(fused.data(), {T, H, D}, {.token = 3 * H * D}), fk(fused.data() + H * D, {T, H, D}, {.token = 3 * H * D});
    rope.apply(fq, fk, pos);
    std::size_t changed_q = 0, changed_k = 0, changed_v = 0;
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < H * D; ++i) {
            changed_q += fused[t * 3 * H * D + i] != 0.5f;
            changed_k += fused[t * 3 * H * D + H * D + i] != 0.5f;
            changed_v += fused[t * 3 * H * D + 2 * H * D + i] != 0.5f;
        }
    CHECK(changed_q > T * H * D / 2);  // positions 3..6 rotate most lanes of a constant row
    CHECK(changed_k == changed_q);     // Q and K held the same values: rotated once each, alike
    CHECK(changed_v == 0);
    CHECK(k == k0);
}

TEST_CASE("views that do not fit their buffer or overlap are rejected", "[errors]") {
    std::vector<float> buf(100);
    CHECK_THROWS_AS(posenc::heads_view<float>(std::span<float>(buf), {2, 1, 64}), posenc::range_error);
    // The message says which view (its shape and strides) and by how much.
    try {
        (void)posenc::heads_view<float>(std::span<float>(buf), {2, 1, 64});
        FAIL("no range_error");
    } catch (const posenc::range_error& e) {
        CHECK(std::string(e.what()).find("2x1x64 (token stride 64, head stride 64) needs 128 elements but the buffer holds 100") !=
              std::string::npos);
    }
    expect_config_error([&] { posenc::heads_view<float>(std::span<float>(buf), {2, 1, 32}, {.token = 16}); },
                        "token_stride", "16");
    expect_config_error([&] { posenc::heads_view<float>(std::span<float>(buf), {1, 2, 32}, {.head = 8}); },
                        "head_stride", "8");
    expect_config_error([&] { posenc::heads_view<float>(std::span<float>(buf), {1, 1, 0}); }, "head_dim", "0");
}

TEST_CASE("sizes that overflow are range errors, not wrapped-around buffers", "[errors]") {
    std::vector<float> buf(64);
    CHECK_THROWS_AS(posenc::heads_view<float>(std::span<float>(buf), {3, 1, 16}, {.token = std::size_t{1} << 63}),
                    posenc::range_error);
    CHECK_THROWS_AS(posenc::heads_view<float>(std::span<float>(buf), {1, 3, 16}, {.head = std::size_t{1} << 62}),
                    posenc::range_error);
    const auto f = posenc::default_rope{}.frequencies(4);
    CHECK_THROWS_AS(posenc::cos_sin_table(f, std::int64_t{1} << 62), posenc::range_error);
    CHECK_THROWS_AS(posenc::position_ids::consecutive(std::numeric_limits<std::int64_t>::max() - 1, 4), posenc::range_error);
    CHECK_NOTHROW(posenc::position_ids::consecutive(std::numeric_limits<std::int64_t>::max() - 3, 4));
}
