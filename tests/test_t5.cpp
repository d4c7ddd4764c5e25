// T5 relative buckets against HF's _relative_position_bucket (tests/data/hf_golden_public.json,
// t5_relative_buckets, exact), bucket properties, the bias row against the golden buckets and a random
// table, decode == prefill, and errors.
#include <posenc/posenc.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;

namespace {


posenc::t5_buckets buckets_of(const nlohmann::json& e) {
    return {.num_buckets = e.at("num_buckets"), .max_distance = e.at("max_distance"),
            .bidirectional = e.at("bidirectional")};
}

}  // namespace

TEST_CASE("T5 buckets equal HF's _relative_position_bucket exactly", "[t5][golden]") {
    std::size_t compared = 0;
    for (const auto& e : posenc_test::golden().at("t5_relative_buckets")) {
        INFO(e.at("id").get<std::string>());
        const auto b = buckets_of(e);
        const std::int64_t first = e.at("relative_position_first"), last = e.at("relative_position_last");
        const auto expected = e.at("buckets_hf").get<std::vector<std::int32_t>>();
        REQUIRE(expected.size() == static_cast<std::size_t>(last - first + 1));
        CHECK(b.buckets(first, last) == expected);
        for (std::int64_t r = first; r <= last; ++r) {
            const auto want = expected[static_cast<std::size_t>(r - first)];
            CHECK(b.bucket(r) == want);
            CHECK(posenc::t5_relative_bucket(r, b.bidirectional, b.num_buckets, b.max_distance) == want);
            ++compared;
        }
    }
    REQUIRE(compared == 2 * 601);
}

TEST_CASE("T5 buckets at exact logarithmic ties take the exact value", "[t5]") {
    // num_buckets 10 unidirectional, max_distance 160: max_exact 5, and for distance 5·2^k the bucket is
    // 5 + ln(2^k)/ln(32)·5 = 5 + k exactly. HF's float32 log lands on the integer; a double evaluation gives
    // 1.9999999999999998 at distance 20 (bucket 6 instead of 7).
    const posenc::t5_buckets b{.num_buckets = 10, .max_distance = 160, .bidirectional = false};
    CHECK(b.bucket(-10) == 6);
    CHECK(b.bucket(-20) == 7);
    CHECK(b.bucket(-40) == 8);
    CHECK(b.bucket(-80) == 9);
    CHECK(b.bucket(-160) == 9);  // capped at num_buckets − 1
}

TEST_CASE("T5 buckets: exact range, monotone in |distance|, capped, in range", "[t5][properties]") {
    constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
    constexpr std::int64_t small = std::numeric_limits<std::int64_t>::min();
    for (bool bidirectional : {true, false}) {
        for (std::int64_t nb : {4, 8, 32, 64, 320}) {
            for (std::int64_t md : {128, 1000, 4096}) {
                const posenc::t5_buckets b{.num_buckets = nb, .max_distance = md, .bidirectional = bidirectional};
                if (md <= b.exact_range()) continue;
                INFO("bidirectional " << bidirectional << " num_buckets " << nb << " max_distance " << md);
                const std::int64_t per = bidirectional ? nb / 2 : nb;
                const std::int64_t exact = per / 2;
                const std::int64_t forward_offset = bidirectional ? per : 0;
                // Exact range: distance d < max_exact has bucket d (plus the forward offset for r > 0).
                for (std::int64_t d = 0; d < exact; ++d) {
                    CHECK(b.bucket(-d) == d);
                    if (d > 0) CHECK(b.bucket(d) == (bidirectional ? forward_offset + d : 0));
                }
                // Monotone non-decreasing in |r| on each side, in [offset, offset + per), and capped.
                std::int64_t prev_back = 0, prev_fwd = b.bucket(0);
                bool ok = true;
                for (std::int64_t d = 1; d <= 3 * md; ++d) {
                    const std::int64_t back = b.bucket(-d), fwd = b.bucket(d);
                    ok = ok && back >= prev_back && back < per;
                    ok = ok && (bidirectional ? fwd >= std::max(prev_fwd, forward_offset) && fwd < nb : fwd == 0);
                    prev_back = back;
                    prev_fwd = fwd;
                }
                CHECK(ok);
                CHECK(b.bucket(-md) == per - 1);
                CHECK(b.bucket(-md - 1) == per - 1);
                CHECK(b.bucket(-1'000'000'000'000) == per - 1);
                CHECK(b.bucket(small) == per - 1);
                CHECK(b.bucket(md) == (bidirectional ? nb - 1 : 0));
                CHECK(b.bucket(big) == (bidirectional ? nb - 1 : 0));
            }
        }
    }
}

TEST_CASE("T5 bias rows add table[bucket(key - query), head]", "[t5][bias]") {
    // Reference buckets: the golden HF list for relative positions −300..300 (every |r| ≥ 128 is the cap).
    std::size_t rows = 0;
    for (const auto& e : posenc_test::golden().at("t5_relative_buckets")) {
        INFO(e.at("id").get<std::string>());
        const auto b = buckets_of(e);
        const std::int64_t first = e.at("relative_position_first"), last = e.at("relative_position_last");
        const auto golden = e.at("buckets_hf").get<std::vector<std::int32_t>>();
        auto hf_bucket = [&](std::int64_t r) {
            return golden[static_cast<std::size_t>(std::clamp(r, first, last) - first)];
        };
        const std::size_t heads = 6;
        const auto table = posenc_test::random_floats(static_cast<std::size_t>(b.num_buckets) * heads, 5u);
        const posenc::t5_bias bias(b, heads, table);
        CHECK(bias.heads() == heads);
        for (std::int64_t q : {std::int64_t{0}, std::int64_t{100}, std::int64_t{250}, std::int64_t{700}, std::int64_t{100000}}) {
            for (std::int64_t k0 : {q - 400, q - 129, q - 128, q - 5, q, q + 3, q + 127, q + 128, q + 200}) {
                for (std::size_t n : {1u, 7u, 64u, 257u, 600u}) {
                    const auto init = posenc_test::random_floats(n, static_cast<std::uint32_t>(n + 3));
                    std::vector<std::int64_t> explicit_keys(n);
                    for (std::size_t j = 0; j < n; ++j) explicit_keys[j] = k0 + static_cast<std::int64_t>(j);
                    for (std::size_t h = 0; h < heads; h += 2) {
                        auto run = init, run_explicit = init;
                        bias.add_to_scores(h, q, posenc::position_ids::consecutive(k0, n), run);
                        bias.add_to_scores(h, q, explicit_keys, run_explicit);
                        bool ok = true;
                        for (std::size_t j = 0; j < n; ++j) {
                            const std::int64_t r = explicit_keys[j] - q;
                            const float t = table[static_cast<std::size_t>(hf_bucket(r)) * heads + h];
                            const float want = init[j] + t;
                            ok = ok && run[j] == want && run_explicit[j] == want && bias.bias(h, r) == t;
                        }
                        INFO("q=" << q << " k0=" << k0 << " n=" << n << " h=" << h);
                        CHECK(ok);
                        ++rows;
                    }
                }
            }
        }
    }
    REQUIRE(rows == 2 * 5 * 9 * 5 * 3);
}

TEST_CASE("T5 decode row equals the prefill row", "[t5][decode]") {
    const posenc::t5_buckets b{.num_buckets = 32, .max_distance = 128, .bidirectional = false};
    const std::size_t heads = 8;
    const auto table = posenc_test::random_floats(32 * heads, 11u);
    const posenc::t5_bias bias(b, heads, table);
    const std::size_t T = 500;
    std::vector<std::int32_t> cache(T);
    for (std::size_t j = 0; j < T; ++j) cache[j] = static_cast<std::int32_t>(j);
    std::size_t compared = 0;
    for (std::int64_t i : {0, 1, 127, 128, 499}) {
        std::vector<float> prefill(T, 0.0f);
        bias.add_to_scores(3, i, posenc::position_ids::consecutive(0, T), prefill);
        std::vector<float> decode(static_cast<std::size_t>(i + 1), 0.0f);
        bias.add_to_scores(3, i, std::span<const std::int32_t>(cache.data(), decode.size()), decode);
        for (std::size_t j = 0; j < decode.size(); ++j) CHECK(decode[j] == prefill[j]);
        compared += decode.size();
    }
    REQUIRE(compared == 1 + 2 + 128 + 129 + 500);
}

TEST_CASE("T5 errors name the parameter", "[t5][errors]") {
    expect_config_error([] { (void)posenc::t5_buckets{.num_buckets = 31, .bidirectional = true}.bucket(0); },
                        "num_buckets", "31");
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, true, 33, 128); }, "num_buckets", "33");
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, true, 2, 128); }, "num_buckets", "2");
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, false, 0, 128); }, "num_buckets", "0");
    // max_distance must exceed the exact range: num_buckets/4 bidirectional, num_buckets/2 unidirectional.
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, true, 32, 8); }, "max_distance", "8");
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, false, 32, 16); }, "max_distance", "16");
    expect_config_error([] { (void)posenc::t5_relative_bucket(3, true, 32, -1); }, "max_distance", "-1");
    CHECK(posenc::t5_relative_bucket(-9, true, 32, 9) == 15);
    CHECK(posenc::t5_relative_bucket(-17, false, 32, 17) == 31);
    const posenc::t5_buckets ok{};
    const std::vector<float> table(32 * 4, 0.5f);
    expect_config_error([&] { (void)posenc::t5_bias(ok, 0, {}); }, "heads", "0");
    expect_config_error([&] { (void)posenc::t5_bias(ok, 5, table); }, "table", "128");
    expect_config_error([&] { (void)posenc::t5_bias({.num_buckets = 7}, 4, table); }, "num_buckets", "7");
    const posenc::t5_bias bias(ok, 4, table);
    std::vector<float> scores(3, 0.0f);
    CHECK_THROWS_AS(bias.add_to_scores(4, 0, posenc::position_ids::consecutive(0, 3), scores), posenc::range_error);
    CHECK_THROWS_AS(bias.add_to_scores(0, 0, posenc::position_ids::consecutive(0, 4), scores), posenc::range_error);
    CHECK(scores == std::vector<float>(3, 0.0f));
}
