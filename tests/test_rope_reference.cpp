// The public rotary API against closed forms evaluated in double inside the test (support/
// reference.hpp: its own lane pairing, angle p·θᵢ in double, std::cos / std::sin): amplitudes ≠ 1
// in tables and on the fly, forward and inverse, partial rotary, explicit int64 / int32 positions
// split across threads, and long prefills through the angle-addition recurrence.
//
// Tolerances: float ulps of each rotated pair's length a·|(x₁, x₂)| (see worst_pair_ulps). One
// rotation rounds cos/sin once (≤ ½ ulp each) and its float arithmetic adds ≤ ~1½ ulp: bound 3.
// An inverse through a table scales the stored (rounded) rows by 1/a², one more rounding: bound 4.
// Measured worst over this file (x86-64 AVX2, g++ 12 -O3): 1.83.
#include <posenc/posenc.hpp>

#include <random>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"

using posenc_test::random_floats;

namespace {

/// T tokens of H heads of `dims`, positions `pos`: the reference rotation of every head, in double.
std::vector<double> reference(const std::vector<float>& x, std::size_t head_dim, std::size_t r, bool inter,
                              const std::vector<double>& inv, const std::vector<std::int64_t>& pos, std::size_t heads,
                              double a, bool inverse = false) {
    std::vector<double> out;
    out.reserve(x.size());
    for (std::size_t t = 0; t < pos.size(); ++t)
        for (std::size_t h = 0; h < heads; ++h) {
            const auto first = x.begin() + static_cast<std::ptrdiff_t>((t * heads + h) * head_dim);
            const std::vector<double> xd(first, first + static_cast<std::ptrdiff_t>(head_dim));
            const auto y = posenc_test::reference_rotate(xd, r, inter, inv, inverse ? -pos[t] : pos[t], inverse ? 1.0 / a : a);
            out.insert(out.end(), y.begin(), y.end());
        }
    return out;
}

posenc::heads_view<float> view(std::vector<float>& buf, std::size_t tokens, std::size_t heads, std::size_t d) {
    return posenc::heads_view<float>(std::span<float>(buf), {tokens, heads, d});
}

posenc::rope_layout layout_of(bool inter) { return inter ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split; }

}  // namespace

TEST_CASE("table rows hold amplitude x cos/sin of the double angle, for amplitudes other than 1", "[rope][table][amplitude]") {
    // YaRN ×4: amplitude 0.1·ln 4 + 1 (closed form), and an explicit rope_frequencies with a = 0.8.
    const double yarn_a = 0.1 * std::log(4.0) + 1.0;
    const posenc::rotary<posenc::half_split> yarn_rope({.head_dim = 64}, posenc::yarn{.factor = 4, .original_max_position = 4096});
    REQUIRE(std::abs(yarn_rope.frequencies().attention_factor - yarn_a) <= 1e-15);
    const auto closed = posenc_test::closed_form_inv_freq(10000.0, 64);
    const posenc::rotary<posenc::interleaved> plain({.head_dim = 64}, posenc::rope_frequencies{closed, 0.8});
    std::size_t compared = 0;
    for (const auto* inv_a : {&yarn_rope.frequencies(), &plain.frequencies()}) {
        const posenc::cos_sin_table table(*inv_a, 5000);
        REQUIRE(table.amplitude() == inv_a->attention_factor);
        const double a = inv_a == &plain.frequencies() ? 0.8 : yarn_a;
        for (std::int64_t p : {0LL, 1LL, 17LL, 4095LL, 4999LL})
            for (std::size_t i = 0; i < 32; ++i) {
                INFO("amplitude " << a << " p " << p << " pair " << i);
                const double ang = static_cast<double>(p) * inv_a->inv_freq[i];
                const auto c = static_cast<float>(a * std::cos(ang)), s = static_cast<float>(a * std::sin(ang));
                CHECK(std::abs(table.cos(p)[i] - c) <= std::nextafter(std::abs(c), 2.0f) - std::abs(c));
                CHECK(std::abs(table.sin(p)[i] - s) <= std::nextafter(std::abs(s), 2.0f) - std::abs(s));
                ++compared;
            }
    }
    REQUIRE(compared == 2 * 5 * 32);
    // And the rotary's own table() carries it too (large rotary_dim takes the scalar row path).
    const auto wide = posenc_test::closed_form_inv_freq(10000.0, 2048);
    const posenc::cos_sin_table wide_table(posenc::rope_frequencies{wide, 1.5}, 3);
    CHECK(std::abs(wide_table.cos(2)[5] - static_cast<float>(1.5 * std::cos(2.0 * wide[5]))) <= 2e-7);
    CHECK(std::abs(wide_table.sin(2)[5] - static_cast<float>(1.5 * std::sin(2.0 * wide[5]))) <= 2e-7);
}

TEST_CASE("forward and inverse through a table with amplitude != 1 equal the double reference and round-trip",
          "[rope][table][amplitude][inverse]") {
    const std::size_t T = 5, H = 3, D = 64;
    const std::vector<std::int64_t> pos{0, 3, 4095, 777, 4999};
    std::size_t cases = 0;
    for (bool inter : {false, true}) {
        for (double a : {0.8, 1.1386294361119891, 1.5}) {
            const auto inv = posenc_test::closed_form_inv_freq(10000.0, D);
            const posenc::any_rotary rope(layout_of(inter), {.head_dim = D}, posenc::rope_frequencies{inv, a});
            const auto table = rope.table(5000);
            const auto x = random_floats(T * H * D, 41);
            INFO("interleaved " << inter << " amplitude " << a);
            // Forward, table and on the fly: rotation by p·θ times a.
            const auto fwd_ref = reference(x, D, D, inter, inv, pos, H, a);
            auto y_table = x, y_fly = x;
            rope.apply(table, view(y_table, T, H, D), pos);
            rope.apply(view(y_fly, T, H, D), pos);
            CHECK(posenc_test::worst_pair_ulps(x, y_table, fwd_ref, D, D, inter, a) <= 3.0);
            CHECK(posenc_test::worst_pair_ulps(x, y_fly, fwd_ref, D, D, inter, a) <= 3.0);
            // Inverse, table and on the fly: rotation by −p·θ divided by a.
            const auto inv_ref = reference(x, D, D, inter, inv, pos, H, a, true);
            auto z_table = x, z_fly = x;
            rope.apply(table, view(z_table, T, H, D), pos, posenc::rotation::inverse);
            rope.apply(view(z_fly, T, H, D), pos, posenc::rotation::inverse);
            CHECK(posenc_test::worst_pair_ulps(x, z_table, inv_ref, D, D, inter, 1.0 / a) <= 4.0);
            CHECK(posenc_test::worst_pair_ulps(x, z_fly, inv_ref, D, D, inter, 1.0 / a) <= 3.0);
            // Round trips, crossing the two row sources: back to x to float rounding.
            auto rt1 = y_table, rt2 = y_fly;
            rope.apply(table, view(rt1, T, H, D), pos, posenc::rotation::inverse);
            rope.apply(table, view(rt2, T, H, D), pos, posenc::rotation::inverse);
            double worst = 0;
            for (std::size_t i = 0; i < x.size(); ++i)
                worst = posenc_test::worst_of(posenc_test::worst_of(worst, std::abs(double(rt1[i]) - x[i])), std::abs(double(rt2[i]) - x[i]));
            CHECK(worst <= 4e-6 * 8);  // |x| ≤ ~8 (normal, σ = 1): a few ulps of it
            ++cases;
        }
    }
    REQUIRE(cases == 6);
}

TEST_CASE("a table built with the same frequencies but another amplitude is rejected before any write", "[rope][table][errors]") {
    const auto inv = posenc_test::closed_form_inv_freq(10000.0, 32);
    const posenc::rotary<posenc::half_split> rope({.head_dim = 32}, posenc::rope_frequencies{inv, 1.25});
    const posenc::rotary<posenc::half_split> unit({.head_dim = 32}, posenc::rope_frequencies{inv, 1.0});
    const auto foreign = unit.table(10);
    const auto own = rope.table(10);
    const auto x = random_floats(2 * 32, 3);
    auto y = x;
    posenc_test::expect_config_error([&] { rope.apply(foreign, view(y, 2, 1, 32), std::vector<std::int64_t>{1, 2}); }, "table");
    posenc_test::expect_config_error(
        [&] { rope.apply(foreign, view(y, 2, 1, 32), std::vector<std::int64_t>{1, 2}, posenc::rotation::inverse); }, "table");
    CHECK(y == x);
    CHECK_NOTHROW(rope.apply(own, view(y, 2, 1, 32), std::vector<std::int64_t>{1, 2}));
    CHECK(y != x);
}

TEST_CASE("partial rotary against the closed form: exponents over rotary_dim, pairs inside it, tail untouched",
          "[rope][partial]") {
    // (head_dim, factor) → rotary_dim = int(head_dim·factor), HF's truncation; θᵢ = base^(−2i/rotary_dim).
    struct partial_case {
        std::size_t head_dim;
        double factor;
        std::size_t rotary;
        double base;
    };
    const std::vector<partial_case> cases{
        {96, 0.3, 28, 10000.0}, {128, 0.25, 32, 10000.0}, {80, 0.5, 40, 1e6}, {256, 0.25, 64, 10000.0}, {64, 0.75, 48, 5e5}};
    // Under a sanitizer the far position is 99'983 (a 10× smaller table, the same table and
    // on-the-fly paths; its precision at 10^6 is the Release run's).
    const std::int64_t far = posenc_test::sanitized ? 99'983 : 999'983;
    const std::vector<std::int64_t> pos{0, 1, 31, 32, 4097, 65536, far};
    std::size_t checked = 0;
    for (const auto& c : cases) {
        const auto dims = posenc::rope_dims::partial(c.head_dim, c.factor);
        REQUIRE(dims.rotary() == c.rotary);
        const auto inv = posenc_test::closed_form_inv_freq(c.base, c.rotary);
        for (bool inter : {false, true}) {
            const posenc::any_rotary rope(layout_of(inter), dims, posenc::default_rope{.base = c.base});
            REQUIRE(rope.frequencies().inv_freq.size() == c.rotary / 2);
            const std::size_t H = 2, T = pos.size();
            const auto x = random_floats(T * H * c.head_dim, static_cast<std::uint32_t>(c.head_dim));
            const auto ref = reference(x, c.head_dim, c.rotary, inter, inv, pos, H, 1.0);
            auto y_fly = x, y_table = x, y_run = x;
            rope.apply(view(y_fly, T, H, c.head_dim), pos);
            const auto table = rope.table(far + 17);
            rope.apply(table, view(y_table, T, H, c.head_dim), pos);
            INFO("head_dim " << c.head_dim << " rotary " << c.rotary << " interleaved " << inter);
            CHECK(posenc_test::worst_pair_ulps(x, y_fly, ref, c.head_dim, c.rotary, inter, 1.0) <= 3.0);
            CHECK(posenc_test::worst_pair_ulps(x, y_table, ref, c.head_dim, c.rotary, inter, 1.0) <= 3.0);
            // A prefill run 0..T−1 (the recurrence path) with the same closed form.
            std::vector<std::int64_t> run_pos(T);
            for (std::size_t t = 0; t < T; ++t) run_pos[t] = static_cast<std::int64_t>(t) + 29;
            rope.apply(view(y_run, T, H, c.head_dim), posenc::position_ids::consecutive(29, T));
            CHECK(posenc_test::worst_pair_ulps(x, y_run, reference(x, c.head_dim, c.rotary, inter, inv, run_pos, H, 1.0),
                                               c.head_dim, c.rotary, inter, 1.0) <= 3.0);
            ++checked;
        }
    }
    REQUIRE(checked == 2 * cases.size());
}

TEST_CASE("rope_dims::partial truncates head_dim x factor like HF's int()", "[rope][partial]") {
    // 96·0.3 = 28.799999999999997 → 28; 100·0.33 = 33.0 → 33; 128·0.4 = 51.2 → 51; 80·0.35 = 28.000000000000004 → 28;
    // 64·0.999 = 63.936 → 63; and an exact product stays: 128·0.5 = 64.
    CHECK(posenc::rope_dims::partial(96, 0.3).rotary() == 28);
    CHECK(posenc::rope_dims::partial(100, 0.33).rotary() == 33);
    CHECK(posenc::rope_dims::partial(128, 0.4).rotary() == 51);
    CHECK(posenc::rope_dims::partial(80, 0.35).rotary() == 28);
    CHECK(posenc::rope_dims::partial(64, 0.999).rotary() == 63);
    CHECK(posenc::rope_dims::partial(128, 0.5).rotary() == 64);
    CHECK(posenc::rope_dims::partial(128, 1.0).rotary() == 128);
    CHECK(posenc::rope_dims::partial(96, 0.3).head_dim == 96);
}

TEST_CASE("explicit int64 and int32 positions split across threads equal one thread and the double reference",
          "[rope][threads]") {
    // 600 tokens × (8 + 2) heads × 128 lanes: large enough for 2 and 3 threads (≥ 64K floats each).
    const std::size_t T = 600, HQ = 8, HK = 2, D = 128;
    std::mt19937_64 gen(9);
    // Under a sanitizer positions up to 19'999 (a 10× smaller table; the same rows, paths and splits).
    const std::int64_t top = posenc_test::sanitized ? 19'999 : 199'999;
    std::uniform_int_distribution<std::int64_t> any(0, top);
    std::vector<std::int64_t> pos64(T);
    for (auto& p : pos64) p = any(gen);
    pos64[0] = top;
    pos64[T / 2] = 0;
    const std::vector<std::int32_t> pos32(pos64.begin(), pos64.end());
    const auto q0 = random_floats(T * HQ * D, 21), k0 = random_floats(T * HK * D, 22);
    std::size_t runs = 0;
    for (bool inter : {false, true}) {
        posenc::any_rotary rope(layout_of(inter), {.head_dim = D}, posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 4096});
        const auto& f = rope.frequencies();
        const auto table = rope.table(top + 1);
        const auto q_ref = reference(q0, D, D, inter, f.inv_freq, pos64, HQ, f.attention_factor);
        const auto k_ref = reference(k0, D, D, inter, f.inv_freq, pos64, HK, f.attention_factor);
        std::vector<float> single_q, single_k;
        for (unsigned threads : {1u, 2u, 3u})
            for (bool use_table : {false, true})
                for (bool wide : {true, false}) {
                    rope.set_threads(threads);
                    auto q = q0, k = k0;
                    const posenc::position_ids ids = wide ? posenc::position_ids(pos64) : posenc::position_ids(pos32);
                    if (use_table)
                        rope.apply(table, view(q, T, HQ, D), view(k, T, HK, D), ids);
                    else
                        rope.apply(view(q, T, HQ, D), view(k, T, HK, D), ids);
                    INFO("interleaved " << inter << " threads " << threads << " table " << use_table << " int64 " << wide);
                    CHECK(posenc_test::worst_pair_ulps(q0, q, q_ref, D, D, inter, f.attention_factor) <= 3.0);
                    CHECK(posenc_test::worst_pair_ulps(k0, k, k_ref, D, D, inter, f.attention_factor) <= 3.0);
                    if (threads == 1 && !use_table && wide) {
                        single_q = q;
                        single_k = k;
                    }
                    const bool same = q == single_q && k == single_k;  // (a bool: Catch2 would print 600K floats)
                    CHECK(same);  // bit for bit: a row depends on its position only
                    ++runs;
                }
    }
    REQUIRE(runs == 2 * 3 * 2 * 2);
}

TEST_CASE("long prefills: recurrence rows equal direct per-position rows", "[rope][recurrence]") {
    // Consecutive positions take the angle-addition recurrence, re-seeded exactly every 32 positions;
    // explicit positions compute each row directly. A head whose first half is 1 and second half 0
    // (half_split) comes out as the float row [a·cos | a·sin] itself, so the two paths are compared
    // value by value. θᵢ = (2i + 1)/64 makes every angle p·θᵢ exact in double, so the direct rows
    // carry no angle rounding. A recurrence value is used only where it provably rounds to the direct
    // row's float (kernels.hpp, consecutive_rows), so the two paths agree bit for bit, and both lie
    // within 1 ulp of the closed form. (Before that check, with an earlier step computation, 5778 of
    // these 16.8M values differed and 444 were more than 1 ulp from the closed form. With exact angles
    // the recurrence now matches even without the check, so the check itself is guarded by the
    // batch-invariance tests in test_batch_invariance.cpp, whose angles round.)
    const std::size_t D = 128, T = 8192;
    std::vector<double> inv(D / 2);
    for (std::size_t i = 0; i < inv.size(); ++i) inv[i] = static_cast<double>(2 * i + 1) / 64.0;
    const double a = 1.1386294361119891;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::rope_frequencies{inv, a});
    std::vector<float> unit(T * D);
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t j = 0; j < D / 2; ++j) unit[t * D + j] = 1.0f;
    std::size_t values = 0, differ = 0, rec_far = 0, direct_far = 0;
    auto far = [](float got, float want) {  // more than an ulp of want away, or NaN
        return !(std::abs(got - want) <= std::nextafter(std::abs(want), 2.0f) - std::abs(want));
    };
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{100'013}, std::int64_t{1'000'000}, std::int64_t{7'777'777}}) {
        for (std::size_t chunk = 0; chunk < 4; ++chunk) {
            const std::int64_t first = start + static_cast<std::int64_t>(chunk * T);
            std::vector<std::int64_t> pos(T);
            for (std::size_t t = 0; t < T; ++t) pos[t] = first + static_cast<std::int64_t>(t);
            auto rec = unit, direct = unit;
            rope.apply(view(rec, T, 1, D), posenc::position_ids::consecutive(first, T));
            rope.apply(view(direct, T, 1, D), pos);
            for (std::size_t t = 0; t < T; ++t)
                for (std::size_t i = 0; i < D / 2; ++i) {
                    const double ang = static_cast<double>(pos[t]) * inv[i];  // exact
                    const auto c = static_cast<float>(a * std::cos(ang)), s = static_cast<float>(a * std::sin(ang));
                    const float rc = rec[t * D + i], rs = rec[t * D + D / 2 + i];
                    const float dc = direct[t * D + i], ds = direct[t * D + D / 2 + i];
                    differ += (rc != dc) + (rs != ds);
                    rec_far += far(rc, c) + far(rs, s);
                    direct_far += far(dc, c) + far(ds, s);
                    values += 2;
                }
        }
    }
    REQUIRE(values == 4 * 4 * T * D);
    INFO("of " << values << " row values: " << differ << " differ between the recurrence and direct rows, " << rec_far
               << " recurrence and " << direct_far << " direct ones are more than 1 ulp from the closed form");
    CHECK(differ == 0);
    CHECK(rec_far == 0);
    CHECK(direct_far == 0);
}

TEST_CASE("rows whose angles are beyond the vector reduction's reach stay within 1 ulp of the closed form", "[rope][recurrence]") {
    // θ up to 32 at positions near 2^26 (|p·θ|·2/π up to ~1.4e9 quadrants: past the FMA-less kernels'
    // exact reduction, 2^29) and one θ of 1e20 (past every kernel's, 2^50): those rows take the scalar
    // path. Each value within 1 ulp of a·cos / a·sin of the double angle (exact θᵢ = k/8 keep the
    // angles exact), through explicit positions (direct rows) and consecutive ones (the recurrence,
    // re-seeded by direct rows). The 1e20 lane only has to stay a finite value within ±a: its double
    // angle is known to ±2^13 rad. Run on SSE2's kernels too (ctest rope_on_sse2).
    const std::size_t D = 32, T = 96;
    std::vector<double> inv(D / 2);
    for (std::size_t i = 0; i + 1 < inv.size(); ++i) inv[i] = static_cast<double>(8 * i + 1) / 8.0 * (i % 2 ? 1.0 : 2.0);
    inv.back() = 1e20;
    const double a = 1.25;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::rope_frequencies{inv, a});
    auto far = [](float got, double want) {
        const auto w = static_cast<float>(want);
        return !(std::abs(got - w) <= std::nextafter(std::abs(w), 2.0f) - std::abs(w));
    };
    std::size_t values = 0, off = 0, out_of_range = 0;
    for (std::int64_t first : {(std::int64_t{1} << 26) - std::int64_t{T}, -(std::int64_t{1} << 26), std::int64_t{50'000'017}}) {
        std::vector<std::int64_t> pos(T);
        for (std::size_t t = 0; t < T; ++t) pos[t] = first + static_cast<std::int64_t>(t);
        for (bool consecutive : {false, true}) {
            std::vector<float> x(T * D, 0.0f);
            for (std::size_t t = 0; t < T; ++t)
                for (std::size_t j = 0; j < D / 2; ++j) x[t * D + j] = 1.0f;  // rotates into [a·cos | a·sin]
            if (consecutive)
                rope.apply(view(x, T, 1, D), posenc::position_ids::consecutive(first, T));
            else
                rope.apply(view(x, T, 1, D), pos);
            for (std::size_t t = 0; t < T; ++t)
                for (std::size_t i = 0; i < D / 2; ++i) {
                    const float c = x[t * D + i], sn = x[t * D + D / 2 + i];
                    values += 2;
                    if (i + 1 == D / 2) {
                        out_of_range += !(std::abs(c) <= a) + !(std::abs(sn) <= a);
                        continue;
                    }
                    const double ang = static_cast<double>(pos[t]) * inv[i];  // exact
                    off += far(c, a * std::cos(ang)) + far(sn, a * std::sin(ang));
                }
        }
    }
    INFO(values << " values: " << off << " more than 1 ulp from the closed form, " << out_of_range << " outside ±a");
    CHECK(off == 0);
    CHECK(out_of_range == 0);
}

TEST_CASE("rotary_dim beyond the SIMD kernels' reach (scalar backend) equals the double reference", "[rope][scalar]") {
    const std::size_t D = 2048, T = 3, H = 2;
    const std::vector<std::int64_t> pos{0, 77, 4099};
    const auto inv = posenc_test::closed_form_inv_freq(10000.0, D);
    const double a = 1.25;
    std::size_t checked = 0;
    for (bool inter : {false, true}) {
        const posenc::any_rotary rope(layout_of(inter), {.head_dim = D}, posenc::rope_frequencies{inv, a});
        const auto table = rope.table(4100);
        const auto x = random_floats(T * H * D, 17);
        const auto fwd = reference(x, D, D, inter, inv, pos, H, a), bwd = reference(x, D, D, inter, inv, pos, H, a, true);
        for (bool use_table : {false, true}) {
            auto y = x, z = x;
            if (use_table) {
                rope.apply(table, view(y, T, H, D), pos);
                rope.apply(table, view(z, T, H, D), pos, posenc::rotation::inverse);
            } else {
                rope.apply(view(y, T, H, D), pos);
                rope.apply(view(z, T, H, D), pos, posenc::rotation::inverse);
            }
            INFO("interleaved " << inter << " table " << use_table);
            CHECK(posenc_test::worst_pair_ulps(x, y, fwd, D, D, inter, a) <= 3.0);
            CHECK(posenc_test::worst_pair_ulps(x, z, bwd, D, D, inter, 1.0 / a) <= 4.0);
            ++checked;
        }
    }
    REQUIRE(checked == 4);
}

TEST_CASE("llama3 bands against HF's formula in double, for original lengths that put pairs next to each band edge",
          "[rope][llama3]") {
    // HF _compute_llama3_parameters: λ = 2π/θ; λ < L0/high keeps θ, λ > L0/low gives θ/s, in between
    // (1 − w)·θ/s + w·θ with w = (L0/λ − low)/(high − low).
    const double base = 500000, s = 8, low = 1, high = 4;
    const std::size_t d = 128;
    const auto theta = posenc_test::closed_form_inv_freq(base, d);
    std::size_t compared = 0, kept = 0, divided = 0, smooth = 0;
    for (std::int64_t L0 = 1000; L0 <= 20000; L0 += 37) {
        const auto f = posenc::llama3{.base = base, .factor = s, .low_freq_factor = low, .high_freq_factor = high,
                                      .original_max_position = L0}
                           .frequencies(d);
        REQUIRE(f.inv_freq.size() == d / 2);
        for (std::size_t i = 0; i < d / 2; ++i) {
            const double lambda = 2 * 3.14159265358979323846 / theta[i], L = static_cast<double>(L0);
            double want;
            if (lambda < L / high) {
                want = theta[i];
                ++kept;
            } else if (lambda > L / low) {
                want = theta[i] / s;
                ++divided;
            } else {
                const double w = (L / lambda - low) / (high - low);
                want = (1 - w) * theta[i] / s + w * theta[i];
                ++smooth;
            }
            INFO("L0 " << L0 << " pair " << i << " wavelength " << lambda);
            CHECK(std::abs(f.inv_freq[i] - want) <= 1e-13 * want);
            ++compared;
        }
    }
    REQUIRE(compared == 514 * 64);
    CHECK(kept > 0);
    CHECK(divided > 0);
    CHECK(smooth > 0);
}

TEST_CASE("yarn ramp against HF's _compute_yarn_parameters in double, across its floor, ceil and clamps", "[rope][yarn]") {
    // correction_dim(n) = d·ln(L0/(2π·n)) / (2 ln base); low/high from beta_fast/beta_slow, floored/ceiled
    // when truncating, clamped to [0, d − 1]; ramp w = clamp((i − low)/(high − low), 0, 1) over i < d/2
    // (high += 0.001 when equal); θ' = w·θ/s + (1 − w)·θ with θ = 1/base^(2i/d).
    const double pi = 3.14159265358979323846, s = 4;
    std::size_t compared = 0, low_clamped = 0, high_clamped = 0, high_above_half = 0, blended = 0;
    for (std::size_t d : {16u, 32u, 64u, 128u})
        for (double base : {100.0, 10000.0, 500000.0})
            for (std::int64_t L0 : {128, 4096, 65536, 1'000'000})
                for (bool truncate : {true, false}) {
                    posenc::yarn y{.base = base, .factor = s, .original_max_position = L0};
                    y.truncate = truncate;
                    const auto f = y.frequencies(d);
                    const double dd = static_cast<double>(d), L = static_cast<double>(L0);
                    auto corr = [&](double n) { return dd * std::log(L / (n * 2 * pi)) / (2 * std::log(base)); };
                    double low = corr(32), high = corr(1);
                    if (truncate) {
                        low = std::floor(low);
                        high = std::ceil(high);
                    }
                    low_clamped += low < 0;
                    high_clamped += high > dd - 1;
                    low = std::max(low, 0.0);
                    high = std::min(high, dd - 1);
                    high_above_half += high > dd / 2 - 1;
                    if (low == high) high += 0.001;
                    REQUIRE(f.inv_freq.size() == d / 2);
                    for (std::size_t i = 0; i < d / 2; ++i) {
                        const double w = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
                        const double theta = 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / dd);
                        const double want = w * theta / s + (1 - w) * theta;
                        blended += w > 0 && w < 1;
                        INFO("d " << d << " base " << base << " L0 " << L0 << " truncate " << truncate << " pair " << i);
                        CHECK(std::abs(f.inv_freq[i] - want) <= 1e-13 * want);
                        ++compared;
                    }
                }
    REQUIRE(compared == 3 * 4 * 2 * (8 + 16 + 32 + 64));
    CHECK(low_clamped > 0);
    CHECK(high_clamped > 0);
    CHECK(high_above_half > 0);
    CHECK(blended > 0);
}
