// ALiBi: slopes against the authors' get_slopes (tests/data/hf_golden_public.json, alibi_slopes), the
// bias row against BLOOM's build_alibi_tensor (alibi_bloom_tensor), the closed forms 2^(−8k/n) and
// ggml's m0/m1 rule, decode == prefill, and errors.
#include <posenc/posenc.hpp>

#include <bit>
#include <cmath>
#include <random>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;

namespace {


// The row a query at `query_pos` gets against `keys`, starting from `init`.
std::vector<float> bias_row(const posenc::alibi_bias& b, std::size_t head, std::int64_t query_pos,
                            const posenc::position_ids& keys, std::vector<float> init = {}) {
    if (init.empty()) init.assign(keys.size(), 0.0f);
    b.add_to_scores(head, query_pos, keys, init);
    return init;
}

}  // namespace

TEST_CASE("ALiBi slopes match the authors' get_slopes in float64", "[alibi][golden]") {
    std::size_t entries = 0;
    for (const auto& e : posenc_test::golden().at("alibi_slopes")) {
        ++entries;
        const std::size_t n = e.at("n_heads");
        INFO("n_heads = " << n);
        const auto expected = e.at("slopes_f64").get<std::vector<double>>();
        const auto authors_f32 = e.at("slopes_authors_f32").get<std::vector<double>>();
        const auto slopes = posenc::alibi_slopes(n);
        REQUIRE(slopes.size() == n);
        CHECK(posenc_test::max_rel_diff(slopes, expected) <= 1e-15);
        CHECK(posenc::alibi{.heads = n}.slopes() == slopes);
        const posenc::alibi_bias bias({.heads = n});
        for (std::size_t h = 0; h < n; ++h) {
            CHECK(posenc::alibi_slope(h, n) == slopes[h]);
            CHECK(bias.slope(h) == slopes[h]);
            // What the authors' model stores: torch.Tensor(get_slopes(n)), float32.
            CHECK(static_cast<double>(static_cast<float>(slopes[h])) == authors_f32[h]);
        }
    }
    REQUIRE(entries == 19);
}

TEST_CASE("ALiBi slopes follow the closed forms for any head count", "[alibi][slopes]") {
    // Power of two n: 2^(−8k/n). Otherwise the c = 2^⌊log₂n⌋ slopes of c, then 2^(−4(2j+1)/c).
    for (std::size_t n : {1u, 2u, 3u, 5u, 6u, 8u, 12u, 16u, 20u, 24u, 32u, 40u, 48u, 64u, 71u, 96u, 128u, 256u}) {
        INFO("n = " << n);
        const auto s = posenc::alibi_slopes(n);
        std::size_t c = 1;
        while (2 * c <= n) c *= 2;
        for (std::size_t h = 0; h < n; ++h) {
            const double expected = h < c ? std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(c))
                                          : std::exp2(-4.0 * static_cast<double>(2 * (h - c) + 1) / static_cast<double>(c));
            CHECK(std::abs(s[h] - expected) <= 2e-14 * expected);
        }
    }
    // ggml's rule with a max_bias other than 8: m0 = 2^(−max_bias/c), m1 = 2^(−max_bias/2/c),
    // slope = m0^(h+1) for h < c, else m1^(2(h−c)+1).
    for (double max_bias : {8.0, 6.0, 12.5}) {
        for (std::size_t n : {7u, 12u, 32u, 40u}) {
            INFO("max_bias = " << max_bias << ", n = " << n);
            std::size_t c = 1;
            while (2 * c <= n) c *= 2;
            const double m0 = std::pow(2.0, -max_bias / static_cast<double>(c));
            const double m1 = std::pow(2.0, -(max_bias / 2.0) / static_cast<double>(c));
            const auto s = posenc::alibi_slopes(n, max_bias);
            for (std::size_t h = 0; h < n; ++h) {
                const double expected =
                    h < c ? std::pow(m0, static_cast<double>(h + 1)) : std::pow(m1, static_cast<double>(2 * (h - c) + 1));
                CHECK(std::abs(s[h] - expected) <= 2e-14 * expected);
            }
        }
    }
    // The max_bias generalisation for a power of two: 2^(−max_bias·k/n).
    const auto s = posenc::alibi_slopes(16, 4.0);
    for (std::size_t h = 0; h < 16; ++h) CHECK(std::abs(s[h] - std::exp2(-4.0 * static_cast<double>(h + 1) / 16.0)) <= 1e-15);
}

TEST_CASE("ALiBi rows equal BLOOM's build_alibi_tensor up to the per-row constant", "[alibi][golden]") {
    // BLOOM adds slope·key_pos with key_pos = (cumsum(mask) − 1)·mask (left padding shifts positions);
    // posenc adds −slope·(query_pos − key_pos). The two differ by slope·query_pos in every row, which the
    // softmax ignores; padded keys are masked by the kernel, so only real keys are compared.
    std::size_t compared = 0;
    for (const auto& e : posenc_test::golden().at("alibi_bloom_tensor")) {
        INFO(e.at("id").get<std::string>());
        const std::size_t heads = e.at("n_heads");
        const auto& masks = e.at("attention_mask");
        const auto& expected = e.at("alibi_hf_f32");
        const posenc::alibi_bias bias({.heads = heads});
        for (std::size_t b = 0; b < masks.size(); ++b) {
            const auto mask = masks[b].get<std::vector<int>>();
            std::vector<std::int64_t> pos(mask.size());
            std::int64_t running = 0;
            for (std::size_t j = 0; j < mask.size(); ++j) {
                running += mask[j];
                pos[j] = (running - 1) * mask[j];
            }
            for (std::size_t h = 0; h < heads; ++h) {
                const auto& want = expected[b * heads + h];
                for (std::size_t i = 0; i < mask.size(); ++i) {
                    if (!mask[i]) continue;
                    const auto row = bias_row(bias, h, pos[i], pos);
                    for (std::size_t j = 0; j < mask.size(); ++j) {
                        if (!mask[j]) continue;
                        const double ours = row[j] + bias.slope(h) * static_cast<double>(pos[i]);
                        const double theirs = want[j].get<double>();
                        CHECK(std::abs(ours - theirs) <= 1e-6 * std::max(1.0, std::abs(theirs)));
                        ++compared;
                    }
                }
            }
        }
    }
    REQUIRE(compared == 1600);  // Σ over batch rows of (real tokens)² × heads
}

TEST_CASE("ALiBi bias is -m(i-j) causal and -m|i-j| symmetric, added in double", "[alibi]") {
    const std::size_t heads = 12;
    const auto slopes = posenc::alibi_slopes(heads);
    for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
        const posenc::alibi_bias bias({.heads = heads, .form = form});
        for (std::int64_t q : {std::int64_t{0}, std::int64_t{17}, std::int64_t{4095}, std::int64_t{1'000'000'007}}) {
            for (std::int64_t k0 : {q - 40, q - 5, q}) {
                const auto init = posenc_test::random_floats(64, static_cast<std::uint32_t>(q + k0 + 7), 3.0f);
                for (std::size_t h = 0; h < heads; h += 5) {
                    INFO("form " << static_cast<int>(form) << " q=" << q << " k0=" << k0 << " h=" << h);
                    const auto row = bias_row(bias, h, q, posenc::position_ids::consecutive(k0, 64), init);
                    for (std::size_t j = 0; j < 64; ++j) {
                        const double dist = static_cast<double>(q - (k0 + static_cast<std::int64_t>(j)));
                        const double b = form == posenc::alibi_form::causal ? -slopes[h] * dist : -slopes[h] * std::abs(dist);
                        const auto expected = static_cast<float>(static_cast<double>(init[j]) + b);
                        CHECK(row[j] == expected);
                        CHECK(bias.bias(h, q, k0 + static_cast<std::int64_t>(j)) == b);
                    }
                }
            }
        }
    }
}

TEST_CASE("ALiBi with explicit key positions on both sides of the query: causal signed, symmetric -m|i-j|", "[alibi]") {
    // Explicit (int64 and int32) keys take their own loop, not the consecutive one: keys before and
    // after the query, out of order, repeated, far away, where the two forms differ.
    const std::size_t heads = 8;
    const auto slopes = posenc::alibi_slopes(heads);
    const std::vector<std::int64_t> keys64{1000, 0, 999, 1001, 1500, 3, 1000, 2'000'000, 998, 1'000'000'000};
    const std::vector<std::int32_t> keys32(keys64.begin(), keys64.end());
    const std::int64_t q = 1000;
    std::size_t compared = 0, after_query = 0;
    for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
        const posenc::alibi_bias bias({.heads = heads, .form = form});
        for (std::size_t h = 0; h < heads; ++h) {
            const auto init = posenc_test::random_floats(keys64.size(), static_cast<std::uint32_t>(h + 1));
            const auto row64 = bias_row(bias, h, q, keys64, init);
            const auto row32 = bias_row(bias, h, q, std::span<const std::int32_t>(keys32), init);
            for (std::size_t j = 0; j < keys64.size(); ++j) {
                INFO("form " << static_cast<int>(form) << " head " << h << " key " << keys64[j]);
                const double d = static_cast<double>(q - keys64[j]);  // i − j
                const double b = form == posenc::alibi_form::causal ? -slopes[h] * d : -slopes[h] * std::abs(d);
                const auto expected = static_cast<float>(static_cast<double>(init[j]) + b);
                CHECK(row64[j] == expected);
                CHECK(row32[j] == expected);
                CHECK(bias.bias(h, q, keys64[j]) == b);
                if (keys64[j] > q) ++after_query;
                ++compared;
            }
        }
    }
    REQUIRE(compared == 2 * heads * keys64.size());
    REQUIRE(after_query == 2 * heads * 4);
}

TEST_CASE("ALiBi decode rows equal prefill rows, any cached key positions", "[alibi][decode]") {
    const std::size_t heads = 40;
    const std::int64_t T = 300;
    for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric}) {
        const posenc::alibi_bias bias({.heads = heads, .form = form});
        std::vector<std::int64_t> cache64(T);
        std::vector<std::int32_t> cache32(T);
        for (std::int64_t j = 0; j < T; ++j) {
            cache64[static_cast<std::size_t>(j)] = j;
            cache32[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j);
        }
        for (std::size_t h : {0u, 7u, 31u, 32u, 39u}) {
            for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{150}, T - 1}) {
                // Prefill: query i against keys 0..T−1 (the kernel masks j > i). Decode: query i against the
                // cache 0..i, as explicit int64 or int32 ids.
                const auto prefill = bias_row(bias, h, i, posenc::position_ids::consecutive(0, static_cast<std::size_t>(T)));
                const std::span<const std::int64_t> c64(cache64.data(), static_cast<std::size_t>(i + 1));
                const std::span<const std::int32_t> c32(cache32.data(), static_cast<std::size_t>(i + 1));
                const auto decode64 = bias_row(bias, h, i, c64);
                const auto decode32 = bias_row(bias, h, i, c32);
                for (std::size_t j = 0; j <= static_cast<std::size_t>(i); ++j) {
                    CHECK(decode64[j] == prefill[j]);
                    CHECK(decode32[j] == prefill[j]);
                }
            }
        }
        // A cache that evicted the middle (StreamingLLM-style sinks + recent window) keeps real positions.
        const std::vector<std::int64_t> kept{0, 1, 2, 3, 996, 997, 998, 999};
        const auto row = bias_row(bias, 3, 1000, kept);
        for (std::size_t j = 0; j < kept.size(); ++j) {
            const double d = static_cast<double>(1000 - kept[j]);
            CHECK(row[j] == static_cast<float>(-bias.slope(3) * d));
        }
    }
}

TEST_CASE("ALiBi exposes the scale/bias order and satisfies score_bias", "[alibi]") {
    static_assert(posenc::score_bias<posenc::alibi_bias>);
    CHECK(posenc::alibi_bias({.heads = 8}).order() == posenc::bias_order::scale_then_add);
    const posenc::alibi_bias falcon({.heads = 8, .order = posenc::bias_order::add_then_scale});
    CHECK(falcon.order() == posenc::bias_order::add_then_scale);
    CHECK(falcon.heads() == 8);
    CHECK(falcon.slopes().size() == 8);
    // An empty tile is a no-op.
    falcon.add_to_scores(0, 5, posenc::position_ids::consecutive(0, 0), {});
}

TEST_CASE("ALiBi errors name the parameter", "[alibi][errors]") {
    expect_config_error([] { (void)posenc::alibi_slopes(0); }, "heads", "0");
    expect_config_error([] { (void)posenc::alibi_bias({.heads = 0}); }, "heads", "0");
    expect_config_error([] { (void)posenc::alibi{.heads = 0}.slopes(); }, "heads", "0");
    expect_config_error([] { (void)posenc::alibi_slopes(8, 0.0); }, "max_bias", "0");
    expect_config_error([] { (void)posenc::alibi_slopes(8, -8.0); }, "max_bias", "-8");
    expect_config_error([] { (void)posenc::alibi_slopes(8, std::nan("")); }, "max_bias", "nan");
    CHECK_THROWS_AS(posenc::alibi_slope(8, 8), posenc::range_error);
    const posenc::alibi_bias bias({.heads = 4});
    std::vector<float> scores(3, 0.0f);
    CHECK_THROWS_AS(bias.add_to_scores(4, 0, posenc::position_ids::consecutive(0, 3), scores), posenc::range_error);
    CHECK_THROWS_AS(bias.add_to_scores(0, 0, posenc::position_ids::consecutive(0, 2), scores), posenc::range_error);
    CHECK(scores == std::vector<float>(3, 0.0f));
}
