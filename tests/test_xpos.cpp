// xPos against a closed form written here in double (rotation by p·θ_i, scale ζ_i^(±(p − c)/scale_base),
// ζ_i = (2i/d + γ)/(1 + γ), θ_i = 10000^(−2i/d)), both layouts, partial rotary; qᵀk depends only on
// n − m (and not on the center); range and parameter errors.
#include <posenc/posenc.hpp>

#include <cmath>
#include <random>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

using posenc_test::dot;
using posenc_test::expect_config_error;

namespace {


struct reference_xpos {
    std::size_t rotary_dim;
    bool interleaved;
    double gamma = 0.4, scale_base = 512.0, base = 10000.0;
    std::int64_t center = 0;

    [[nodiscard]] double zeta(std::size_t i) const {
        return (2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim) + gamma) / (1.0 + gamma);
    }

    // One head, `query` selects the sign of the decay exponent.
    [[nodiscard]] std::vector<double> apply(const std::vector<double>& x, std::int64_t p, bool query) const {
        std::vector<double> y = x;
        const double e = static_cast<double>(p - center) / scale_base * (query ? 1.0 : -1.0);
        for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
            const std::size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + rotary_dim / 2;
            const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
            const double ang = static_cast<double>(p) * theta, sc = std::pow(zeta(i), e);
            y[a] = sc * (x[a] * std::cos(ang) - x[b] * std::sin(ang));
            y[b] = sc * (x[b] * std::cos(ang) + x[a] * std::sin(ang));
        }
        return y;
    }
};

template <class Layout>
std::vector<double> run_one(const posenc::xpos_rotary<Layout>& xp, const std::vector<float>& x, std::int64_t p,
                            bool query) {
    std::vector<float> y = x;
    const posenc::heads_view<float> v(std::span<float>(y), {1, 1, y.size()});
    const std::vector<std::int64_t> pos{p};
    if (query)
        xp.apply_queries(v, pos);
    else
        xp.apply_keys(v, pos);
    return {y.begin(), y.end()};
}

template <class Layout>
void closed_form(std::size_t head_dim, std::size_t rotary_dim, std::int64_t center,
                 const std::vector<std::int64_t>& positions = {0, 1, 7, 100, 3000, -50, 20000}) {
    constexpr bool inter = std::is_same_v<Layout, posenc::interleaved>;
    const posenc::xpos_rotary<Layout> xp({.head_dim = head_dim, .rotary_dim = rotary_dim}, posenc::xpos{.center = center});
    const reference_xpos ref{.rotary_dim = rotary_dim, .interleaved = inter, .center = center};
    const std::size_t heads = 3, tokens = positions.size();
    const auto q0 = posenc_test::random_floats(tokens * heads * head_dim, 21u);
    const auto k0 = posenc_test::random_floats(tokens * heads * head_dim, 22u);
    auto q = q0, k = k0;
    xp.apply(posenc::heads_view<float>(std::span<float>(q), {tokens, heads, head_dim}),
             posenc::heads_view<float>(std::span<float>(k), {tokens, heads, head_dim}), positions);
    for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t h = 0; h < heads; ++h) {
            const std::size_t off = (t * heads + h) * head_dim;
            for (bool query : {true, false}) {
                const auto& in = query ? q0 : k0;
                const auto& out = query ? q : k;
                const std::vector<double> x(in.begin() + static_cast<std::ptrdiff_t>(off),
                                            in.begin() + static_cast<std::ptrdiff_t>(off + head_dim));
                const auto want = ref.apply(x, positions[t], query);
                INFO(Layout::name << " head_dim " << head_dim << " rotary " << rotary_dim << " center " << center
                                  << " p=" << positions[t] << (query ? " query" : " key"));
                bool ok = true;
                for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
                    const std::size_t a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + rotary_dim / 2;
                    const double e = static_cast<double>(positions[t] - center) / 512.0 * (query ? 1.0 : -1.0);
                    const double bound = 1e-6 * std::pow(ref.zeta(i), e) * (std::abs(x[a]) + std::abs(x[b]));
                    ok = ok && std::abs(out[off + a] - want[a]) <= bound && std::abs(out[off + b] - want[b]) <= bound;
                    CHECK(std::abs(xp.scale(i, positions[t], query ? posenc::xpos_role::query : posenc::xpos_role::key) -
                                   std::pow(ref.zeta(i), e)) <= 1e-12 * std::pow(ref.zeta(i), e));
                }
                for (std::size_t j = rotary_dim; j < head_dim; ++j) ok = ok && out[off + j] == in[off + j];
                CHECK(ok);
            }
        }
    }
}

template <class Layout>
void relative_only() {
    const std::size_t d = 64;
    const posenc::xpos_rotary<Layout> xp({.head_dim = d}, posenc::xpos{});
    const posenc::xpos_rotary<Layout> centered({.head_dim = d}, posenc::xpos{.center = 5000});
    const reference_xpos ref{.rotary_dim = d, .interleaved = std::is_same_v<Layout, posenc::interleaved>};
    const auto q = posenc_test::random_floats(d, 31u), k = posenc_test::random_floats(d, 32u);
    std::mt19937_64 gen(7);
    std::uniform_int_distribution<std::int64_t> pos(0, 8000), shift(-8000, 8000);
    for (int trial = 0; trial < 40; ++trial) {
        const std::int64_t n = pos(gen), m = pos(gen), s = shift(gen);
        // |qᵀk| is at most Σ_i ζ_i^((n−m)/512)·|q_i||k_i| (pairwise); tolerances are relative to that.
        double envelope = 0;
        for (std::size_t i = 0; i < d / 2; ++i) {
            const std::size_t a = std::is_same_v<Layout, posenc::interleaved> ? 2 * i : i;
            const std::size_t b = std::is_same_v<Layout, posenc::interleaved> ? 2 * i + 1 : i + d / 2;
            envelope += std::pow(ref.zeta(i), static_cast<double>(n - m) / 512.0) * (std::abs(q[a]) + std::abs(q[b])) *
                        (std::abs(k[a]) + std::abs(k[b]));
        }
        const double base = dot(run_one(xp, q, n, true), run_one(xp, k, m, false));
        const double shifted = dot(run_one(xp, q, n + s, true), run_one(xp, k, m + s, false));
        const double other_center = dot(run_one(centered, q, n, true), run_one(centered, k, m, false));
        const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end());
        const double closed = dot(ref.apply(qd, n, true), ref.apply(kd, m, false));
        INFO(Layout::name << " n=" << n << " m=" << m << " shift=" << s);
        CHECK(std::abs(base - closed) <= 1e-6 * envelope);
        CHECK(std::abs(shifted - base) <= 2e-6 * envelope);
        CHECK(std::abs(other_center - base) <= 2e-6 * envelope);
    }
}

}  // namespace

TEST_CASE("xPos rotates and scales queries and keys as the closed form", "[xpos]") {
    for (std::int64_t center : {0, 37}) {
        closed_form<posenc::half_split>(64, 64, center);
        closed_form<posenc::interleaved>(64, 64, center);
        closed_form<posenc::half_split>(48, 32, center);
        closed_form<posenc::interleaved>(48, 32, center);
        // More tokens than one block of rows (the rows are computed 4096 floats at a time: 64 tokens
        // at rotary_dim 64, 16 at 256), positions out of order.
        std::vector<std::int64_t> many(150);
        for (std::size_t t = 0; t < many.size(); ++t) many[t] = static_cast<std::int64_t>((t * 37) % 150) * 40 - 1000;
        closed_form<posenc::half_split>(64, 64, center, many);
        closed_form<posenc::interleaved>(256, 256, center, many);
    }
}

TEST_CASE("xPos q.k depends only on n - m, whatever the center", "[xpos][properties]") {
    relative_only<posenc::half_split>();
    relative_only<posenc::interleaved>();
}

TEST_CASE("xPos apply(q, k) equals apply_queries + apply_keys, rows are [cos*scale | sin*scale]", "[xpos]") {
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = 32}, posenc::xpos{.gamma = 0.5, .scale_base = 256});
    const auto q0 = posenc_test::random_floats(5 * 2 * 32, 1u), k0 = posenc_test::random_floats(5 * 2 * 32, 2u);
    auto q1 = q0, k1 = k0, q2 = q0, k2 = k0;
    const auto pos = posenc::position_ids::consecutive(90, 5);
    auto view = [](std::vector<float>& v) { return posenc::heads_view<float>(std::span<float>(v), {5, 2, 32}); };
    xp.apply(view(q1), view(k1), pos);
    xp.apply_queries(view(q2), pos);
    xp.apply_keys(view(k2), pos);
    CHECK(q1 == q2);
    CHECK(k1 == k2);
    const auto rows = xp.rows(pos, posenc::xpos_role::key);
    REQUIRE(rows.size() == 5 * 32);
    for (std::size_t t = 0; t < 5; ++t)
        for (std::size_t i = 0; i < 16; ++i) {
            const double p = 90.0 + static_cast<double>(t);
            const double zeta = (2.0 * static_cast<double>(i) / 32.0 + 0.5) / 1.5;
            const double sc = std::pow(zeta, -p / 256.0);
            const double ang = p * std::pow(10000.0, -2.0 * static_cast<double>(i) / 32.0);
            CHECK(std::abs(rows[t * 32 + i] - sc * std::cos(ang)) <= 1e-6 * sc);
            CHECK(std::abs(rows[t * 32 + 16 + i] - sc * std::sin(ang)) <= 1e-6 * sc);
        }
}

TEST_CASE("xPos scales outside float range throw before anything is written", "[xpos][errors]") {
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = 64}, posenc::xpos{});
    auto q = posenc_test::random_floats(2 * 64, 3u), k = posenc_test::random_floats(2 * 64, 4u);
    const auto before = q, k_before = k;
    const std::vector<std::int64_t> far{10, 100000};
    CHECK_THROWS_AS(xp.apply_keys(posenc::heads_view<float>(std::span<float>(q), {2, 1, 64}), far), posenc::range_error);
    CHECK_THROWS_AS(xp.apply(posenc::heads_view<float>(std::span<float>(q), {2, 1, 64}),
                             posenc::heads_view<float>(std::span<float>(k), {2, 1, 64}), far),
                    posenc::range_error);
    CHECK(q == before);
    CHECK(k == k_before);
    // The same positions work with a center near them.
    const posenc::xpos_rotary<posenc::half_split> centered({.head_dim = 64}, posenc::xpos{.center = 50000});
    centered.apply_keys(posenc::heads_view<float>(std::span<float>(q), {2, 1, 64}), posenc::position_ids::consecutive(49990, 2));
    CHECK_THROWS_AS((void)xp.scale(32, 0, posenc::xpos_role::query), posenc::range_error);
}

TEST_CASE("xPos errors name the parameter", "[xpos][errors]") {
    using X = posenc::xpos_rotary<posenc::interleaved>;
    expect_config_error([] { (void)X({.head_dim = 64}, posenc::xpos{.gamma = 0}); }, "gamma", "0");
    expect_config_error([] { (void)X({.head_dim = 64}, posenc::xpos{.gamma = -1}); }, "gamma", "-1");
    expect_config_error([] { (void)X({.head_dim = 64}, posenc::xpos{.scale_base = 0}); }, "scale_base", "0");
    expect_config_error([] { (void)X({.head_dim = 64}, posenc::xpos{.base = 1}); }, "base", "1");
    expect_config_error([] { (void)X({.head_dim = 0}, posenc::xpos{}); }, "head_dim", "0");
    expect_config_error([] { (void)X({.head_dim = 64, .rotary_dim = 63}, posenc::xpos{}); }, "rotary_dim", "63");
    const X xp({.head_dim = 64}, posenc::xpos{});
    std::vector<float> buf(2 * 64);
    expect_config_error([&] { xp.apply_queries(posenc::heads_view<float>(std::span<float>(buf), {2, 1, 32}),
                                               posenc::position_ids::consecutive(0, 4)); },
                        "q.head_dim", "32");
    expect_config_error([&] { xp.apply_keys(posenc::heads_view<float>(std::span<float>(buf), {2, 1, 64}),
                                            posenc::position_ids::consecutive(0, 3)); },
                        "k.tokens", "2");
    static_assert(posenc::qk_transform<X>);
    static_assert(posenc::qk_transform<posenc::rotary<posenc::half_split>>);
}
