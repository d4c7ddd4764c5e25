// M-RoPE (Qwen2-VL sections, Qwen3-VL interleave) against a closed form in double written from HF's
// definitions: HF's cos of width head_dim = cat(freqs, freqs) per component, split by mrope_section·2
// with chunk i taking component i % 3 (apply_multimodal_rotary_pos_emb), and apply_interleaved_mrope's
// slice(offset, 3·section, 3) overwrites. Text tokens (t = h = w) bit-identical to posenc::rotary;
// tables, out of place, inverse (through a table with an amplitude: forward then inverse is the
// identity to float rounding), 16-bit storage; errors before anything is written.
#include <posenc/rope/mrope.hpp>
#include <posenc/rope/rotary.hpp>
#include <posenc/rope/default.hpp>
#include <posenc/rope/yarn.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;

namespace {

constexpr std::size_t HD = 128, Hq = 4, Hk = 2;  // head_dim, query and key heads

// Component (0 t, 1 h, 2 w) of every one of the head_dim lanes, HF's way: the lane axis of width
// head_dim split into chunks mrope_section * 2 = [s0, s1, s2, s0, s1, s2], chunk i reads i % 3.
std::vector<int> hf_sectioned_lane_axis(const std::vector<std::size_t>& section, std::size_t head_dim) {
    std::vector<int> lane;
    for (int rep = 0; rep < 2; ++rep)
        for (int c = 0; c < 3; ++c)
            for (std::size_t k = 0; k < section[static_cast<std::size_t>(c)]; ++k) lane.push_back(c);
    REQUIRE(lane.size() == head_dim);
    return lane;
}

// HF's apply_interleaved_mrope on one token's freqs (3 × pairs angles): start from freqs[0], overwrite
// idx = slice(offset, section[dim]*3, 3) from freqs[dim] for (dim, offset) = (1, 1), (2, 2).
std::vector<double> hf_interleaved(const std::vector<std::vector<double>>& freqs, const std::vector<std::size_t>& section) {
    std::vector<double> out = freqs[0];
    const std::size_t n = out.size();
    for (std::size_t dim = 1; dim <= 2; ++dim) {
        const std::size_t offset = dim, length = section[dim] * 3;
        for (std::size_t idx = offset; idx < length && idx < n; idx += 3) out[idx] = freqs[dim][idx];
    }
    return out;
}

// One head rotated (half-split) by per-lane angles ang[lane] (cat(freqs, freqs) convention): y = x·cos + rotate_half(x)·sin.
std::vector<double> hf_rotate(const std::vector<double>& x, const std::vector<double>& ang) {
    const std::size_t n = x.size() / 2;
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double rh = i < n ? -x[i + n] : x[i - n];
        y[i] = x[i] * std::cos(ang[i]) + rh * std::sin(ang[i]);
    }
    return y;
}

struct qk {
    std::vector<float> q, k;
    explicit qk(std::size_t tokens, std::uint32_t seed)
        : q(posenc_test::random_floats(tokens * Hq * HD, seed)), k(posenc_test::random_floats(tokens * Hk * HD, seed + 1)) {}
    posenc::heads_view<float> qv(std::size_t tokens) { return {std::span<float>(q), {tokens, Hq, HD}}; }
    posenc::heads_view<float> kv(std::size_t tokens) { return {std::span<float>(k), {tokens, Hk, HD}}; }
};

// Mixed positions: text (t = h = w), an image block, a video block with distinct t, far and negative ones.
struct sample_positions {
    std::vector<std::int64_t> t{0, 1, 2, 3, 3, 3, 3, 5, 9, 9, 11, 11, 100000, -7, 70000000, 3},
        h{0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 6, 7, 3, 12, 5, 70000001},
        w{0, 1, 2, 3, 4, 3, 4, 5, 6, 6, 7, 7, 99999, -8, 123456789, 2};
    [[nodiscard]] std::size_t size() const { return t.size(); }
    [[nodiscard]] posenc::axis_positions ids() const {
        return {posenc::position_ids(t), posenc::position_ids(h), posenc::position_ids(w)};
    }
};

}  // namespace

TEST_CASE("M-RoPE pair map: Qwen2-VL sections and Qwen3-VL interleave, written out by hand", "[mrope]") {
    const auto sec = posenc::mrope{.section = {16, 24, 24}}.pair_axes(64);
    REQUIRE(sec.size() == 64);
    CHECK(sec[0] == 0);
    CHECK(sec[15] == 0);
    CHECK(sec[16] == 1);
    CHECK(sec[39] == 1);
    CHECK(sec[40] == 2);
    CHECK(sec[63] == 2);
    const auto il = posenc::mrope{.section = {24, 20, 20}, .interleaved = true}.pair_axes(64);
    // t h w t h w … for pairs 0..59 (h at 1, 4, …, 58; w at 2, 5, …, 59), then t for 60..63.
    const std::vector<std::uint8_t> expected = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0,
                                                1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1,
                                                2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0, 0};
    CHECK(il == expected);
    // Unequal h and w sections: h stops at pair 3·2 = 6, w at 3·4 = 12.
    const auto un = posenc::mrope{.section = {0, 2, 4}, .interleaved = true}.pair_axes(16);
    const std::vector<std::uint8_t> expected_un = {0, 1, 2, 0, 1, 2, 0, 0, 2, 0, 0, 2, 0, 0, 0, 0};
    CHECK(un == expected_un);
}

TEST_CASE("M-RoPE sectioned and interleaved against HF's definitions in double", "[mrope]") {
    const sample_positions P;
    const std::size_t T = P.size();
    std::size_t compared = 0;
    for (bool interleaved : {false, true}) {
        const std::vector<std::size_t> section = interleaved ? std::vector<std::size_t>{24, 20, 20}
                                                             : std::vector<std::size_t>{16, 24, 24};
        posenc::mrope_rotary<posenc::half_split> rope(
            {.head_dim = HD}, posenc::default_rope{.base = 1000000},
            posenc::mrope{.section = {section[0], section[1], section[2]}, .interleaved = interleaved});
        qk buf(T, 7);
        const qk in = buf;
        rope.apply(buf.qv(T), buf.kv(T), P.ids());
        const auto inv = posenc_test::closed_form_inv_freq(1000000.0, HD);
        const std::vector<int> lane_axis = hf_sectioned_lane_axis({16, 24, 24}, HD);
        for (std::size_t t = 0; t < T; ++t) {
            const double p[3] = {static_cast<double>(P.t[t]), static_cast<double>(P.h[t]), static_cast<double>(P.w[t])};
            std::vector<double> ang(HD);
            if (interleaved) {
                std::vector<std::vector<double>> freqs(3, std::vector<double>(HD / 2));
                for (int c = 0; c < 3; ++c)
                    for (std::size_t j = 0; j < HD / 2; ++j) freqs[static_cast<std::size_t>(c)][j] = p[c] * inv[j];
                const auto f = hf_interleaved(freqs, section);
                for (std::size_t i = 0; i < HD; ++i) ang[i] = f[i % (HD / 2)];  // emb = cat(freqs, freqs)
            } else {
                for (std::size_t i = 0; i < HD; ++i) ang[i] = p[lane_axis[i]] * inv[i % (HD / 2)];
            }
            for (int which = 0; which < 2; ++which) {
                const std::size_t heads = which == 0 ? Hq : Hk;
                const auto& src = which == 0 ? in.q : in.k;
                const auto& got = which == 0 ? buf.q : buf.k;
                for (std::size_t h = 0; h < heads; ++h) {
                    const std::size_t off = (t * heads + h) * HD;
                    const std::vector<double> x(src.begin() + static_cast<std::ptrdiff_t>(off),
                                                src.begin() + static_cast<std::ptrdiff_t>(off + HD));
                    const auto y = hf_rotate(x, ang);
                    for (std::size_t i = 0; i < HD / 2; ++i) {
                        const double len = std::hypot(x[i], x[i + HD / 2]);
                        CHECK(std::abs(got[off + i] - y[i]) <= 2e-6 * len + 1e-30);
                        CHECK(std::abs(got[off + i + HD / 2] - y[i + HD / 2]) <= 2e-6 * len + 1e-30);
                        ++compared;
                    }
                }
            }
        }
    }
    REQUIRE(compared == 2 * sample_positions{}.size() * (Hq + Hk) * HD / 2);
}

TEST_CASE("M-RoPE: text tokens (t = h = w) are bit-identical to posenc::rotary", "[mrope]") {
    const posenc::yarn sched{.base = 1000000, .factor = 4, .original_max_position = 8192};
    std::size_t compared = 0;
    for (bool interleaved : {false, true}) {
        posenc::mrope m{.section = {16, 24, 24}, .interleaved = interleaved};
        posenc::mrope_rotary<posenc::half_split> mr({.head_dim = HD}, sched, m);
        posenc::rotary<posenc::half_split> r({.head_dim = HD}, sched);
        const std::size_t T = 300;
        std::vector<std::int64_t> far(T);
        for (std::size_t i = 0; i < T; ++i) far[i] = static_cast<std::int64_t>(i * i * 977) - 5000;  // up to ~8.7e7: far rows too
        for (int mode = 0; mode < 4; ++mode) {
            qk a(T, 11), b(T, 11);
            if (mode == 0) {  // consecutive: rotary's recurrence rows vs multi-axis direct rows
                const auto pos = posenc::position_ids::consecutive(40, T);
                r.apply(a.qv(T), a.kv(T), pos);
                mr.apply(b.qv(T), b.kv(T), pos);
            } else if (mode == 1) {  // explicit, far and negative, given as three equal components
                r.apply(a.qv(T), a.kv(T), far);
                mr.apply(b.qv(T), b.kv(T), {posenc::position_ids(far), posenc::position_ids(far), posenc::position_ids(far)});
            } else if (mode == 2) {  // from a table
                const auto table = r.table(2048);
                const auto pos = posenc::position_ids::consecutive(1000, T);
                r.apply(table, a.qv(T), a.kv(T), pos);
                mr.apply(mr.table(2048), b.qv(T), b.kv(T), pos);
            } else {  // inverse
                r.apply(a.qv(T), a.kv(T), far, posenc::rotation::inverse);
                mr.apply(b.qv(T), b.kv(T), posenc::position_ids(far), posenc::rotation::inverse);
            }
            CHECK(std::memcmp(a.q.data(), b.q.data(), a.q.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(a.k.data(), b.k.data(), a.k.size() * sizeof(float)) == 0);
            compared += a.q.size() + a.k.size();
        }
    }
    REQUIRE(compared == 2 * 4 * 300 * (Hq + Hk) * HD);
}

TEST_CASE("M-RoPE: tables, out of place, inverse and bf16 agree with the on-the-fly path", "[mrope]") {
    const sample_positions P;
    const std::size_t T = P.size();
    posenc::mrope_rotary<posenc::half_split> rope({.head_dim = HD}, posenc::default_rope{.base = 1000000},
                                                  posenc::mrope{.section = {16, 24, 24}});
    // A table only for positions < 2^27 + 2: drop the tokens beyond it.
    qk ref(T, 3);
    const qk in = ref;
    rope.apply(ref.qv(T), ref.kv(T), P.ids());

    // Table rows hold the same floats as the direct rows (same code), so the results are identical.
    const std::size_t Tt = 12;  // the first 12 tokens have positions < 12
    qk tab(Tt, 3);
    rope.apply(rope.table(16), tab.qv(Tt), tab.kv(Tt),
               {posenc::position_ids(std::span(P.t).first(Tt)), posenc::position_ids(std::span(P.h).first(Tt)),
                posenc::position_ids(std::span(P.w).first(Tt))});
    CHECK(std::memcmp(tab.q.data(), ref.q.data(), tab.q.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(tab.k.data(), ref.k.data(), tab.k.size() * sizeof(float)) == 0);

    // Out of place = in place.
    std::vector<float> qd(in.q.size(), 0.0f), kd(in.k.size(), 0.0f);
    const posenc::heads_view<const float> qs(std::span<const float>(in.q), {T, Hq, HD}), ks(std::span<const float>(in.k), {T, Hk, HD});
    rope.apply_into(qs, posenc::heads_view<float>(std::span<float>(qd), {T, Hq, HD}), ks,
                    posenc::heads_view<float>(std::span<float>(kd), {T, Hk, HD}), P.ids());
    CHECK(std::memcmp(qd.data(), ref.q.data(), qd.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(kd.data(), ref.k.data(), kd.size() * sizeof(float)) == 0);

    // Inverse undoes forward (to float rounding).
    rope.apply(ref.qv(T), ref.kv(T), P.ids(), posenc::rotation::inverse);
    double worst = 0;
    for (std::size_t i = 0; i < in.q.size(); ++i) worst = posenc_test::worst_of(worst, static_cast<double>(std::abs(ref.q[i] - in.q[i])));
    CHECK(worst <= 1e-5);

    // bf16 in place: the float result rounded once (the kernels compute in float32).
    std::vector<posenc::bf16> qb(in.q.size());
    for (std::size_t i = 0; i < qb.size(); ++i) qb[i] = posenc::bf16(in.q[i]);
    std::vector<float> qf(in.q.size());
    for (std::size_t i = 0; i < qb.size(); ++i) qf[i] = static_cast<float>(qb[i]);
    rope.apply(posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(qb), {T, Hq, HD}), P.ids());
    rope.apply(posenc::heads_view<float>(std::span<float>(qf), {T, Hq, HD}), P.ids());
    std::size_t same = 0;
    for (std::size_t i = 0; i < qb.size(); ++i) same += static_cast<float>(qb[i]) == static_cast<float>(posenc::bf16(qf[i]));
    CHECK(same == qb.size());

    // Inverse through a table with an amplitude (YaRN's attention factor, ≈ 1.14 here): the rows carry
    // a, so the inverse must divide by a² (rotation then its transpose gives a²·x): forward then
    // inverse gives x back to float rounding, for distinct t, h, w positions.
    posenc::mrope_rotary<posenc::half_split> yarn({.head_dim = HD}, posenc::yarn{.base = 100, .factor = 4, .original_max_position = 16},
                                                  posenc::mrope{.section = {16, 24, 24}});
    REQUIRE(std::abs(yarn.frequencies().attention_factor - 1.0) > 0.1);
    qk round_trip(Tt, 7);
    const qk start = round_trip;
    const posenc::axis_positions first{posenc::position_ids(std::span(P.t).first(Tt)), posenc::position_ids(std::span(P.h).first(Tt)),
                                       posenc::position_ids(std::span(P.w).first(Tt))};
    const auto ytable = yarn.table(16);
    yarn.apply(ytable, round_trip.qv(Tt), round_trip.kv(Tt), first);
    yarn.apply(ytable, round_trip.qv(Tt), round_trip.kv(Tt), first, posenc::rotation::inverse);
    double worst_table = 0;
    for (std::size_t i = 0; i < start.q.size(); ++i)
        worst_table = posenc_test::worst_of(worst_table, static_cast<double>(std::abs(round_trip.q[i] - start.q[i])));
    for (std::size_t i = 0; i < start.k.size(); ++i)
        worst_table = posenc_test::worst_of(worst_table, static_cast<double>(std::abs(round_trip.k[i] - start.k[i])));
    CHECK(worst_table <= 1e-5);
}

TEST_CASE("M-RoPE: bad sections, positions and tables are errors before anything is written", "[mrope][errors]") {
    expect_config_error([] { (void)posenc::mrope{.section = {16, 24, 23}}.pair_axes(64); }, "mrope_section", "[16, 24, 23]");
    expect_config_error(
        [] {
            posenc::mrope_rotary<posenc::half_split>({.head_dim = 80}, posenc::default_rope{}, posenc::mrope{.section = {16, 24, 24}});
        },
        "mrope_section", "[16, 24, 24]");
    expect_config_error([] { (void)posenc::mrope{.section = {24, 65, 20}, .interleaved = true}.pair_axes(64); }, "mrope_section");

    posenc::mrope_rotary<posenc::half_split> rope({.head_dim = HD}, posenc::default_rope{}, posenc::mrope{.section = {16, 24, 24}});
    const std::size_t T = 4;
    qk buf(T, 5);
    const qk before = buf;
    const std::vector<std::int64_t> t{0, 1, 2, 3}, h{0, 1, 2, 3}, w3{0, 1, 2};
    const std::vector<std::int64_t> big{0, 1, 2, 40};
    auto unchanged = [&] {
        CHECK(buf.q == before.q);
        CHECK(buf.k == before.k);
    };
    expect_config_error([&] { rope.apply(buf.qv(T), buf.kv(T), {posenc::position_ids(t), posenc::position_ids(h)}); },
                        "positions", "2 components");
    unchanged();
    expect_config_error(
        [&] { rope.apply(buf.qv(T), buf.kv(T), {posenc::position_ids(t), posenc::position_ids(h), posenc::position_ids(w3)}); },
        "positions[2]", "3 tokens");
    unchanged();
    const auto table = rope.table(32);
    CHECK_THROWS_AS(rope.apply(table, buf.qv(T), buf.kv(T), {posenc::position_ids(t), posenc::position_ids(h), posenc::position_ids(big)}),
                    posenc::range_error);
    unchanged();
    const auto other = posenc::rotary<posenc::half_split>({.head_dim = HD}, posenc::default_rope{.base = 500}).table(32);
    expect_config_error([&] { rope.apply(other, buf.qv(T), buf.kv(T), posenc::position_ids(t)); }, "table");
    unchanged();
    // The same frequencies with another amplitude: a table of other rows, rejected too.
    posenc::rope_frequencies doubled = rope.frequencies();
    doubled.attention_factor = 2.0;
    const posenc::cos_sin_table amplified(doubled, 32);
    expect_config_error([&] { rope.apply(amplified, buf.qv(T), buf.kv(T), posenc::position_ids(t)); }, "table");
    unchanged();
    // Out of place onto the source's memory under other strides: rejected (the source itself would be
    // rotated in place), and so is a destination overlapping it elsewhere.
    const posenc::heads_view<float> reordered(buf.q.data(), {T, Hq, HD}, {HD, T * HD});
    expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(buf.qv(T)), reordered, posenc::position_ids(t)); },
                        "dst.token_stride", std::to_string(HD));
    const posenc::heads_view<float> shifted(buf.q.data() + 1, {T - 1, Hq, HD});
    expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(buf.q.data(), {T - 1, Hq, HD}), shifted,
                                              posenc::position_ids::consecutive(0, T - 1)); },
                        "dst", "overlapping");
    unchanged();
    // Views of another head_dim or token count.
    expect_config_error([&] { rope.apply(buf.qv(T), posenc::position_ids::consecutive(0, 3)); }, "x.tokens", "4");
    unchanged();
    // The source itself as the destination: rotated in place, as apply does.
    qk a(T, 9), b = a;
    rope.apply_into(posenc::heads_view<const float>(a.qv(T)), a.qv(T), posenc::position_ids(t));
    rope.apply(b.qv(T), posenc::position_ids(t));
    CHECK(a.q == b.q);
    CHECK(a.q != qk(T, 9).q);
}
