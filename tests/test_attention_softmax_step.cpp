// The attention kernel's online-softmax step (attn_kernels::softmax) on every architecture this CPU
// runs, called directly on score tiles.
//
// Expected values: (1) the same rows one at a time, bit for bit — the step takes many rows as the
// lanes of one vector and few rows one by one, and promises a row the same bits either way, a NaN's
// sign and payload excepted (edge inputs included: −∞, +∞, ±0, NaN, rows that see nothing, partial
// tiles, soft-capping), and every row's rescale factor against e^{m_old − m_new} in double; (2) the
// contract of functors.hpp in exact terms: a row that has seen nothing keeps m = −∞, l = 0 and gets
// p = 0 and α = 1; an unchanged maximum (+∞ too) gives α exactly 1; a running maximum survives a later
// tile that is far below it; (3) p, l and α against exp computed in double here; (4) NaN and +∞ logits
// in IEEE terms (a NaN reaches l and α, +∞ logits share the weight); (5) the pv step applying the
// factors as it loads the accumulator against acc·α rounded once and a plain pv step, bit for bit;
// (6) soft-capped scores against c·tanh(s/c) in double.
#include <posenc/attention/attention.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"

namespace softmax_step_test {

constexpr std::size_t BK = posenc::simd::attn_key_tile;
constexpr float inf = std::numeric_limits<float>::infinity();

/// One step's inputs and outputs: scores [rows][BK], state m, l, rescale factors alpha. The factors
/// start as NaN: a row must get its own (one that sees nothing too), not keep an earlier tile's.
struct tile {
    std::size_t rows, keys;
    float softcap;
    posenc::detail::attn_floats s;
    std::vector<float> m, l, alpha;
    tile(std::size_t rows_, std::size_t keys_, float softcap_)
        : rows(rows_), keys(keys_), softcap(softcap_), s(rows_ * BK), m(rows_), l(rows_), alpha(rows_) {}
    void run(const posenc::simd::attn_kernels& ker) {
        std::fill(alpha.begin(), alpha.end(), std::nanf(""));
        ker.softmax({s.data(), rows, keys, m.data(), l.data(), softcap, alpha.data()});
    }
    /// Row r alone, as a one-row step (the few-row path).
    tile row(std::size_t r) const {
        tile t(1, keys, softcap);
        std::copy_n(s.begin() + static_cast<std::ptrdiff_t>(r * BK), BK, t.s.begin());
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

/// α = e^{m_old − m_new} in double: exactly 1 for an unchanged maximum (±∞ too), NaN after a NaN.
/// Within 4e-7 relative, plus what rounding the exponent to float may cost (≤ 2⁻²⁴|m_old − m_new|),
/// and absolutely within float's smallest normal (an α below it may flush to 0).
bool alpha_ok(float alpha, float m_old, float m_new) {
    if (m_old == m_new) return alpha == 1.0f;
    if (std::isnan(m_old) || std::isnan(m_new)) return std::isnan(alpha);
    const double d = static_cast<double>(m_old) - static_cast<double>(m_new), expected = std::exp(d);
    if (std::isinf(d)) return alpha == static_cast<float>(expected);  // e^{−∞} = 0 after a row that saw nothing
    return std::abs(alpha - expected) <= (4e-7 + 6e-8 * std::abs(d)) * expected + std::numeric_limits<float>::min();
}
/// A random tile: each row a kind of edge case or plain random scores, and a state that is fresh
/// (m = −∞) or carried (m at or away from the row's maximum).
tile random_tile(std::mt19937& rng, std::size_t rows, bool with_nan) {
    std::uniform_int_distribution<std::size_t> keys_d(1, BK);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    tile t(rows, rng() % 3 == 0 ? keys_d(rng) : BK, rng() % 4 == 0 ? 3.0f : 0.0f);
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
        const unsigned state = rng() % 3;
        if (state == 0 || kind == 1) {
            t.m[r] = -inf, t.l[r] = 0.0f;
        } else {
            t.m[r] = state == 1 ? u(rng) : 4.0f;  // 4: at or above every plain score
            t.l[r] = 1.0f + std::abs(u(rng));
        }
    }
    return t;
}

template <class Arch>
void check_arch(Arch) {
    const auto ker = posenc::simd::attention_kernels_for<Arch>();
    INFO("architecture " << ker.arch);
    std::mt19937 rng(20261204);

    // (1) many rows at once = each row alone, bit for bit, for every row count up to 21 (16 + 5).
    std::size_t compared = 0;
    for (int trial = 0; trial < 400; ++trial) {
        const std::size_t rows = 1 + static_cast<std::size_t>(trial) % 21;
        tile all = random_tile(rng, rows, true);
        const std::vector<float> m_old = all.m;
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
            REQUIRE(same(one.alpha[0], all.alpha[r]));
            INFO("alpha " << all.alpha[r] << ", m_old " << m_old[r] << ", m_new " << all.m[r]);
            REQUIRE(alpha_ok(all.alpha[r], m_old[r], all.m[r]));
            ++compared;
        }
    }
    CHECK(compared > 4000);

    // (5) the pv step with the factors (attn_pv_args::acc_scale) = acc·α rounded once, then a plain pv
    // step, bit for bit; widths 1-80 reach every column path (a 4-vector block on AVX-512 from 64).
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t rows = 1 + static_cast<std::size_t>(trial) % 21;
        tile t = random_tile(rng, rows, true);
        t.run(ker);
        const std::size_t keys = t.keys, dv = trial % 3 == 0 ? 64 + static_cast<std::size_t>(trial) % 17 : 1 + rng() % 80;
        const std::size_t stride = (dv + 15) / 16 * 16;
        INFO("trial " << trial << ", rows " << rows << ", keys " << keys << ", dv " << dv);
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        std::vector<float> v(keys * dv);
        for (float& x : v) x = u(rng);
        posenc::detail::attn_floats scaled(rows * stride), by_hand(rows * stride);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t d = 0; d < stride; ++d) {
                scaled[r * stride + d] = u(rng);
                by_hand[r * stride + d] = scaled[r * stride + d] * t.alpha[r];
            }
        ker.pv({t.s.data(), rows, keys, v.data(), dv, dv, scaled.data(), stride, posenc::dtype::f32, false, {}, t.alpha.data()});
        ker.pv({t.s.data(), rows, keys, v.data(), dv, dv, by_hand.data(), stride, posenc::dtype::f32});
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t d = 0; d < dv; ++d) REQUIRE(same(scaled[r * stride + d], by_hand[r * stride + d]));
    }

    // (2) the contract: rows 0-2 (nothing seen, a standing maximum, a standing +∞ maximum) among 3
    // rows and among 19 (one path or the other, depending on the vector width).
    for (const std::size_t rows : {std::size_t{3}, std::size_t{19}}) {
        INFO("rows " << rows);
        tile t(rows, 40, 0.0f);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = 0; j < BK; ++j) t.s[r * BK + j] = 0.25f * static_cast<float>((j * 7 + r) % 13) - 1.0f;
        const std::size_t plus_inf = 2;
        std::fill_n(t.m.begin(), rows, 5.0f);
        std::fill_n(t.l.begin(), rows, 2.0f);
        // row 0: sees nothing so far and nothing now
        std::fill_n(t.s.begin(), BK, -inf);
        t.m[0] = -inf, t.l[0] = 0.0f;
        // row 2: a +∞ logit under a maximum already +∞
        t.s[plus_inf * BK + 3] = inf;
        t.m[plus_inf] = inf;
        const std::vector<float> s_before(t.s.begin(), t.s.end());
        t.run(ker);
        for (std::size_t j = 0; j < BK; ++j) REQUIRE(bits(t.s[j]) == bits(0.0f));
        CHECK(t.m[0] == -inf);
        CHECK(bits(t.l[0]) == bits(0.0f));
        CHECK(t.alpha[0] == 1.0f);
        CHECK(t.m[plus_inf] == inf);
        CHECK(t.alpha[plus_inf] == 1.0f);
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
            CHECK(t.alpha[r] == 1.0f);
        }
    }

    // (3) a new maximum rescales l by α = e^{m_old − m_new}, which goes to the pv step; a running maximum
    // 100 above a later tile survives it (p then underflows to 0, l keeps its value, α = 1).
    {
        tile t(3, BK, 0.0f);
        for (std::size_t r = 0; r < 3; ++r)
            for (std::size_t j = 0; j < BK; ++j) t.s[r * BK + j] = static_cast<float>(j % 5) - 2.0f + static_cast<float>(r);
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
        CHECK(std::abs(t.alpha[0] - alpha0) <= 4e-7 * alpha0);
        CHECK(std::abs(t.alpha[2] - alpha2) <= 4e-7 * alpha2);
        CHECK(std::abs(t.l[1] - 1.0f) <= 1e-6f);  // e^{s − 100} ≤ e^{−97}: below float's range
        CHECK(t.alpha[1] == 1.0f);
    }

    // (4) non-finite logits, IEEE semantics (rows 0-4 among 5 and among 19, either path): a row of NaN
    // and −∞ only (m = NaN, p = NaN on the NaN key, 0 on the masked ones), a NaN beside finite
    // logits (l NaN, m finite), a standing NaN maximum (stays NaN, masked keys p = 0), +∞ logits
    // (p = 1 each, the others 0, α = 0 for the old state) and +∞ beside a NaN (l NaN).
    for (const std::size_t rows : {std::size_t{5}, std::size_t{19}}) {
        INFO("rows " << rows << " (non-finite)");
        tile t(rows, BK, 0.0f);
        for (std::size_t i = 0; i < t.s.size(); ++i) t.s[i] = -inf;
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
        CHECK(std::isnan(t.alpha[0]));
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
        CHECK(t.alpha[3] == 0.0f);
        CHECK(t.m[4] == inf);
        CHECK(std::isnan(t.l[4]));
        CHECK(std::isnan(t.s[4 * BK + 8]));
    }

    // (6) soft-capping against c·tanh(s/c) in double, through both tanh branches (|s/c| below and
    // above 0.3) and into saturation (|s/c| up to 50: tanh rounds to 1), among 3 rows and among 19; a
    // fresh state, some keys masked. A capped score is within 8·2⁻²⁴·c (the quotient's two roundings,
    // tanh's few ulps, the product's rounding), so the running max is too, and p = e^{capped − m}
    // within that plus exp's 3e-7; the max is also within 8·2⁻²⁴ of itself relative (the series
    // branch's error is relative, about 5·2⁻²⁴ at worst).
    for (const float cap : {3.0f, 30.0f, 50.0f})
        for (const std::size_t rows : {std::size_t{3}, std::size_t{19}}) {
            INFO("softcap " << cap << ", rows " << rows);
            std::uniform_real_distribution<float> frac(-1.0f, 1.0f);
            tile t(rows, BK, cap);
            for (std::size_t r = 0; r < rows; ++r) {
                const float reach = r % 4 == 0 ? 0.3f : r % 4 == 1 ? 1.5f : r % 4 == 2 ? 6.0f : 50.0f;  // |s/c| up to this
                for (std::size_t j = 0; j < BK; ++j) t.s[r * BK + j] = j % 11 == 5 ? -inf : reach * cap * frac(rng);
                t.m[r] = -inf, t.l[r] = 0.0f;
            }
            const std::vector<float> s_before(t.s.begin(), t.s.end());
            t.run(ker);
            const double delta = 8.0 * cap * 0x1p-24;
            for (std::size_t r = 0; r < rows; ++r) {
                double max_capped = -inf;
                for (std::size_t j = 0; j < BK; ++j)
                    if (s_before[r * BK + j] != -inf)
                        max_capped = std::max(max_capped, cap * std::tanh(static_cast<double>(s_before[r * BK + j]) / cap));
                INFO("row " << r << ", m " << t.m[r] << ", max of c·tanh(s/c) " << max_capped);
                REQUIRE(std::abs(t.m[r] - max_capped) <= delta);
                REQUIRE(std::abs(t.m[r] - max_capped) <= 8.0 * 0x1p-24 * std::abs(max_capped));
                for (std::size_t j = 0; j < BK; ++j) {
                    const float x = s_before[r * BK + j];
                    if (x == -inf) {
                        REQUIRE(bits(t.s[r * BK + j]) == bits(0.0f));
                        continue;
                    }
                    const double p = std::exp(cap * std::tanh(static_cast<double>(x) / cap) - static_cast<double>(t.m[r]));
                    INFO("key " << j << ", s " << x << ", p " << t.s[r * BK + j] << ", expected " << p);
                    REQUIRE(std::abs(t.s[r * BK + j] - p) <= (3e-7 + delta) * p + 1e-37);
                }
            }
        }
}

}  // namespace softmax_step_test

TEST_CASE("attention softmax step: rows as lanes give each row's bits alone, the contract's edge cases, exp and tanh in double", "[attention][kernels]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { softmax_step_test::check_arch(arch); }) >= 1);
}
