#pragma once
// A small decoder-only transformer, written to be read: token embeddings, `layers` blocks of
//   x += Wo·attention(T(RMSNorm(x)·Wq), T(RMSNorm(x)·Wk), RMSNorm(x)·Wv)   (posenc, forward and backward)
//   x += W2·silu(W1·RMSNorm(x))
// then a final RMSNorm and the LM head, softmax cross-entropy on the answer positions, AdamW.
// Each backward is written out next to its forward; tests/test_trainer_grad.cpp checks the whole
// model's gradient against central finite differences of the loss.
//
// Every positional encoding and the attention itself are posenc's: the layer's encoding (NoPE, RoPE,
// ALiBi, xPos, T5 buckets) and mask (causal, or a sliding window) become a posenc::attention_encoding
// and a mask; attention_partial gives the output and the per-row log-sum-exp the backward
// (posenc::attention_backward) recomputes the probabilities from. The dense layers are Eigen.

#include <Eigen/Dense>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <posenc/attention/partial.hpp>
#include <posenc/bias/alibi.hpp>
#include <posenc/bias/t5.hpp>
#include <posenc/grad/attention.hpp>
#include <posenc/grad/transform.hpp>
#include <posenc/logit/nope.hpp>
#include <posenc/rope/default.hpp>
#include <posenc/rope/rotary.hpp>
#include <posenc/xpos/xpos.hpp>

#include "task.hpp"

namespace train_tiny {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using vector = Eigen::Matrix<float, 1, Eigen::Dynamic>;

enum class encoding { nope, rope, alibi, xpos, t5 };

/// One layer's position handling: its encoding and, for a sliding-window layer, the window (0: full causal).
struct layer_position {
    encoding kind = encoding::nope;
    std::int64_t window = 0;
};

struct model_config {
    std::size_t vocab = 20, d_model = 32, heads = 2, head_dim = 16, d_ff = 128;
    std::vector<layer_position> layers{{encoding::rope, 0}, {encoding::rope, 0}};
    double rope_base = 10000.0;
    posenc::xpos xpos{};                                           // base 10⁴, γ 0.4, scale_base 512
    posenc::t5_buckets t5{.num_buckets = 32, .max_distance = 128, .bidirectional = false};  // HF's decoder
};

/// What inference changes on the RoPE layers without retraining: the frequencies (PI, NTK, YaRN... with
/// the amplitude YaRN puts in them) and a multiplier on the logit scale (the log-length temperature).
struct rope_inference {
    std::optional<posenc::rope_frequencies> frequencies;
    double logit_multiplier = 1.0;
};

/// A weight with its gradient and AdamW's two moments.
struct parameter {
    matrix w, grad, m, v;
    bool decay = true;  ///< AdamW's weight decay (not on norms' gains or the T5 table)
    /// Normal(0, stddev) entries; stddev 0 means a norm's gain, all ones.
    void init(std::size_t rows, std::size_t cols, float stddev, std::mt19937_64& rng, bool decays = true) {
        std::normal_distribution<float> g(0.0f, stddev);
        w = matrix(rows, cols);
        for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = stddev == 0.0f ? 1.0f : g(rng);
        grad = m = v = matrix::Zero(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
        decay = decays;
    }
};

struct layer_weights {
    parameter norm1, wq, wk, wv, wo, norm2, w1, w2, t5_table;  // t5_table only for T5 layers
};

/// Wall-clock seconds per component, summed over calls (the step-time report).
struct component_times {
    double embed = 0, norm = 0, qkv = 0, attention_forward = 0, attention_backward = 0, out_proj = 0, mlp = 0,
           head_loss = 0, optimizer = 0;
    [[nodiscard]] double dense() const { return embed + norm + qkv + out_proj + mlp + head_loss; }
    [[nodiscard]] double total() const { return dense() + attention_forward + attention_backward + optimizer; }
};

class scoped_timer {
public:
    explicit scoped_timer(double& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
    ~scoped_timer() { into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
    scoped_timer(const scoped_timer&) = delete;
    scoped_timer& operator=(const scoped_timer&) = delete;

private:
    double& into_;
    std::chrono::steady_clock::time_point start_;
};

constexpr float rms_eps = 1e-6f;

/// y = x / rms(x) ⊙ gain per row; keeps 1/rms for the backward.
inline void rms_norm_forward(const matrix& x, const matrix& gain, matrix& y, vector& inv_rms) {
    inv_rms = ((x.array().square().rowwise().mean() + rms_eps).rsqrt()).transpose();
    y = (x.array().colwise() * inv_rms.transpose().array()).rowwise() * gain.row(0).array();
}

/// dx = r·(ĝ − x̂·mean(ĝ ⊙ x̂)) with x̂ = x·r and ĝ = dy ⊙ gain; dgain += Σ_rows dy ⊙ x̂.
inline matrix rms_norm_backward(const matrix& x, const matrix& gain, const vector& inv_rms, const matrix& dy,
                                matrix& dgain) {
    const matrix xhat = x.array().colwise() * inv_rms.transpose().array();
    dgain.row(0) += (dy.array() * xhat.array()).colwise().sum().matrix();
    const matrix ghat = dy.array().rowwise() * gain.row(0).array();
    const Eigen::VectorXf mean_gx = (ghat.array() * xhat.array()).rowwise().mean();
    return (ghat.array() - xhat.array().colwise() * mean_gx.array()).colwise() * inv_rms.transpose().array();
}

inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

/// Calls f(encoding, mask) with the posenc objects of one layer (for T5, the bias built from `t5_table`).
template <class F>
void with_attention(const model_config& cfg, const layer_position& layer, const matrix& t5_table,
                    const rope_inference& inference, F&& f) {
    const std::size_t D = cfg.head_dim;
    const double base_scale = 1.0 / std::sqrt(static_cast<double>(D));
    auto with_mask = [&](const auto& enc) {
        if (layer.window > 0)
            f(enc, posenc::sliding_window_mask{layer.window});
        else
            f(enc, posenc::causal_mask{});
    };
    switch (layer.kind) {
        case encoding::nope:
            with_mask(posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, posenc::fixed_scale{base_scale}});
            break;
        case encoding::rope: {
            const posenc::rope_dims dims{.head_dim = D};
            const posenc::rotary<posenc::half_split> rope =
                inference.frequencies ? posenc::rotary<posenc::half_split>(dims, *inference.frequencies)
                                      : posenc::rotary<posenc::half_split>(dims, posenc::default_rope{.base = cfg.rope_base});
            with_mask(posenc::attention_encoding{rope, posenc::no_bias{},
                                                 posenc::fixed_scale{base_scale * inference.logit_multiplier}});
            break;
        }
        case encoding::alibi:
            with_mask(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = cfg.heads}),
                                                 posenc::fixed_scale{base_scale}});
            break;
        case encoding::xpos:
            with_mask(posenc::attention_encoding{posenc::xpos_rotary<posenc::half_split>({.head_dim = D}, cfg.xpos),
                                                 posenc::no_bias{}, posenc::fixed_scale{base_scale}});
            break;
        case encoding::t5:
            with_mask(posenc::attention_encoding{
                posenc::nope{}, posenc::t5_bias(cfg.t5, cfg.heads, std::span<const float>(t5_table.data(), static_cast<std::size_t>(t5_table.size()))),
                posenc::fixed_scale{base_scale}});
            break;
    }
}

class model {
public:
    model(model_config cfg, std::uint64_t seed) : cfg_(std::move(cfg)) {
        std::mt19937_64 rng(seed);
        const auto d = cfg_.d_model, hd = cfg_.heads * cfg_.head_dim;
        const float s_in = 1.0f / std::sqrt(static_cast<float>(d));
        // Residual branches' output projections start smaller (GPT-2's 1/√(2·layers)).
        const float s_out = s_in / std::sqrt(2.0f * static_cast<float>(cfg_.layers.size()));
        embedding_.init(cfg_.vocab, d, 1.0f, rng);
        for (const auto& lp : cfg_.layers) {
            layer_weights l;
            l.norm1.init(1, d, 0.0f, rng, false);
            l.wq.init(d, hd, s_in, rng);
            l.wk.init(d, hd, s_in, rng);
            l.wv.init(d, hd, s_in, rng);
            l.wo.init(hd, d, s_out, rng);
            l.norm2.init(1, d, 0.0f, rng, false);
            l.w1.init(d, cfg_.d_ff, s_in, rng);
            l.w2.init(cfg_.d_ff, d, s_out * std::sqrt(static_cast<float>(d) / static_cast<float>(cfg_.d_ff)), rng);
            if (lp.kind == encoding::t5) {
                l.t5_table.init(static_cast<std::size_t>(cfg_.t5.num_buckets), cfg_.heads, 0.02f, rng, false);
            }
            layers_.push_back(std::move(l));
        }
        final_norm_.init(1, d, 0.0f, rng, false);
        head_.init(d, cfg_.vocab, s_in, rng);
    }

    [[nodiscard]] const model_config& config() const { return cfg_; }
    [[nodiscard]] std::vector<parameter*> parameters() {
        std::vector<parameter*> p{&embedding_};
        for (auto& l : layers_) {
            for (parameter* q : {&l.norm1, &l.wq, &l.wk, &l.wv, &l.wo, &l.norm2, &l.w1, &l.w2}) p.push_back(q);
            if (l.t5_table.w.size() > 0) p.push_back(&l.t5_table);
        }
        p.push_back(&final_norm_);
        p.push_back(&head_);
        return p;
    }
    [[nodiscard]] std::size_t parameter_count() {
        std::size_t n = 0;
        for (parameter* p : parameters()) n += static_cast<std::size_t>(p->w.size());
        return n;
    }

    struct result {
        double loss = 0;        ///< mean cross-entropy over the answer positions (nats)
        std::size_t correct = 0, answers = 0;
    };

    /// Forward (and, with `backward`, the gradients added to each parameter's grad). Per-component times
    /// are added to `times` when given.
    result run(const recall_batch& batch, bool backward, const rope_inference& inference = {},
               component_times* times = nullptr, std::vector<component_times>* per_layer = nullptr) {
        component_times scratch_times;
        component_times& tm = times ? *times : scratch_times;
        const std::size_t n = batch.batch * batch.length, L = cfg_.layers.size();
        const auto rows = static_cast<Eigen::Index>(n);
        if (per_layer) per_layer->resize(L);
        std::vector<cache> caches(L);
        matrix x(rows, static_cast<Eigen::Index>(cfg_.d_model));
        {
            scoped_timer t(tm.embed);
            for (std::size_t i = 0; i < n; ++i) x.row(static_cast<Eigen::Index>(i)) = embedding_.w.row(batch.tokens[i]);
        }
        for (std::size_t l = 0; l < L; ++l) {
            component_times before = tm;
            layer_forward(l, x, batch, inference, caches[l], tm);
            if (per_layer) accumulate_difference((*per_layer)[l], tm, before);
        }
        // Only the answer rows reach the final norm, the head and the loss.
        const auto answers = static_cast<Eigen::Index>(batch.answer_rows.size());
        matrix xa(answers, x.cols()), ya, logits;
        vector inv_rms;
        result r;
        matrix dlogits;
        {
            scoped_timer t(tm.head_loss);
            for (Eigen::Index a = 0; a < answers; ++a) xa.row(a) = x.row(static_cast<Eigen::Index>(batch.answer_rows[static_cast<std::size_t>(a)]));
            rms_norm_forward(xa, final_norm_.w, ya, inv_rms);
            logits = ya * head_.w;
            dlogits = matrix(answers, logits.cols());
            for (Eigen::Index a = 0; a < answers; ++a) {
                const float mx = logits.row(a).maxCoeff();
                const Eigen::ArrayXf e = (logits.row(a).array() - mx).exp().transpose();
                const double z = static_cast<double>(e.sum());
                const int target = batch.targets[static_cast<std::size_t>(a)];
                r.loss += std::log(z) - static_cast<double>(logits(a, target) - mx);
                Eigen::Index arg = 0;
                logits.row(a).maxCoeff(&arg);
                r.correct += arg == target ? 1 : 0;
                dlogits.row(a) = (e / static_cast<float>(z)).transpose();
                dlogits(a, target) -= 1.0f;
            }
            r.answers = static_cast<std::size_t>(answers);
            r.loss /= static_cast<double>(answers);
        }
        if (!backward) return r;

        matrix dx = matrix::Zero(rows, x.cols());
        {
            scoped_timer t(tm.head_loss);
            dlogits /= static_cast<float>(answers);  // the loss is a mean
            head_.grad += ya.transpose() * dlogits;
            const matrix dya = dlogits * head_.w.transpose();
            const matrix dxa = rms_norm_backward(xa, final_norm_.w, inv_rms, dya, final_norm_.grad);
            for (Eigen::Index a = 0; a < answers; ++a) dx.row(static_cast<Eigen::Index>(batch.answer_rows[static_cast<std::size_t>(a)])) += dxa.row(a);
        }
        for (std::size_t l = L; l-- > 0;) {
            component_times before = tm;
            layer_backward(l, dx, batch, inference, caches[l], tm);
            if (per_layer) accumulate_difference((*per_layer)[l], tm, before);
        }
        {
            scoped_timer t(tm.embed);
            for (std::size_t i = 0; i < n; ++i) embedding_.grad.row(batch.tokens[i]) += dx.row(static_cast<Eigen::Index>(i));
        }
        return r;
    }

    void zero_grad() {
        for (parameter* p : parameters()) p->grad.setZero();
    }

private:
    /// What a layer's backward needs from its forward.
    struct cache {
        matrix x_in, h1, q, k, v, attn, lse, x_mid, h2, pre, act;
        vector r1, r2;
    };

    static void accumulate_difference(component_times& into, const component_times& now, const component_times& before) {
        into.embed += now.embed - before.embed;
        into.norm += now.norm - before.norm;
        into.qkv += now.qkv - before.qkv;
        into.attention_forward += now.attention_forward - before.attention_forward;
        into.attention_backward += now.attention_backward - before.attention_backward;
        into.out_proj += now.out_proj - before.out_proj;
        into.mlp += now.mlp - before.mlp;
    }

    [[nodiscard]] posenc::heads_view<float> heads(matrix& m, std::size_t b, std::size_t T) const {
        float* p = m.data() + static_cast<std::ptrdiff_t>(b * T) * m.cols();
        return posenc::heads_view<float>(p, {T, cfg_.heads, cfg_.head_dim});
    }
    [[nodiscard]] posenc::heads_view<const float> cheads(const matrix& m, std::size_t b, std::size_t T) const {
        const float* p = m.data() + static_cast<std::ptrdiff_t>(b * T) * m.cols();
        return posenc::heads_view<const float>(p, {T, cfg_.heads, cfg_.head_dim});
    }

    void layer_forward(std::size_t l, matrix& x, const recall_batch& batch, const rope_inference& inference, cache& c,
                       component_times& tm) {
        layer_weights& w = layers_[l];
        const std::size_t B = batch.batch, T = batch.length;
        c.x_in = x;
        {
            scoped_timer t(tm.norm);
            rms_norm_forward(x, w.norm1.w, c.h1, c.r1);
        }
        {
            scoped_timer t(tm.qkv);
            c.q = c.h1 * w.wq.w;
            c.k = c.h1 * w.wk.w;
            c.v = c.h1 * w.wv.w;
        }
        {
            scoped_timer t(tm.attention_forward);
            c.attn = matrix(c.q.rows(), c.q.cols());
            c.lse = matrix(static_cast<Eigen::Index>(B * T), static_cast<Eigen::Index>(cfg_.heads));
            const auto pos = posenc::position_ids::consecutive(0, T);
            with_attention(cfg_, cfg_.layers[l], w.t5_table.w, inference,
                           [&](const auto& enc, const auto& mask) {
                               for (std::size_t b = 0; b < B; ++b)
                                   posenc::attention_partial(enc, cheads(c.q, b, T), cheads(c.k, b, T), cheads(c.v, b, T),
                                                             heads(c.attn, b, T),
                                                             std::span<float>(c.lse.data() + b * T * cfg_.heads, T * cfg_.heads),
                                                             pos, pos, mask);
                           });
        }
        {
            scoped_timer t(tm.out_proj);
            x.noalias() += c.attn * w.wo.w;
        }
        c.x_mid = x;
        {
            scoped_timer t(tm.norm);
            rms_norm_forward(x, w.norm2.w, c.h2, c.r2);
        }
        {
            scoped_timer t(tm.mlp);
            c.pre = c.h2 * w.w1.w;
            c.act = c.pre.unaryExpr([](float a) { return a * sigmoid(a); });
            x.noalias() += c.act * w.w2.w;
        }
    }

    /// dx holds ∂L/∂(this layer's output); on return, ∂L/∂(its input).
    void layer_backward(std::size_t l, matrix& dx, const recall_batch& batch, const rope_inference& inference, cache& c,
                        component_times& tm) {
        layer_weights& w = layers_[l];
        const std::size_t B = batch.batch, T = batch.length;
        matrix dh2;
        {
            scoped_timer t(tm.mlp);  // x_out = x_mid + silu(h2·W1)·W2
            w.w2.grad.noalias() += c.act.transpose() * dx;
            const matrix dact = dx * w.w2.w.transpose();
            const matrix dpre = dact.binaryExpr(c.pre, [](float g, float a) {
                const float s = sigmoid(a);
                return g * s * (1.0f + a * (1.0f - s));
            });
            w.w1.grad.noalias() += c.h2.transpose() * dpre;
            dh2 = dpre * w.w1.w.transpose();
        }
        {
            scoped_timer t(tm.norm);
            dx += rms_norm_backward(c.x_mid, w.norm2.w, c.r2, dh2, w.norm2.grad);
        }
        matrix dattn;
        {
            scoped_timer t(tm.out_proj);  // x_mid = x_in + attn·Wo
            w.wo.grad.noalias() += c.attn.transpose() * dx;
            dattn = dx * w.wo.w.transpose();
        }
        matrix dq(c.q.rows(), c.q.cols()), dk(c.k.rows(), c.k.cols()), dv(c.v.rows(), c.v.cols());
        {
            scoped_timer t(tm.attention_backward);
            const auto pos = posenc::position_ids::consecutive(0, T);
            posenc::attention_param_grads pg;
            if (w.t5_table.w.size() > 0) pg.bias_table = std::span<float>(w.t5_table.grad.data(), static_cast<std::size_t>(w.t5_table.grad.size()));
            with_attention(cfg_, cfg_.layers[l], w.t5_table.w, inference,
                           [&](const auto& enc, const auto& mask) {
                               for (std::size_t b = 0; b < B; ++b)
                                   posenc::attention_backward(
                                       enc, cheads(c.q, b, T), cheads(c.k, b, T), cheads(c.v, b, T), cheads(c.attn, b, T),
                                       std::span<const float>(c.lse.data() + b * T * cfg_.heads, T * cfg_.heads),
                                       cheads(dattn, b, T), heads(dq, b, T), heads(dk, b, T), heads(dv, b, T), pos, pos,
                                       mask, posenc::attention_options{}, pg);
                           });
        }
        matrix dh1;
        {
            scoped_timer t(tm.qkv);
            w.wq.grad.noalias() += c.h1.transpose() * dq;
            w.wk.grad.noalias() += c.h1.transpose() * dk;
            w.wv.grad.noalias() += c.h1.transpose() * dv;
            dh1 = dq * w.wq.w.transpose() + dk * w.wk.w.transpose() + dv * w.wv.w.transpose();
        }
        {
            scoped_timer t(tm.norm);
            dx += rms_norm_backward(c.x_in, w.norm1.w, c.r1, dh1, w.norm1.grad);
        }
    }

    model_config cfg_;
    parameter embedding_;
    std::vector<layer_weights> layers_;
    parameter final_norm_, head_;
};

/// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
struct adamw {
    float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.98f, eps = 1e-8f, weight_decay = 0.01f;
    std::int64_t step = 0;

    void update(const std::vector<parameter*>& params, float lr_now) {
        ++step;
        const float c1 = 1.0f - std::pow(beta1, static_cast<float>(step)), c2 = 1.0f - std::pow(beta2, static_cast<float>(step));
        for (parameter* p : params) {
            p->m = beta1 * p->m + (1.0f - beta1) * p->grad;
            p->v = beta2 * p->v + (1.0f - beta2) * p->grad.cwiseProduct(p->grad);
            if (p->decay) p->w *= 1.0f - lr_now * weight_decay;
            p->w.array() -= lr_now * (p->m.array() / c1) / ((p->v.array() / c2).sqrt() + eps);
        }
    }
};

}  // namespace train_tiny
