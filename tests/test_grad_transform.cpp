// The transforms' backward passes (grad/transform.hpp) against central finite differences in double of
// L(x) = Σ dY·T(x), with T a forward written here in double (cos/sin of p·inv_freq from the schedule's
// inv_freq and amplitude; xPos's θ and ζ from the paper's closed form; M-RoPE's pair → axis split from
// its sections): every layout × schedule × partial rotary × amplitude × cos/sin source, xPos (queries
// and keys), M-RoPE, NoPE and 16-bit storage. Then the transpose identity ⟨T(x), y⟩ = ⟨x, Tᵀ(y)⟩ with
// posenc's own forward, bad input (throws, writes nothing) and thread-count invariance.
#include <posenc/grad/transform.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

namespace grad_transform_test {

using posenc_test::random_floats;
using posenc_test::worst_of;

constexpr std::size_t tokens = 5, heads = 2, head_dim = 16;
// Strided views: padding after each head and each token, so that dense-only code would go wrong.
constexpr std::size_t head_stride = head_dim + 3, token_stride = heads * head_stride + 5;
constexpr std::size_t buffer_size = tokens * token_stride;

inline std::size_t at(std::size_t t, std::size_t h, std::size_t j) { return t * token_stride + h * head_stride + j; }

/// What one transform does to each token, in double: pair i of token t is rotated by angle[t][i] and
/// scaled by scale[t][i]; pairs (2i, 2i+1) interleaved, else (i, i + r/2); lanes ≥ r pass through.
struct reference_transform {
    std::size_t rotary_dim = head_dim;
    bool interleaved = false;
    std::vector<std::vector<double>> angle, scale;

    [[nodiscard]] std::size_t pair_lane(std::size_t i, int which) const {
        return interleaved ? 2 * i + static_cast<std::size_t>(which) : i + static_cast<std::size_t>(which) * rotary_dim / 2;
    }

    /// L(x) = Σ over every token, head and lane of dy·T(x) (dense [tokens, heads, head_dim] doubles).
    [[nodiscard]] double loss(const std::vector<double>& x, const std::vector<double>& dy) const {
        double sum = 0;
        for (std::size_t t = 0; t < tokens; ++t)
            for (std::size_t h = 0; h < heads; ++h) {
                const std::size_t o = (t * heads + h) * head_dim;
                for (std::size_t j = rotary_dim; j < head_dim; ++j) sum += dy[o + j] * x[o + j];
                for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
                    const std::size_t a = o + pair_lane(i, 0), b = o + pair_lane(i, 1);
                    const double c = scale[t][i] * std::cos(angle[t][i]), s = scale[t][i] * std::sin(angle[t][i]);
                    sum += dy[a] * (c * x[a] - s * x[b]) + dy[b] * (s * x[a] + c * x[b]);
                }
            }
        return sum;
    }

    /// ∂L/∂x by central differences at the point x (L is linear, so the step only sets the rounding).
    [[nodiscard]] std::vector<double> finite_difference(std::vector<double> x, const std::vector<double>& dy) const {
        const double step = 1e-3;
        std::vector<double> g(x.size());
        for (std::size_t j = 0; j < x.size(); ++j) {
            const double keep = x[j];
            x[j] = keep + step;
            const double up = loss(x, dy);
            x[j] = keep - step;
            const double down = loss(x, dy);
            x[j] = keep;
            g[j] = (up - down) / (2 * step);
        }
        return g;
    }

    [[nodiscard]] double largest_scale(std::size_t t) const {
        double m = 1.0;
        for (double s : scale[t]) m = std::max(m, std::abs(s));
        return m;
    }
};

/// RoPE: angle p·inv_freq[i], scale a.
inline reference_transform rope_reference(const posenc::rope_frequencies& f, std::size_t rotary_dim, bool interleaved,
                                          const std::vector<std::int64_t>& pos) {
    reference_transform r{rotary_dim, interleaved, {}, {}};
    for (std::int64_t p : pos) {
        std::vector<double> ang, sc;
        for (double inv : f.inv_freq) {
            ang.push_back(static_cast<double>(p) * inv);
            sc.push_back(f.attention_factor);
        }
        r.angle.push_back(ang);
        r.scale.push_back(sc);
    }
    return r;
}

/// A dense copy of a strided float buffer, as doubles.
inline std::vector<double> dense(const std::vector<float>& strided) {
    std::vector<double> d(tokens * heads * head_dim);
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t j = 0; j < head_dim; ++j) d[(t * heads + h) * head_dim + j] = strided[at(t, h, j)];
    return d;
}

template <class T>
posenc::heads_view<T> strided_view(std::vector<T>& buffer) {
    return posenc::heads_view<T>(buffer.data(), {tokens, heads, head_dim}, {token_stride, head_stride});
}

/// Worst |got − ∂L/∂x| over the views' lanes in units of the float tolerance of each token:
/// 1.2e-6·(largest scale of the token). Why: each output lane is c·dy_a ± s·dy_b in float, five
/// roundings (cos, sin, two products, the sum) of at most 2^-24 relative each, of terms bounded by
/// scale·(|dy_a| + |dy_b|) ≤ 2·scale for |dy| ≤ 1: 5·2^-24·2 ≈ 6e-7 per unit of scale, doubled.
/// The finite differences are exact up to ~1e-12 (L is linear). Lanes outside the view (the padding)
/// must be untouched; they count as infinitely wrong if changed.
inline double worst_vs_fd(const std::vector<float>& got, const std::vector<float>& before,
                          const std::vector<double>& fd, const reference_transform& ref) {
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const std::size_t t = i / token_stride, in_token = i % token_stride, h = in_token / head_stride,
                          j = in_token % head_stride;
        if (t >= tokens || h >= heads || j >= head_dim) {
            if (got[i] != before[i]) return HUGE_VAL;
            continue;
        }
        const double tol = 1.2e-6 * ref.largest_scale(t);
        worst = worst_of(worst, std::abs(double(got[i]) - fd[(t * heads + h) * head_dim + j]) / tol);
    }
    return worst;
}

enum class source { per_token, table };

/// The schedules of posenc (every any_schedule alternative), with amplitudes other than 1 where the
/// schedule has one.
inline std::vector<std::pair<std::string, posenc::any_schedule>> schedules(std::size_t rotary_dim) {
    const std::size_t n = rotary_dim / 2;
    std::vector<double> short_f(n), long_f(n);
    for (std::size_t i = 0; i < n; ++i) {
        short_f[i] = 1.0 + 0.1 * static_cast<double>(i);
        long_f[i] = 1.5 + 0.7 * static_cast<double>(i);
    }
    return {
        {"default", posenc::default_rope{.base = 100.0}},
        {"linear", posenc::linear{.base = 100.0, .factor = 4.0}},
        {"ntk_aware", posenc::ntk_aware{.base = 100.0, .factor = 3.0}},
        {"ntk_by_parts", posenc::ntk_by_parts{.base = 100.0, .factor = 4.0, .original_max_position = 16}},
        {"dynamic_ntk", posenc::dynamic_ntk{.base = 100.0, .factor = 2.0, .original_max_position = 16}},
        {"yarn", posenc::yarn{.base = 100.0, .factor = 8.0, .original_max_position = 16}},
        {"yarn attention_factor 1.7", posenc::yarn{.base = 100.0, .factor = 4.0, .original_max_position = 16,
                                                   .attention_factor = 1.7}},
        {"llama3", posenc::llama3{.base = 100.0, .factor = 8.0, .original_max_position = 16}},
        {"longrope", posenc::longrope{.base = 100.0, .short_factor = short_f, .long_factor = long_f,
                                      .original_max_position = 16, .factor = 4.0}},
    };
}

}  // namespace grad_transform_test

using namespace grad_transform_test;

TEST_CASE("rotary backward equals finite differences: every layout, schedule, partial width and cos/sin source",
          "[grad]") {
    const std::vector<std::int64_t> scattered{7, 0, 31, 3, 60};  // any order; inside the table of 64
    std::size_t cases = 0;
    for (bool interleaved : {false, true})
        for (std::size_t rotary_dim : {head_dim, head_dim / 2})
            for (const auto& [name, schedule] : schedules(rotary_dim))
                for (source src : {source::per_token, source::table})
                    for (bool consecutive : {true, false}) {
                        INFO(name << (interleaved ? " interleaved" : " half_split") << " rotary_dim " << rotary_dim
                                  << (src == source::table ? " table" : " per token")
                                  << (consecutive ? " consecutive" : " scattered"));
                        const posenc::any_rotary rope(
                            interleaved ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split,
                            {.head_dim = head_dim, .rotary_dim = rotary_dim}, schedule, 48);
                        std::vector<std::int64_t> pos = scattered;
                        if (consecutive)
                            for (std::size_t t = 0; t < tokens; ++t) pos[t] = 40 + static_cast<std::int64_t>(t);
                        const auto ids = posenc::position_ids(pos);
                        const auto ref = rope_reference(rope.frequencies(), rotary_dim, interleaved, pos);

                        const auto dy = random_floats(buffer_size, static_cast<std::uint32_t>(cases + 1));
                        const auto x = random_floats(buffer_size, static_cast<std::uint32_t>(cases + 1000));
                        const auto fd = ref.finite_difference(dense(x), dense(dy));
                        auto got = dy;
                        const auto table = rope.table(64);
                        if (src == source::table)
                            posenc::transform_backward_queries(posenc::table_transform{rope, table}, strided_view(got), ids);
                        else
                            posenc::transform_backward_queries(rope, strided_view(got), ids);
                        CHECK(worst_vs_fd(got, dy, fd, ref) <= 1.0);
                        ++cases;
                    }
    CHECK(cases == 2 * 2 * 9 * 2 * 2);
}

TEST_CASE("rotary<Layout> backward of Q and K together equals finite differences, amplitude included", "[grad]") {
    const auto ids = posenc::position_ids::consecutive(-3, tokens);  // negative positions: per-token angles
    const std::vector<std::int64_t> pos{-3, -2, -1, 0, 1};
    const posenc::yarn schedule{.base = 50.0, .factor = 16.0, .original_max_position = 8};
    const posenc::rotary<posenc::interleaved> rope({.head_dim = head_dim, .rotary_dim = 12}, schedule);
    REQUIRE(rope.frequencies().attention_factor > 1.2);  // the amplitude matters here
    const auto ref = rope_reference(rope.frequencies(), 12, true, pos);
    const auto dq0 = random_floats(buffer_size, 11), dk0 = random_floats(buffer_size, 12);
    const auto x = random_floats(buffer_size, 13);
    auto dq = dq0, dk = dk0;
    posenc::transform_backward(rope, strided_view(dq), strided_view(dk), ids);
    CHECK(worst_vs_fd(dq, dq0, ref.finite_difference(dense(x), dense(dq0)), ref) <= 1.0);
    CHECK(worst_vs_fd(dk, dk0, ref.finite_difference(dense(x), dense(dk0)), ref) <= 1.0);
    // _keys alone is the same operator.
    auto dk_alone = dk0;
    posenc::transform_backward_keys(rope, strided_view(dk_alone), ids);
    CHECK(dk_alone == dk);
}

TEST_CASE("xPos backward equals finite differences: queries and keys with their own scales, both layouts, partial",
          "[grad]") {
    const posenc::xpos params{.base = 10000.0, .gamma = 0.4, .scale_base = 16.0, .center = 8};
    const std::vector<std::int64_t> pos{0, 20, 5, 13, 9};
    for (bool interleaved : {false, true})
        for (std::size_t rotary_dim : {head_dim, std::size_t{10}})
            for (bool query : {true, false}) {
                INFO((interleaved ? "interleaved" : "half_split") << " rotary_dim " << rotary_dim
                                                                  << (query ? " queries" : " keys"));
                // The paper's closed form: θ_i = base^(−2i/d), ζ_i = (2i/d + γ)/(1 + γ), scale ζ_i^(±(p − c)/scale_base).
                reference_transform ref{rotary_dim, interleaved, {}, {}};
                const double d = static_cast<double>(rotary_dim);
                for (std::int64_t p : pos) {
                    std::vector<double> ang, sc;
                    for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
                        const double two_i = 2.0 * static_cast<double>(i);
                        ang.push_back(static_cast<double>(p) * std::pow(params.base, -two_i / d));
                        const double zeta = (two_i / d + params.gamma) / (1.0 + params.gamma);
                        const double e = static_cast<double>(p - params.center) / params.scale_base;
                        sc.push_back(std::pow(zeta, query ? e : -e));
                    }
                    ref.angle.push_back(ang);
                    ref.scale.push_back(sc);
                }
                const auto dy = random_floats(buffer_size, query ? 21u : 22u), x = random_floats(buffer_size, 23);
                const auto fd = ref.finite_difference(dense(x), dense(dy));
                auto got = dy, both_q = dy, both_k = dy;
                const posenc::rope_dims dims{.head_dim = head_dim, .rotary_dim = rotary_dim};
                const auto ids = posenc::position_ids(pos);
                const auto run = [&](const auto& xp) {
                    if (query)
                        posenc::transform_backward_queries(xp, strided_view(got), ids);
                    else
                        posenc::transform_backward_keys(xp, strided_view(got), ids);
                    posenc::transform_backward(xp, strided_view(both_q), strided_view(both_k), ids);
                };
                if (interleaved)
                    run(posenc::xpos_rotary<posenc::interleaved>(dims, params));
                else
                    run(posenc::xpos_rotary<posenc::half_split>(dims, params));
                CHECK(worst_vs_fd(got, dy, fd, ref) <= 1.0);
                CHECK((query ? both_q : both_k) == got);  // the two-view call gives each view its own role
            }
}

TEST_CASE("M-RoPE backward equals finite differences with distinct t, h, w positions", "[grad]") {
    for (bool interleaved : {false, true})
        for (std::size_t rotary_dim : {head_dim, std::size_t{8}}) {
            INFO((interleaved ? "interleaved" : "half_split") << " rotary_dim " << rotary_dim);
            const std::size_t pairs = rotary_dim / 2;
            const std::array<std::size_t, 3> section =
                pairs == 8 ? std::array<std::size_t, 3>{2, 3, 3} : std::array<std::size_t, 3>{2, 1, 1};
            const posenc::yarn schedule{.base = 100.0, .factor = 4.0, .original_max_position = 16};
            const std::vector<std::int64_t> t_pos{0, 4, 4, 9, 12}, h_pos{0, 1, 2, 9, 3}, w_pos{0, 7, 2, 9, 5};
            const auto run = [&](const auto& rope, std::vector<float>& dq, std::vector<float>& dk) {
                posenc::transform_backward(rope, strided_view(dq), strided_view(dk),
                                           posenc::axis_positions(t_pos, h_pos, w_pos));
                return rope.frequencies();
            };
            const auto dq0 = random_floats(buffer_size, 31), dk0 = random_floats(buffer_size, 32);
            auto dq = dq0, dk = dk0;
            const posenc::rope_dims dims{.head_dim = head_dim, .rotary_dim = rotary_dim};
            const posenc::rope_frequencies f =
                interleaved ? run(posenc::mrope_rotary<posenc::interleaved>(dims, schedule, posenc::mrope{.section = section}), dq, dk)
                            : run(posenc::mrope_rotary<posenc::half_split>(dims, schedule, posenc::mrope{.section = section}), dq, dk);
            // Consecutive sections: the first section[0] pairs read t, the next section[1] h, the rest w.
            reference_transform ref{rotary_dim, interleaved, {}, {}};
            for (std::size_t t = 0; t < tokens; ++t) {
                std::vector<double> ang, sc;
                for (std::size_t i = 0; i < pairs; ++i) {
                    const std::int64_t p = i < section[0] ? t_pos[t] : i < section[0] + section[1] ? h_pos[t] : w_pos[t];
                    ang.push_back(static_cast<double>(p) * f.inv_freq[i]);
                    sc.push_back(f.attention_factor);
                }
                ref.angle.push_back(ang);
                ref.scale.push_back(sc);
            }
            const auto x = random_floats(buffer_size, 33);
            CHECK(worst_vs_fd(dq, dq0, ref.finite_difference(dense(x), dense(dq0)), ref) <= 1.0);
            CHECK(worst_vs_fd(dk, dk0, ref.finite_difference(dense(x), dense(dk0)), ref) <= 1.0);
        }
}

TEST_CASE("NoPE backward is the identity and checks the token counts", "[grad]") {
    const auto dq0 = random_floats(buffer_size, 41);
    auto dq = dq0;
    posenc::transform_backward_queries(posenc::nope{}, strided_view(dq), posenc::position_ids::consecutive(0, tokens));
    CHECK(dq == dq0);
    posenc_test::expect_config_error(
        [&] { posenc::transform_backward_queries(posenc::nope{}, strided_view(dq), posenc::position_ids::consecutive(0, 4)); },
        "dq.tokens", "5");
}

namespace grad_transform_test {

/// 16-bit storage: dY rounded to T first; the result must be the finite-difference gradient of that dY
/// rounded once to T: within half an ulp of T (2^-8 relative for bf16's 8 significant bits, 2^-11 for fp16's 11,
/// plus fp16's
/// subnormal spacing 2^-24 / 2) of a float result that is itself within the float tolerance.
template <class T>
void check_16bit(double half_ulp, double subnormal_half_spacing) {
    const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = head_dim, .rotary_dim = 12},
                                  posenc::yarn{.base = 100.0, .factor = 8.0, .original_max_position = 16});
    const std::vector<std::int64_t> pos{3, 9, 1, 30, 2};
    const auto ref = rope_reference(rope.frequencies(), 12, false, pos);
    const auto raw = random_floats(buffer_size, 51);
    std::vector<T> got(raw.size());
    std::vector<float> dy_float(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
        got[i] = T(raw[i]);
        dy_float[i] = static_cast<float>(got[i]);
    }
    const auto before = got;
    const auto fd = ref.finite_difference(dense(random_floats(buffer_size, 52)), dense(dy_float));
    posenc::transform_backward_keys(rope, strided_view(got), posenc::position_ids(pos));
    double worst = 0;
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < heads; ++h) {
            for (std::size_t j = 0; j < head_dim; ++j) {
                const double want = fd[(t * heads + h) * head_dim + j];
                const double float_tol = 1.2e-6 * ref.largest_scale(t);
                const double tol = half_ulp * (std::abs(want) + float_tol) + float_tol + subnormal_half_spacing;
                worst = worst_of(worst, std::abs(double(static_cast<float>(got[at(t, h, j)])) - want) / tol);
            }
            for (std::size_t j = head_dim; j < head_stride; ++j) CHECK(got[at(t, h, j)] == before[at(t, h, j)]);
        }
    CHECK(worst <= 1.0);
}

}  // namespace grad_transform_test

TEST_CASE("rotary backward on bf16 and fp16 storage is the gradient rounded once", "[grad]") {
    SECTION("bf16") { check_16bit<posenc::bf16>(0x1p-8, 0.0); }
    SECTION("fp16") { check_16bit<posenc::fp16>(0x1p-11, 0x1p-25); }
}

TEST_CASE("transpose identity: <T(x), y> = <x, Tt(y)> with posenc's own forward", "[grad]") {
    // Both sides are float vectors summed in double; each lane carries at most ~6e-7·scale relative
    // error (see worst_vs_fd), so the two sums may differ by 2·1.2e-6·scale·Σ|x_i|·|y_i|·... bounded
    // here by 2.5e-6 times the sum of the absolute products of both sides.
    const auto x0 = random_floats(buffer_size, 61), y0 = random_floats(buffer_size, 62);
    const auto inner = [](const std::vector<float>& a, const std::vector<float>& b, double& abs_sum) {
        double s = 0;
        for (std::size_t t = 0; t < tokens; ++t)
            for (std::size_t h = 0; h < heads; ++h)
                for (std::size_t j = 0; j < head_dim; ++j) {
                    const double p = double(a[at(t, h, j)]) * double(b[at(t, h, j)]);
                    s += p;
                    abs_sum += std::abs(p);
                }
        return s;
    };
    const auto check_identity = [&](const char* what, const auto& forward, const auto& backward) {
        INFO(what);
        auto tx = x0, ty = y0;
        forward(strided_view(tx));
        backward(strided_view(ty));
        double abs_sum = 0;
        const double lhs = inner(tx, y0, abs_sum), rhs = inner(x0, ty, abs_sum);
        CHECK(std::abs(lhs - rhs) <= 2.5e-6 * abs_sum);
        CHECK(tx != x0);  // the forward did something
    };
    const auto ids = posenc::position_ids::consecutive(100, tokens);
    const std::vector<std::int64_t> scattered{17, 2, 250, 99, 0};
    for (bool interleaved : {false, true})
        for (std::size_t rotary_dim : {head_dim, std::size_t{6}})
            for (const auto& [name, schedule] : schedules(rotary_dim)) {
                INFO(name << " interleaved " << interleaved << " rotary_dim " << rotary_dim);
                const posenc::any_rotary rope(interleaved ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split,
                                              {.head_dim = head_dim, .rotary_dim = rotary_dim}, schedule, 48);
                check_identity("rotary", [&](auto v) { rope.apply(v, ids); },
                               [&](auto v) { posenc::transform_backward_queries(rope, v, ids); });
                const auto table = rope.table(256);
                const posenc::table_transform tt{rope, table};
                check_identity("table", [&](auto v) { rope.apply(table, v, posenc::position_ids(scattered)); },
                               [&](auto v) { posenc::transform_backward_keys(tt, v, posenc::position_ids(scattered)); });
            }
    const posenc::xpos_rotary<posenc::interleaved> xp({.head_dim = head_dim}, posenc::xpos{.scale_base = 32.0});
    check_identity("xpos queries", [&](auto v) { xp.apply_queries(v, ids); },
                   [&](auto v) { posenc::transform_backward_queries(xp, v, ids); });
    check_identity("xpos keys", [&](auto v) { xp.apply_keys(v, ids); },
                   [&](auto v) { posenc::transform_backward_keys(xp, v, ids); });
    const posenc::mrope_rotary<posenc::half_split> mr({.head_dim = head_dim}, posenc::default_rope{.base = 100.0},
                                                      posenc::mrope{.section = {4, 2, 2}});
    const std::vector<std::int64_t> t_pos{0, 3, 3, 8, 9}, h_pos{0, 1, 2, 1, 9}, w_pos{0, 5, 4, 2, 9};
    const posenc::axis_positions axes(t_pos, h_pos, w_pos);
    check_identity("mrope", [&](auto v) { mr.apply(v, axes); },
                   [&](auto v) { posenc::transform_backward(mr, v, decltype(v){}, axes); });
    const auto mr_table = mr.table(128);
    check_identity("mrope table, text positions", [&](auto v) { mr.apply(mr_table, v, ids); },
                   [&](auto v) { posenc::transform_backward_queries(posenc::table_transform{mr, mr_table}, v, ids); });
}

TEST_CASE("transform_backward rejects bad input and writes nothing", "[grad]") {
    const posenc::rotary<posenc::half_split> rope({.head_dim = head_dim}, posenc::default_rope{});
    const auto dq0 = random_floats(buffer_size, 71), dk0 = random_floats(buffer_size, 72);
    auto dq = dq0, dk = dk0;
    const auto ids = posenc::position_ids::consecutive(0, tokens);
    const auto unchanged = [&] {
        CHECK(dq == dq0);
        CHECK(dk == dk0);
    };
    // dK of another head_dim: dq is checked first but must not be written.
    posenc::heads_view<float> wide_k(dk.data(), {tokens, 1, head_dim + 2});
    posenc_test::expect_config_error([&] { posenc::transform_backward(rope, strided_view(dq), wide_k, ids); },
                                     "dk.head_dim", "18");
    unchanged();
    posenc_test::expect_config_error(
        [&] { posenc::transform_backward(rope, strided_view(dq), strided_view(dk), posenc::position_ids::consecutive(0, 3)); },
        "dq.tokens", "5");
    unchanged();
    posenc_test::expect_config_error([&] { posenc::transform_backward(rope, strided_view(dq), strided_view(dq), ids); },
                                     "dk", "memory of dq");
    unchanged();
    // A table: another rotary's, or too short for a position.
    const posenc::rotary<posenc::half_split> other({.head_dim = head_dim}, posenc::default_rope{.base = 500.0});
    const auto other_table = other.table(16);
    posenc_test::expect_config_error(
        [&] { posenc::transform_backward(posenc::table_transform{rope, other_table}, strided_view(dq), strided_view(dk), ids); },
        "table", "pairs");
    unchanged();
    const auto short_table = rope.table(4);
    CHECK_THROWS_AS(posenc::transform_backward(posenc::table_transform{rope, short_table}, strided_view(dq),
                                               strided_view(dk), ids),
                    posenc::range_error);
    unchanged();
    // xPos: a key scale outside the float range while every query scale is inside it. At p − c = −36000,
    // pair 0 (ζ = 0.4/1.4) has the query scale ζ^(−36000/512) = e^88.09 ≈ 1.8e38 < FLT_MAX and the key
    // scale e^−88.09 ≈ 5.5e-39 < FLT_MIN: dq must not be written before the keys' rows are checked.
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = head_dim}, posenc::xpos{.center = 36000});
    const std::vector<std::int64_t> far{36000, 36001, 36002, 36003, 0};
    CHECK_NOTHROW(xp.rows(posenc::position_ids(far), posenc::xpos_role::query));
    CHECK_THROWS_AS(posenc::transform_backward(xp, strided_view(dq), strided_view(dk), posenc::position_ids(far)),
                    posenc::range_error);
    unchanged();
    // M-RoPE: components of different lengths.
    const posenc::mrope_rotary<posenc::half_split> mr({.head_dim = head_dim}, posenc::default_rope{},
                                                      posenc::mrope{.section = {4, 2, 2}});
    const std::vector<std::int64_t> five{0, 1, 2, 3, 4}, four{0, 1, 2, 3};
    posenc_test::expect_config_error(
        [&] { posenc::transform_backward(mr, strided_view(dq), strided_view(dk), posenc::axis_positions(five, four, five)); },
        "positions[1]", "4");
    unchanged();
    // M-RoPE through a table: checked as its forward (another rotary's frequencies; too short).
    posenc_test::expect_config_error(
        [&] { posenc::transform_backward(posenc::table_transform{mr, other_table}, strided_view(dq), strided_view(dk), ids); },
        "table");
    unchanged();
    const auto short_mr_table = mr.table(4);
    CHECK_THROWS_AS(posenc::transform_backward(posenc::table_transform{mr, short_mr_table}, strided_view(dq), strided_view(dk), ids),
                    posenc::range_error);
    unchanged();
}

TEST_CASE("transform_backward gives the same bits for 1, 2 and 3 threads and on the caller's executor",
          "[grad][threads]") {
    const std::size_t T = 300, H = 16, D = 128;  // ~600K floats a view: several slices
    for (bool interleaved : {false, true}) {
        posenc::any_rotary rope(interleaved ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split,
                                {.head_dim = D}, posenc::yarn{.base = 500000, .factor = 8, .original_max_position = 4096});
        const auto table = rope.table(4096);
        const auto q0 = random_floats(T * H * D, 81), k0 = random_floats(T * 4 * D, 82);
        const auto ids = posenc::position_ids::consecutive(3000, T);
        std::vector<std::vector<float>> results;
        std::atomic<std::size_t> executor_tasks{0};
        for (int run = 0; run < 4; ++run) {
            if (run < 3) {
                rope.set_threads(static_cast<unsigned>(run + 1));
            } else {  // the caller's executor, running the slices backwards on this thread
                rope.set_threads(3);
                rope.set_executor([&](std::size_t n, const std::function<void(std::size_t)>& task) {
                    for (std::size_t i = n; i-- > 0;) {
                        ++executor_tasks;
                        task(i);
                    }
                });
            }
            for (bool use_table : {false, true}) {
                auto q = q0, k = k0;
                posenc::heads_view<float> qv(q.data(), {T, H, D}), kv(k.data(), {T, 4, D});
                if (use_table)
                    posenc::transform_backward(posenc::table_transform{rope, table}, qv, kv, ids);
                else
                    posenc::transform_backward(rope, qv, kv, ids);
                q.insert(q.end(), k.begin(), k.end());
                results.push_back(q);
            }
        }
        CHECK(executor_tasks >= 4);  // the slices ran on the executor (two calls, two or more slices each)
        for (std::size_t i = 2; i < results.size(); ++i) {
            INFO("run " << i / 2 << " table " << i % 2);
            CHECK(results[i] == results[i % 2]);  // bit for bit
        }
    }
}
