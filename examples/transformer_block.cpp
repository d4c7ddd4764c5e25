// A transformer-block walk-through: a per-layer encoding list built by hand (RNoPE-SWA: three RoPE
// layers with a 4096-token sliding window, then one NoPE layer with full causal attention), a
// prefill of a prompt, a decode loop against each layer's KV cache, and one context shift.
//
// Each layer is attention only (q, k, v = x·W, x += attention(q, k, v)): enough to show that the
// cache reproduces prefill through a stack of layers. Printed:
//   1. decode with the caches equals a full prefill of the whole sequence (max abs difference);
//   2. after a context shift (keep 4 sink tokens and the most recent ones, drop the middle, re-rotate),
//      each layer's decode equals a fresh prefill of the kept tokens at the shifted positions.
// Small sizes: it runs in a few milliseconds.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <variant>
#include <vector>

namespace {

constexpr std::size_t Hq = 4, Hkv = 2, D = 16, d_model = Hq * D, kv_width = Hkv * D;
constexpr std::size_t prompt = 40, steps = 24, total = prompt + steps, capacity = 56, n_sink = 4, n_recent = 40;

// The per-layer encodings: what a config.json's layer_types / no_rope_layers would give.
struct rope_swa {
    posenc::rotary<posenc::half_split> rope{{.head_dim = D}, posenc::default_rope{.base = 10000}};
    posenc::sliding_window_mask mask{.window = 4096};
};
struct nope_full {
    posenc::nope transform;
    posenc::causal_mask mask;
};
using layer_encoding = std::variant<rope_swa, nope_full>;

std::vector<layer_encoding> rnope_swa_layers() { return {rope_swa{}, rope_swa{}, rope_swa{}, nope_full{}}; }

template <class E>
auto encoding_of(const E& e) {
    if constexpr (std::is_same_v<E, rope_swa>)
        return posenc::attention_encoding{e.rope};
    else
        return posenc::attention_encoding{e.transform};
}
template <class E>
auto cache_for(const E& e) {
    const posenc::kv_cache_shape shape{.kv_heads = Hkv, .head_dim = D, .capacity = capacity};
    if constexpr (std::is_same_v<E, rope_swa>)
        return posenc::kv_cache(e.rope, shape);
    else
        return posenc::kv_cache(e.transform, shape);
}

using matrix = std::vector<float>;  // row-major

/// The larger of m and d, NaN once either is (std::max(m, NaN) is m: a NaN would pass the check).
double worse(double m, double d) { return d > m || d != d ? d : m; }

matrix random_matrix(std::size_t rows, std::size_t cols, std::mt19937& gen) {
    std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(rows)));
    matrix m(rows * cols);
    for (float& x : m) x = dist(gen);
    return m;
}

// [n, cols] = x [n, rows] · w [rows, cols]
matrix matmul(const float* x, std::size_t n, const matrix& w, std::size_t rows, std::size_t cols) {
    matrix y(n * cols, 0.0f);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) y[i * cols + c] += x[i * rows + r] * w[r * cols + c];
    return y;
}

struct layer_weights {
    matrix wq, wk, wv;
};

posenc::heads_view<float> heads(matrix& m, std::size_t tokens, std::size_t h) { return {std::span<float>(m), {tokens, h, D}}; }

// Full prefill of x [n, d_model] at positions pos through every layer, no cache: x is updated in place.
void prefill(const std::vector<layer_encoding>& layers, const std::vector<layer_weights>& w, matrix& x, std::size_t n,
             const posenc::position_ids& pos) {
    for (std::size_t l = 0; l < layers.size(); ++l)
        std::visit(
            [&](const auto& e) {
                matrix q = matmul(x.data(), n, w[l].wq, d_model, d_model), k = matmul(x.data(), n, w[l].wk, d_model, kv_width),
                       v = matmul(x.data(), n, w[l].wv, d_model, kv_width), out(n * d_model);
                posenc::attention(encoding_of(e), heads(q, n, Hq), heads(k, n, Hkv), heads(v, n, Hkv), heads(out, n, Hq), pos, pos,
                                  e.mask);
                for (std::size_t i = 0; i < x.size(); ++i) x[i] += out[i];
            },
            layers[l]);
}

}  // namespace

int main() {
    std::mt19937 gen(7);
    const std::vector<layer_encoding> layers = rnope_swa_layers();
    std::vector<layer_weights> weights;
    for (std::size_t l = 0; l < layers.size(); ++l)
        weights.push_back({random_matrix(d_model, d_model, gen), random_matrix(d_model, kv_width, gen),
                           random_matrix(d_model, kv_width, gen)});
    const matrix tokens = random_matrix(total, d_model, gen);  // the embeddings of the whole sequence

    // The reference: one prefill of all `total` tokens.
    matrix full = tokens;
    prefill(layers, weights, full, total, posenc::position_ids::consecutive(0, total));

    // The per-layer caches (a variant, as the layers' key transforms differ).
    using cache_variant = std::variant<decltype(cache_for(rope_swa{})), decltype(cache_for(nope_full{}))>;
    std::vector<cache_variant> caches;
    for (const auto& e : layers) std::visit([&](const auto& enc) { caches.emplace_back(cache_for(enc)); }, e);
    std::vector<matrix> raw_keys(layers.size());  // un-rotated K of the cached tokens, for the check after the shift

    // One forward step of n tokens at `pos` against the caches: append each layer's K/V, then attend.
    // `fresh_err` (after the shift): the largest difference between each layer's output and a fresh
    // prefill over that layer's raw kept keys at the cache's positions.
    auto step = [&](matrix& x, std::size_t n, const posenc::position_ids& pos, double* fresh_err) {
        for (std::size_t l = 0; l < layers.size(); ++l)
            std::visit(
                [&](const auto& e) {
                    auto& cache = std::get<decltype(cache_for(e))>(caches[l]);
                    matrix q = matmul(x.data(), n, weights[l].wq, d_model, d_model);
                    matrix k = matmul(x.data(), n, weights[l].wk, d_model, kv_width);
                    matrix v = matmul(x.data(), n, weights[l].wv, d_model, kv_width), out(n * d_model);
                    cache.append(heads(k, n, Hkv), heads(v, n, Hkv), pos);
                    raw_keys[l].insert(raw_keys[l].end(), k.begin(), k.end());
                    posenc::attention(encoding_of(e), heads(q, n, Hq), cache, heads(out, n, Hq), pos, e.mask);
                    if (fresh_err) {  // fresh prefill: raw kept keys rotated inside attention at the cache's positions
                        matrix kr = raw_keys[l], vc(cache.size() * kv_width), ref(n * d_model);
                        for (std::size_t t = 0; t < cache.size(); ++t)
                            for (std::size_t h = 0; h < Hkv; ++h)
                                std::copy_n(cache.values().row(t, h), D, vc.data() + (t * Hkv + h) * D);
                        posenc::attention(encoding_of(e), heads(q, n, Hq), heads(kr, cache.size(), Hkv),
                                          heads(vc, cache.size(), Hkv), heads(ref, n, Hq), pos, cache.positions(), e.mask);
                        for (std::size_t i = 0; i < out.size(); ++i)
                            *fresh_err = worse(*fresh_err, static_cast<double>(std::abs(out[i] - ref[i])));
                    }
                    for (std::size_t i = 0; i < x.size(); ++i) x[i] += out[i];
                },
                layers[l]);
    };

    // Prefill of the prompt through the caches, then decode token by token.
    matrix x(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt * d_model));
    step(x, prompt, posenc::position_ids::consecutive(0, prompt), nullptr);
    double decode_err = 0;
    for (std::size_t i = 0; i < prompt * d_model; ++i) decode_err = worse(decode_err, static_cast<double>(std::abs(x[i] - full[i])));
    std::size_t t = prompt;
    for (; t < total && t < capacity; ++t) {
        matrix xt(tokens.begin() + static_cast<std::ptrdiff_t>(t * d_model), tokens.begin() + static_cast<std::ptrdiff_t>((t + 1) * d_model));
        step(xt, 1, posenc::position_ids::consecutive(static_cast<std::int64_t>(t), 1), nullptr);
        for (std::size_t i = 0; i < d_model; ++i)
            decode_err = worse(decode_err, static_cast<double>(std::abs(xt[i] - full[t * d_model + i])));
    }
    std::printf("RNoPE-SWA, %zu layers: prefill %zu + decode %zu tokens, max |decode - prefill| = %.3g\n", layers.size(),
                prompt, t - prompt, decode_err);

    // The caches are full: context shift in every layer, then keep decoding at the shifted positions.
    std::size_t dropped = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
        dropped = std::visit([&](auto& c) { return c.context_shift(n_sink, n_recent); }, caches[l]);
        const std::size_t from = (capacity - n_recent) * kv_width;  // the raw keys, shifted the same way
        raw_keys[l].erase(raw_keys[l].begin() + static_cast<std::ptrdiff_t>(n_sink * kv_width),
                          raw_keys[l].begin() + static_cast<std::ptrdiff_t>(from));
    }
    double shift_err = 0;
    std::size_t after = 0;
    for (; t < total; ++t, ++after) {
        matrix xt(tokens.begin() + static_cast<std::ptrdiff_t>(t * d_model), tokens.begin() + static_cast<std::ptrdiff_t>((t + 1) * d_model));
        const std::int64_t p = std::visit([](const auto& c) { return c.next_position(); }, caches[0]);
        step(xt, 1, posenc::position_ids::consecutive(p, 1), &shift_err);
    }
    std::printf("context shift: dropped %zu tokens (kept %zu sinks + %zu recent), decoded %zu more: "
                "max |decode - fresh prefill at shifted positions| = %.3g\n",
                dropped, n_sink, n_recent, after, shift_err);
    const bool ok = decode_err <= 1e-5 && shift_err <= 1e-5 && after > 0;
    std::printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
