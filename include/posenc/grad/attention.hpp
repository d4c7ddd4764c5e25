#pragma once
// (Over 450 lines: the block recompute, the two passes and the checks they rely on are one algorithm
// whose invariants — same scores as the forward, fixed summation order — are easiest to review together.)
// posenc::attention_backward: the gradients of out = attention(enc, q, k, v, ...) (attention/attention.hpp)
// with respect to Q, K, V (the un-transformed inputs as the forward took them) and, where the
// encoding has parameters, the T5 table, Shaw's a^K and a^V tables and the sink logits.
//
//   std::vector<float> lse(Tq * Hq);
//   posenc::attention_partial(enc, q, k, v, out, lse, qpos, kpos, posenc::causal_mask{});   // forward
//   posenc::attention_backward(enc, q, k, v, out, lse, dout, dq, dk, dv, qpos, kpos, posenc::causal_mask{});
//
// With sinks, attention_partial (which rejects them) is called without them and its part merged with
// the sinks: merge_attention_partials({{out, lse}}, out, lse, sinks) gives the output and the
// sink-including log-sum-exp this function needs; then pass the same sinks in options.
//
// How (FlashAttention-2's backward, on a CPU): nothing of size Tq×Tk is stored. For a query tile
// (the G query heads of one kv head over up to 64/G tokens) against a key tile of 64 keys, the scores
// are recomputed as the forward computes them (transform, scale, bias in its order, softcap, mask,
// sequence ids), P = exp(S − lse) from the saved per-row log-sum-exp, dP = dO·Vᵀ (Shaw: dO·(V + a^V)),
// dS = P ⊙ (dP − Δ) with Δ_r = dO_r·O_r, times softcap's 1 − tanh². Two passes keep every sum in a
// fixed order whatever the thread count (bit-identical results for any count, no atomics):
//   pass 1, one work item per (kv head, key tile), over every query tile: dV += Pᵀ·dO, dK += s·dSᵀ·T(Q);
//   pass 2, one work item per (kv head, query tile), over every key tile: dQ += s·dS·T(K) and the
//   parameter gradients (into one buffer per item, added to the caller's in item order at the end).
// Then the transform's transpose Jacobian takes dT(Q), dT(K) back to dQ, dK at their positions
// (keys_transformed: dK stays with respect to the transformed keys the call was given).
//
// Extra memory per thread is O(tile); parameter gradients add one table-sized buffer per pass-2 item
// (only for the tables asked for). dq, dk, dv are overwritten; parameter gradients are added to.
// Every check runs before anything is written: the forward's (shapes, positions, mask, sinks, sequence
// ids, bias, scale, transform) and dout/dq/dk/dv shapes, lse's size and values, overlaps, and the
// parameter-gradient spans' sizes.

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
#include "posenc/grad/detail/transform_transpose.hpp"

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

inline void require_grad_shape(const char* name, std::size_t t, std::size_t h, std::size_t d, std::size_t et,
                               std::size_t eh, std::size_t ed, const char* like) {
    if (t != et || h != eh || d != ed)
        throw config_error(std::string(name) + " shape", to_text(t) + "x" + to_text(h) + "x" + to_text(d),
                           "must equal " + std::string(like) + "'s " + to_text(et) + "x" + to_text(eh) + "x" + to_text(ed));
}

template <class Enc, class KV, attention_mask Mask>
void attention_backward_checked(const Enc& enc, heads_view<const float> q, heads_view<const KV> k, heads_view<const KV> v,
                                heads_view<const float> out, std::span<const float> lse, heads_view<const float> dout,
                                heads_view<float> dq, heads_view<float> dk, heads_view<float> dv, const position_ids& qpos,
                                const position_ids& kpos, const Mask& mask, const attention_options& opt,
                                const attention_param_grads& pg) {
    using bias_type = std::remove_cvref_t<decltype(enc.bias)>;
    static_assert(differentiable_bias<bias_type>,
                  "posenc::attention_backward: this bias reads the query or adds to the output, and only Shaw's "
                  "gradient is known");
    // The forward's checks (out stands in for the forward's output view; it is only read here).
    const heads_view<float> out_as_forward(const_cast<float*>(out.data()), {out.tokens(), out.heads(), out.head_dim()},
                                           {out.token_stride(), out.head_stride()});
    check_attention(enc, q, k, v, out_as_forward, qpos, kpos, mask, opt);
    const std::size_t Tq = q.tokens(), Tk = k.tokens(), Hq = q.heads(), Hkv = k.heads(), D = q.head_dim(),
                      Dv = v.head_dim();
    require_grad_shape("dout", dout.tokens(), dout.heads(), dout.head_dim(), Tq, Hq, Dv, "out");
    require_grad_shape("dq", dq.tokens(), dq.heads(), dq.head_dim(), Tq, Hq, D, "q");
    require_grad_shape("dk", dk.tokens(), dk.heads(), dk.head_dim(), Tk, Hkv, D, "k");
    require_grad_shape("dv", dv.tokens(), dv.heads(), dv.head_dim(), Tk, Hkv, Dv, "v");
    require(lse.size() == Tq * Hq, "lse", "of " + to_text(lse.size()) + " values",
            "needs one per query row = q.tokens * q.heads = " + to_text(Tq * Hq));
    for (std::size_t r = 0; r < lse.size(); ++r)
        require(lse[r] < std::numeric_limits<float>::infinity(), "lse[" + to_text(r) + "]", lse[r], "must be finite or -inf");
    // Outputs against every input and each other.
    const std::span<const std::byte> inputs[] = {view_bytes(q), view_bytes(k), view_bytes(v), view_bytes(out),
                                                 view_bytes(dout), std::as_bytes(lse)};
    const char* input_names[] = {"q", "k", "v", "out", "dout", "lse"};
    const std::span<const std::byte> outputs[] = {view_bytes(dq), view_bytes(dk), view_bytes(dv),
                                                  std::as_bytes(pg.bias_table), std::as_bytes(pg.shaw_keys),
                                                  std::as_bytes(pg.shaw_values), std::as_bytes(pg.sinks)};
    const char* output_names[] = {"dq", "dk", "dv", "param_grads.bias_table", "param_grads.shaw_keys",
                                  "param_grads.shaw_values", "param_grads.sinks"};
    for (std::size_t a = 0; a < std::size(outputs); ++a) {
        for (std::size_t b = 0; b < std::size(inputs); ++b)
            require(!spans_overlap(outputs[a], inputs[b]), output_names[a], "view", std::string("overlaps ") + input_names[b]);
        for (std::size_t b = a + 1; b < std::size(outputs); ++b)
            require(!spans_overlap(outputs[a], outputs[b]), output_names[a], "view", std::string("overlaps ") + output_names[b]);
    }
    if (!pg.bias_table.empty()) {
        if constexpr (is_t5_bias<bias_type>) {
            const std::size_t n = static_cast<std::size_t>(enc.bias.buckets().num_buckets) * enc.bias.heads();
            require(pg.bias_table.size() == n, "param_grads.bias_table", "of " + to_text(pg.bias_table.size()) + " values",
                    "needs num_buckets × heads = " + to_text(n));
        } else {
            throw config_error("param_grads.bias_table", "of " + to_text(pg.bias_table.size()) + " values",
                               "must be empty: the bias (" + std::string(bias_type::name) + ") has no table");
        }
    }
    if (!pg.shaw_keys.empty() || !pg.shaw_values.empty()) {
        if constexpr (is_shaw_bias<bias_type>) {
            const auto rows = static_cast<std::size_t>(2 * enc.bias.max_distance() + 1);
            require(pg.shaw_keys.empty() || pg.shaw_keys.size() == rows * D, "param_grads.shaw_keys",
                    "of " + to_text(pg.shaw_keys.size()) + " values", "needs (2·max_distance + 1)·head_dim = " + to_text(rows * D));
            require(pg.shaw_values.empty() || pg.shaw_values.size() == rows * Dv, "param_grads.shaw_values",
                    "of " + to_text(pg.shaw_values.size()) + " values",
                    "needs (2·max_distance + 1)·value_dim = " + to_text(rows * Dv));
        } else {
            throw config_error(pg.shaw_keys.empty() ? "param_grads.shaw_values" : "param_grads.shaw_keys", "non-empty",
                               "must be empty: the bias (" + std::string(bias_type::name) + ") is not Shaw's");
        }
    }
    if (!pg.sinks.empty()) {
        require(!opt.sinks.empty(), "param_grads.sinks", "of " + to_text(pg.sinks.size()) + " values",
                "must be empty when options.sinks is");
        require(pg.sinks.size() == Hq, "param_grads.sinks", "of " + to_text(pg.sinks.size()) + " values",
                "needs one per query head = " + to_text(Hq));
    }

    // Every check has passed: compute.
    grad_shape sh{};
    sh.Tq = Tq, sh.Tk = Tk, sh.Hq = Hq, sh.Hkv = Hkv, sh.G = Hq / Hkv, sh.D = D, sh.Dv = Dv;
    sh.tile_tokens = std::max<std::size_t>(1, std::min(Tq, std::max<std::size_t>(1, 64 / sh.G)));
    sh.max_rows = sh.tile_tokens * sh.G;
    sh.rows_pad = (sh.max_rows + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
    sh.stride_d = (D + 15) / 16 * 16;
    sh.stride_dv = (Dv + 15) / 16 * 16;
    const simd::attn_kernels ker = simd::attention_kernels();
    const grad_call<Enc, Mask, KV> call{ker, enc, sh, q, k, v, out, lse, dout, qpos, kpos, mask, opt};
    const std::size_t ktiles = (Tk + grad_key_tile - 1) / grad_key_tile;
    const std::size_t qtiles = Tq == 0 ? 0 : (Tq + sh.tile_tokens - 1) / sh.tile_tokens;
    const std::size_t fmas = Tq * Hq * std::max<std::size_t>(Tk, 1) * (2 * D + 2 * Dv);
    const std::size_t by_work = opt.min_fmas_per_thread ? std::max<std::size_t>(1, fmas / opt.min_fmas_per_thread) : fmas;
    const std::size_t wanted = std::min<std::size_t>(std::max(1u, opt.threads), by_work);
    std::vector<grad_scratch> scratch;
    scratch.reserve(wanted);
    for (std::size_t i = 0; i < wanted; ++i) scratch.emplace_back(sh);

    const std::size_t key_items = ktiles * Hkv;
    run_round_robin(static_cast<unsigned>(std::min(wanted, std::max<std::size_t>(key_items, 1))), opt, key_items,
                    [&](std::size_t item, std::size_t tid) { call.key_item(item % Hkv, item / Hkv, scratch[tid], dk, dv); });

    const std::size_t table = pg.bias_table.size() + pg.shaw_keys.size() + pg.shaw_values.size();
    const std::size_t query_items = qtiles * Hkv;
    std::vector<float> tables(table * query_items);
    run_round_robin(static_cast<unsigned>(std::min(wanted, std::max<std::size_t>(query_items, 1))), opt, query_items,
                    [&](std::size_t item, std::size_t tid) {
                        call.query_item(item % Hkv, item / Hkv, scratch[tid], dq, pg,
                                        std::span<float>(tables.data() + item * table, table));
                    });
    if (table > 0) {  // the items' shares, summed in item order
        std::vector<double> sum(table, 0.0);
        for (std::size_t item = 0; item < query_items; ++item)
            for (std::size_t i = 0; i < table; ++i) sum[i] += tables[item * table + i];
        std::size_t at = 0;
        for (const std::span<float> s : {pg.bias_table, pg.shaw_keys, pg.shaw_values})
            for (float& g : s) g += static_cast<float>(sum[at++]);
    }
    if (!pg.sinks.empty()) {  // d sink_h = −Σ_rows exp(sink_h − lse_row)·Δ_row (the sink's value is 0)
        for (std::size_t h = 0; h < Hq; ++h) {
            double g = 0.0;
            for (std::size_t t = 0; t < Tq; ++t) {
                const float l = lse[t * Hq + h];
                if (l == -std::numeric_limits<float>::infinity()) continue;
                double delta = 0.0;
                const float* o = out.row(t, h);
                const float* d = dout.row(t, h);
                for (std::size_t c = 0; c < Dv; ++c) delta += static_cast<double>(d[c]) * o[c];
                g -= std::exp(static_cast<double>(opt.sinks[h]) - l) * delta;
            }
            pg.sinks[h] += static_cast<float>(g);
        }
    }
    grad_transform_transpose_queries(enc.transform, dq, qpos);
    if (!opt.keys_transformed) grad_transform_transpose_keys(enc.transform, dk, kpos);
}

}  // namespace detail

/// The gradients of out = attention(enc, q, k, v, ...) for dout = ∂L/∂out; see the top of this file.
/// out and lse as attention_partial returned them (with sinks: after the merge with the sinks).
template <class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
void attention_backward(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                        heads_view<const float> k, heads_view<const float> v, heads_view<const float> out,
                        std::span<const float> lse, heads_view<const float> dout, heads_view<float> dq,
                        heads_view<float> dk, heads_view<float> dv, const position_ids& q_positions,
                        const position_ids& k_positions, const Mask& mask = {}, const attention_options& options = {},
                        const attention_param_grads& param_grads = {}) {
    detail::attention_backward_checked<attention_encoding<Transform, Bias, Scale>, float>(
        enc, q, k, v, out, lse, dout, dq, dk, dv, q_positions, k_positions, mask, options, param_grads);
}

/// The same with K and V in bf16 or fp16 (as the forward took them); the gradients are in float.
template <class K, class V, class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
    requires half_storage<std::remove_const_t<K>> && half_storage<std::remove_const_t<V>>
void attention_backward(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                        heads_view<K> k, heads_view<V> v, heads_view<const float> out, std::span<const float> lse,
                        heads_view<const float> dout, heads_view<float> dq, heads_view<float> dk, heads_view<float> dv,
                        const position_ids& q_positions, const position_ids& k_positions, const Mask& mask = {},
                        const attention_options& options = {}, const attention_param_grads& param_grads = {}) {
    using H = std::remove_const_t<K>;
    static_assert(std::is_same_v<H, std::remove_const_t<V>>, "posenc::attention_backward: K and V must hold the same type");
    detail::attention_backward_checked<attention_encoding<Transform, Bias, Scale>, H>(
        enc, q, heads_view<const H>(k), heads_view<const H>(v), out, lse, dout, dq, dk, dv, q_positions, k_positions, mask,
        options, param_grads);
}

}  // namespace posenc
