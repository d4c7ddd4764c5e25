// The attention kernel's online-softmax step (attn_kernels::softmax) on every architecture this CPU
// runs, called directly on score tiles.
//
// Expected values: (1) the same rows one at a time, bit for bit — the step takes many rows as the
// lanes of one vector and few rows one by one, and promises a row the same bits either way, a NaN's
// sign and payload excepted (edge inputs included: −∞, +∞, ±0, NaN, rows that see nothing, partial
// tiles, soft-capping); (2) the contract of functors.hpp in exact terms: a row that has seen nothing
// keeps m = −∞, l = 0 and gets p = 0; an unchanged maximum (+∞ too) rescales by exactly 1; a running
// maximum survives a later tile that is far below it; (3) p, l and the rescaled accumulator against
// exp computed in double here; (4) NaN and +∞ logits in IEEE terms (a NaN reaches l, +∞ logits share
// the weight); (5) the rescale factors handed to the pv step (the kernel's form) against the rescale in
// place, through the pv step, bit for bit.
#include <posenc/attention/attention.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

namespace softmax_step_test {

constexpr std::size_t BK = posenc::simd::attn_key_tile;
constexpr float inf = std::numeric_limits<float>::infinity();

/// One step's inputs and outputs: scores [rows][BK], state m, l, acc [rows][stride].
struct tile {
    std::size_t rows, keys, dv, stride;
    float softcap;
    posenc::detail::attn_floats s, acc;
    std::vector<float> m, l;
    tile(std::size_t rows_, std::size_t keys_, std::size_t dv_, float softcap_)
        : rows(rows_), keys(keys_), dv(dv_), stride((dv_ + 15) / 16 * 16), softcap(softcap_), s(rows_ * BK),
          acc(rows_ * stride), m(rows_), l(rows_) {}
    void run(const posenc::simd::attn_kernels& ker) {
        ker.softmax({s.data(), rows, keys, m.data(), l.data(), acc.data(), stride, dv, softcap});
    }
    /// Row r alone, as a one-row step (the few-row path).
    tile row(std::size_t r) const {
        tile t(1, keys, dv, softcap);
        std::copy_n(s.begin() + static_cast<std::ptrdiff_t>(r * BK), BK, t.s.begin());
        std::copy_n(acc.begin() + static_cast<std::ptrdiff_t>(r * stride), stride, t.acc.begin());
        t.m[0] = m[r];
        t.l[0] = l[r];
        return t;
    }
};

std::uint32_t bits(float x) {
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}
/// The same bits, or both NaN (a NaN's sign and payload follow the operand order the compiler chose
/// for a commutative operation: not part of the promise).
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

/// A random tile: each row a kind of edge case or plain random scores, and a state that is fresh
/// (m = −∞) or carried (m at or away from the row's maximum).
tile random_tile(std::mt19937& rng, std::size_t rows, bool with_nan) {
    std::uniform_int_distribution<std::size_t> keys_d(1, BK), dv_d(1, 40);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    tile t(rows, rng() % 3 == 0 ? keys_d(rng) : BK, dv_d(rng), rng() % 4 == 0 ? 3.0f : 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
        float* s = t.s.data() + r * BK;
        const unsigned kind = rng() % 8;
        for (std::size_t j = 0; j < BK; ++j) {
            float x = u(rng);
            if (kind == 1) x = -inf;                                       // sees nothing
            if (kind == 2 && rng() % 2) x = -inf;                          // partly masked
            if (kind == 3) x = rng() % 2 ? 0.0f : -0.0f;                   // signed zeros
            if (kind == 4 && rng() % 16 == 0) x = inf;                     // +∞ logits
            if (kind == 5 && with_nan && rng() % 16 == 0) x = std::nanf("");
            if (kind == 6) x *= 30.0f;                                     // beyond exp's range
            if (kind == 7 && with_nan) x = rng() % 8 == 0 ? std::nanf("") : -inf;  // NaN logits only
            s[j] = x;
        }
        for (std::size_t d = 0; d < t.stride; ++d) t.acc[r * t.stride + d] = u(rng);
        const unsigned state = rng() % 3;
        if (state == 0 || kind == 1) {
            t.m[r] = -inf, t.l[r] = 0.0f;
            std::fill_n(t.acc.begin() + static_cast<std::ptrdiff_t>(r * t.stride), t.stride, 0.0f);
        } else {
            t.m[r] = state == 1 ? u(rng) : 4.0f;  // 4: at or above every plain score
            t.l[r] = 1.0f + std::abs(u(rng));
        }
    }
    return t;
}

template <class Arch>
void check_arch(std::size_t& archs) {
    if (!posenc::simd::compat::cpu_supports<Arch>()) return;
    ++archs;
    const auto ker = posenc::simd::attention_kernels_for<Arch>();
    INFO("architecture " << ker.arch);
    std::mt19937 rng(20261204);

    // (1) many rows at once = each row alone, bit for bit, for every row count up to 21 (16 + 5).
    std::size_t compared = 0;
    for (int trial = 0; trial < 400; ++trial) {
        const std::size_t rows = 1 + static_cast<std::size_t>(trial) % 21;
        tile all = random_tile(rng, rows, true);
        std::vector<tile> alone;
        for (std::size_t r = 0; r < rows; ++r) alone.push_back(all.row(r));
        all.run(ker);
        for (std::size_t r = 0; r < rows; ++r) {
            tile& one = alone[r];
            one.run(ker);
            INFO("trial " << trial << ", rows " << rows << ", row " << r << ", keys " << all.keys << ", softcap " << all.softcap);
            REQUIRE(same(one.m[0], all.m[r]));
            REQUIRE(same(one.l[0], all.l[r]));
            for (std::size_t j = 0; j < BK; ++j) REQUIRE(same(one.s[j], all.s[r * BK + j]));
            for (std::size_t d = 0; d < all.dv; ++d) REQUIRE(same(one.acc[d], all.acc[r * all.stride + d]));
            ++compared;
        }
    }
    CHECK(compared > 4000);

    // (5) the factors form (attn_softmax_args::alpha): the same m, l and p, acc left as it was, and the
    // pv step applying the factors as it loads acc (attn_pv_args::acc_scale) gives the bits of the
    // in-place rescale followed by a plain pv step. The factors start as NaN: a row must get its own
    // (one that sees nothing too), not keep an earlier tile's.
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t rows = 1 + static_cast<std::size_t>(trial) % 21;
        tile in_place = random_tile(rng, rows, true);
        tile factors = in_place;
        const posenc::detail::attn_floats acc_before = in_place.acc;
        std::vector<float> alpha(rows, std::nanf(""));
        in_place.run(ker);
        ker.softmax({factors.s.data(), rows, factors.keys, factors.m.data(), factors.l.data(), factors.acc.data(),
                     factors.stride, factors.dv, factors.softcap, alpha.data()});
        INFO("trial " << trial << ", rows " << rows << ", keys " << in_place.keys << ", dv " << in_place.dv);
        for (std::size_t r = 0; r < rows; ++r) {
            REQUIRE(same(factors.m[r], in_place.m[r]));
            REQUIRE(same(factors.l[r], in_place.l[r]));
            for (std::size_t j = 0; j < BK; ++j) REQUIRE(same(factors.s[r * BK + j], in_place.s[r * BK + j]));
        }
        for (std::size_t i = 0; i < acc_before.size(); ++i) REQUIRE(bits(factors.acc[i]) == bits(acc_before[i]));
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        std::vector<float> v(in_place.keys * in_place.dv);
        for (float& x : v) x = u(rng);
        const std::size_t keys = in_place.keys, dv = in_place.dv, stride = in_place.stride;
        ker.pv({in_place.s.data(), rows, keys, v.data(), dv, dv, in_place.acc.data(), stride, posenc::dtype::f32});
        ker.pv({factors.s.data(), rows, keys, v.data(), dv, dv, factors.acc.data(), stride, posenc::dtype::f32, false, {},
                alpha.data()});
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t d = 0; d < dv; ++d) REQUIRE(same(factors.acc[r * stride + d], in_place.acc[r * stride + d]));
    }

    // (2) the contract: rows 0-2 (nothing seen, a standing maximum, a standing +∞ maximum) among 3
    // rows and among 19 (one path or the other, depending on the vector width).
    for (const std::size_t rows : {std::size_t{3}, std::size_t{19}}) {
        INFO("rows " << rows);
        tile t(rows, 40, 20, 0.0f);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = 0; j < BK; ++j) t.s[r * BK + j] = 0.25f * static_cast<float>((j * 7 + r) % 13) - 1.0f;
        for (std::size_t d = 0; d < t.acc.size(); ++d) t.acc[d] = 0.5f + 0.01f * static_cast<float>(d % 50);
        const std::size_t plus_inf = 2;
        std::fill_n(t.m.begin(), rows, 5.0f);
        std::fill_n(t.l.begin(), rows, 2.0f);
        // row 0: sees nothing so far and nothing now
        std::fill_n(t.s.begin(), BK, -inf);
        t.m[0] = -inf, t.l[0] = 0.0f;
        std::fill_n(t.acc.begin(), t.stride, 0.0f);
        // row 2: a +∞ logit under a maximum already +∞
        t.s[plus_inf * BK + 3] = inf;
        t.m[plus_inf] = inf;
        const posenc::detail::attn_floats acc_before = t.acc;
        const std::vector<float> s_before(t.s.begin(), t.s.end());
        t.run(ker);
        for (std::size_t j = 0; j < BK; ++j) REQUIRE(bits(t.s[j]) == bits(0.0f));
        CHECK(t.m[0] == -inf);
        CHECK(bits(t.l[0]) == bits(0.0f));
        CHECK(t.m[plus_inf] == inf);
        for (std::size_t d = 0; d < t.dv; ++d) REQUIRE(t.acc[plus_inf * t.stride + d] == acc_before[plus_inf * t.stride + d]);
        {  // row 1: its maximum 5 stands: α exactly 1, p = e^{s − 5} to float rounding
            const std::size_t r = 1;
            CHECK(t.m[r] == 5.0f);
            double sum = 0.0;
            for (std::size_t j = 0; j < BK; ++j) {
                const double p = j < t.keys ? std::exp(static_cast<double>(s_before[r * BK + j]) - 5.0) : 0.0;
                REQUIRE(std::abs(t.s[r * BK + j] - p) <= 4e-7 * p);
                sum += p;
            }
            CHECK(std::abs(t.l[r] - (2.0 + sum)) <= 1e-6 * (2.0 + sum));
            for (std::size_t d = 0; d < t.dv; ++d) REQUIRE(t.acc[r * t.stride + d] == acc_before[r * t.stride + d]);
        }
    }

    // (3) a new maximum rescales l and acc by e^{m_old − m_new}; a running maximum 100 above a later
    // tile survives it (p then underflows to 0 and l keeps its value).
    {
        tile t(3, BK, 16, 0.0f);
        for (std::size_t r = 0; r < 3; ++r)
            for (std::size_t j = 0; j < BK; ++j) t.s[r * BK + j] = static_cast<float>(j % 5) - 2.0f + static_cast<float>(r);
        std::fill(t.acc.begin(), t.acc.end(), 1.0f);
        t.m = {-1.0f, 100.0f, 2.5f};
        t.l = {3.0f, 1.0f, 1.5f};
        t.run(ker);
        const double max0 = 2.0, alpha0 = std::exp(-1.0 - max0), alpha2 = std::exp(2.5 - 4.0);
        CHECK(t.m[0] == 2.0f);
        CHECK(t.m[1] == 100.0f);
        CHECK(t.m[2] == 4.0f);
        double sum0 = 0.0;
        for (std::size_t j = 0; j < BK; ++j) sum0 += std::exp(static_cast<double>(j % 5) - 2.0 - max0);
        CHECK(std::abs(t.l[0] - (3.0 * alpha0 + sum0)) <= 1e-6 * (3.0 * alpha0 + sum0));
        CHECK(std::abs(t.acc[0] - alpha0) <= 4e-7 * alpha0);
        CHECK(std::abs(t.acc[2 * t.stride] - alpha2) <= 4e-7 * alpha2);
        CHECK(std::abs(t.l[1] - 1.0f) <= 1e-6f);  // e^{s − 100} ≤ e^{−97}: below float's range
        CHECK(t.acc[t.stride] == 1.0f);
    }

    // (4) non-finite logits, IEEE semantics (rows 0-4 among 5 and among 19, either path): a row of NaN
    // and −∞ only (m = NaN, p = NaN on the NaN key, 0 on the masked ones), a NaN beside finite
    // logits (l NaN, m finite), a standing NaN maximum (stays NaN, masked keys p = 0), +∞ logits
    // (p = 1 each, the others 0, α = 0 for the old state) and +∞ beside a NaN (l NaN).
    for (const std::size_t rows : {std::size_t{5}, std::size_t{19}}) {
        INFO("rows " << rows << " (non-finite)");
        tile t(rows, BK, 8, 0.0f);
        for (std::size_t i = 0; i < t.s.size(); ++i) t.s[i] = -inf;
        std::fill(t.acc.begin(), t.acc.end(), 1.0f);
        std::fill_n(t.m.begin(), rows, 1.0f);
        std::fill_n(t.l.begin(), rows, 2.0f);
        const float nan = std::nanf("");
        t.m[0] = -inf, t.l[0] = 0.0f;
        t.s[0 * BK + 9] = nan;
        for (std::size_t j = 0; j < 20; ++j) t.s[1 * BK + j] = 0.1f * static_cast<float>(j);
        t.s[1 * BK + 5] = nan;
        t.m[2] = nan;
        t.s[2 * BK + 4] = 0.5f;
        t.s[3 * BK + 7] = inf, t.s[3 * BK + 30] = inf, t.s[3 * BK + 8] = 3.0f;
        t.s[4 * BK + 7] = inf, t.s[4 * BK + 8] = nan;
        t.run(ker);
        CHECK(std::isnan(t.m[0]));
        CHECK(std::isnan(t.l[0]));
        CHECK(std::isnan(t.s[9]));
        for (std::size_t j = 0; j < BK; ++j)
            if (j != 9) REQUIRE(bits(t.s[j]) == bits(0.0f));
        CHECK(std::isnan(t.acc[0]));
        CHECK(std::isnan(t.l[1]));
        CHECK(std::isnan(t.s[1 * BK + 5]));  // (acc meets it in the pv step)
        CHECK(std::abs(t.s[1 * BK + 4] - std::exp(0.4 - 1.9)) <= 4e-7 * std::exp(0.4 - 1.9));
        CHECK(std::isnan(t.m[2]));
        CHECK(std::isnan(t.s[2 * BK + 4]));
        for (std::size_t j = 0; j < BK; ++j)
            if (j != 4) REQUIRE(bits(t.s[2 * BK + j]) == bits(0.0f));
        CHECK(t.m[3] == inf);
        CHECK(t.l[3] == 2.0f);  // 2·α + 1 + 1 with α = e^{1 − ∞} = 0
        for (std::size_t j = 0; j < BK; ++j) REQUIRE(t.s[3 * BK + j] == (j == 7 || j == 30 ? 1.0f : 0.0f));
        CHECK(t.acc[3 * t.stride] == 0.0f);
        CHECK(t.m[4] == inf);
        CHECK(std::isnan(t.l[4]));
        CHECK(std::isnan(t.s[4 * BK + 8]));
    }
}

template <class... Archs>
std::size_t check_all(xsimd::arch_list<Archs...>) {
    std::size_t archs = 0;
    (check_arch<Archs>(archs), ...);
    return archs;
}

}  // namespace softmax_step_test

TEST_CASE("attention softmax step: rows as lanes give each row's bits alone, the contract's edge cases, exp in double", "[attention][kernels]") {
    REQUIRE(softmax_step_test::check_all(posenc::simd::dispatch_archs{}) >= 1);
}
