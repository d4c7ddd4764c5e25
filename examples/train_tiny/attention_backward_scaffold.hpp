#pragma once
// TEMPORARY scaffold with the shared API's signature, used only until posenc/grad/attention.hpp lands
// (then this file is deleted). Naive O(T²) per head, probabilities recomputed from lse.
#include <cmath>
#include <span>
#include <vector>

#include <posenc/attention/partial.hpp>
#include <posenc/bias/t5.hpp>
#include <posenc/grad/transform.hpp>

namespace posenc {

struct attention_param_grads {
    std::span<float> bias_table{};
    std::span<float> shaw_keys{};
    std::span<float> shaw_values{};
    std::span<float> sinks{};
};

template <class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
void attention_backward(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                        heads_view<const float> k, heads_view<const float> v, heads_view<const float> out,
                        std::span<const float> lse, heads_view<const float> dout, heads_view<float> dq,
                        heads_view<float> dk, heads_view<float> dv, const position_ids& qpos, const position_ids& kpos,
                        const Mask& mask = {}, const attention_options& = {}, const attention_param_grads& pg = {}) {
    const std::size_t Tq = q.tokens(), Tk = k.tokens(), H = q.heads(), D = q.head_dim();
    std::vector<float> qr(Tq * H * D), kr(Tk * H * D), dqr(Tq * H * D, 0.0f), dkr(Tk * H * D, 0.0f);
    for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) qr[(t * H + h) * D + d] = q.row(t, h)[d];
    for (std::size_t t = 0; t < Tk; ++t)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) kr[(t * H + h) * D + d] = k.row(t, h)[d];
    heads_view<float> qv(std::span<float>(qr), {Tq, H, D}), kv(std::span<float>(kr), {Tk, H, D});
    if constexpr (requires { enc.transform.apply_queries(qv, qpos); }) {
        enc.transform.apply_queries(qv, qpos);
        enc.transform.apply_keys(kv, kpos);
    } else {
        enc.transform.apply(qv, qpos);
        enc.transform.apply(kv, kpos);
    }
    for (std::size_t t = 0; t < Tk; ++t)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) dv.row(t, h)[d] = 0.0f;
    std::vector<float> s(Tk);
    for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < Tq; ++i) {
            const double sc = enc.scale.scale(qpos[i], D);
            for (std::size_t j = 0; j < Tk; ++j) {
                float a = 0;
                for (std::size_t d = 0; d < D; ++d) a += qr[(i * H + h) * D + d] * kr[(j * H + h) * D + d];
                s[j] = static_cast<float>(a * sc);
            }
            enc.bias.add_to_scores(h, qpos[i], kpos, s);
            float Di = 0;
            for (std::size_t d = 0; d < D; ++d) Di += dout.row(i, h)[d] * out.row(i, h)[d];
            for (std::size_t j = 0; j < Tk; ++j) {
                if (!mask.visible(qpos[i], kpos[j])) continue;
                const float p = std::exp(s[j] - lse[i * H + h]);
                float dp = 0;
                for (std::size_t d = 0; d < D; ++d) {
                    dp += dout.row(i, h)[d] * v.row(j, h)[d];
                    dv.row(j, h)[d] += p * dout.row(i, h)[d];
                }
                const float ds = p * (dp - Di);
                if constexpr (std::is_same_v<Bias, t5_bias>)
                    if (!pg.bias_table.empty())
                        pg.bias_table[static_cast<std::size_t>(enc.bias.buckets().bucket(kpos[j] - qpos[i])) * H + h] += ds;
                for (std::size_t d = 0; d < D; ++d) {
                    dqr[(i * H + h) * D + d] += static_cast<float>(sc) * ds * kr[(j * H + h) * D + d];
                    dkr[(j * H + h) * D + d] += static_cast<float>(sc) * ds * qr[(i * H + h) * D + d];
                }
            }
        }
    heads_view<float> dqv(std::span<float>(dqr), {Tq, H, D}), dkv(std::span<float>(dkr), {Tk, H, D});
    transform_backward_queries(enc.transform, dqv, qpos);
    transform_backward_keys(enc.transform, dkv, kpos);
    for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) dq.row(t, h)[d] = dqr[(t * H + h) * D + d];
    for (std::size_t t = 0; t < Tk; ++t)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) dk.row(t, h)[d] = dkr[(t * H + h) * D + d];
}

}  // namespace posenc
