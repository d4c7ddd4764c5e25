// NoPE: the identity transform, permutation equivariance ("the dog bit the man" vs "the man bit the
// dog" are indistinguishable without positions), the logit temperature, and Llama 4's per-position
// query temperature against its closed form log(floor((pos+1)/floor_scale) + 1)·attn_scale + 1.
#include <posenc/posenc.hpp>

#include <cmath>
#include <map>
#include <string>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

using posenc_test::expect_config_error;

namespace {


constexpr std::size_t toy_d_model = 16, toy_heads = 2, toy_head_dim = 8;

// A toy one-layer attention over a sentence: word embeddings (fixed per word), optional absolute
// embeddings, Q/K/V projections, an optional query/key transform, softmax(λ·qᵀk)·V per head.
struct toy_attention {
    std::vector<float> wq = posenc_test::random_floats(toy_d_model * toy_d_model, 101u, 0.3f);
    std::vector<float> wk = posenc_test::random_floats(toy_d_model * toy_d_model, 102u, 0.3f);
    std::vector<float> wv = posenc_test::random_floats(toy_d_model * toy_d_model, 103u, 0.3f);

    static std::vector<float> embed(const std::vector<std::string>& words) {
        static const std::map<std::string, std::uint32_t> vocab{{"the", 1}, {"dog", 2}, {"bit", 3}, {"man", 4}};
        std::vector<float> x;
        for (const auto& w : words) {
            const auto e = posenc_test::random_floats(toy_d_model, vocab.at(w));
            x.insert(x.end(), e.begin(), e.end());
        }
        return x;
    }

    static std::vector<float> project(const std::vector<float>& x, const std::vector<float>& w) {
        const std::size_t tokens = x.size() / toy_d_model;
        std::vector<float> y(tokens * toy_d_model);
        for (std::size_t t = 0; t < tokens; ++t)
            for (std::size_t o = 0; o < toy_d_model; ++o) {
                double s = 0;
                for (std::size_t i = 0; i < toy_d_model; ++i) s += static_cast<double>(x[t * toy_d_model + i]) * w[i * toy_d_model + o];
                y[t * toy_d_model + o] = static_cast<float>(s);
            }
        return y;
    }

    // Outputs [tokens, toy_d_model] in double. `transform(q_view, k_view, positions)` runs on Q and K.
    template <class Transform>
    std::vector<double> run(const std::vector<float>& x, Transform&& transform, bool causal = false) const {
        const std::size_t tokens = x.size() / toy_d_model;
        auto q = project(x, wq), k = project(x, wk);
        const auto v = project(x, wv);
        const auto pos = posenc::position_ids::consecutive(0, tokens);
        transform(posenc::heads_view<float>(std::span<float>(q), {tokens, toy_heads, toy_head_dim}),
                  posenc::heads_view<float>(std::span<float>(k), {tokens, toy_heads, toy_head_dim}), pos);
        const double lambda = posenc::logit_temperature::inverse_sqrt(toy_head_dim).scale();
        std::vector<double> out(tokens * toy_d_model, 0.0);
        for (std::size_t h = 0; h < toy_heads; ++h)
            for (std::size_t i = 0; i < tokens; ++i) {
                std::vector<double> p(tokens, 0.0);
                double mx = -1e300, sum = 0;
                for (std::size_t j = 0; j < tokens; ++j) {
                    if (causal && j > i) continue;
                    double s = 0;
                    for (std::size_t c = 0; c < toy_head_dim; ++c)
                        s += static_cast<double>(q[(i * toy_heads + h) * toy_head_dim + c]) * k[(j * toy_heads + h) * toy_head_dim + c];
                    p[j] = lambda * s;
                    mx = std::max(mx, p[j]);
                }
                for (std::size_t j = 0; j < tokens; ++j) {
                    p[j] = causal && j > i ? 0.0 : std::exp(p[j] - mx);
                    sum += p[j];
                }
                for (std::size_t j = 0; j < tokens; ++j)
                    for (std::size_t c = 0; c < toy_head_dim; ++c)
                        out[i * toy_d_model + h * toy_head_dim + c] += p[j] / sum * v[(j * toy_heads + h) * toy_head_dim + c];
            }
        return out;
    }
};

std::vector<double> mean_pool(const std::vector<double>& out) {
    const std::size_t tokens = out.size() / toy_d_model;
    std::vector<double> m(toy_d_model, 0.0);
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t c = 0; c < toy_d_model; ++c) m[c] += out[t * toy_d_model + c] / static_cast<double>(tokens);
    return m;
}

}  // namespace

TEST_CASE("NoPE is the identity and checks shapes", "[nope]") {
    static_assert(posenc::qk_transform<posenc::nope>);
    const auto q0 = posenc_test::random_floats(4 * 2 * 8, 9u), k0 = posenc_test::random_floats(4 * 2 * 8, 10u);
    auto q = q0, k = k0;
    const posenc::nope nope;
    nope.apply(posenc::heads_view<float>(std::span<float>(q), {4, 2, 8}),
               posenc::heads_view<float>(std::span<float>(k), {4, 2, 8}), posenc::position_ids::consecutive(123, 4));
    nope.apply(posenc::heads_view<float>(std::span<float>(q), {4, 2, 8}), std::vector<std::int64_t>{9, 1, 5, 2});
    CHECK(q == q0);
    CHECK(k == k0);
    expect_config_error([&] { nope.apply(posenc::heads_view<float>(std::span<float>(q), {4, 2, 8}),
                                         posenc::position_ids::consecutive(0, 3)); },
                        "x.tokens", "4");
    expect_config_error([&] { nope.apply({}, posenc::heads_view<float>(std::span<float>(k), {4, 2, 8}),
                                         posenc::position_ids::consecutive(0, 5)); },
                        "k.tokens", "4");
}

TEST_CASE("NoPE cannot tell 'the dog bit the man' from 'the man bit the dog'", "[nope][properties]") {
    // Without positions (and without a causal mask), attention is permutation-equivariant: swapping
    // "dog" and "man" swaps their outputs and changes nothing else, so a pooled sentence vector is the
    // same for both sentences (seed 001's example).
    const toy_attention attn;
    const std::vector<std::string> a{"the", "dog", "bit", "the", "man"}, b{"the", "man", "bit", "the", "dog"};
    const std::size_t perm[] = {0, 4, 2, 3, 1};  // token t of a is token perm[t] of b
    const auto xa = toy_attention::embed(a), xb = toy_attention::embed(b);
    auto nope = [](auto q, auto k, const auto& pos) { posenc::nope{}.apply(q, k, pos); };
    const auto out_a = attn.run(xa, nope), out_b = attn.run(xb, nope);
    for (std::size_t t = 0; t < a.size(); ++t)
        for (std::size_t c = 0; c < toy_d_model; ++c) CHECK(std::abs(out_a[t * toy_d_model + c] - out_b[perm[t] * toy_d_model + c]) <= 1e-12);
    CHECK(posenc_test::max_abs_diff(mean_pool(out_a), mean_pool(out_b)) <= 1e-12);

    // Any positional signal breaks the tie: sinusoidal embeddings added to the input, RoPE or xPos on
    // Q/K, or (for NoPE decoders) the causal mask itself.
    auto with_sinusoidal = [](std::vector<float> x) {
        posenc::sinusoidal{.d_model = toy_d_model}.add_to(x, posenc::position_ids::consecutive(0, x.size() / toy_d_model));
        return x;
    };
    CHECK(posenc_test::max_abs_diff(mean_pool(attn.run(with_sinusoidal(xa), nope)),
                                    mean_pool(attn.run(with_sinusoidal(xb), nope))) > 1e-3);
    const posenc::rotary<posenc::half_split> rope({.head_dim = toy_head_dim}, posenc::default_rope{});
    auto rotary = [&](auto q, auto k, const auto& pos) { rope.apply(q, k, pos); };
    CHECK(posenc_test::max_abs_diff(mean_pool(attn.run(xa, rotary)), mean_pool(attn.run(xb, rotary))) > 1e-3);
    const posenc::xpos_rotary<posenc::half_split> xpos({.head_dim = toy_head_dim}, posenc::xpos{});
    auto with_xpos = [&](auto q, auto k, const auto& pos) { xpos.apply(q, k, pos); };
    CHECK(posenc_test::max_abs_diff(mean_pool(attn.run(xa, with_xpos)), mean_pool(attn.run(xb, with_xpos))) > 1e-3);
    CHECK(posenc_test::max_abs_diff(mean_pool(attn.run(xa, nope, true)), mean_pool(attn.run(xb, nope, true))) > 1e-3);
}

TEST_CASE("logit temperature multiplies the logits by lambda", "[nope][temperature]") {
    CHECK(posenc::logit_temperature::inverse_sqrt(64).scale() == 0.125);
    CHECK(posenc::logit_temperature{}.scale() == 1.0);
    const posenc::logit_temperature t{.lambda = 0.3};
    std::vector<float> scores{1.0f, -2.5f, 1e30f, 0.0f};
    const auto before = scores;
    t.apply(scores);
    for (std::size_t j = 0; j < scores.size(); ++j) CHECK(scores[j] == static_cast<float>(0.3 * before[j]));
    expect_config_error([] { (void)posenc::logit_temperature{.lambda = 0}.scale(); }, "lambda", "0");
    expect_config_error([] { (void)posenc::logit_temperature{.lambda = -1}.scale(); }, "lambda", "-1");
    expect_config_error([] { (void)posenc::logit_temperature::inverse_sqrt(0); }, "head_dim", "0");
}

TEST_CASE("Llama 4 attention temperature follows HF's formula", "[nope][temperature][llama4]") {
    const posenc::llama4_attn_temperature t{};  // floor_scale 8192, attn_scale 0.1
    CHECK(t.floor_scale == 8192.0);
    CHECK(t.attn_scale == 0.1);
    // s = 1 until (pos + 1) reaches floor_scale, then 1 + 0.1·ln(k + 1) on [k·8192 − 1, (k+1)·8192 − 1).
    CHECK(t.scale(0) == 1.0);
    CHECK(t.scale(8190) == 1.0);
    CHECK(std::abs(t.scale(8191) - (1.0 + 0.1 * std::log(2.0))) <= 1e-15);
    CHECK(std::abs(t.scale(16382) - (1.0 + 0.1 * std::log(2.0))) <= 1e-15);
    CHECK(std::abs(t.scale(16383) - (1.0 + 0.1 * std::log(3.0))) <= 1e-15);
    CHECK(std::abs(t.scale(1'000'000) - (1.0 + 0.1 * std::log(123.0))) <= 1e-15);  // floor(1000001/8192) = 122
    for (std::int64_t p : {0, 1, 5000, 8191, 65535, 131071, 10'000'000}) {
        const double expected = std::log1p(std::floor((static_cast<double>(p) + 1.0) / 8192.0)) * 0.1 + 1.0;
        CHECK(std::abs(t.scale(p) - expected) <= 1e-15 * expected);
    }
    const posenc::llama4_attn_temperature custom{.floor_scale = 4, .attn_scale = 0.5};
    CHECK(std::abs(custom.scale(11) - (1.0 + 0.5 * std::log(4.0))) <= 1e-15);

    // apply: q[t] ← s(pos[t])·q[t] for every head and lane.
    const std::vector<std::int64_t> pos{0, 8191, 70000};
    const auto q0 = posenc_test::random_floats(3 * 2 * 4, 4u);
    auto q = q0;
    t.apply(posenc::heads_view<float>(std::span<float>(q), {3, 2, 4}), pos);
    for (std::size_t tok = 0; tok < 3; ++tok) {
        const double s = std::log1p(std::floor((static_cast<double>(pos[tok]) + 1.0) / 8192.0)) * 0.1 + 1.0;
        for (std::size_t j = 0; j < 8; ++j) CHECK(q[tok * 8 + j] == static_cast<float>(s * q0[tok * 8 + j]));
    }

    expect_config_error([] { (void)posenc::llama4_attn_temperature{.floor_scale = 0}.scale(1); }, "floor_scale", "0");
    expect_config_error([] { (void)posenc::llama4_attn_temperature{.attn_scale = -0.1}.scale(1); }, "attn_scale", "-0.1");
    CHECK_THROWS_AS((void)t.scale(-1), posenc::range_error);
    auto q2 = q0;
    CHECK_THROWS_AS(t.apply(posenc::heads_view<float>(std::span<float>(q2), {3, 2, 4}), std::vector<std::int64_t>{0, 1, -2}),
                    posenc::range_error);
    CHECK(q2 == q0);
}
