// Numbers at the edges: positions up to 2^31−1 and past any table, factors from the smallest a
// schedule accepts to 1000, every even head_dim 2..512 (non-multiples of every vector width
// included), NaN/Inf inputs that stay in their own pair, zero tokens — both layouts throughout.
// Expected values come from a rotation and from inverse frequencies written here in double from the
// formulas (HF's modeling_rope_utils.py for the schedules), not from posenc's detail:: code.
#include <posenc/posenc.hpp>

#include <cfloat>
#include <cstring>
#include <limits>
#include <numbers>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/reference.hpp"

using posenc_test::closed_form_inv_freq;
using posenc_test::random_floats;
using posenc_test::same_bits;

namespace {

constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();

/// Largest error of `got` (float, one head) against the double rotation of `x` by p·inv, in units of
/// each pair's length (a rotation's natural scale).
double worst_pair_error(const std::vector<float>& x, const float* got, std::size_t d, bool interleaved,
                        const std::vector<double>& inv, std::int64_t p, double amplitude = 1.0) {
    std::vector<double> xd(x.begin(), x.end());
    const auto ref = posenc_test::reference_rotate(xd, d, interleaved, inv, p, amplitude);
    double worst = 0;
    for (std::size_t i = 0; i < d / 2; ++i) {
        const std::size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + d / 2;
        const double len = amplitude * std::hypot(xd[a], xd[b]) + 1e-30;
        worst = posenc_test::worst_of(posenc_test::worst_of(worst, std::abs(got[a] - ref[a]) / len), std::abs(got[b] - ref[b]) / len);
    }
    return worst;
}

template <class Layout>
constexpr bool is_interleaved = std::is_same_v<Layout, posenc::interleaved>;

// The reference rotates by the same double angle p·θ (θ checked against the closed form separately)
// with std::cos/std::sin of the unreduced angle; posenc reduces it and rounds cos/sin and the
// rotation to float: a few float ulps of the pair length. 1e-6 leaves margin; a float angle (error
// ~|p|·2^−24 rad) or a truncated position is off by O(1) at these positions.
constexpr double far_tolerance = 1e-6;

template <class Layout>
void check_far_positions() {
    const std::size_t d = 128, H = 2;
    const posenc::rotary<Layout> rope({.head_dim = d}, posenc::default_rope{.base = 500000});
    const auto& inv = rope.frequencies().inv_freq;  // checked against the closed form here:
    const auto closed = closed_form_inv_freq(500000, d);
    for (std::size_t i = 0; i < d / 2; ++i) REQUIRE(std::abs(inv[i] - closed[i]) <= 4 * DBL_EPSILON * closed[i]);
    const std::vector<std::int64_t> pos64{0, 1, (1 << 24) + 1, int32_max - 1, int32_max, int32_max + 1,
                                          (std::int64_t{1} << 32) + 5, -int32_max - 1};
    const std::vector<std::int32_t> pos32{0, 1, (1 << 24) + 1, std::numeric_limits<std::int32_t>::max() - 1,
                                          std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min()};
    std::size_t compared = 0;
    auto run = [&](const posenc::position_ids& pos) {
        const std::size_t T = pos.size();
        const auto x = random_floats(T * H * d, 7);
        auto y = x;
        rope.apply(posenc::heads_view<float>(std::span<float>(y), {T, H, d}), pos);
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < H; ++h) {
                const std::vector<float> head(x.begin() + static_cast<std::ptrdiff_t>((t * H + h) * d),
                                              x.begin() + static_cast<std::ptrdiff_t>((t * H + h + 1) * d));
                INFO(Layout::name << " position " << pos[t]);
                CHECK(worst_pair_error(head, y.data() + (t * H + h) * d, d, is_interleaved<Layout>, inv, pos[t]) <= far_tolerance);
                ++compared;
            }
    };
    run(pos64);
    run(pos32);
    run(posenc::position_ids::consecutive(int32_max - 40, 80));  // the prefill recurrence across 2^31
    CHECK(compared == (8 + 6 + 80) * H);

    // Past the table: every checked API throws range_error, whatever the position's width.
    const auto table = rope.table(4096);
    std::vector<float> buf(2 * H * d);
    posenc::heads_view<float> v(std::span<float>(buf), {2, H, d});
    for (std::int64_t p : {std::int64_t{4096}, int32_max, int32_max + 1, std::numeric_limits<std::int64_t>::max(),
                           std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
        INFO("position " << p);
        CHECK_THROWS_AS(rope.apply(table, v, std::vector<std::int64_t>{0, p}), posenc::range_error);
        CHECK_THROWS_AS(table.cos(p), posenc::range_error);
        CHECK_THROWS_AS(table.sin(p), posenc::range_error);
    }
    CHECK_THROWS_AS(rope.apply(table, v, std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::max(), 0}),
                    posenc::range_error);
    CHECK_THROWS_AS(rope.apply(table, v, posenc::position_ids::consecutive(4095, 2)), posenc::range_error);
}

}  // namespace

TEST_CASE("positions up to 2^31-1 and beyond equal a double rotation, and checked tables throw past their end",
          "[stress]") {
    check_far_positions<posenc::half_split>();
    check_far_positions<posenc::interleaved>();
}

namespace {

// HF's _compute_yarn_parameters (truncate = true), written from modeling_rope_utils.py in double.
std::vector<double> closed_yarn(double base, double factor, double L0, std::size_t d, double beta_fast, double beta_slow) {
    auto corr = [&](double rot) { return static_cast<double>(d) * std::log(L0 / (rot * 2 * std::numbers::pi)) / (2 * std::log(base)); };
    double low = std::max(std::floor(corr(beta_fast)), 0.0), high = std::min(std::ceil(corr(beta_slow)), static_cast<double>(d) - 1);
    if (low == high) high += 0.001;
    std::vector<double> inv(d / 2);
    for (std::size_t i = 0; i < inv.size(); ++i) {
        const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / (high - low)));
        const double extrapolation_factor = 1 - ramp;
        const double pos_freq = std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(d));
        inv[i] = (1 / (factor * pos_freq)) * (1 - extrapolation_factor) + (1 / pos_freq) * extrapolation_factor;
    }
    return inv;
}

// HF's _compute_llama3_parameters.
std::vector<double> closed_llama3(double base, double factor, double low_ff, double high_ff, double L0, std::size_t d) {
    auto inv = closed_form_inv_freq(base, d);
    for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > L0 / low_ff) {
            f /= factor;
        } else if (wavelen >= L0 / high_ff) {
            const double smooth = (L0 / wavelen - low_ff) / (high_ff - low_ff);
            f = (1 - smooth) * f / factor + smooth * f;
        }
    }
    return inv;
}

struct schedule_case {
    const char* name;
    posenc::any_schedule schedule;
    std::int64_t seq_len;
    std::vector<double> inv;  // closed form
    double amplitude;         // closed form
};

std::vector<schedule_case> factor_cases(std::size_t d) {
    std::vector<schedule_case> c;
    const double L0 = 4096, base = 10000;
    // The smallest factor each schedule accepts is any positive double; 1e-3 stands for "far below 1"
    // (a smaller one only scales the angles further), 1000 for the top of the range.
    for (double s : {1e-3, 0.5, 1.0, 1000.0}) {
        auto lin = closed_form_inv_freq(base, d);
        for (double& f : lin) f /= s;
        c.push_back({"linear", posenc::linear{.base = base, .factor = s}, 0, lin, 1.0});
        const double dd = static_cast<double>(d);
        c.push_back({"ntk_aware", posenc::ntk_aware{.base = base, .factor = s}, 0,
                     closed_form_inv_freq(base * std::pow(s, dd / (dd - 2)), d), 1.0});
        const std::int64_t L = 1000 * 4096;  // HF: base·((s·L/L₀) − (s − 1))^(d/(d−2)) for L > L₀
        c.push_back({"dynamic", posenc::dynamic_ntk{.base = base, .factor = s, .original_max_position = 4096}, L,
                     closed_form_inv_freq(base * std::pow(s * static_cast<double>(L) / L0 - (s - 1), dd / (dd - 2)), d), 1.0});
        c.push_back({"yarn", posenc::yarn{.base = base, .factor = s, .original_max_position = 4096}, 0,
                     closed_yarn(base, s, L0, d, 32, 1), s <= 1 ? 1.0 : 0.1 * std::log(s) + 1});
        c.push_back({"llama3", posenc::llama3{.base = base, .factor = s, .original_max_position = 4096}, 0,
                     closed_llama3(base, s, 1, 4, L0, d), 1.0});
        std::vector<double> ext(d / 2);
        for (std::size_t i = 0; i < ext.size(); ++i) ext[i] = s * (1 + static_cast<double>(i) / static_cast<double>(d));
        auto lr = closed_form_inv_freq(base, d);
        for (std::size_t i = 0; i < lr.size(); ++i) lr[i] /= ext[i];
        c.push_back({"longrope", posenc::longrope{.base = base, .short_factor = std::vector<double>(d / 2, 1.0), .long_factor = ext,
                                                  .original_max_position = 4096, .factor = s},
                     8192, lr, s <= 1 ? 1.0 : std::sqrt(1 + std::log(s) / std::log(L0))});
    }
    return c;
}

template <class Layout>
std::size_t check_factors() {
    const std::size_t d = 64, H = 1;
    std::size_t compared = 0;
    for (const auto& c : factor_cases(d)) {
        const posenc::rotary<Layout> rope({.head_dim = d}, posenc::frequencies(c.schedule, d, c.seq_len));
        const auto& f = rope.frequencies();
        INFO(Layout::name << " " << c.name << " factor " << f.attention_factor);
        REQUIRE(f.inv_freq.size() == d / 2);
        for (std::size_t i = 0; i < d / 2; ++i) {
            INFO("pair " << i);
            CHECK(std::isfinite(f.inv_freq[i]));
            CHECK(f.inv_freq[i] > 0);
            CHECK(std::abs(f.inv_freq[i] - c.inv[i]) <= 1e-12 * c.inv[i]);
        }
        CHECK(std::abs(f.attention_factor - c.amplitude) <= 1e-12 * c.amplitude);
        const auto table = rope.table(70);
        std::size_t finite = 0;
        for (std::size_t j = 0; j < 70 * d; ++j) finite += std::isfinite(table.data()[j]) ? 1 : 0;
        CHECK(finite == 70 * d);
        // Rotations near and far, against the double rotation by these (closed-form-checked) frequencies.
        const std::vector<std::int64_t> pos{0, 69, 1'000'003, int32_max};
        const auto x = random_floats(pos.size() * H * d, 3);
        auto y = x;
        rope.apply(table, posenc::heads_view<float>(std::span<float>(y), {2, H, d}), std::vector<std::int64_t>{0, 69});
        rope.apply(posenc::heads_view<float>(std::span<float>(y.data() + 2 * d, 2 * d), {2, H, d}),
                   std::vector<std::int64_t>{pos[2], pos[3]});
        for (std::size_t t = 0; t < pos.size(); ++t) {
            const std::vector<float> head(x.begin() + static_cast<std::ptrdiff_t>(t * d), x.begin() + static_cast<std::ptrdiff_t>((t + 1) * d));
            INFO("position " << pos[t]);
            CHECK(worst_pair_error(head, y.data() + t * d, d, is_interleaved<Layout>, f.inv_freq, pos[t], c.amplitude) <=
                  far_tolerance);
            ++compared;
        }
    }
    return compared;
}

}  // namespace

TEST_CASE("factors from far below 1 up to 1000 keep every schedule's frequencies finite and as the closed form",
          "[stress]") {
    CHECK(check_factors<posenc::half_split>() == 4 * 6 * 4);
    CHECK(check_factors<posenc::interleaved>() == 4 * 6 * 4);
}

namespace {
template <class Layout>
std::size_t check_head_dims_public() {
    std::size_t compared = 0;
    const std::size_t H = 2;
    for (std::size_t d = 2; d <= 512; d += 2) {
        const posenc::rotary<Layout> rope({.head_dim = d}, posenc::default_rope{.base = 10000});
        const auto& inv = rope.frequencies().inv_freq;
        const auto closed = closed_form_inv_freq(10000, d);
        for (std::size_t i = 0; i < d / 2; ++i) REQUIRE(std::abs(inv[i] - closed[i]) <= 4 * DBL_EPSILON * closed[i]);
        const auto table = rope.table(70);
        const std::vector<std::int64_t> pos{0, 1, 69, 4097, int32_max};
        const auto x = random_floats(pos.size() * H * d, static_cast<std::uint32_t>(d));
        auto y = x;
        rope.apply(table, posenc::heads_view<float>(std::span<float>(y), {3, H, d}), std::vector<std::int64_t>{0, 1, 69});
        rope.apply(posenc::heads_view<float>(std::span<float>(y.data() + 3 * H * d, 2 * H * d), {2, H, d}),
                   std::vector<std::int64_t>{4097, int32_max});
        for (std::size_t t = 0; t < pos.size(); ++t)
            for (std::size_t h = 0; h < H; ++h) {
                const std::size_t off = (t * H + h) * d;
                const std::vector<float> head(x.begin() + static_cast<std::ptrdiff_t>(off), x.begin() + static_cast<std::ptrdiff_t>(off + d));
                INFO(Layout::name << " head_dim " << d << " position " << pos[t]);
                CHECK(worst_pair_error(head, y.data() + off, d, is_interleaved<Layout>, inv, pos[t]) <= far_tolerance);
                ++compared;
            }
    }
    return compared;
}
}  // namespace

TEST_CASE("every even head_dim 2..512 (table and on the fly) equals a double rotation", "[stress]") {
    CHECK(check_head_dims_public<posenc::half_split>() == 256 * 5 * 2);
    CHECK(check_head_dims_public<posenc::interleaved>() == 256 * 5 * 2);
}

namespace {

// Head widths that are not multiples of 4, 8 or 16 lanes, and the largest.
const std::vector<std::size_t> odd_widths{2, 4, 6, 10, 14, 18, 22, 26, 30, 34, 38, 46, 62, 66, 98, 126, 130, 194, 258, 386, 510, 512};

enum class cos_sin_source { table, on_the_fly_scattered, on_the_fly_consecutive };

struct qk_case {
    std::size_t d;
    std::vector<float> q, k;
    static constexpr std::size_t T = 9, HQ = 3, HK = 2;
    explicit qk_case(std::size_t width) : d(width), q(random_floats(T * HQ * d, 8)), k(random_floats(T * HK * d, 9)) {}
};

/// Rotates Q and K with Arch's kernel, forced (the way tests/test_simd_kernels.cpp forces it).
template <class Layout, class Arch>
void run_forced(std::vector<float>& q, std::vector<float>& k, std::size_t d, cos_sin_source src, const posenc::rope_frequencies& f,
                const posenc::cos_sin_table& table) {
    static const std::vector<std::int64_t> scattered{5, 0, 131, 300, 1, 77, 2, 299, 9};
    posenc::detail::rotate_job job;
    job.views[0] = posenc::heads_view<float>(std::span<float>(q), {qk_case::T, qk_case::HQ, d});
    job.views[1] = posenc::heads_view<float>(std::span<float>(k), {qk_case::T, qk_case::HK, d});
    job.positions = src == cos_sin_source::on_the_fly_consecutive ? posenc::position_ids::consecutive(30, qk_case::T)
                                                          : posenc::position_ids(scattered);
    job.rotary_dim = d;
    job.table = src == cos_sin_source::table ? &table : nullptr;
    job.inv_freq = f.inv_freq.data();
    job.amplitude = f.attention_factor;
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
}

/// NaN in Q token 3 head 1 lane j, +Inf in K token 0 head 0, −Inf in K token 8 head 1: only the pairs
/// holding them change from the clean run, and they come out non-finite.
template <class Layout, class Arch>
std::size_t check_poison(std::size_t d) {
    const auto f = posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 4096}.frequencies(d);
    const posenc::cos_sin_table table(f, 301);
    std::size_t rows_compared = 0;
    for (cos_sin_source src : {cos_sin_source::table, cos_sin_source::on_the_fly_scattered, cos_sin_source::on_the_fly_consecutive}) {
        qk_case clean(d), dirty(d);
        const std::size_t jn = (5 * d) / 7, ji = d / 3, jm = d - 1;  // lanes hit
        dirty.q[(3 * qk_case::HQ + 1) * d + jn] = std::numeric_limits<float>::quiet_NaN();
        dirty.k[(0 * qk_case::HK + 0) * d + ji] = std::numeric_limits<float>::infinity();
        dirty.k[(8 * qk_case::HK + 1) * d + jm] = -std::numeric_limits<float>::infinity();
        run_forced<Layout, Arch>(clean.q, clean.k, d, src, f, table);
        run_forced<Layout, Arch>(dirty.q, dirty.k, d, src, f, table);
        INFO(Arch::name() << " " << Layout::name << " head_dim " << d << " source " << int(src));
        // The partner lane of j in its pair.
        auto partner = [&](std::size_t j) {
            if (is_interleaved<Layout>) return j ^ 1;
            return j < d / 2 ? j + d / 2 : j - d / 2;
        };
        auto check_view = [&](const std::vector<float>& c, const std::vector<float>& g, std::size_t heads, std::size_t bad_row,
                              std::size_t bad_lane) {
            for (std::size_t row = 0; row < qk_case::T * heads; ++row) {
                const float* cr = c.data() + row * d;
                const float* gr = g.data() + row * d;
                if (row != bad_row) {
                    CHECK(same_bits(cr, gr, d));
                } else {
                    const std::size_t p = partner(bad_lane);
                    CHECK((!std::isfinite(gr[bad_lane]) || !std::isfinite(gr[p])));
                    for (std::size_t j = 0; j < d; ++j)
                        if (j != bad_lane && j != p) CHECK(std::memcmp(cr + j, gr + j, sizeof(float)) == 0);
                }
                ++rows_compared;
            }
        };
        check_view(clean.q, dirty.q, qk_case::HQ, 3 * qk_case::HQ + 1, jn);
        // K has two poisoned rows; check each against the other's exclusion.
        for (std::size_t row = 0; row < qk_case::T * qk_case::HK; ++row) {
            const float* cr = clean.k.data() + row * d;
            const float* gr = dirty.k.data() + row * d;
            const bool bad = row == 0 || row == 8 * qk_case::HK + 1;
            if (!bad) CHECK(same_bits(cr, gr, d));
            else {
                const std::size_t lane = row == 0 ? ji : jm, p = partner(lane);
                CHECK((!std::isfinite(gr[lane]) || !std::isfinite(gr[p])));
                for (std::size_t j = 0; j < d; ++j)
                    if (j != lane && j != p) CHECK(std::memcmp(cr + j, gr + j, sizeof(float)) == 0);
            }
            ++rows_compared;
        }
    }
    return rows_compared;
}

template <class... Archs>
std::size_t check_poison_all(xsimd::arch_list<Archs...> archs) {
    std::size_t n = 0;
    const std::size_t ran = posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        for (std::size_t d : odd_widths) {
            n += check_poison<posenc::half_split, Arch>(d);
            n += check_poison<posenc::interleaved, Arch>(d);
        }
    });
    CHECK(ran >= 1);
    return n / ran;
}

}  // namespace

TEST_CASE("NaN and Inf in Q/K stay in their own pair on every SIMD architecture, layout and width", "[stress]") {
    const std::size_t per_arch = check_poison_all(posenc::simd::dispatch_archs{});
    CHECK(per_arch == odd_widths.size() * 2 * 3 * qk_case::T * (qk_case::HQ + qk_case::HK));
}

TEST_CASE("a NaN row does not spread through the public API's thread split either", "[stress]") {
    const std::size_t T = 256, H = 8, d = 128;
    for (auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
        posenc::any_rotary rope(layout, {.head_dim = d}, posenc::any_schedule{posenc::default_rope{.base = 10000}});
        rope.set_threads(4);
        const auto table = rope.table(1024);
        auto clean = random_floats(T * H * d, 4), dirty = clean;
        dirty[(3 * H + 1) * d + 17] = std::numeric_limits<float>::quiet_NaN();
        for (auto* buf : {&clean, &dirty}) {
            posenc::heads_view<float> v(std::span<float>(*buf), {T, H, d});
            rope.apply(table, v, posenc::position_ids::consecutive(500, T));
            rope.apply(v, posenc::position_ids::consecutive(1, T), posenc::rotation::inverse);
        }
        std::size_t equal_rows = 0;
        for (std::size_t row = 0; row < T * H; ++row)
            equal_rows += same_bits(clean.data() + row * d, dirty.data() + row * d, d) ? 1 : 0;
        CHECK(equal_rows == T * H - 1);
        CHECK(std::isnan(dirty[(3 * H + 1) * d + 17]));
    }
}

namespace {
template <class Layout>
void check_zero_tokens() {
    const posenc::rotary<Layout> rope({.head_dim = 64}, posenc::default_rope{});
    const auto table = rope.table(0);  // an empty table is valid, and holds no position
    const auto full = rope.table(10);
    std::vector<float> guard = random_floats(16, 1);
    const auto before = guard;
    const std::vector<std::int64_t> none;
    posenc::heads_view<float> empty(std::span<float>(guard.data(), 0), {0, 4, 64});
    posenc::heads_view<float> no_heads(std::span<float>(guard.data(), 0), {0, 0, 64});
    posenc::heads_view<float> null_view(nullptr, {0, 2, 64});
    CHECK_NOTHROW(rope.apply(empty, empty, none));
    CHECK_NOTHROW(rope.apply(null_view, none, posenc::rotation::inverse));
    CHECK_NOTHROW(rope.apply(table, empty, no_heads, none));
    CHECK_NOTHROW(rope.apply(full, empty, posenc::position_ids::consecutive(0, 0)));
    CHECK_NOTHROW(rope.shift(empty, 5));
    CHECK_NOTHROW(rope.apply_unchecked(table, empty, empty, none));
    std::vector<float> one(64);
    CHECK_THROWS_AS(rope.apply(table, posenc::heads_view<float>(std::span<float>(one), {1, 1, 64}), none),
                    posenc::config_error);  // 1 token for 0 positions is still an error
    CHECK_THROWS_AS(table.cos(0), posenc::range_error);
    const posenc::xpos_rotary<Layout> xp({.head_dim = 64}, posenc::xpos{});
    CHECK_NOTHROW(xp.apply(empty, empty, none));
    CHECK_NOTHROW(xp.apply_queries(null_view, none));
    CHECK(guard == before);
}
}  // namespace

TEST_CASE("zero tokens: every encoding accepts an empty call and writes nothing", "[stress]") {
    check_zero_tokens<posenc::half_split>();
    check_zero_tokens<posenc::interleaved>();
    std::vector<float> guard = random_floats(8, 2);
    const auto before = guard;
    const std::vector<std::int64_t> none;
    const posenc::alibi_bias alibi({.heads = 4});
    const auto t5_table = random_floats(32 * 2, 3);
    const posenc::t5_bias t5({}, 2, t5_table);
    CHECK_NOTHROW(alibi.add_to_scores(3, 100, none, std::span<float>()));
    CHECK_NOTHROW(alibi.add_to_scores(3, 100, posenc::position_ids::consecutive(0, 0), std::span<float>(guard.data(), 0)));
    CHECK_NOTHROW(t5.add_to_scores(1, 100, none, std::span<float>()));
    const posenc::sinusoidal pe{.d_model = 8};
    CHECK_NOTHROW(pe.add_to(std::span<float>(), none));
    CHECK_NOTHROW(pe.add_to(std::span<float>(), none, 100));
    CHECK(pe.table(std::size_t{0}).empty());
    CHECK(guard == before);
}
