// A transformer-block walk-through over a model read from its config.json: one posenc::attention_layer
// per layer (hf::make_attention_layers: the rotary, mask, scale and KV cache of each layer, as the
// file's layer_types / windows / no_rope_layers give them), a prefill of a prompt, a decode loop
// through the layers' caches, and one context shift.
//
// Each layer is attention only (q, k, v = norm(x)·W, x += attention(q, k, v)·Wo, with a small model width
// and random weights): enough to show that the caches reproduce prefill through a stack of layers.
// Printed:
//   1. decode through the caches equals one prefill of the whole sequence (max abs difference);
//   2. after a context shift (keep 4 sink tokens and the most recent ones, drop the middle, re-rotate),
//      each layer's decode equals a fresh layer given the kept (un-rotated) keys at the shifted positions.
// Usage: transformer_block config.json  (ctest: tests/data/configs/gemma-3-1b-v5.json, 8 layers,
// sliding 512 / full, each with its own RoPE base). Small sizes: it runs in a fraction of a second.
#include <posenc/hf/attention_layer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t d_model = 64;  // the toy model's width; the attention shapes are the config's
constexpr std::size_t prompt = 40, steps = 24, total = prompt + steps, capacity = 56, n_sink = 4, n_recent = 40;

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

// Each row divided by its root mean square (RMSNorm without a gain), as before every attention of
// real models: without it the residual stream grows layer by layer and the softmax turns so sharp that
// float rounding is amplified.
matrix rms_norm(const matrix& x) {
    matrix y(x.size());
    for (std::size_t i = 0; i < x.size(); i += d_model) {
        double ss = 0;
        for (std::size_t c = 0; c < d_model; ++c) ss += static_cast<double>(x[i + c]) * x[i + c];
        const auto r = static_cast<float>(1.0 / std::sqrt(ss / d_model + 1e-6));
        for (std::size_t c = 0; c < d_model; ++c) y[i + c] = x[i + c] * r;
    }
    return y;
}

struct model {
    posenc::hf::model_layers config;
    std::size_t H, Hkv, D;
    struct weights {
        matrix wq, wk, wv, wo;
    };
    std::vector<weights> w;
    std::vector<float> sinks;  // gpt-oss's learned sinks are weights: random here, like the rest

    std::vector<posenc::attention_layer> make_layers(std::size_t cap) const {
        auto layers = posenc::hf::make_attention_layers(config, cap);
        for (auto& l : layers)
            if (l.needs_sinks()) l.set_sinks(sinks);
        return layers;
    }
    posenc::heads_view<float> heads(matrix& m, std::size_t n, std::size_t h) const { return {std::span<float>(m), {n, h, D}}; }
};

// One forward pass of n tokens at `pos` through every layer, each layer's K/V appended to its cache.
// `raw_keys` collects each layer's un-rotated K; `fresh_err` (after the shift) compares each layer's
// output with a fresh layer given the raw kept keys at the cache's positions.
void forward(const model& m, std::vector<posenc::attention_layer>& layers, matrix& x, std::size_t n,
             const posenc::position_ids& pos, std::vector<matrix>* raw_keys, double* fresh_err) {
    const std::size_t qw = m.H * m.D, kw = m.Hkv * m.D;
    for (std::size_t l = 0; l < layers.size(); ++l) {
        const matrix h = rms_norm(x);
        matrix q = matmul(h.data(), n, m.w[l].wq, d_model, qw), k = matmul(h.data(), n, m.w[l].wk, d_model, kw),
               v = matmul(h.data(), n, m.w[l].wv, d_model, kw), out(n * qw);
        layers[l].prefill(m.heads(q, n, m.H), m.heads(k, n, m.Hkv), m.heads(v, n, m.Hkv), pos, m.heads(out, n, m.H));
        if (raw_keys) (*raw_keys)[l].insert(raw_keys[0][l].end(), k.begin(), k.end());
        if (fresh_err) {
            posenc::attention_layer fresh = posenc::hf::make_attention_layer(m.config, l, capacity);
            if (fresh.needs_sinks()) fresh.set_sinks(m.sinks);
            const std::size_t kept = layers[l].size() - n;  // before this step's token
            matrix kr((*raw_keys)[l].begin(), (*raw_keys)[l].begin() + static_cast<std::ptrdiff_t>(kept * kw)), vc(kept * kw);
            const auto cv = layers[l].values();
            for (std::size_t t = 0; t < kept; ++t)
                for (std::size_t h = 0; h < m.Hkv; ++h) std::copy_n(cv.row(t, h), m.D, vc.data() + (t * m.Hkv + h) * m.D);
            const auto cached = layers[l].positions();
            std::vector<std::int64_t> kept_pos(kept);
            for (std::size_t t = 0; t < kept; ++t) kept_pos[t] = cached[t];
            fresh.append(m.heads(kr, kept, m.Hkv), m.heads(vc, kept, m.Hkv), kept_pos);
            matrix ref(n * qw);
            fresh.prefill(m.heads(q, n, m.H), m.heads(k, n, m.Hkv), m.heads(v, n, m.Hkv), pos, m.heads(ref, n, m.H));
            for (std::size_t i = 0; i < out.size(); ++i) *fresh_err = worse(*fresh_err, static_cast<double>(std::abs(out[i] - ref[i])));
        }
        const matrix y = matmul(out.data(), n, m.w[l].wo, qw, d_model);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    }
}

int run(const char* config_path) {
    model m{posenc::hf::load_layers(config_path), 0, 0, 0, {}, {}};
    m.H = m.config.heads, m.Hkv = m.config.kv_heads, m.D = m.config.head_dim;
    std::mt19937 gen(7);
    for (std::size_t l = 0; l < m.config.layers.size(); ++l)
        m.w.push_back({random_matrix(d_model, m.H * m.D, gen), random_matrix(d_model, m.Hkv * m.D, gen),
                       random_matrix(d_model, m.Hkv * m.D, gen), random_matrix(m.H * m.D, d_model, gen)});
    m.sinks = random_matrix(1, m.H, gen);
    const matrix tokens = random_matrix(total, d_model, gen);  // the embeddings of the whole sequence

    std::vector<posenc::attention_layer> layers = m.make_layers(capacity);
    std::printf("%s: %zu layers, %zu heads / %zu kv heads, head_dim %zu:", m.config.model_type.c_str(), layers.size(), m.H,
                m.Hkv, m.D);
    for (const auto& l : layers) std::printf(" %s%s", l.is_nope() ? "nope+" : "", std::string(l.mask().kind()).c_str());
    std::printf("\n");

    // The reference: one prefill of all `total` tokens through layers with room for them.
    matrix full = tokens;
    {
        std::vector<posenc::attention_layer> big = m.make_layers(total);
        forward(m, big, full, total, posenc::position_ids::consecutive(0, total), nullptr, nullptr);
    }

    // Prefill of the prompt, then decode token by token until the caches are full.
    std::vector<matrix> raw_keys(layers.size());  // un-rotated K of the cached tokens, for the check after the shift
    matrix x(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt * d_model));
    forward(m, layers, x, prompt, posenc::position_ids::consecutive(0, prompt), &raw_keys, nullptr);
    double decode_err = 0;
    for (std::size_t i = 0; i < prompt * d_model; ++i) decode_err = worse(decode_err, static_cast<double>(std::abs(x[i] - full[i])));
    std::size_t t = prompt;
    for (; t < total && t < capacity; ++t) {
        matrix xt(tokens.begin() + static_cast<std::ptrdiff_t>(t * d_model), tokens.begin() + static_cast<std::ptrdiff_t>((t + 1) * d_model));
        forward(m, layers, xt, 1, posenc::position_ids::consecutive(static_cast<std::int64_t>(t), 1), &raw_keys, nullptr);
        for (std::size_t i = 0; i < d_model; ++i) decode_err = worse(decode_err, static_cast<double>(std::abs(xt[i] - full[t * d_model + i])));
    }
    double scale = 0;
    for (float f : full) scale = worse(scale, static_cast<double>(std::abs(f)));
    std::printf("prefill %zu + decode %zu tokens: max |decode - prefill| = %.3g (max |x| %.3g)\n", prompt, t - prompt, decode_err, scale);

    // The caches are full: context shift in every layer, then keep decoding at the shifted positions.
    std::size_t dropped = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
        dropped = layers[l].context_shift(n_sink, n_recent);
        const std::size_t kw = m.Hkv * m.D, from = (capacity - n_recent) * kw;  // the raw keys, shifted the same way
        raw_keys[l].erase(raw_keys[l].begin() + static_cast<std::ptrdiff_t>(n_sink * kw), raw_keys[l].begin() + static_cast<std::ptrdiff_t>(from));
    }
    double shift_err = 0;
    std::size_t after = 0;
    for (; t < total; ++t, ++after) {
        matrix xt(tokens.begin() + static_cast<std::ptrdiff_t>(t * d_model), tokens.begin() + static_cast<std::ptrdiff_t>((t + 1) * d_model));
        forward(m, layers, xt, 1, posenc::position_ids::consecutive(layers[0].next_position(), 1), &raw_keys, &shift_err);
    }
    std::printf("context shift: dropped %zu tokens (kept %zu sinks + %zu recent), decoded %zu more: "
                "max |decode - fresh layer at shifted positions| = %.3g\n",
                dropped, n_sink, n_recent, after, shift_err);
    // Float rounding, compounded once per layer, relative to the residual stream's size.
    const double bound = 2e-6 * scale * static_cast<double>(layers.size());
    const bool ok = decode_err <= bound && shift_err <= bound && after > 0;
    std::printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: transformer_block config.json\n");
        return 2;
    }
    try {
        return run(argv[1]);
    } catch (const posenc::error& e) {  // a config posenc rejects (or one with MLA layers): one line
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
