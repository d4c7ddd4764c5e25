#pragma once
// The block recompute, the two passes and the one-sweep head item of posenc::attention_backward
// (grad/attention.hpp, which explains the algorithm and runs every check before calling in here), and attention_param_grads,
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

struct grad_query_tile {
    std::size_t hk = 0, t0 = 0, nq = 0, R = 0, rows_pad = 0;
    position_ids qs = position_ids::consecutive(0, 0);
    std::int64_t q_lo = 0, q_hi = 0;
    std::int32_t seq_lo = 0, seq_hi = 0;
};

/// A query tile's rows as the steps read them, 64-byte aligned: transformed queries and dO (rows past
/// the tile's zero), Δ, lse and the scales.
struct grad_query_rows {
    attn_floats q, dout;
    std::vector<float> delta, lse, scale, row_scale;
    grad_query_tile tile;
    explicit grad_query_rows(const grad_shape& sh)
        : q(sh.rows_pad * sh.D), dout(sh.rows_pad * sh.Dv), delta(sh.rows_pad), lse(sh.rows_pad), scale(sh.tile_tokens),
          row_scale(sh.rows_pad) {}
};

/// One thread's scratch, 64-byte aligned for the SIMD steps: query rows (one tile's, or every tile of
/// a kv head for head_item; `current` is the one the steps read), a key tile's transformed K and V, the
/// block's P and dS ([rows][grad_key_tile]), the accumulators (head_dq: a kv head's dQ, for head_item),
/// and a distance bias's terms (as the forward's).
struct grad_scratch {
    std::vector<grad_query_rows> slots;
    std::size_t current = 0;
    attn_floats k, v, kt, p, ds, acc_k, acc_v, acc_q, head_dq;
    std::vector<float> m, l;
    std::size_t terms_stride;
    std::vector<double> terms;
    explicit grad_scratch(const grad_shape& sh)
        : slots(1, grad_query_rows(sh)), k(grad_key_tile * sh.D), v(grad_key_tile * sh.Dv),
          kt(std::max(sh.D, sh.Dv) * grad_key_tile), p(sh.rows_pad * grad_key_tile), ds(sh.rows_pad * grad_key_tile),
          acc_k(grad_key_tile * sh.stride_d), acc_v(grad_key_tile * sh.stride_dv), acc_q(sh.rows_pad * sh.stride_d),
          m(sh.rows_pad), l(sh.rows_pad), terms_stride(grad_key_tile + sh.tile_tokens), terms(sh.G * terms_stride) {}
    [[nodiscard]] grad_query_rows& rows() noexcept { return slots[current]; }
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
    std::span<const float> lse;
    std::span<const float> delta;  // Δ = dO·O per query row, as lse
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
    /// transformed queries, dO, Δ, lse, and the per-token scales.
    grad_query_tile load_queries(std::size_t hk, std::size_t tile, grad_scratch& w) const {
        grad_query_tile t = query_bounds(tile);
        t.hk = hk;
        t.R = t.nq * sh.G;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv;
        t.rows_pad = (t.R + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
        std::fill_n(w.rows().q.begin(), t.rows_pad * D, 0.0f);
        std::fill_n(w.rows().dout.begin(), t.rows_pad * Dv, 0.0f);
        for (std::size_t i = 0; i < t.nq; ++i)
            for (std::size_t g = 0; g < G; ++g) {
                const std::size_t r = i * G + g, h = hk * G + g;
                std::copy_n(q.row(t.t0 + i, h), D, w.rows().q.data() + r * D);
                std::copy_n(dout.row(t.t0 + i, h), Dv, w.rows().dout.data() + r * Dv);
                w.rows().delta[r] = delta[(t.t0 + i) * sh.Hq + h];
                // A row whose forward met +∞ logits (lse +∞) has no defined gradient: NaN along its keys.
                const float l = lse[(t.t0 + i) * sh.Hq + h];
                w.rows().lse[r] = l == std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::quiet_NaN() : l;
            }
        transform_queries(enc.transform, heads_view<float>(w.rows().q.data(), {t.nq, G, D}), t.qs);
        for (std::size_t i = 0; i < t.nq; ++i) w.rows().scale[i] = static_cast<float>(enc.scale.scale(t.qs[i], D));
        for (std::size_t r = 0; r < t.rows_pad; ++r) w.rows().row_scale[r] = r < t.R ? w.rows().scale[r / G] : 0.0f;
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
    /// block into w.p and w.ds, [rows][grad_key_tile], dS times ds_factor[r] when given; 0 where masked
    /// and for a row that saw nothing. The bias, the masks and Shaw's dP term run here, outside the steps.
    void block(const grad_query_tile& t, const grad_key_tile_info& kt, tile_visibility vis, grad_scratch& w,
               const float* ds_factor) const {
        constexpr float ninf = -std::numeric_limits<float>::infinity();
        constexpr std::size_t BK = grad_key_tile;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv, nk = kt.nk;
        const float cap = opt.softcap;
        // scale_then_add: the qk step scales each row as it stores it, as the forward does.
        ker.qk({w.rows().q.data(), t.rows_pad, D, w.k.data(), D, nk, w.kt.data(), w.p.data(),
                add_then_scale() ? nullptr : w.rows().row_scale.data(), dtype::f32});
        ker.qk({w.rows().dout.data(), t.rows_pad, Dv, w.v.data(), Dv, nk, w.kt.data(), w.ds.data(), nullptr, dtype::f32});
        const bool by_distance =
            distance_terms(enc.bias, t.hk, G, sh.tile_tokens, t.q_lo, t.q_hi, kt.ks, w.terms.data(), w.terms_stride);
        for (std::size_t r = 0; r < t.R; ++r) {  // the logits as the forward forms them, −∞ where masked
            const std::size_t i = r / G, head = t.hk * G + r % G;
            const std::int64_t qp = t.qs[i];
            float* srow = w.p.data() + r * BK;
            if (by_distance)  // row r's distances start at k_lo − qp, entry q_hi − qp of its head's terms
                ker.add_terms({srow, w.terms.data() + (r % G) * w.terms_stride + static_cast<std::size_t>(t.q_hi - qp), nk});
            else
                add_bias_to_scores(enc.bias, head, qp, kt.ks, std::span<float>(srow, nk),
                                   std::span<const float>(w.rows().q.data() + r * D, D));
            if (add_then_scale()) {
                const float sc = w.rows().scale[i];
                for (std::size_t j = 0; j < nk; ++j) srow[j] *= sc;
            }
            if (vis == tile_visibility::partial) {
                mask_scores(mask, qp, kt.ks, srow);
                if (seq()) {
                    const std::int32_t qid = opt.query_sequence[t.t0 + i];
                    for (std::size_t j = 0; j < nk; ++j)
                        if (opt.key_sequence[kt.j0 + j] != qid) srow[j] = ninf;
                }
            }
        }
        if constexpr (is_shaw_bias<bias_type>) {  // dP += dO·a^V of each pair's clipped distance
            for (std::size_t r = 0; r < t.R; ++r) {
                const std::int64_t qp = t.qs[r / G];
                const float* dor = w.rows().dout.data() + r * Dv;
                for (std::size_t j = 0; j < nk; ++j) {
                    const float* av = enc.bias.value_table().data() + enc.bias.row(qp, kt.ks[j]) * Dv;
                    float dp = 0.0f;
                    for (std::size_t d = 0; d < Dv; ++d) dp += dor[d] * av[d];
                    w.ds[r * BK + j] += dp;
                }
            }
        }
        if (cap == 0.0f) {  // P = exp(S − lse) by the forward's softmax step started from m = lse
            std::copy_n(w.rows().lse.begin(), t.R, w.m.begin());
            std::fill_n(w.l.begin(), t.R, 0.0f);
            ker.softmax({w.p.data(), t.R, nk, w.m.data(), w.l.data(), 0.0f});
            ker.grad_ds({w.p.data(), w.ds.data(), t.R, w.rows().delta.data(), ds_factor});
        }
        for (std::size_t r = 0; r < t.R; ++r) {
            float* prow = w.p.data() + r * BK;
            float* dsrow = w.ds.data() + r * BK;  // dP on entry with softcap
            const float l = w.rows().lse[r], delta = w.rows().delta[r], f = ds_factor ? ds_factor[r] : 1.0f;
            if (l == ninf) {  // a row that saw nothing (and no sink): no gradient
                std::fill_n(prow, BK, 0.0f);
                std::fill_n(dsrow, BK, 0.0f);
                continue;
            }
            if (cap == 0.0f) continue;
            for (std::size_t j = 0; j < nk; ++j) {  // softcap: y = c·tanh(x/c), dy/dx = 1 − tanh²
                if (prow[j] == ninf) {
                    prow[j] = 0.0f;
                    dsrow[j] = 0.0f;
                    continue;
                }
                const float th = std::tanh(prow[j] / cap);
                const float p = std::exp(cap * th - l);
                prow[j] = p;
                dsrow[j] = p * (dsrow[j] - delta) * (1.0f - th * th) * f;
            }
        }
    }

    /// Pass 1: dK (w.r.t. the transformed keys) and dV of key tile `ktile` of kv head hk.
    void key_item(std::size_t hk, std::size_t ktile, grad_scratch& w, const heads_view<float>& dk,
                  const heads_view<float>& dv) const {
        const grad_key_tile_info kt = key_tile(ktile);
        std::fill_n(w.acc_k.begin(), kt.nk * sh.stride_d, 0.0f);
        std::fill_n(w.acc_v.begin(), kt.nk * sh.stride_dv, 0.0f);
        bool loaded = false;
        for (std::size_t qt = 0; qt < query_tiles(); ++qt) {
            const tile_visibility vis = classify(query_bounds(qt), kt);  // before the queries are loaded
            if (vis == tile_visibility::none) continue;
            if (!loaded) load_keys(hk, kt, w), loaded = true;
            const grad_query_tile t = load_queries(hk, qt, w);
            block(t, kt, vis, w, w.rows().row_scale.data());  // s·dS, dK's factor
            key_side(t, kt, w);
        }
        store_keys(hk, kt, w, dk, dv);
    }

    /// Which parameter-gradient buffer the pass-2 item (query tile qt, kv head hk) adds to: T5's items
    /// write only their kv head's G columns, so a query tile's Hkv items share one table; Shaw's a^K and
    /// a^V rows are every head's, so each item has its own.
    [[nodiscard]] std::size_t table_buffer(std::size_t qt, std::size_t hk) const noexcept {
        return is_t5_bias<bias_type> ? qt : qt * sh.Hkv + hk;
    }
    [[nodiscard]] std::size_t table_buffers() const noexcept { return table_buffer(query_tiles(), 0); }

    /// Pass 2: dQ (w.r.t. the transformed queries) of query tile `qtile` of kv head hk, and this item's
    /// share of the parameter gradients added into `table` (zeroed by the caller; bias table, then a^K,
    /// then a^V, as asked for).
    void query_item(std::size_t hk, std::size_t qtile, grad_scratch& w, const heads_view<float>& dq,
                    const attention_param_grads& pg, std::span<float> table) const {
        const grad_query_tile t = load_queries(hk, qtile, w);
        std::fill_n(w.acc_q.begin(), t.rows_pad * sh.stride_d, 0.0f);
        for (std::size_t kti = 0; kti < key_tiles(); ++kti) {
            const grad_key_tile_info kt = key_tile(kti);
            const tile_visibility vis = classify(t, kt);
            if (vis == tile_visibility::none) continue;
            load_keys(hk, kt, w);
            block(t, kt, vis, w, raw_ds ? nullptr : w.rows().row_scale.data());  // s·dS, dQ's factor, unless tables need dS
            query_side(t, kt, w, w.acc_q.data(), pg, table);
        }
        for (std::size_t r = 0; r < t.R; ++r)
            std::copy_n(w.acc_q.data() + r * sh.stride_d, sh.D, dq.row(t.t0 + r / sh.G, t.hk * sh.G + r % sh.G));
    }

    /// Both passes of kv head hk in one sweep, each block computed once (5 block products instead of 7):
    /// the head's query tiles loaded once, then key tiles in order, each over the query tiles in order,
    /// each query tile's dQ accumulated in w.head_dq. Every sum runs in the passes' order with the same
    /// steps, so the results are the passes' bits; the caller uses it when there are no more threads
    /// than kv heads (the head's rows and dQ then total about the size of q, dout and dq).
    /// `tables`: the pass-2 items' buffers (table_buffer), zeroed by the caller.
    void head_item(std::size_t hk, grad_scratch& w, const heads_view<float>& dq, const heads_view<float>& dk,
                   const heads_view<float>& dv, const attention_param_grads& pg, std::span<float> tables) const {
        const std::size_t table = pg.bias_table.size() + pg.shaw_keys.size() + pg.shaw_values.size();
        const std::size_t tile_acc = sh.rows_pad * sh.stride_d;
        w.head_dq.assign(query_tiles() * tile_acc, 0.0f);
        if (w.slots.size() < query_tiles()) {
            const grad_query_rows blank = w.slots.front();
            w.slots.resize(query_tiles(), blank);
        }
        for (std::size_t qt = 0; qt < query_tiles(); ++qt) {  // each query tile loaded and transformed once
            w.current = qt;
            w.rows().tile = load_queries(hk, qt, w);
        }
        for (std::size_t kti = 0; kti < key_tiles(); ++kti) {
            const grad_key_tile_info kt = key_tile(kti);
            std::fill_n(w.acc_k.begin(), kt.nk * sh.stride_d, 0.0f);
            std::fill_n(w.acc_v.begin(), kt.nk * sh.stride_dv, 0.0f);
            bool loaded = false;
            for (std::size_t qt = 0; qt < query_tiles(); ++qt) {
                w.current = qt;
                const grad_query_tile& t = w.rows().tile;
                const tile_visibility vis = classify(t, kt);
                if (vis == tile_visibility::none) continue;
                if (!loaded) load_keys(hk, kt, w), loaded = true;
                block(t, kt, vis, w, raw_ds ? nullptr : w.rows().row_scale.data());
                query_side(t, kt, w, w.head_dq.data() + qt * tile_acc, pg,
                           tables.subspan(table_buffer(qt, hk) * table, table));  // leaves s·dS in w.ds
                key_side(t, kt, w);
            }
            store_keys(hk, kt, w, dk, dv);
        }
        w.current = 0;
        for (std::size_t qt = 0; qt < query_tiles(); ++qt) {
            const grad_query_tile& t = w.slots[qt].tile;
            for (std::size_t r = 0; r < t.R; ++r)
                std::copy_n(w.head_dq.data() + qt * tile_acc + r * sh.stride_d, sh.D, dq.row(t.t0 + r / sh.G, hk * sh.G + r % sh.G));
        }
    }

private:
    static constexpr bool raw_ds = is_shaw_bias<bias_type> || is_t5_bias<bias_type>;  // tables need dS before s
    [[nodiscard]] std::size_t query_tiles() const noexcept { return (sh.Tq + sh.tile_tokens - 1) / sh.tile_tokens; }
    [[nodiscard]] std::size_t key_tiles() const noexcept { return (sh.Tk + grad_key_tile - 1) / grad_key_tile; }

    /// dV += Pᵀ·dO and dK += (s·dS)ᵀ·T(Q) over the block, read transposed by the pv step.
    void key_side(const grad_query_tile& t, const grad_key_tile_info& kt, grad_scratch& w) const {
        ker.pv({w.p.data(), kt.nk, t.R, w.rows().dout.data(), sh.Dv, sh.Dv, w.acc_v.data(), sh.stride_dv, dtype::f32, true});
        ker.pv({w.ds.data(), kt.nk, t.R, w.rows().q.data(), sh.D, sh.D, w.acc_k.data(), sh.stride_d, dtype::f32, true});
    }

    void store_keys(std::size_t hk, const grad_key_tile_info& kt, const grad_scratch& w, const heads_view<float>& dk,
                    const heads_view<float>& dv) const {
        for (std::size_t j = 0; j < kt.nk; ++j) {
            std::copy_n(w.acc_k.data() + j * sh.stride_d, sh.D, dk.row(kt.j0 + j, hk));
            std::copy_n(w.acc_v.data() + j * sh.stride_dv, sh.Dv, dv.row(kt.j0 + j, hk));
        }
    }

    /// dQ += s·dS·T(K) (+ Shaw's a^K) into acc_q (the tile's rows, sh.stride_d apart) and the parameter
    /// gradients into `table`; with raw_ds, w.ds holds dS on entry and s·dS after.
    void query_side(const grad_query_tile& t, const grad_key_tile_info& kt, grad_scratch& w, float* acc_q,
                    const attention_param_grads& pg, std::span<float> table) const {
        constexpr std::size_t BK = grad_key_tile;
        const std::size_t G = sh.G, D = sh.D, Dv = sh.Dv;
        float* g_bias = table.data();
        float* g_ak = g_bias + pg.bias_table.size();
        float* g_av = g_ak + pg.shaw_keys.size();
        for (std::size_t r = 0; raw_ds && r < t.R; ++r) {
            const std::size_t i = r / G, head = t.hk * G + r % G;
            const float sc = w.rows().scale[i];
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
                        float* aq = acc_q + r * sh.stride_d;
                        for (std::size_t d = 0; d < D; ++d) aq[d] += dsb * akr[d];
                        if (!pg.shaw_keys.empty()) {
                            const float* qr = w.rows().q.data() + r * D;
                            for (std::size_t d = 0; d < D; ++d) g_ak[row * D + d] += dsb * qr[d];
                        }
                        if (!pg.shaw_values.empty()) {
                            const float p = w.p[r * BK + j];
                            const float* dor = w.rows().dout.data() + r * Dv;
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
        ker.pv({w.ds.data(), t.R, kt.nk, w.k.data(), D, D, acc_q, sh.stride_d, dtype::f32, false});
    }
};
}  // namespace detail

}  // namespace posenc
