// Properties every RoPE implementation must have, checked against closed forms in double.
#include <posenc/posenc.hpp>

#include <random>

#include "support/catch.hpp"
#include "support/reference.hpp"

using posenc_test::dot;
using posenc_test::random_floats;

namespace {

template <class Layout>
std::vector<double> rotate_one(const posenc::rotary<Layout>& rope, const std::vector<float>& x, std::int64_t p) {
    std::vector<float> y = x;
    rope.apply(posenc::heads_view<float>(std::span<float>(y), {1, 1, y.size()}), std::vector<std::int64_t>{p});
    return {y.begin(), y.end()};
}

double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

template <class Layout>
void relative_property(std::uint32_t seed) {
    const posenc::rotary<Layout> rope({.head_dim = 128}, posenc::default_rope{.base = 10000});
    const auto q = random_floats(128, seed), k = random_floats(128, seed + 1);
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int64_t> pos(0, 1'000'000), shift(-500'000, 500'000);
    for (int trial = 0; trial < 50; ++trial) {
        const std::int64_t m = pos(gen), n = pos(gen), s = shift(gen);
        const double a = dot(rotate_one(rope, q, m), rotate_one(rope, k, n));
        const double b = dot(rotate_one(rope, q, m + s), rotate_one(rope, k, n + s));
        // Both equal qᵀR(n−m)k; each float output lane carries ≤ ~1 ulp, so the dot products agree
        // to about |q||k|·1e-6.
        INFO("m=" << m << " n=" << n << " shift=" << s);
        CHECK(std::abs(a - b) <= 2e-6 * norm({q.begin(), q.end()}) * norm({k.begin(), k.end()}));
    }
}

}  // namespace

TEST_CASE("<R_m q, R_n k> depends only on m - n, positions up to 10^6", "[rope][property]") {
    relative_property<posenc::half_split>(1);
    relative_property<posenc::interleaved>(2);
}

TEST_CASE("rotation keeps norms and matches the double reference at large positions", "[rope][property]") {
    for (bool inter : {false, true}) {
        const posenc::rope_dims dims{.head_dim = 96, .rotary_dim = 64};  // partial rotary
        const auto f = posenc::default_rope{.base = 500000}.frequencies(64);
        const posenc::any_rotary rope(inter ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split,
                                      dims, f);
        const auto x = random_floats(96, 7);
        for (std::int64_t p : {0LL, 1LL, 4095LL, 65536LL, 999'983LL, 123'456'789LL}) {
            std::vector<float> y = x;
            rope.apply(posenc::heads_view<float>(std::span<float>(y), {1, 1, 96}), std::vector<std::int64_t>{p});
            const std::vector<double> yd(y.begin(), y.end()), xd(x.begin(), x.end());
            INFO("interleaved=" << inter << " p=" << p);
            CHECK(std::abs(norm(yd) - norm(xd)) <= 1e-6 * norm(xd));
            const auto ref = posenc_test::reference_rotate(xd, 64, inter, f.inv_freq, p);
            CHECK(posenc_test::max_abs_diff(yd, ref) <= 1e-6);
            for (std::size_t j = 64; j < 96; ++j) CHECK(y[j] == x[j]);  // tail passes through, bit for bit
        }
    }
}

TEST_CASE("partial rotary uses rotary_dim in the exponents and pairs inside rotary_dim", "[rope][property]") {
    // GPT-NeoX: head_dim 128, rotary_pct 0.25 → rotary_dim 32, pairs (i, i+16).
    const auto dims = posenc::rope_dims::partial(128, 0.25);
    REQUIRE(dims.rotary() == 32);
    const auto f = posenc::default_rope{}.frequencies(dims.rotary());
    REQUIRE(f.inv_freq.size() == 16);
    for (std::size_t i = 0; i < 16; ++i)
        CHECK(std::abs(f.inv_freq[i] - std::pow(10000.0, -2.0 * double(i) / 32.0)) <= 1e-15 * f.inv_freq[i]);
    const posenc::rotary<posenc::half_split> rope(dims, f);
    const auto x = random_floats(128, 3);
    const auto y = rotate_one(rope, x, 77777);
    const auto ref = posenc_test::reference_rotate({x.begin(), x.end()}, 32, false, f.inv_freq, 77777);
    CHECK(posenc_test::max_abs_diff(y, ref) <= 1e-6);
}

TEST_CASE("scaled schedules with factor 1 equal the default schedule", "[rope][property]") {
    const double base = 10000;
    const auto def = posenc::default_rope{.base = base}.frequencies(128).inv_freq;
    auto same = [&](const posenc::rope_frequencies& f) {
        CHECK(posenc_test::max_rel_diff(f.inv_freq, def) <= 1e-15);
        CHECK(f.attention_factor == 1.0);
    };
    same(posenc::linear{.base = base, .factor = 1}.frequencies(128));
    same(posenc::ntk_aware{.base = base, .factor = 1}.frequencies(128));
    same(posenc::ntk_by_parts{.base = base, .factor = 1, .original_max_position = 4096}.frequencies(128));
    same(posenc::yarn{.base = base, .factor = 1, .original_max_position = 4096}.frequencies(128));
}

TEST_CASE("dynamic NTK at L <= L0 is exactly the default table, finite everywhere", "[rope][property]") {
    const posenc::dynamic_ntk d{.base = 10000, .factor = 4, .original_max_position = 4096};
    const auto def = posenc::default_rope{.base = 10000}.frequencies(64).inv_freq;
    for (std::int64_t L : {0, 1, 100, 4095, 4096}) CHECK(d.frequencies(64, L).inv_freq == def);
    // Above L0: the closed form base·(s·L/L0 − (s − 1))^(d/(d−2)), checked at several lengths (a
    // "dynamic" formula that reduced to a constant would fail here).
    double previous = 10000;
    for (std::int64_t L : {4097, 6000, 8192, 16384, 100000}) {
        const double expected = 10000 * std::pow(4.0 * double(L) / 4096.0 - 3.0, 64.0 / 62.0);
        const auto f = d.frequencies(64, L);
        CHECK(std::abs(f.inv_freq[1] - std::pow(expected, -2.0 / 64.0)) <= 1e-14);
        CHECK(d.effective_base(64, L) > previous);
        previous = d.effective_base(64, L);
        for (double v : f.inv_freq) CHECK(std::isfinite(v));
    }
}

TEST_CASE("dynamic NTK: a short prompt after a long one gets the short prompt's rotation", "[rope][property]") {
    // The bug class: a module that keeps the longest length seen rotates later short prompts with a
    // stale base. Replayed through the public objects (rotary, tables), which must keep no such state.
    const posenc::dynamic_ntk d{.base = 10000, .factor = 2, .original_max_position = 2048};
    const auto x = random_floats(128, 13);
    auto rotate = [&](std::int64_t seq_len) {
        const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = 128}, posenc::any_schedule{d}, seq_len);
        std::vector<float> y = x;
        const auto table = rope.table(1000);
        rope.apply(table, posenc::heads_view<float>(std::span<float>(y), {1, 1, 128}), std::vector<std::int64_t>{999});
        return y;
    };
    const auto before = rotate(1000);
    const auto long_prompt = rotate(1'000'000);
    CHECK(long_prompt != before);
    CHECK(rotate(1000) == before);
    // And the short prompt's rotation is the default RoPE's (1000 <= L0).
    const auto def = posenc::default_rope{.base = 10000}.frequencies(128).inv_freq;
    const auto ref = posenc_test::reference_rotate({x.begin(), x.end()}, 128, false, def, 999);
    CHECK(posenc_test::max_abs_diff({before.begin(), before.end()}, ref) <= 1e-6);
}

TEST_CASE("any_rotary built from a typed dynamic_ntk takes seq_len: the base at L and not at L0", "[rope][property]") {
    // any_rotary(layout, dims, schedule, seq_len) with the schedule's own type, as with an any_schedule: HF's
    // dynamic NTK base above L0 is base·(s·L/L0 − (s − 1))^(d/(d−2)), and inv_freq_i = base'^(−2i/d).
    const posenc::dynamic_ntk d{.base = 10000, .factor = 4, .original_max_position = 4096};
    for (const std::int64_t L : {std::int64_t{8192}, std::int64_t{100000}}) {
        const double b = 10000 * std::pow(4.0 * static_cast<double>(L) / 4096.0 - 3.0, 64.0 / 62.0);
        for (const auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
            const posenc::any_rotary rope(layout, {.head_dim = 64}, d, L);
            const auto& inv = rope.frequencies().inv_freq;
            REQUIRE(inv.size() == 32);
            double worst = 0;
            for (std::size_t i = 0; i < inv.size(); ++i)
                worst = std::max(worst, std::abs(inv[i] / std::pow(b, -2.0 * static_cast<double>(i) / 64.0) - 1.0));
            INFO("L = " << L);
            CHECK(worst <= 1e-13);
        }
    }
}

TEST_CASE("linear divides the default inverse frequencies by the factor", "[rope][property]") {
    const auto def = posenc::default_rope{.base = 10000}.frequencies(128).inv_freq;
    const auto lin = posenc::linear{.base = 10000, .factor = 8}.frequencies(128).inv_freq;
    for (std::size_t i = 0; i < def.size(); ++i) CHECK(lin[i] == def[i] / 8);
}

TEST_CASE("linear interpolates every pair: its interpolation weights are all 1", "[rope][property]") {
    // concepts.hpp: theta'_i = w_i·theta_i/s + (1 − w_i)·theta_i. Position Interpolation (Chen et al. 2023) divides
    // every theta_i by s, so every w_i is 1 (default_rope, which moves no pair, has every w_i = 0).
    const double s = 8;
    const auto w = posenc::linear{.base = 10000, .factor = s}.interpolation(128);
    REQUIRE(w.size() == 64);
    CHECK(w == std::vector<double>(64, 1.0));
    std::size_t off = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
        const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / 128.0);
        off += !(std::abs(w[i] * theta / s + (1.0 - w[i]) * theta - theta / s) <= 1e-15 * theta);
    }
    CHECK(off == 0);
}

TEST_CASE("ntk_aware uses base * s^(d/(d-2))", "[rope][property]") {
    const auto f = posenc::ntk_aware{.base = 10000, .factor = 8}.frequencies(128).inv_freq;
    const double b = 10000 * std::pow(8.0, 128.0 / 126.0);
    for (std::size_t i = 0; i < f.size(); ++i)
        CHECK(std::abs(f[i] - std::pow(b, -2.0 * double(i) / 128.0)) <= 1e-14 * f[i]);
    // The lowest frequency is interpolated by exactly s: base'^(−(d−2)/d) = base^(−(d−2)/d) / s.
    // (The highest, inv_freq[0] = 1 for every base, says nothing.)
    const auto def = posenc::default_rope{.base = 10000}.frequencies(128).inv_freq;
    CHECK(std::abs(f[63] - def[63] / 8) <= 1e-14 * def[63]);
    CHECK(std::abs(f[63] - std::pow(10000.0, -126.0 / 128.0) / 8) <= 1e-14 * def[63]);
}

TEST_CASE("ntk_by_parts follows the YaRN paper's ramp on r = L0/lambda", "[rope][property]") {
    const posenc::ntk_by_parts s{.base = 10000, .factor = 4, .original_max_position = 4096};
    const auto f = s.frequencies(128).inv_freq;
    const double pi = 3.14159265358979323846;
    int interpolated = 0, extrapolated = 0, blended = 0;
    for (std::size_t i = 0; i < f.size(); ++i) {
        const double theta = std::pow(10000.0, -2.0 * double(i) / 128.0);
        const double r = 4096.0 / (2 * pi / theta);
        const double g = r < 1 ? 0.0 : r > 32 ? 1.0 : (r - 1) / 31;
        CHECK(std::abs(f[i] - ((1 - g) * theta / 4 + g * theta)) <= 1e-15 * theta);
        (g == 0 ? interpolated : g == 1 ? extrapolated : blended)++;
    }
    CHECK(interpolated > 0);
    CHECK(extrapolated > 0);
    CHECK(blended > 0);
}

TEST_CASE("yarn amplitude and DeepSeek softmax multiplier follow HF / DeepSeek", "[rope][property][yarn]") {
    const posenc::yarn plain{.factor = 40, .original_max_position = 4096};
    CHECK(std::abs(plain.amplitude() - (0.1 * std::log(40.0) + 1)) <= 1e-15);
    CHECK(plain.softmax_scale_multiplier() == 1.0);
    posenc::yarn ds = plain;
    ds.mscale = 1.0;
    ds.mscale_all_dim = 0.707;
    const double m = 0.1 * std::log(40.0);
    CHECK(std::abs(ds.amplitude() - (m + 1) / (0.707 * m + 1)) <= 1e-15);
    CHECK(std::abs(ds.softmax_scale_multiplier() - std::pow(0.707 * m + 1, 2)) <= 1e-14);
    ds.mscale = 0.707;
    CHECK(std::abs(ds.amplitude() - 1.0) <= 1e-15);
    ds.attention_factor = 1.25;  // explicit wins
    CHECK(ds.amplitude() == 1.25);
    CHECK(ds.frequencies(64).attention_factor == 1.25);
}

TEST_CASE("longrope boundary: short factors at L0-1 and L0, long at L0+1", "[rope][property][longrope]") {
    std::vector<double> sf(32, 1.0), lf(32, 2.0);
    const posenc::longrope l{.short_factor = sf, .long_factor = lf, .original_max_position = 4096, .factor = 32};
    const auto def = posenc::default_rope{}.frequencies(64).inv_freq;
    for (std::int64_t L : {0, 4095, 4096}) CHECK(l.frequencies(64, L).inv_freq == def);
    const auto lng = l.frequencies(64, 4097).inv_freq;
    for (std::size_t i = 0; i < 32; ++i) CHECK(std::abs(lng[i] - def[i] / 2) <= 1e-16 * def[i]);
    CHECK(std::abs(l.amplitude() - std::sqrt(1 + std::log(32.0) / std::log(4096.0))) <= 1e-15);
}

TEST_CASE("inverse rotation undoes the forward one, shift re-rotates cached keys", "[rope][property]") {
    const posenc::rotary<posenc::interleaved> rope({.head_dim = 64}, posenc::yarn{.factor = 4, .original_max_position = 4096});
    const auto x = random_floats(3 * 2 * 64, 11);
    std::vector<float> y = x;
    posenc::heads_view<float> v(std::span<float>(y), {3, 2, 64});
    const std::vector<std::int64_t> pos{5, 70000, 123456};
    rope.apply(v, pos);
    rope.apply(v, pos, posenc::rotation::inverse);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(y[i] - x[i]) <= 2e-6f * std::max(1.0f, std::abs(x[i])));

    // Keys cached at positions p, re-rotated by Δ, equal keys rotated at p + Δ directly.
    std::vector<float> a = x, b = x;
    posenc::heads_view<float> va(std::span<float>(a), {3, 2, 64}), vb(std::span<float>(b), {3, 2, 64});
    rope.apply(va, pos);
    rope.shift(va, -4);
    rope.apply(vb, std::vector<std::int64_t>{1, 69996, 123452});
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 2e-6f);
}

TEST_CASE("table and on-the-fly paths agree, tables hold the rounded double cos/sin", "[rope][property]") {
    const posenc::rotary<posenc::half_split> rope({.head_dim = 128}, posenc::llama3{.base = 500000, .factor = 8, .original_max_position = 8192});
    const auto table = rope.table(9000);
    const auto x = random_floats(4 * 8 * 128, 5);
    std::vector<float> a = x, b = x;
    const std::vector<std::int32_t> pos{8999, 0, 17, 4096};  // int32 positions work too
    rope.apply(table, posenc::heads_view<float>(std::span<float>(a), {4, 8, 128}), pos);
    rope.apply(posenc::heads_view<float>(std::span<float>(b), {4, 8, 128}), pos);
    // Both round the same double cos/sin once (a rare double rounding aside): equal to the last ulp.
    for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(std::abs(a[i] - b[i]) <= 2 * (std::nextafter(std::abs(a[i]), 1e30f) - std::abs(a[i])) + 1e-30f);
    // The table stores amplitude × cos/sin of the double angle, rounded once (to 1 ulp).
    const auto& inv = rope.frequencies().inv_freq;
    for (std::size_t i = 0; i < inv.size(); ++i) {
        const float c = static_cast<float>(std::cos(8999.0 * inv[i])), s = static_cast<float>(std::sin(8999.0 * inv[i]));
        CHECK(std::abs(table.cos(8999)[i] - c) <= std::nextafter(std::abs(c), 2.0f) - std::abs(c));
        CHECK(std::abs(table.sin(8999)[i] - s) <= std::nextafter(std::abs(s), 2.0f) - std::abs(s));
    }
}
