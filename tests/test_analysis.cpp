// posenc::analysis against closed forms, direct sums written here, and the published numbers of
// Men et al. 2024 (RoPE base bound), RoFormer §3.4.3 (decay), the ALiBi-via-RoPE article's example
// (m ≈ 0.707, head_dim 64, phase 0.1 over 65536 → θ ≈ 1.5e-6, N ≈ 3.7e6) and the YaRN paper's
// extrapolation argument.
#include <cmath>
#include <complex>
#include <cstdint>
#include <numbers>
#include <vector>

#include <posenc/analysis/alibi_rope.hpp>
#include <posenc/analysis/base_bound.hpp>
#include <posenc/analysis/decay.hpp>
#include <posenc/analysis/extrapolation.hpp>
#include <posenc/bias/alibi.hpp>
#include <posenc/rope/default.hpp>
#include <posenc/rope/linear.hpp>
#include <posenc/rope/llama3.hpp>
#include <posenc/rope/ntk_aware.hpp>
#include <posenc/rope/rotary.hpp>
#include <posenc/rope/yarn.hpp>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

namespace an = posenc::analysis;

namespace {

std::vector<double> default_freq(double base, std::size_t d) { return posenc::default_rope{base}.frequencies(d).inv_freq; }

// The definition, evaluated directly: first m with Σ cos(m θᵢ) < 0, minus one; `limit` if none.
std::int64_t brute_force_length(const std::vector<double>& inv, std::int64_t limit) {
    for (std::int64_t m = 0; m <= limit; ++m) {
        double b = 0.0;
        for (const double t : inv) b += std::cos(static_cast<double>(m) * t);
        if (b < 0.0) return m - 1;
    }
    return limit;
}

}  // namespace

TEST_CASE("analysis: B(m, theta) by the recurrence equals the direct sum up to 1.1M", "[analysis][base_bound]") {
    std::size_t compared = 0;
    for (const double base : {1e4, 5e8}) {
        const auto inv = default_freq(base, 128);
        const std::int64_t m_max = 1'100'000;
        const auto curve = an::cos_sum_curve(inv, m_max);
        REQUIRE(curve.size() == static_cast<std::size_t>(m_max) + 1);
        for (std::int64_t m = 0; m <= m_max; m += (m % 128 == 127 ? 1 : 997)) {  // also block edges
            double direct = 0.0;
            for (const double t : inv) direct += std::cos(static_cast<double>(m) * t);
            // Both sides round the angle (m·θ vs m₀·θ + j steps): ulp(1.1e6 rad) ≈ 2.3e-10 per pair.
            REQUIRE(std::abs(curve[static_cast<std::size_t>(m)] - direct) < 1e-8);
            ++compared;
        }
        REQUIRE(curve[0] == 64.0);
    }
    REQUIRE(compared > 2000);
}

TEST_CASE("analysis: context length bound, closed forms for one and two pairs", "[analysis][base_bound]") {
    // One pair: cos(mθ) < 0 first for m > π/(2θ).
    const std::vector<double> one{0.001};
    REQUIRE(an::context_length_bound(one, 100000) == static_cast<std::int64_t>(std::floor(std::numbers::pi / 2 / 0.001)));
    // Two pairs: cos am + cos bm = 2 cos((a+b)m/2) cos((a−b)m/2), first negative for m > π/(a+b).
    const std::vector<double> two{0.003, 0.001};
    REQUIRE(an::context_length_bound(two, 100000) == static_cast<std::int64_t>(std::floor(std::numbers::pi / 0.004)));
    // The limit caps the scan.
    REQUIRE(an::context_length_bound(one, 1000) == 1000);
}

TEST_CASE("analysis: context length bound equals the direct definition (head_dim 128)", "[analysis][base_bound]") {
    std::size_t compared = 0;
    for (const double base : {4.3e3, 1e4, 1.6e4, 2.7e4, 2.9e4, 2.95e4, 3.0e4, 3.96e4, 8.4e4}) {
        const auto inv = default_freq(base, 128);
        REQUIRE(an::context_length_bound(inv, 20000) == brute_force_length(inv, 20000));
        ++compared;
    }
    REQUIRE(compared == 9);
}

TEST_CASE("analysis: L_theta is not monotone in the base (d = 128, 4096 tokens)", "[analysis][base_bound]") {
    REQUIRE(brute_force_length(default_freq(2.9e4, 128), 8192) == 4142);
    std::size_t failing = 0;
    for (int k = 291; k <= 392; ++k) {  // 2.91e4 .. 3.92e4 in steps of 100 all fail
        REQUIRE(an::context_length_bound(default_freq(k * 100.0, 128), 4096) < 4096);
        ++failing;
    }
    REQUIRE(failing == 102);
    REQUIRE(brute_force_length(default_freq(3.93e4, 128), 8192) == 4122);  // and 3.93e4 qualifies again
}

TEST_CASE("analysis: smallest base on the 2-digit grid vs the paper's Table (head_dim 128)", "[analysis][base_bound]") {
    // Rows where posenc's first qualifying base equals the paper's published value.
    struct row {
        std::int64_t target;
        double base;
        double grid_below;
    };
    std::size_t compared = 0;
    for (const row r : {row{1024, 4.3e3, 4.2e3}, row{2048, 1.6e4, 1.5e4}, row{8192, 8.4e4, 8.3e4}}) {
        const auto found = an::smallest_base_for_length(128, r.target);
        REQUIRE(found.base == Approx(r.base).epsilon(1e-12));
        REQUIRE(found.context_length == r.target);
        // Minimal on the grid: the grid point below fails (checked by the direct definition).
        REQUIRE(brute_force_length(default_freq(r.grid_below, 128), r.target) < r.target);
        ++compared;
    }
    REQUIRE(compared == 3);  // 64k (2.1e6) also agrees: examples/rope_base_bound prints it
    // 4k: the paper prints 2.7e4, whose L_θ is 4078 < 4096; posenc's grid gives 2.9e4.
    REQUIRE(brute_force_length(default_freq(2.7e4, 128), 4096) == 4078);
    REQUIRE(an::smallest_base_for_length(128, 4096).base == Approx(2.9e4).epsilon(1e-12));
}

TEST_CASE("analysis: base search equals a plain walk over the grid", "[analysis][base_bound]") {
    // The search against a plain walk over the grid written here (every grid point scanned).
    std::size_t compared = 0;
    for (const int digits : {2, 3})
        for (const std::int64_t target : {1500, 3000, 6000, 12000, 20000}) {
            if (digits == 3 && target > 3000) continue;  // 10x the grid points: keep sanitizer runs short
            double expected = 0;
            // The grid k·10^(e − digits + 1), k with `digits` digits, from 10 upward.
            for (int e = 1; expected == 0 && e < 9; ++e)
                for (double k = std::pow(10.0, digits - 1); k < std::pow(10.0, digits); ++k) {
                    const double b = k * std::pow(10.0, e - digits + 1);
                    if (an::context_length_bound(default_freq(b, 128), target) >= target) {
                        expected = b;
                        break;
                    }
                }
            REQUIRE(an::smallest_base_for_length(128, target, {.significant_digits = digits}).base ==
                    Approx(expected).epsilon(1e-12));
            ++compared;
        }
    REQUIRE(compared == 7);
}

TEST_CASE("analysis: base search grid and errors", "[analysis][base_bound]") {
    // Starting above the answer returns the start when it qualifies.
    const auto r = an::smallest_base_for_length(128, 1024, {.from = 1e5});
    REQUIRE(r.base == Approx(1e5).epsilon(1e-12));
    REQUIRE(r.bases_tried == 1);
    // The grid itself: 90 two-digit mantissas per decade, 1.0e1 .. 9.9e1 then 1.0e2 .. 1.0e3.
    const auto none = an::smallest_base_for_length(128, 1'000'000, {.from = 10, .to = 1e3});
    REQUIRE(none.base == 0.0);
    REQUIRE(none.bases_tried == 181);
    REQUIRE(an::smallest_base_for_length(128, 1'000'000, {.from = 9.95, .to = 1e3}).bases_tried == 181);  // rounds up to 1.0e1
    REQUIRE(an::smallest_base_for_length(128, 1'000'000, {.from = 10, .to = 1e3, .significant_digits = 3}).bases_tried == 1801);
    // A grid that ends before any qualifying base reports none.
    REQUIRE(an::smallest_base_for_length(128, 1024, {.from = 10, .to = 4.2e3}).base == 0.0);
    posenc_test::expect_config_error([] { (void)an::smallest_base_for_length(127, 1024); }, "head_dim", "127");
    posenc_test::expect_config_error([] { (void)an::smallest_base_for_length(128, 0); }, "target", "0");
    posenc_test::expect_config_error([] { (void)an::smallest_base_for_length(128, 10, {.from = 1.0}); }, "from", "1");
    posenc_test::expect_config_error([] { (void)an::cos_sum_curve(std::vector<double>{}, 3); }, "inv_freq.size", "0");
    posenc_test::expect_config_error([] { (void)an::context_length_bound(std::vector<double>{NAN}, 3); }, "inv_freq",
                                     "nan");
}

TEST_CASE("analysis: RoFormer relative upper bound, closed forms", "[analysis][decay]") {
    // r = 0: |S_j| = j, so the bound is (n + 1)/2 for n pairs.
    REQUIRE(an::relative_upper_bound(default_freq(1e4, 128), 0.0) == Approx(32.5).epsilon(1e-14));
    // Two pairs: (|e^{irθ0}| + |e^{irθ0} + e^{irθ1}|)/2 = (1 + 2|cos(r(θ0 − θ1)/2)|)/2.
    const auto inv = default_freq(1e4, 4);
    std::size_t compared = 0;
    for (double r = 0; r <= 5000; r += 7.5) {
        const double expected = (1.0 + 2.0 * std::abs(std::cos(r * (inv[0] - inv[1]) / 2.0))) / 2.0;
        REQUIRE(an::relative_upper_bound(inv, r) == Approx(expected).margin(1e-12));
        ++compared;
    }
    REQUIRE(compared == 667);
}

TEST_CASE("analysis: decay curve under PI is the default curve stretched by the factor", "[analysis][decay]") {
    const auto base = default_freq(1e4, 128);
    const auto pi = posenc::linear{.base = 1e4, .factor = 4}.frequencies(128).inv_freq;
    std::vector<double> r, r_over_s;
    for (double x = 0; x <= 20000; x += 37) {
        r.push_back(x);
        r_over_s.push_back(x / 4);
    }
    const auto c_pi = an::decay_curve(pi, r), c_def = an::decay_curve(base, r_over_s);
    REQUIRE(c_pi.size() == r.size());
    std::size_t compared = 0;
    for (std::size_t i = 0; i < r.size(); ++i, ++compared) REQUIRE(c_pi[i] == Approx(c_def[i]).margin(1e-9));
    REQUIRE(compared == 541);
    // The bound decays (RoFormer Fig. 2): mean over distances 1000..2000 is far below the start.
    double far = 0;
    for (int x = 1000; x < 2000; ++x) far += an::relative_upper_bound(base, x) / 1000.0;
    REQUIRE(far < 0.5 * an::relative_upper_bound(base, 1.0));
}

TEST_CASE("analysis: ALiBi via one RoPE pair reproduces the article's numbers", "[analysis][alibi_rope]") {
    const double m = posenc::alibi_slopes(16)[0];  // BLOOM-560m's steepest head: 2^-0.5
    REQUIRE(m == Approx(0.70710678118654752).epsilon(1e-15));
    const auto p = an::alibi_rope_for_window(m, 64, 65536, 0.1);
    REQUIRE(p.theta == Approx(0.1 / 65536.0).epsilon(1e-15));
    REQUIRE(std::abs(p.theta - 1.5e-6) / 1.5e-6 < 0.02);  // article: θ ≈ 1.5e-6
    REQUIRE(p.n == Approx(m * 8.0 / (0.1 / 65536.0)).epsilon(1e-14));
    REQUIRE(std::abs(p.n - 3.7e6) / 3.7e6 < 0.01);  // article: N ≈ 3.7e6
    // Small-angle limit: −(N/√hd)·sin(θd) ≈ −m·d.
    REQUIRE(an::emulated_alibi_bias(p, 64, 1.0) == Approx(-m).epsilon(1e-12));
    // Worst case over the window: (m/θ)(φ − sin φ), ≈ m·W·φ²/6.
    const long double phi = 0.1L;
    const long double expected = (static_cast<long double>(m) / (phi / 65536.0L)) * (phi - std::sin(phi));
    const double dev = an::alibi_rope_max_deviation(p, m, 64, 65536);
    REQUIRE(dev == Approx(static_cast<double>(expected)).epsilon(1e-9));
    REQUIRE(dev == Approx(m * 65536 * 0.01 / 6).epsilon(1e-3));
    // A phase chosen for a tolerance gives exactly that worst-case deviation.
    const double phase = an::alibi_rope_phase_for_tolerance(m, 65536, 0.5);
    const double got = an::alibi_rope_max_deviation(an::alibi_rope_for_window(m, 64, 65536, phase), m, 64, 65536);
    REQUIRE(got == Approx(0.5).epsilon(1e-6));
    posenc_test::expect_config_error([&] { (void)an::alibi_rope_for_window(m, 64, 65536, 2.0); }, "max_phase", "2");
    posenc_test::expect_config_error([&] { (void)an::alibi_rope_for_window(-1, 64, 65536, 0.1); }, "slope", "-1");
}

TEST_CASE("analysis: ALiBi via RoPE accepts the largest phase pi/2", "[analysis][alibi_rope]") {
    // alibi_rope.hpp: max_phase in (0, pi/2], where sin is monotone over the window. pi/2 itself is allowed, and it
    // is what alibi_rope_phase_for_tolerance returns when even the largest phase meets the tolerance.
    const double m = 0.5, half_pi = std::numbers::pi / 2;
    const std::int64_t W = 1024;
    CHECK_NOTHROW(an::alibi_rope_for_window(m, 64, W, half_pi));
    const auto p = an::alibi_rope_for_window(m, 64, W, half_pi);
    CHECK(p.theta == Approx(half_pi / 1024.0).epsilon(1e-15));
    CHECK(p.n == Approx(m * 8.0 / (half_pi / 1024.0)).epsilon(1e-14));
    // Worst deviation at d = W: (m/theta)·(phi − sin phi) = m·W·(1 − 2/pi).
    CHECK(an::alibi_rope_max_deviation(p, m, 64, W) == Approx(m * 1024.0 * (1.0 - 2.0 / std::numbers::pi)).epsilon(1e-12));
    const double loose = an::alibi_rope_phase_for_tolerance(m, W, 1e6);
    CHECK(loose == half_pi);
    CHECK_NOTHROW(an::alibi_rope_for_window(m, 64, W, loose));
}

TEST_CASE("analysis: max deviation of a pair with a model's own frequency", "[analysis][alibi_rope]") {
    // N chosen for another θ: the error m·d − (N/√hd)·sin(θd) has an interior extremum.
    const double m = 0.5, hd = 64;
    const an::alibi_rope_pair p{.theta = 1e-4, .n = 1.2 * m * 8 / 1e-4};
    double worst = 0;
    for (int d = 0; d <= 10000; ++d) worst = posenc_test::worst_of(worst, std::abs(an::emulated_alibi_bias(p, 64, d) + m * d));
    REQUIRE(an::alibi_rope_max_deviation(p, m, static_cast<std::size_t>(hd), 10000) == Approx(worst).epsilon(1e-6));
}

namespace {

// Scaled scores (R_i q)·(R_j k)/√hd of q = (−N, 0) at query_pos against k = (0, 1) at each key
// position, rotated in float by posenc's rotary kernel.
std::vector<double> emulated_scores_f32(const an::alibi_rope_pair& p, std::size_t head_dim, std::int64_t query_pos,
                                        const std::vector<std::int64_t>& keys) {
    const posenc::rotary<posenc::interleaved> rope({.head_dim = 2}, posenc::rope_frequencies{{p.theta}, 1.0});
    std::vector<float> q{static_cast<float>(-p.n), 0.0f};
    std::vector<float> k;
    for (std::size_t j = 0; j < keys.size(); ++j) k.insert(k.end(), {0.0f, 1.0f});
    const std::vector<std::int64_t> qpos{query_pos};
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 1, 2}), qpos);
    rope.apply(posenc::heads_view<float>(std::span<float>(k), {keys.size(), 1, 2}), keys);
    std::vector<double> s(keys.size());
    for (std::size_t j = 0; j < keys.size(); ++j) {
        const float dot = q[0] * k[2 * j] + q[1] * k[2 * j + 1];
        s[j] = static_cast<double>(dot / std::sqrt(static_cast<float>(head_dim)));
    }
    return s;
}

}  // namespace

TEST_CASE("analysis: ALiBi via RoPE through posenc's rotary kernel, float32 error", "[analysis][alibi_rope]") {
    const double m = posenc::alibi_slopes(16)[0];
    const std::int64_t window = 4096;
    std::size_t compared = 0;
    for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{1'000'000}}) {
        const auto p = an::alibi_rope_for_window(m, 64, window, 0.1);
        std::vector<std::int64_t> keys;
        for (std::int64_t j = 0; j <= window; ++j) keys.push_back(offset + j);
        const std::int64_t query = offset + window;
        const auto s = emulated_scores_f32(p, 64, query, keys);
        // Float32 rounding of cos/sin and of the two products: |error| ≤ 8·2^-24·N/√hd.
        const double float_bound = 8.0 * std::ldexp(1.0, -24) * p.n / 8.0;
        const double approx = an::alibi_rope_max_deviation(p, m, 64, window);
        for (std::size_t j = 0; j < keys.size(); ++j) {
            const double d = static_cast<double>(query - keys[j]);
            REQUIRE(std::abs(s[j] - an::emulated_alibi_bias(p, 64, d)) <= float_bound);
            REQUIRE(std::abs(s[j] + m * d) <= approx + float_bound);
            ++compared;
        }
    }
    REQUIRE(compared == 2 * 4097);
}

TEST_CASE("analysis: ALiBi via RoPE in float32 breaks far from position 0", "[analysis][alibi_rope]") {
    // The score is N·(cᵢsⱼ − sᵢcⱼ)/√hd with float32 cos/sin (relative error 2^-24 each), so the
    // float error is ~(m/θ)·2^-24·(|sᵢ| + |sⱼ|) ≈ 2^-23·m·min(P, 1/θ) at absolute position P: it
    // grows with the position, not the distance. At P = 1e9 with φ = 1e-3 (1/θ = 6.6e7) it
    // exceeds one score unit (3.6 measured) while the approximation itself is within 0.01.
    const double m = posenc::alibi_slopes(16)[0];
    const auto p = an::alibi_rope_for_window(m, 64, 65536, 1e-3);
    std::vector<std::int64_t> keys;
    const std::int64_t offset = 1'000'000'000;
    for (std::int64_t j = 0; j <= 65536; j += 64) keys.push_back(offset + j);
    const auto s = emulated_scores_f32(p, 64, offset + 65536, keys);
    double worst = 0;
    for (std::size_t j = 0; j < keys.size(); ++j)
        worst = posenc_test::worst_of(worst, std::abs(s[j] + m * static_cast<double>(offset + 65536 - keys[j])));
    REQUIRE(an::alibi_rope_max_deviation(p, m, 64, 65536) < 0.01);  // the approximation is fine...
    REQUIRE(worst > 1.0);                                            // ...float32 is not
}

TEST_CASE("analysis: rotation angles, which pairs leave the trained range", "[analysis][extrapolation]") {
    const std::size_t d = 128;
    const auto trained = default_freq(1e4, d);
    // Plain extrapolation 4096 → 32768: pairs without a full turn in training, θᵢ < 2π/4096, i.e.
    // i > 64·ln(4096/2π)/ln(1e4) = 45.03: pairs 46..63.
    const auto plain = an::rotation_angles(trained, trained, 4096, 32768);
    REQUIRE(an::out_of_range_pairs(plain) == 18);
    REQUIRE(!plain[45].out_of_range);
    REQUIRE(plain[46].out_of_range);
    REQUIRE(plain[0].test_angle == Approx(32768.0).epsilon(1e-15));
    // PI ×8: everything back in range, every pair slowed by 8 (also the short wavelengths).
    const auto pi = an::rotation_angles(trained, posenc::linear{.base = 1e4, .factor = 8}.frequencies(d).inv_freq,
                                        4096, 32768);
    REQUIRE(an::out_of_range_pairs(pi) == 0);
    std::size_t compared = 0;
    for (const auto& p : pi) {
        REQUIRE(p.slowdown == Approx(8.0).epsilon(1e-14));
        ++compared;
    }
    REQUIRE(compared == 64);
    // PI ×5 and ×3: L_test·θ/s equals L_train·θ only up to rounding, which must not count as leaving.
    std::size_t factors = 0;
    for (const double s : {3.0, 5.0}) {
        const auto a = an::rotation_angles(trained, posenc::linear{.base = 1e4, .factor = s}.frequencies(d).inv_freq,
                                           4096, static_cast<std::int64_t>(4096 * s));
        REQUIRE(an::out_of_range_pairs(a) == 0);
        ++factors;
    }
    REQUIRE(factors == 2);
    // NTK-aware ×8: only the last pair is exactly interpolated (θ/s); the other pairs without a full
    // turn are slowed by less than 8 and leave the range.
    const auto ntk = an::rotation_angles(trained, posenc::ntk_aware{.base = 1e4, .factor = 8}.frequencies(d).inv_freq,
                                         4096, 32768);
    REQUIRE(ntk[63].slowdown == Approx(8.0).epsilon(1e-12));
    REQUIRE(an::out_of_range_pairs(ntk) == 17);
    // YaRN ×8 (HF ramp, β 32/1): out of range exactly where w < 1 and no full turn, since
    // L_test·θ' / (L_train·θ) = w + s·(1 − w).
    const posenc::yarn y{.base = 1e4, .factor = 8, .original_max_position = 4096};
    const auto w = y.interpolation(d);
    const auto ya = an::rotation_angles(trained, y.frequencies(d).inv_freq, 4096, 32768);
    std::size_t expected = 0;
    for (std::size_t i = 0; i < w.size(); ++i) expected += (w[i] < 1.0 && 4096 * trained[i] < 2 * std::numbers::pi);
    REQUIRE(an::out_of_range_pairs(ya) == expected);
    // Llama-3.1 (low_freq_factor 1): every pair without a full turn over L₀ is fully interpolated.
    const auto l3 = an::rotation_angles(
        default_freq(5e5, d),
        posenc::llama3{.base = 5e5, .factor = 8, .original_max_position = 8192}.frequencies(d).inv_freq, 8192, 65536);
    REQUIRE(an::out_of_range_pairs(l3) == 0);
    posenc_test::expect_config_error([&] { (void)an::rotation_angles(trained, std::vector<double>(3), 1, 1); }, "scaled.size", "3");
}
