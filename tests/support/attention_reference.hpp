#pragma once
// A naive attention in double: materialised scores, plain softmax, and every encoding's own formula
// (rotation, xPos decay, ALiBi slopes, T5 buckets, Shaw tables) written here from the papers' closed
// forms, not from posenc's code.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "support/reference.hpp"

namespace posenc_test {

struct attn_problem {
    std::size_t Tq = 0, Tk = 0, Hq = 1, Hkv = 1, D = 16, Dv = 16;
    std::vector<float> q, k, v;  // dense [T][H][D]
    std::vector<std::int64_t> qpos, kpos;
    std::vector<std::int32_t> qseq, kseq;  // empty = one sequence
};

inline attn_problem make_attn_problem(std::size_t Tq, std::size_t Tk, std::size_t Hq, std::size_t Hkv, std::size_t D,
                                      std::size_t Dv, std::uint32_t seed, std::int64_t offset = 0) {
    attn_problem p;
    p.Tq = Tq, p.Tk = Tk, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.Dv = Dv;
    p.q = random_floats(Tq * Hq * D, seed, 0.5f);
    p.k = random_floats(Tk * Hkv * D, seed + 1, 0.5f);
    p.v = random_floats(Tk * Hkv * Dv, seed + 2, 1.0f);
    for (std::size_t j = 0; j < Tk; ++j) p.kpos.push_back(offset + static_cast<std::int64_t>(j));
    // Queries: the last Tq positions of the keys (prefill / decode), or 0.. when there are more.
    const std::int64_t q0 = Tq <= Tk ? offset + static_cast<std::int64_t>(Tk - Tq) : offset;
    for (std::size_t t = 0; t < Tq; ++t) p.qpos.push_back(q0 + static_cast<std::int64_t>(t));
    return p;
}

/// What an encoding does, in double.
struct attn_model {
    using rot = std::function<std::vector<double>(const std::vector<double>&, std::int64_t)>;
    rot rot_q, rot_k;  // empty = identity
    std::function<double(std::size_t, std::int64_t, std::int64_t, const std::vector<double>&)> bias;
    std::function<std::vector<double>(std::int64_t, std::int64_t)> out_term;  // Shaw's a^V
    std::function<double(std::int64_t)> scale;                                   // empty = 1/√D
    bool add_then_scale = false;
    double softcap = 0;
    std::vector<double> sinks;
};

using visible_fn = std::function<bool(std::int64_t, std::int64_t)>;

/// out [Tq][Hq][Dv] in double.
inline std::vector<double> reference_attention(const attn_problem& p, const attn_model& m, const visible_fn& visible) {
    const std::size_t G = p.Hq / p.Hkv;
    std::vector<double> out(p.Tq * p.Hq * p.Dv, 0.0);
    auto row = [](const std::vector<float>& x, std::size_t t, std::size_t h, std::size_t H, std::size_t D) {
        return std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>((t * H + h) * D),
                                   x.begin() + static_cast<std::ptrdiff_t>((t * H + h + 1) * D));
    };
    for (std::size_t i = 0; i < p.Tq; ++i)
        for (std::size_t h = 0; h < p.Hq; ++h) {
            std::vector<double> qd = row(p.q, i, h, p.Hq, p.D);
            if (m.rot_q) qd = m.rot_q(qd, p.qpos[i]);
            const double s = m.scale ? m.scale(p.qpos[i]) : 1.0 / std::sqrt(static_cast<double>(p.D));
            std::vector<double> logit(p.Tk, -std::numeric_limits<double>::infinity());
            double mx = -std::numeric_limits<double>::infinity();
            for (std::size_t j = 0; j < p.Tk; ++j) {
                if (!visible(p.qpos[i], p.kpos[j])) continue;
                if (!p.qseq.empty() && p.qseq[i] != p.kseq[j]) continue;
                std::vector<double> kd = row(p.k, j, h / G, p.Hkv, p.D);
                if (m.rot_k) kd = m.rot_k(kd, p.kpos[j]);
                double dot = 0;
                for (std::size_t d = 0; d < p.D; ++d) dot += qd[d] * kd[d];
                const double b = m.bias ? m.bias(h, p.qpos[i], p.kpos[j], qd) : 0.0;
                double x = m.add_then_scale ? s * (dot + b) : s * dot + b;
                if (m.softcap > 0) x = m.softcap * std::tanh(x / m.softcap);
                logit[j] = x;
                mx = worst_of(mx, x);  // a NaN logit makes the row NaN, not invisible
            }
            if (mx == -std::numeric_limits<double>::infinity()) continue;  // nothing visible: zeros
            double denom = 0;
            if (!m.sinks.empty()) {
                mx = worst_of(mx, m.sinks[h]);
                denom += std::exp(m.sinks[h] - mx);
            }
            std::vector<double> acc(p.Dv, 0.0);
            for (std::size_t j = 0; j < p.Tk; ++j) {
                if (logit[j] == -std::numeric_limits<double>::infinity()) continue;
                const double e = std::exp(logit[j] - mx);
                denom += e;
                const std::vector<double> vd = row(p.v, j, h / G, p.Hkv, p.Dv);
                const std::vector<double> extra = m.out_term ? m.out_term(p.qpos[i], p.kpos[j]) : std::vector<double>{};
                for (std::size_t d = 0; d < p.Dv; ++d) acc[d] += e * (vd[d] + (extra.empty() ? 0.0 : extra[d]));
            }
            for (std::size_t d = 0; d < p.Dv; ++d) out[(i * p.Hq + h) * p.Dv + d] = acc[d] / denom;
        }
    return out;
}

/// RoPE in double on one head: pairs (2i, 2i+1) or (i, i + r/2), angle p·inv[i], amplitude a.
inline attn_model::rot rope_rot(std::size_t rotary_dim, bool interleaved, std::vector<double> inv, double a) {
    return [=](const std::vector<double>& x, std::int64_t p) { return reference_rotate(x, rotary_dim, interleaved, inv, p, a); };
}

/// xPos (Sun et al.) in double, half-split, center 0, scale_base 512: RoPE at p, then pair i scaled
/// by ζᵢ^(sign·p/512) with ζᵢ = (2i/D + 0.4)/1.4 (sign +1 for queries, −1 for keys).
inline attn_model::rot xpos_half_split_rot(std::size_t D, double sign) {
    std::vector<double> inv(D / 2), zeta(D / 2);
    for (std::size_t i = 0; i < D / 2; ++i) {
        inv[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
        zeta[i] = (2.0 * static_cast<double>(i) / static_cast<double>(D) + 0.4) / 1.4;
    }
    return [=](const std::vector<double>& x, std::int64_t p) {
        std::vector<double> y = reference_rotate(x, D, false, inv, p);
        for (std::size_t i = 0; i < D / 2; ++i) {
            const double s = std::pow(zeta[i], sign * static_cast<double>(p) / 512.0);
            y[i] *= s;
            y[i + D / 2] *= s;
        }
        return y;
    };
}

/// Shaw et al.'s relative positions in double: logit += q·a^K[clip(j − i)], out += a^V[clip(j − i)],
/// clip to [−kmax, kmax], tables [2·kmax + 1][D] and [2·kmax + 1][Dv]; Shaw's bias adds before the scale.
inline attn_model shaw_model(std::vector<float> ak, std::size_t D, std::vector<float> av, std::size_t Dv, std::int64_t kmax) {
    auto clip_row = [=](std::int64_t i, std::int64_t j) {
        return static_cast<std::size_t>(std::clamp<std::int64_t>(j - i, -kmax, kmax) + kmax);
    };
    attn_model m;
    m.add_then_scale = true;
    m.bias = [=](std::size_t, std::int64_t i, std::int64_t j, const std::vector<double>& q) {
        double dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += q[d] * ak[clip_row(i, j) * D + d];
        return dot;
    };
    m.out_term = [=](std::int64_t i, std::int64_t j) {
        return std::vector<double>(av.begin() + static_cast<std::ptrdiff_t>(clip_row(i, j) * Dv),
                                   av.begin() + static_cast<std::ptrdiff_t>((clip_row(i, j) + 1) * Dv));
    };
    return m;
}

/// ALiBi's closed form for a power-of-two head count n: m_h = 2^(−max_bias·(h+1)/n).
inline double alibi_closed_slope(std::size_t h, std::size_t n, double max_bias) {
    return std::pow(2.0, -max_bias * static_cast<double>(h + 1) / static_cast<double>(n));
}

/// T5's bucket (Raffel et al.; Mesh TensorFlow's _relative_position_bucket) in double.
inline std::int64_t t5_closed_bucket(std::int64_t rel, bool bidirectional, std::int64_t num_buckets, std::int64_t max_distance) {
    std::int64_t n = num_buckets, ret = 0;
    if (bidirectional) {
        n /= 2;
        if (rel > 0) ret += n;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    const std::int64_t max_exact = n / 2;
    if (rel < max_exact) return ret + rel;
    const double large = static_cast<double>(max_exact) +
                         std::log(static_cast<double>(rel) / static_cast<double>(max_exact)) /
                             std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                             static_cast<double>(n - max_exact);
    return ret + std::min<std::int64_t>(static_cast<std::int64_t>(large), n - 1);
}

}  // namespace posenc_test
