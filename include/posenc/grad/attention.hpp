#pragma once
// posenc::attention_backward: the gradients of out = attention(enc, q, k, v, ...) (attention/attention.hpp)
// with respect to Q, K, V (the un-transformed inputs as the forward took them) and, where the
// encoding has parameters, the T5 table, Shaw's a^K and a^V tables and the sink logits.
//
//   std::vector<float> lse(Tq * Hq);
//   posenc::attention_partial(enc, q, k, v, out, lse, qpos, kpos, posenc::causal_mask{});   // forward
//   posenc::attention_backward(enc, q, k, v, out, lse, dout, dq, dk, dv, qpos, kpos, posenc::causal_mask{});
//
// Save from the forward the un-transformed q, k, v (there is no queries_transformed), out and lse. The
// positions come after dout, dq, dk, dv (unlike attention_partial). Q is float; K and V float, bf16 or
// fp16. The mask, softcap, sequence ids, scale and keys_transformed must be the forward's: none of them
// can be checked against out and lse.
//
// With sinks, attention_partial (which rejects them) is called without them and its part merged with
// the sinks: merge_attention_partials({{out, lse}}, out, {.lse = lse, .sinks = sinks}) gives the
// output and the sink-including log-sum-exp this function needs (dQ, dK, dV see the sinks only
// through out and lse); then pass the same sinks in options. Sharded or ring: every call takes its
// queries' global out and lse, the caller sums the calls' dq, dk, dv shares, and param_grads.sinks is
// asked of one call only (the tables add up across calls).
//
// How (FlashAttention-2's backward, on a CPU): nothing of size Tq×Tk is stored. For a query tile
// (the G query heads of one kv head over up to 64/G tokens) against a key tile of 64 keys, the scores
// are recomputed as the forward computes them (transform, scale, bias in its order, softcap, mask,
// sequence ids), P = exp(S − lse) from the saved per-row log-sum-exp, dP = dO·Vᵀ (Shaw: dO·(V + a^V)),
// dS = P ⊙ (dP − Δ) with Δ_r = dO_r·O_r, times softcap's 1 − tanh². Two passes keep every sum in a
// fixed order whatever the thread count (bit-identical results for any count, no atomic adds):
//   pass 1, one work item per (kv head, key tile), over every query tile: dV += Pᵀ·dO, dK += s·dSᵀ·T(Q);
//   pass 2, one work item per (kv head, query tile), over every key tile: dQ += s·dS·T(K) and the
//   parameter gradients (into buffers summed in a fixed order and added to the caller's at the end).
// With no more threads than kv heads, one item per kv head does both passes' sums in one sweep (each
// block's scores computed once instead of twice), in the same order with the same steps: the same bits.
// Then the transform's transpose Jacobian takes dT(Q), dT(K) back to dQ, dK at their positions
// (keys_transformed: dK stays with respect to the transformed keys the call was given); a transform
// without a transform_backward must declare `static constexpr bool linear_in_x = true;`, else it does
// not compile (grad/detail/transform_transpose.hpp).
//
// Extra memory per thread is O(tile), plus a kv head's transformed Q, dO and dQ in the one-sweep case
// (about the size of q, dout and dq in all); parameter gradients add float buffers the items add to
// (T5: one table per query tile; Shaw: one a^K/a^V pair per item of a wave of pass 2, independent of
// Tq; docs/gradients.md gives the bytes). dq, dk, dv are overwritten; parameter gradients are added to.
// Every check runs before anything is written: the forward's (shapes, positions, mask, sinks, sequence
// ids, bias, scale, transform) and dout/dq/dk/dv shapes, lse's size, overlaps, and the
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
#include "posenc/grad/detail/attention_passes.hpp"
#include "posenc/grad/detail/transform_transpose.hpp"

namespace posenc {

namespace detail {

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
    require(lse.size() == Tq * Hq, "lse", [&] { return "of " + to_text(lse.size()) + " values"; },
            [&] { return "needs one per query row = q.tokens * q.heads = " + to_text(Tq * Hq); });
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
            require(!spans_overlap(outputs[a], inputs[b]), output_names[a], "view",
                    [&] { return std::string("overlaps ") + input_names[b]; });
        for (std::size_t b = a + 1; b < std::size(outputs); ++b)
            require(!spans_overlap(outputs[a], outputs[b]), output_names[a], "view",
                    [&] { return std::string("overlaps ") + output_names[b]; });
    }
    if (!pg.bias_table.empty()) {
        if constexpr (is_t5_bias<bias_type>) {
            const std::size_t n = static_cast<std::size_t>(enc.bias.buckets().num_buckets) * enc.bias.heads();
            require(pg.bias_table.size() == n, "param_grads.bias_table",
                    [&] { return "of " + to_text(pg.bias_table.size()) + " values"; },
                    [&] { return "needs num_buckets × heads = " + to_text(n); });
        } else {
            throw config_error("param_grads.bias_table", "of " + to_text(pg.bias_table.size()) + " values",
                               "must be empty: the bias (" + std::string(bias_type::name) + ") has no table");
        }
    }
    if (!pg.shaw_keys.empty() || !pg.shaw_values.empty()) {
        if constexpr (is_shaw_bias<bias_type>) {
            const auto rows = static_cast<std::size_t>(2 * enc.bias.max_distance() + 1);
            require(pg.shaw_keys.empty() || pg.shaw_keys.size() == rows * D, "param_grads.shaw_keys",
                    [&] { return "of " + to_text(pg.shaw_keys.size()) + " values"; },
                    [&] { return "needs (2·max_distance + 1)·head_dim = " + to_text(rows * D); });
            require(pg.shaw_values.empty() || pg.shaw_values.size() == rows * Dv, "param_grads.shaw_values",
                    [&] { return "of " + to_text(pg.shaw_values.size()) + " values"; },
                    [&] { return "needs (2·max_distance + 1)·value_dim = " + to_text(rows * Dv); });
        } else {
            throw config_error(pg.shaw_keys.empty() ? "param_grads.shaw_values" : "param_grads.shaw_keys", "non-empty",
                               "must be empty: the bias (" + std::string(bias_type::name) + ") is not Shaw's");
        }
    }
    if (!pg.sinks.empty()) {
        require(!opt.sinks.empty(), "param_grads.sinks", [&] { return "of " + to_text(pg.sinks.size()) + " values"; },
                "must be empty when options.sinks is");
        require(pg.sinks.size() == Hq, "param_grads.sinks", [&] { return "of " + to_text(pg.sinks.size()) + " values"; },
                [&] { return "needs one per query head = " + to_text(Hq); });
    }

    // Every check has passed: compute.
    grad_shape sh{};
    sh.Tq = Tq, sh.Tk = Tk, sh.Hq = Hq, sh.Hkv = Hkv, sh.G = Hq / Hkv, sh.D = D, sh.Dv = Dv;
    sh.tile_tokens = std::max<std::size_t>(1, std::min(Tq, std::max<std::size_t>(1, 64 / sh.G)));
    sh.max_rows = sh.tile_tokens * sh.G;
    sh.rows_pad = (sh.max_rows + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
    sh.stride_d = (D + 15) / 16 * 16;
    sh.stride_dv = (Dv + 15) / 16 * 16;
    std::vector<float> delta(Tq * Hq);  // Δ = dO·O of each query row, summed in double once for both passes
    for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t h = 0; h < Hq; ++h) {
            double sum = 0.0;
            const float* o = out.row(t, h);
            const float* d = dout.row(t, h);
            for (std::size_t c = 0; c < Dv; ++c) sum += static_cast<double>(d[c]) * o[c];
            delta[t * Hq + h] = static_cast<float>(sum);
        }
    const simd::attn_kernels ker = simd::attention_kernels();
    const grad_call<Enc, Mask, KV> call{ker, enc, sh, q, k, v, lse, delta, dout, qpos, kpos, mask, opt};
    const std::size_t ktiles = (Tk + grad_key_tile - 1) / grad_key_tile;
    const std::size_t qtiles = Tq == 0 ? 0 : (Tq + sh.tile_tokens - 1) / sh.tile_tokens;
    const std::size_t fmas = Tq * Hq * std::max<std::size_t>(Tk, 1) * (2 * D + 2 * Dv);
    const std::size_t by_work =
        opt.min_fmas_per_thread ? std::max<std::size_t>(1, fmas / opt.min_fmas_per_thread) : std::max<std::size_t>(1, fmas);
    const std::size_t wanted = std::min<std::size_t>(std::max(1u, opt.threads), by_work);
    std::vector<grad_scratch> scratch;
    scratch.reserve(wanted);
    for (std::size_t i = 0; i < wanted; ++i) scratch.emplace_back(sh);

    const std::size_t table = pg.bias_table.size() + pg.shaw_keys.size() + pg.shaw_values.size();
    std::vector<double> sum(table, 0.0);  // the parameter gradients: the items' buffers, added in buffer order
    auto add_buffers = [&](const std::vector<float>& buffers, std::size_t count) {
        for (std::size_t b = 0; b < count; ++b)
            for (std::size_t i = 0; i < table; ++i) sum[i] += buffers[b * table + i];
    };
    // Shaw's tables are (2·max_distance+1)·(D+Dv) floats: past options.max_grad_buffer_bytes of buffers
    // (one per query item), pass 2 runs in waves of query items whose buffers are added (in buffer
    // order, as all at once would be: the same bits) before the next wave reuses them.
    const bool shaw_waves = (!pg.shaw_keys.empty() || !pg.shaw_values.empty()) &&
                            table * call.table_buffers() * sizeof(float) > opt.max_grad_buffer_bytes;
    if (wanted <= Hkv && !shaw_waves) {  // a kv head per item, each block once (the two passes' bits)
        std::vector<float> tables(table * call.table_buffers());  // zeros: the items add their shares to them
        run_units(static_cast<unsigned>(wanted), opt, Hkv, [&](std::size_t hk, std::size_t tid) {
            call.head_item(hk, scratch[tid], dq, dk, dv, pg, tables);
        });
        add_buffers(tables, call.table_buffers());
    } else {
        const std::size_t key_items = ktiles * Hkv;
        // (Under a causal mask the first key tiles see the most queries.)
        run_units(static_cast<unsigned>(std::min(wanted, std::max<std::size_t>(key_items, 1))), opt, key_items,
                  [&](std::size_t item, std::size_t tid) { call.key_item(item % Hkv, item / Hkv, scratch[tid], dk, dv); },
                  unit_order::first_first);
        // A wave is whole query tiles (a T5 buffer is shared by a tile's kv heads): all of them at once
        // without Shaw, else about 4 items a thread.
        const std::size_t wave_tiles =
            shaw_waves ? std::max<std::size_t>(1, 4 * wanted / Hkv) : std::max<std::size_t>(qtiles, 1);
        std::vector<float> tables(table * call.table_buffer(std::min(wave_tiles, qtiles), 0));
        for (std::size_t qt0 = 0; qt0 < qtiles; qt0 += wave_tiles) {
            const std::size_t tiles = std::min(wave_tiles, qtiles - qt0), items = tiles * Hkv;
            std::fill(tables.begin(), tables.end(), 0.0f);
            run_units(static_cast<unsigned>(std::min(wanted, items)), opt, items,
                            [&](std::size_t item, std::size_t tid) {
                                const std::size_t hk = item % Hkv, qt = item / Hkv;
                                call.query_item(hk, qt0 + qt, scratch[tid], dq, pg,
                                                std::span<float>(tables.data() + call.table_buffer(qt, hk) * table, table));
                            });
            add_buffers(tables, call.table_buffer(tiles, 0));
        }
    }
    if (table > 0) {
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
                g -= std::exp(static_cast<double>(opt.sinks[h]) - l) * delta[t * Hq + h];
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
    requires half_kv_pair<K, V>
void attention_backward(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                        heads_view<K> k, heads_view<V> v, heads_view<const float> out, std::span<const float> lse,
                        heads_view<const float> dout, heads_view<float> dq, heads_view<float> dk, heads_view<float> dv,
                        const position_ids& q_positions, const position_ids& k_positions, const Mask& mask = {},
                        const attention_options& options = {}, const attention_param_grads& param_grads = {}) {
    using H = std::remove_const_t<K>;
    static_assert(std::is_same_v<H, std::remove_const_t<V>>,
                  "posenc::attention_backward: K and V must hold the same element type (float, bf16 or fp16)");
    detail::attention_backward_checked<attention_encoding<Transform, Bias, Scale>, H>(
        enc, q, heads_view<const H>(k), heads_view<const H>(v), out, lse, dout, dq, dk, dv, q_positions, k_positions, mask,
        options, param_grads);
}

}  // namespace posenc
