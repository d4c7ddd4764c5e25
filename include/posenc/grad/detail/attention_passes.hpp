#pragma once
// The block recompute and the two passes of posenc::attention_backward (grad/attention.hpp, which
// explains the algorithm and runs every check before calling in here), and attention_param_grads,
// the public type naming where the parameter gradients go.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <iterator>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/partial.hpp"
#include "posenc/attention/shaw.hpp"
#include "posenc/bias/t5.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"

namespace posenc {

/// Where attention_backward adds the encoding's parameter gradients; an empty span is not computed.
struct attention_param_grads {
    std::span<float> bias_table{};   ///< T5: same layout as the t5_bias table ([num_buckets × heads])
    std::span<float> shaw_keys{};    ///< Shaw a^K table, same layout as shaw_rpr's
    std::span<float> shaw_values{};  ///< Shaw a^V table
    std::span<float> sinks{};        ///< one per query head, when options.sinks is given
};

namespace detail {

template <class Bias>
inline constexpr bool is_shaw_bias = std::is_same_v<std::remove_cvref_t<Bias>, shaw_rpr>;
template <class Bias>
inline constexpr bool is_t5_bias = std::is_same_v<std::remove_cvref_t<Bias>, t5_bias>;

/// A bias whose value depends on the query vector or that adds to the output has a gradient only
/// when this file knows its formula (Shaw); any other bias must be a constant per (head, i, j).
template <class Bias>
inline constexpr bool differentiable_bias =
    is_shaw_bias<Bias> ||
    !(requires(const Bias& b, std::span<float> s, std::span<const float> q, const position_ids& p) {
        b.add_to_scores(std::size_t{0}, std::int64_t{0}, p, s, q);
    } || requires(const Bias& b, std::span<const float> w, std::span<float> o, const position_ids& p) {
        b.add_to_output(std::size_t{0}, std::int64_t{0}, p, w, o);
    });

struct grad_shape {
    std::size_t Tq, Tk, Hq, Hkv, G, D, Dv, tile_tokens, max_rows, rows_pad, stride_d, stride_dv;
};

inline constexpr std::size_t grad_key_tile = simd::attn_key_tile;

/// One thread's scratch, 64-byte aligned for the SIMD steps: the query tile's transformed rows and dO
/// (rows past the tile's zero), a key tile's transformed K and V, the block's P and dS
/// ([rows][grad_key_tile]), a transposed block for the key-side products, and the accumulators.
struct grad_scratch {
    attn_floats q, dout, k, v, kt, p, ds, transposed, acc_k, acc_v, acc_q;
    std::vector<float> delta, lse, scale, row_scale, m, l;
    explicit grad_scratch(const grad_shape& sh)
        : q(sh.rows_pad * sh.D), dout(sh.rows_pad * sh.Dv), k(grad_key_tile * sh.D), v(grad_key_tile * sh.Dv),
          kt(std::max(sh.D, sh.Dv) * grad_key_tile), p(sh.rows_pad * grad_key_tile), ds(sh.rows_pad * grad_key_tile),
          transposed(grad_key_tile * grad_key_tile), acc_k(grad_key_tile * sh.stride_d), acc_v(grad_key_tile * sh.stride_dv),
          acc_q(sh.rows_pad * sh.stride_d), delta(sh.rows_pad), lse(sh.rows_pad), scale(sh.tile_tokens),
          row_scale(sh.rows_pad), m(sh.rows_pad), l(sh.rows_pad) {}
};

struct grad_query_tile {
    std::size_t hk = 0, t0 = 0, nq = 0, R = 0, rows_pad = 0;
    position_ids qs = position_ids::consecutive(0, 0);
    std::int64_t q_lo = 0, q_hi = 0;
    std::int32_t seq_lo = 0, seq_hi = 0;
};

struct grad_key_tile_info {
    std::size_t j0 = 0, nk = 0;
    position_ids ks = position_ids::consecutive(0, 0);
    std::int64_t k_lo = 0, k_hi = 0;
    std::int32_t seq_lo = 0, seq_hi = 0;
};

template <class Enc, class Mask, class KV>
struct grad_call {
    const simd::attn_kernels& ker;
    const Enc& enc;
    const grad_shape& sh;
    heads_view<const float> q;
    heads_view<const KV> k, v;
    heads_view<const float> out;
    std::span<const float> lse;
    heads_view<const float> dout;
    const position_ids& qpos;
    const position_ids& kpos;
    const Mask& mask;
    const attention_options& opt;

    using transform_type = std::remove_cvref_t<decltype(enc.transform)>;
    using bias_type = std::remove_cvref_t<decltype(enc.bias)>;
    [[nodiscard]] bool seq() const noexcept { return !opt.query_sequence.empty(); }
    [[nodiscard]] bool add_then_scale() const noexcept { return enc.bias.order() == bias_order::add_then_scale; }

    /// The rows of query tile `tile` of kv head hk (row i·G + g is token t0 + i, head hk·G + g):
    /// transformed queries, dO, Δ = dO·O, lse, and the per-token scales.
    grad_query_tile load_queries(std::size_t hk, std::size_t tile, grad_scratch& w) const {
        grad_query_tile t = query_bounds(tile);
        t.hk = hk;
        t.R = t.nq * sh.G;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv;
        t.rows_pad = (t.R + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
        std::fill_n(w.q.begin(), t.rows_pad * D, 0.0f);
        std::fill_n(w.dout.begin(), t.rows_pad * Dv, 0.0f);
        for (std::size_t i = 0; i < t.nq; ++i)
            for (std::size_t g = 0; g < G; ++g) {
                const std::size_t r = i * G + g, h = hk * G + g;
                std::copy_n(q.row(t.t0 + i, h), D, w.q.data() + r * D);
                const float* o = out.row(t.t0 + i, h);
                const float* d = dout.row(t.t0 + i, h);
                std::copy_n(d, Dv, w.dout.data() + r * Dv);
                double delta = 0.0;
                for (std::size_t c = 0; c < Dv; ++c) delta += static_cast<double>(d[c]) * o[c];
                w.delta[r] = static_cast<float>(delta);
                w.lse[r] = lse[(t.t0 + i) * sh.Hq + h];
            }
        transform_queries(enc.transform, heads_view<float>(w.q.data(), {t.nq, G, D}), t.qs);
        for (std::size_t i = 0; i < t.nq; ++i) w.scale[i] = static_cast<float>(enc.scale.scale(t.qs[i], D));
        for (std::size_t r = 0; r < t.rows_pad; ++r) w.row_scale[r] = r < t.R ? w.scale[r / G] : 0.0f;
        return t;
    }

    /// Key tile `tile`'s positions (what the masks classify) without loading K or V.
    grad_key_tile_info key_tile(std::size_t tile) const {
        grad_key_tile_info kt;
        kt.j0 = tile * grad_key_tile;
        kt.nk = std::min(grad_key_tile, sh.Tk - kt.j0);
        kt.ks = slice_positions(kpos, kt.j0, kt.nk);
        std::tie(kt.k_lo, kt.k_hi) = kt.ks.bounds();
        if (seq()) std::tie(kt.seq_lo, kt.seq_hi) = id_range(opt.key_sequence.subspan(kt.j0, kt.nk));
        return kt;
    }

    /// Query tile `tile`'s tokens, positions and the ranges the masks classify it by.
    grad_query_tile query_bounds(std::size_t tile) const {
        grad_query_tile t;
        t.t0 = tile * sh.tile_tokens;
        t.nq = std::min(sh.tile_tokens, sh.Tq - t.t0);
        t.qs = slice_positions(qpos, t.t0, t.nq);
        std::tie(t.q_lo, t.q_hi) = t.qs.bounds();
        if (seq()) std::tie(t.seq_lo, t.seq_hi) = id_range(opt.query_sequence.subspan(t.t0, t.nq));
        return t;
    }

    static std::pair<std::int32_t, std::int32_t> id_range(std::span<const std::int32_t> ids) {
        const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
        return {*lo, *hi};
    }

    /// K (widened, transformed unless keys_transformed) and V of a key tile into scratch.
    void load_keys(std::size_t hk, const grad_key_tile_info& kt, grad_scratch& w) const {
        const std::size_t D = sh.D, Dv = sh.Dv;
        for (std::size_t j = 0; j < kt.nk; ++j) {
            const KV* kr = k.row(kt.j0 + j, hk);
            const KV* vr = v.row(kt.j0 + j, hk);
            for (std::size_t d = 0; d < D; ++d) w.k[j * D + d] = static_cast<float>(kr[d]);
            for (std::size_t d = 0; d < Dv; ++d) w.v[j * Dv + d] = static_cast<float>(vr[d]);
        }
        if (!is_identity_transform<transform_type> && !opt.keys_transformed)
            transform_keys(enc.transform, heads_view<float>(w.k.data(), {kt.nk, 1, D}), kt.ks);
    }

    [[nodiscard]] tile_visibility classify(const grad_query_tile& t, const grad_key_tile_info& kt) const {
        tile_visibility vis = mask.classify({t.q_lo, t.q_hi, kt.k_lo, kt.k_hi});
        if (seq() && vis != tile_visibility::none) {
            if (kt.seq_hi < t.seq_lo || kt.seq_lo > t.seq_hi)
                vis = tile_visibility::none;
            else if (!(kt.seq_lo == kt.seq_hi && t.seq_lo == t.seq_hi && kt.seq_lo == t.seq_lo))
                vis = tile_visibility::partial;
        }
        return vis;
    }

    /// P and dS (the gradient of the logit x = s·qᵀk + bias, or s·(qᵀk + bias), before softcap) of the
    /// block into w.p and w.ds, [rows][grad_key_tile]; 0 where masked and for a row that saw nothing.
    void block(const grad_query_tile& t, const grad_key_tile_info& kt, tile_visibility vis, grad_scratch& w) const {
        constexpr float ninf = -std::numeric_limits<float>::infinity();
        constexpr std::size_t BK = grad_key_tile;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv, nk = kt.nk;
        const float cap = opt.softcap;
        // scale_then_add: the qk step scales each row as it stores it, as the forward does.
        ker.qk({w.q.data(), t.rows_pad, D, w.k.data(), D, nk, w.kt.data(), w.p.data(),
                add_then_scale() ? nullptr : w.row_scale.data(), dtype::f32});
        ker.qk({w.dout.data(), t.rows_pad, Dv, w.v.data(), Dv, nk, w.kt.data(), w.ds.data(), nullptr, dtype::f32});
        for (std::size_t r = 0; r < t.R; ++r) {  // the logits as the forward forms them, −∞ where masked
            const std::size_t i = r / G, head = t.hk * G + r % G;
            const std::int64_t qp = t.qs[i];
            float* srow = w.p.data() + r * BK;
            add_bias_to_scores(enc.bias, head, qp, kt.ks, std::span<float>(srow, nk),
                               std::span<const float>(w.q.data() + r * D, D));
            if (add_then_scale()) {
                const float sc = w.scale[i];
                for (std::size_t j = 0; j < nk; ++j) srow[j] *= sc;
            }
            if (vis == tile_visibility::partial) {
                const std::int32_t qid = seq() ? opt.query_sequence[t.t0 + i] : 0;
                for (std::size_t j = 0; j < nk; ++j)
                    if (!mask.visible(qp, kt.ks[j]) || (seq() && opt.key_sequence[kt.j0 + j] != qid)) srow[j] = ninf;
            }
        }
        if (cap == 0.0f) {  // P = exp(S − lse) by the forward's softmax step started from m = lse
            std::copy_n(w.lse.begin(), t.R, w.m.begin());
            std::fill_n(w.l.begin(), t.R, 0.0f);
            ker.softmax({w.p.data(), t.R, nk, w.m.data(), w.l.data(), w.acc_q.data(), 0, 0, 0.0f});
        }
        for (std::size_t r = 0; r < t.R; ++r) {
            const std::int64_t qp = t.qs[r / G];
            float* prow = w.p.data() + r * BK;
            float* dsrow = w.ds.data() + r * BK;  // dP on entry
            const float l = w.lse[r], delta = w.delta[r];
            if (l == ninf) {  // a row that saw nothing (and no sink): no gradient
                std::fill_n(prow, nk, 0.0f);
                std::fill_n(dsrow, nk, 0.0f);
                continue;
            }
            if constexpr (is_shaw_bias<bias_type>) {
                const float* dor = w.dout.data() + r * Dv;
                for (std::size_t j = 0; j < nk; ++j) {
                    const float* av = enc.bias.value_table().data() + enc.bias.row(qp, kt.ks[j]) * Dv;
                    float dp = 0.0f;
                    for (std::size_t d = 0; d < Dv; ++d) dp += dor[d] * av[d];
                    dsrow[j] += dp;
                }
            }
            if (cap == 0.0f) {
                for (std::size_t j = 0; j < nk; ++j) dsrow[j] = prow[j] * (dsrow[j] - delta);
                continue;
            }
            for (std::size_t j = 0; j < nk; ++j) {  // softcap: y = c·tanh(x/c), dy/dx = 1 − tanh²
                if (prow[j] == ninf) {
                    prow[j] = 0.0f;
                    dsrow[j] = 0.0f;
                    continue;
                }
                const float th = std::tanh(prow[j] / cap);
                const float p = std::exp(cap * th - l);
                prow[j] = p;
                dsrow[j] = p * (dsrow[j] - delta) * (1.0f - th * th);
            }
        }
    }

    /// acc[j] += Σ_r factor_r·block[r][j]·rows[r] over the tile's rows, for each key j: the key-side
    /// products (dV += Pᵀ·dO, dK += (s·dS)ᵀ·T(Q)) as the pv step over the transposed block, 64 rows at a time.
    void add_transposed(const grad_query_tile& t, std::size_t nk, const float* block_rows, const float* factor,
                        const float* rows, std::size_t width, float* acc, std::size_t acc_stride, grad_scratch& w) const {
        constexpr std::size_t BK = grad_key_tile;
        for (std::size_t r0 = 0; r0 < t.R; r0 += BK) {
            const std::size_t n = std::min(BK, t.R - r0);
            for (std::size_t j = 0; j < nk; ++j)
                for (std::size_t c = 0; c < n; ++c)
                    w.transposed[j * BK + c] = factor ? factor[r0 + c] * block_rows[(r0 + c) * BK + j] : block_rows[(r0 + c) * BK + j];
            ker.pv({w.transposed.data(), nk, n, rows + r0 * width, width, width, acc, acc_stride, dtype::f32});
        }
    }

    /// Pass 1: dK (w.r.t. the transformed keys) and dV of key tile `ktile` of kv head hk.
    void key_item(std::size_t hk, std::size_t ktile, grad_scratch& w, const heads_view<float>& dk,
                  const heads_view<float>& dv) const {
        const std::size_t D = sh.D, Dv = sh.Dv;
        const grad_key_tile_info kt = key_tile(ktile);
        std::fill_n(w.acc_k.begin(), kt.nk * sh.stride_d, 0.0f);
        std::fill_n(w.acc_v.begin(), kt.nk * sh.stride_dv, 0.0f);
        bool loaded = false;
        const std::size_t qtiles = (sh.Tq + sh.tile_tokens - 1) / sh.tile_tokens;
        for (std::size_t qt = 0; qt < qtiles; ++qt) {
            const tile_visibility vis = classify(query_bounds(qt), kt);  // before the queries are loaded
            if (vis == tile_visibility::none) continue;
            if (!loaded) load_keys(hk, kt, w), loaded = true;
            const grad_query_tile t = load_queries(hk, qt, w);
            block(t, kt, vis, w);
            add_transposed(t, kt.nk, w.p.data(), nullptr, w.dout.data(), Dv, w.acc_v.data(), sh.stride_dv, w);
            add_transposed(t, kt.nk, w.ds.data(), w.row_scale.data(), w.q.data(), D, w.acc_k.data(), sh.stride_d, w);
        }
        for (std::size_t j = 0; j < kt.nk; ++j) {
            std::copy_n(w.acc_k.data() + j * sh.stride_d, D, dk.row(kt.j0 + j, hk));
            std::copy_n(w.acc_v.data() + j * sh.stride_dv, Dv, dv.row(kt.j0 + j, hk));
        }
    }

    /// Pass 2: dQ (w.r.t. the transformed queries) of query tile `qtile` of kv head hk, and this item's
    /// share of the parameter gradients into `table` (bias table, then a^K, then a^V, as asked for).
    void query_item(std::size_t hk, std::size_t qtile, grad_scratch& w, const heads_view<float>& dq,
                    const attention_param_grads& pg, std::span<float> table) const {
        constexpr std::size_t BK = grad_key_tile;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv;
        const grad_query_tile t = load_queries(hk, qtile, w);
        std::fill_n(w.acc_q.begin(), t.rows_pad * sh.stride_d, 0.0f);
        std::fill(table.begin(), table.end(), 0.0f);
        float* g_bias = table.data();
        float* g_ak = g_bias + pg.bias_table.size();
        float* g_av = g_ak + pg.shaw_keys.size();
        const std::size_t ktiles = (sh.Tk + BK - 1) / BK;
        for (std::size_t kti = 0; kti < ktiles; ++kti) {
            const grad_key_tile_info kt = key_tile(kti);
            const tile_visibility vis = classify(t, kt);
            if (vis == tile_visibility::none) continue;
            load_keys(hk, kt, w);
            block(t, kt, vis, w);
            for (std::size_t r = 0; r < t.R; ++r) {
                const std::size_t i = r / G, head = hk * G + r % G;
                const float sc = w.scale[i];
                const float bf = add_then_scale() ? sc : 1.0f;  // the bias's gradient: dS·s or dS
                float* dsrow = w.ds.data() + r * BK;
                const std::int64_t qp = t.qs[i];
                if constexpr (is_shaw_bias<bias_type> || is_t5_bias<bias_type>) {
                    for (std::size_t j = 0; j < kt.nk; ++j) {
                        const float ds = dsrow[j];
                        if constexpr (is_shaw_bias<bias_type>) {
                            const std::size_t row = enc.bias.row(qp, kt.ks[j]);
                            const float* akr = enc.bias.key_table().data() + row * D;
                            const float dsb = bf * ds;
                            float* aq = w.acc_q.data() + r * sh.stride_d;
                            for (std::size_t d = 0; d < D; ++d) aq[d] += dsb * akr[d];
                            if (!pg.shaw_keys.empty()) {
                                const float* qr = w.q.data() + r * D;
                                for (std::size_t d = 0; d < D; ++d) g_ak[row * D + d] += dsb * qr[d];
                            }
                            if (!pg.shaw_values.empty()) {
                                const float p = w.p[r * BK + j];
                                const float* dor = w.dout.data() + r * Dv;
                                for (std::size_t d = 0; d < Dv; ++d) g_av[row * Dv + d] += p * dor[d];
                            }
                        } else if (!pg.bias_table.empty()) {
                            const auto b = static_cast<std::size_t>(
                                enc.bias.buckets().bucket_unchecked(relative_position(kt.ks[j], qp)));
                            g_bias[b * sh.Hq + head] += bf * ds;
                        }
                    }
                }
                for (std::size_t j = 0; j < kt.nk; ++j) dsrow[j] *= sc;
            }
            ker.pv({w.ds.data(), t.R, kt.nk, w.k.data(), D, D, w.acc_q.data(), sh.stride_d, dtype::f32});
        }
        for (std::size_t r = 0; r < t.R; ++r)
            std::copy_n(w.acc_q.data() + r * sh.stride_d, D, dq.row(t.t0 + r / G, hk * G + r % G));
    }
};
}  // namespace detail

}  // namespace posenc
