// Regression tests for what tests/fuzz/fuzz_attention.cpp found: relative distances between positions
// at opposite ends of int64 overflowed (key − query in ALiBi, T5, Shaw; i − j in the sliding window),
// and kv_cache::context_shift's offset could overflow. Expected values are closed forms: a bias
// saturated past its cap/clip, the visibility of the exact (128-bit) difference, attention over one
// visible key equal to that key's V.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/catch.hpp"
#include "support/reference.hpp"

namespace {

constexpr std::int64_t lo64 = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t hi64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t p62 = std::int64_t{1} << 62;

}  // namespace

TEST_CASE("hardening: ALiBi, T5 and Shaw distances between the ends of int64 saturate, never wrap",
          "[hardening][attention]") {
    // ALiBi causal: bias = −m·(i − j) for a key far before the query: a huge negative score, whichever
    // row path (consecutive keys, a list) and whichever of the two is at which end.
    const posenc::alibi_bias alibi({.heads = 4});
    const double m = alibi.slope(1);
    std::size_t compared = 0;
    for (const auto& [query, key] : {std::pair{hi64, lo64}, std::pair{hi64, lo64 + 1}, std::pair{p62, -p62}}) {
        INFO("query " << query << " key " << key);
        std::vector<float> s1(1, 0.0f), s2(1, 0.0f);
        alibi.add_to_scores(1, query, posenc::position_ids::consecutive(key, 1), s1);
        const std::vector<std::int64_t> keys{key};
        alibi.add_to_scores(1, query, keys, s2);
        CHECK(s1[0] <= static_cast<float>(-m * 0x1p61));  // i − j ≥ 2^62 (saturated there)
        CHECK(s2[0] == s1[0]);
        CHECK(alibi.bias(1, query, key) <= -m * 0x1p61);
        // The key far after the query (no mask): a huge positive causal bias, −m·|i − j| symmetric.
        CHECK(alibi.bias(1, key, query) >= m * 0x1p61);
        compared += 4;
    }
    const posenc::alibi_bias sym({.heads = 4, .form = posenc::alibi_form::symmetric});
    CHECK(sym.bias(0, lo64, hi64) <= -sym.slope(0) * 0x1p61);

    // T5: every distance past max_distance is the cap bucket, on both sides; the list path and the
    // consecutive path agree.
    const std::size_t heads = 2;
    const posenc::t5_buckets b{.num_buckets = 32, .max_distance = 128, .bidirectional = true};
    std::vector<float> table(32 * heads);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.25f;
    const posenc::t5_bias t5(b, heads, table);
    for (const auto& [query, key] : {std::pair{hi64, lo64}, std::pair{lo64, hi64}, std::pair{p62, -p62}, std::pair{-p62, p62}}) {
        INFO("query " << query << " key " << key);
        const std::int64_t far = key > query ? 1000 : -1000;  // the same cap bucket, far inside int64
        const float want = t5.bias(1, far);
        std::vector<float> s1(3, 0.0f), s2(3, 0.0f);
        const std::int64_t first = key > query ? key - 2 : key;  // three consecutive keys ending at or starting from `key`
        t5.add_to_scores(1, query, posenc::position_ids::consecutive(first, 3), s1);
        const std::vector<std::int64_t> keys{first, first + 1, first + 2};
        t5.add_to_scores(1, query, keys, s2);
        for (std::size_t j = 0; j < 3; ++j) {
            CHECK(s1[j] == want);
            CHECK(s2[j] == want);
            compared += 2;
        }
    }

    // Shaw: distances clip to ±k, so a far key uses row 0 (−k) or row 2k (+k).
    const std::int64_t k = 2;
    const std::size_t D = 4;
    std::vector<float> ak(5 * D), av(5 * D);
    for (std::size_t i = 0; i < ak.size(); ++i) ak[i] = static_cast<float>(i + 1);
    const posenc::shaw_rpr shaw({.max_distance = k}, ak, D, av, D);
    CHECK(shaw.row(hi64, lo64) == 0);
    CHECK(shaw.row(lo64, hi64) == 4);
    CHECK(shaw.row(p62, -p62) == 0);
    CHECK(shaw.row(hi64, hi64 - 1) == 1);
    compared += 4;
    // Its output term with mismatched spans: a range_error, not a truncated sum.
    std::vector<float> row(D, 0.0f), short_row(D - 1, 0.0f);
    const std::vector<float> two(2, 1.0f), three(3, 1.0f);
    CHECK_THROWS_AS(shaw.add_to_output(0, 0, posenc::position_ids::consecutive(0, 3), two, row), posenc::range_error);
    CHECK_THROWS_AS(shaw.add_to_output(0, 0, posenc::position_ids::consecutive(0, 3), three, short_row), posenc::range_error);
    CHECK(row == std::vector<float>(D, 0.0f));
    REQUIRE(compared == 3 * 4 + 4 * 6 + 4);
}

TEST_CASE("hardening: the sliding window compares i − j exactly for any two int64 positions", "[hardening][attention]") {
    // The exact difference: j ≤ i, so i − j fits uint64 (the wrap of two int64 values does not).
    auto exact_visible = [](std::int64_t i, std::int64_t j, std::int64_t w) {
        if (j > i) return false;
        const std::uint64_t d = static_cast<std::uint64_t>(i) - static_cast<std::uint64_t>(j);
        return d < static_cast<std::uint64_t>(w);
    };
    std::size_t compared = 0;
    for (std::int64_t w : {std::int64_t{1}, std::int64_t{64}, p62, hi64})
        for (const auto& [i, j] : {std::pair{hi64, lo64}, std::pair{p62, -p62}, std::pair{p62 - 1, 1 - p62}, std::pair{hi64, hi64 - 63},
                                   std::pair{hi64, std::int64_t{0}}, std::pair{std::int64_t{0}, lo64}, std::pair{lo64, hi64}}) {
            const posenc::sliding_window_mask mask{.window = w};
            INFO("i " << i << " j " << j << " W " << w);
            CHECK(mask.visible(i, j) == exact_visible(i, j, w));
            ++compared;
        }
    // Literal cases: (2^63 − 1) − (−2^63) = 2^64 − 1 ≥ any W, so never visible; a window of 2^63 − 1
    // sees i − j = 2^63 − 2.
    CHECK_FALSE(posenc::sliding_window_mask{.window = hi64}.visible(hi64, lo64));
    CHECK(posenc::sliding_window_mask{.window = hi64}.visible(p62 - 1, 1 - p62));
    // A tile with queries at the top of int64 and keys at the bottom: nothing visible.
    CHECK(posenc::sliding_window_mask{.window = 4096}.classify({hi64 - 10, hi64, lo64, lo64 + 10}) == posenc::tile_visibility::none);
    CHECK(posenc::sliding_window_mask{.window = hi64}.classify({hi64, hi64, lo64, lo64}) == posenc::tile_visibility::none);
    REQUIRE(compared == 4 * 7);
}

TEST_CASE("hardening: attention with positions at both ends of int64 sees exactly the keys its mask allows",
          "[hardening][attention]") {
    // One query at 2^62 and three keys: −2^62 (2^63 before it), 2^62 − 3 and 2^62 − 1. A window of 4
    // sees the last two; with ALiBi the nearer key dominates. No bias and a window of 2: only the last,
    // so out equals its V row exactly.
    const std::size_t H = 2, D = 8;
    const auto q = posenc_test::random_floats(H * D, 1), k = posenc_test::random_floats(3 * H * D, 2),
               v = posenc_test::random_floats(3 * H * D, 3);
    const std::vector<std::int64_t> qpos{p62}, kpos{-p62, p62 - 3, p62 - 1};
    const posenc::heads_view<const float> Q(std::span<const float>(q), {1, H, D}), K(std::span<const float>(k), {3, H, D}),
        V(std::span<const float>(v), {3, H, D});
    std::vector<float> out(H * D, -7.0f);
    const posenc::heads_view<float> O(std::span<float>(out), {1, H, D});
    posenc::attention(posenc::attention_encoding{posenc::nope{}}, Q, K, V, O, qpos, kpos, posenc::sliding_window_mask{.window = 2});
    std::size_t compared = 0;
    for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) {
            CHECK(out[h * D + d] == v[(2 * H + h) * D + d]);
            ++compared;
        }
    // ALiBi without a mask: the key 2^63 before the query gets −m·2^62 and weight exactly 0; the
    // output stays finite and is a mix of the two near keys only.
    posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = H})}, Q, K, V, O, qpos, kpos);
    for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) {
            const float a = v[(1 * H + h) * D + d], b = v[(2 * H + h) * D + d];
            const float x = out[h * D + d];
            CHECK(std::isfinite(x));
            CHECK(x >= std::min(a, b) - 1e-6f);
            CHECK(x <= std::max(a, b) + 1e-6f);
            ++compared;
        }
    REQUIRE(compared == 2 * H * D);
}

TEST_CASE("hardening: kv_cache context_shift whose offset overflows int64 throws and leaves the cache as it was",
          "[hardening][kv_cache]") {
    const std::size_t H = 1, D = 4;
    posenc::kv_cache cache(posenc::nope{}, {.kv_heads = H, .head_dim = D, .capacity = 8});
    const auto k = posenc_test::random_floats(3 * H * D, 4), v = posenc_test::random_floats(3 * H * D, 5);
    const std::vector<std::int64_t> pos{lo64, lo64 + 1, hi64 - 1};  // (append rejects 2^63 − 1 itself)
    cache.append(posenc::heads_view<const float>(std::span<const float>(k), {3, H, D}),
                 posenc::heads_view<const float>(std::span<const float>(v), {3, H, D}), pos);
    const std::vector<float> k0(cache.key_storage().begin(), cache.key_storage().end());
    const std::vector<std::int64_t> p0(cache.position_storage().begin(), cache.position_storage().end());
    // Keep 1 sink (at −2^63) and the last token (at 2^63 − 2): it would move by −(2^64 − 3).
    CHECK_THROWS_AS(cache.context_shift(1, 1), posenc::range_error);
    CHECK(cache.size() == 3);
    CHECK(std::memcmp(k0.data(), cache.key_storage().data(), k0.size() * sizeof(float)) == 0);
    CHECK(std::equal(p0.begin(), p0.end(), cache.position_storage().begin()));
    // Keeping the two sinks and dropping the last works (nothing moves).
    CHECK(cache.context_shift(2, 0) == 1);
    REQUIRE(cache.size() == 2);
}
