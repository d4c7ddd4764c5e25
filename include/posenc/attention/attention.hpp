#pragma once
// posenc::attention: out = softmax(s·T(Q)·T(K)ᵀ + bias, masked)·V per head, for any encoding.
//
//   posenc::attention(posenc::attention_encoding{rope}, q, k, v, out, q_positions, k_positions,
//                     posenc::causal_mask{}, {.threads = 2});
//
// Shapes: Q [Tq, Hq, D], K [Tk, Hkv, D], V [Tk, Hkv, Dv], out [Tq, Hq, Dv], heads_views with any
// strides; K and V in float, bf16 or fp16 (both of one type), Q and out in float; Hq a multiple of Hkv (MHA, GQA, MQA): query head h reads kv head h / (Hq/Hkv). Positions
// are explicit for queries and keys (a KV cache, left padding, packed sequences): decode is Tq new
// queries at their positions against cached keys at theirs, with keys_transformed = true when the
// cache holds already-rotated keys.
//
// The encoding supplies T (attention_encoding::transform: rotary, any_rotary, xpos_rotary, nope; Q is
// transformed per query tile in scratch, never in the caller's buffer), the bias (alibi_bias,
// t5_bias, shaw_rpr, no_bias; in the order the bias's order() says) and the scale s. Then
// soft-capping, then the mask (attention/mask.hpp) and sequence ids, then the softmax, with the sink
// logits in its denominator. A query row that sees no key gets zeros.
//
// How (FlashAttention-2's loop, on a CPU; attention/tile_loop.hpp): work items are (kv head, tile of
// query tokens); an item holds the G = Hq/Hkv query heads of its kv head together (rows = G·tokens, at
// most 128 or G), so K and V are read once per group. For each tile of 64 keys the mask classifies the
// tile from its position ranges (skipped when nothing is visible, no per-element test when everything
// is), K's tile is widened (16-bit) and transformed into scratch (unless the transform is the identity
// or keys_transformed), the SIMD steps (attention/kernels.hpp) form S = QKᵀ, the policies
// scale/bias/mask S in place, and an online softmax (running max and sum) folds exp(S − m)·V into the
// accumulator; key segments of 1024 are folded in order. Extra memory is per thread and O(tile): Q
// tile, K tile, its transpose, S, two accumulators (a split decode adds a state per unit of a wave of
// 4·threads, and one per item); nothing grows with T. A custom policy's call (below) also stages out.
//
// K per key tile vs pre-rotated once: rotating K once would need a copy of all of K (O(T) memory);
// per tile, K is re-rotated once per query tile (Tq/tokens-per-tile times), which on-the-fly
// cos/sin makes the dominant overhead for long RoPE prefill; a cos/sin table (table_transform below)
// turns it into a table lookup. Measured numbers: docs/performance.md.
//
// Threads (options.threads, on options.executor when given) take the work items from a shared
// counter, or the items' key segments when there are fewer items than threads (decode); a call of
// under ~2M multiply-adds a thread uses fewer. Each item and segment is computed by the same code
// whatever the thread that runs it, so the output is bit-identical for any count.
//
// Every check runs before anything is written (out's bytes are unchanged after a throw): shapes, head
// ratio, positions, out overlapping Q/K/V, mask parameters, sinks, sequence ids, the bias's heads and
// widths, the scale and the transform at the extreme positions. A transform, bias or scale that is not
// posenc's (that may reject an interior position) is computed into scratch and copied out at the end.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "posenc/attention/dispatch.hpp"
#include "posenc/attention/tile_loop.hpp"
#include "posenc/attention/mask.hpp"
#include "posenc/attention/options.hpp"
#include "posenc/attention/workspace.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/detail/parallel.hpp"
#include "posenc/rope/table.hpp"

namespace posenc {

/// A rotary (or any_rotary) that takes cos/sin from a prebuilt table instead of computing them per
/// token: what attention should use for long RoPE prefill, where K tiles are rotated once per query
/// tile. Both are borrowed. Positions outside the table throw (checked before anything is written).
template <class Rotary>
struct table_transform {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    const Rotary& rotary;
    const cos_sin_table& table;
    void apply(heads_view<float> q, heads_view<float> k, const position_ids& pos) const { rotary.apply(table, q, k, pos); }
};
template <class Rotary>
table_transform(const Rotary&, const cos_sin_table&) -> table_transform<Rotary>;

namespace detail {

template <class T, class U>
bool views_overlap(const heads_view<T>& out, const heads_view<U>& in) noexcept {
    if (out.empty() || in.empty()) return false;
    auto range = [](const auto& v) {
        const auto* b = v.data();
        const std::size_t n = (v.tokens() - 1) * v.token_stride() + (v.heads() - 1) * v.head_stride() + v.head_dim();
        return std::pair{reinterpret_cast<std::uintptr_t>(b), reinterpret_cast<std::uintptr_t>(b + n)};
    };
    const auto [a0, a1] = range(out);
    const auto [b0, b1] = range(in);
    return a0 < b1 && b0 < a1;
}

/// A policy whose only rejections depend on a position's range (so that checking the extreme
/// positions checks them all) says so with `static constexpr bool rejects_only_out_of_range = true`;
/// posenc's transforms, biases and scales do. A call with any other policy computes into scratch and
/// writes `out` only when every item has finished, so that a throw at an interior position writes nothing.
template <class T>
inline constexpr bool rejects_only_out_of_range = requires { requires T::rejects_only_out_of_range; };
template <class Enc>
inline constexpr bool may_throw_inside =
    !(rejects_only_out_of_range<std::remove_cvref_t<decltype(std::declval<const Enc&>().transform)>> &&
      rejects_only_out_of_range<std::remove_cvref_t<decltype(std::declval<const Enc&>().bias)>> &&
      rejects_only_out_of_range<std::remove_cvref_t<decltype(std::declval<const Enc&>().scale)>>);

/// The shapes of Q, K, V and out against each other and the positions. Each message names the view
/// that disagrees with the others (where two agree) and both numbers.
template <class KV>
void check_shapes(const heads_view<const float>& q, const heads_view<const KV>& k, const heads_view<const KV>& v,
                  const heads_view<float>& out, const position_ids& qpos, const position_ids& kpos,
                  std::size_t transform_head_dim) {
    require(q.tokens() == qpos.size(), "q.tokens", q.tokens(),
            [&] { return "must equal the number of query positions = " + to_text(qpos.size()); });
    require(k.tokens() == kpos.size(), "k.tokens", k.tokens(),
            [&] { return "must equal the number of key positions = " + to_text(kpos.size()); });
    require(v.tokens() == kpos.size(), "v.tokens", v.tokens(),
            [&] { return "must equal the number of key positions = " + to_text(kpos.size()); });
    require(out.tokens() == q.tokens(), "out.tokens", out.tokens(),
            [&] { return "must equal q.tokens = " + to_text(q.tokens()); });
    if (q.head_dim() != k.head_dim()) {  // the transform's width, where it has one, says which is wrong
        const bool q_wrong = transform_head_dim != 0 && k.head_dim() == transform_head_dim;
        if (q_wrong)
            throw config_error("q.head_dim", to_text(q.head_dim()), "must equal k.head_dim = " + to_text(k.head_dim()));
        throw config_error("k.head_dim", to_text(k.head_dim()), "must equal q.head_dim = " + to_text(q.head_dim()));
    }
    auto divides = [](std::size_t kv, std::size_t hq) { return kv > 0 && hq % kv == 0; };
    if (q.heads() != out.heads()) {
        if (divides(k.heads(), out.heads()) && !divides(k.heads(), q.heads()))
            throw config_error("q.heads", to_text(q.heads()), "must equal out.heads = " + to_text(out.heads()));
        throw config_error("out.heads", to_text(out.heads()), "must equal q.heads = " + to_text(q.heads()));
    }
    if (k.heads() != v.heads()) {
        if (divides(v.heads(), q.heads()) && !divides(k.heads(), q.heads()))
            throw config_error("k.heads", to_text(k.heads()),
                               "must divide q.heads = " + to_text(q.heads()) + " and equal v.heads = " + to_text(v.heads()));
        throw config_error("v.heads", to_text(v.heads()), "must equal k.heads = " + to_text(k.heads()));
    }
    require(divides(k.heads(), q.heads()), "q.heads", q.heads(),
            [&] { return "must be a multiple of k.heads = v.heads = " + to_text(k.heads()); });
    require(out.head_dim() == v.head_dim(), "out.head_dim", out.head_dim(),
            [&] { return "must equal v.head_dim = " + to_text(v.head_dim()); });
}

template <class T>
std::size_t transform_head_dim(const T& t) noexcept {
    if constexpr (requires { t.dims().head_dim; })
        return t.dims().head_dim;
    else
        return 0;
}

template <class Enc, class KV, attention_mask Mask>
void check_attention(const Enc& enc, const heads_view<const float>& q, const heads_view<const KV>& k,
                     const heads_view<const KV>& v, const heads_view<float>& out, const position_ids& qpos,
                     const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    mask.validate();
    check_shapes(q, k, v, out, qpos, kpos, transform_head_dim(enc.transform));
    require(opt.sinks.empty() || opt.sinks.size() == q.heads(), "sinks",
            [&] { return "of " + to_text(opt.sinks.size()) + " values"; },
            [&] { return "needs one per query head = " + to_text(q.heads()); });
    for (float s : opt.sinks) require(std::isfinite(s), "sinks", s, "must be finite");
    require(std::isfinite(opt.softcap) && opt.softcap >= 0.0f, "softcap", opt.softcap, "must be finite and >= 0");
    require(opt.query_sequence.empty() == opt.key_sequence.empty(), "query_sequence",
            [&] { return "of " + to_text(opt.query_sequence.size()) + " ids"; }, "and key_sequence must be given together");
    if (!opt.query_sequence.empty()) {
        require(opt.query_sequence.size() == q.tokens(), "query_sequence",
                [&] { return "of " + to_text(opt.query_sequence.size()) + " ids"; },
                [&] { return "needs one per query = " + to_text(q.tokens()); });
        require(opt.key_sequence.size() == k.tokens(), "key_sequence",
                [&] { return "of " + to_text(opt.key_sequence.size()) + " ids"; },
                [&] { return "needs one per key = " + to_text(k.tokens()); });
    }
    require(!views_overlap(out, q), "out", "view", "overlaps q");
    require(!views_overlap(out, k), "out", "view", "overlaps k");
    require(!views_overlap(out, v), "out", "view", "overlaps v");
    check_bias_shape(enc.bias, q.heads(), q.head_dim(), v.head_dim());
    // A zero row to probe the transform with: on the stack for the usual head sizes (a decode step
    // with a workspace allocates nothing).
    constexpr std::size_t local_dim = 512;
    alignas(64) float local[local_dim];
    std::vector<float> heap(q.head_dim() > local_dim ? q.head_dim() : 0);
    float* const probe = heap.empty() ? local : heap.data();
    std::fill_n(probe, q.head_dim(), 0.0f);
    if (q.tokens() == 0) {  // the transform still checks q's shape (head_dim): an empty view of it
        transform_queries(enc.transform, heads_view<float>(probe, {0, 1, q.head_dim()}), position_ids::consecutive(0, 0));
        return;
    }
    // The scale and the transform at the extreme positions: what a position can make them reject
    // (a table's range, xPos's float range, Llama 4's negative positions) is rejected here.
    const auto [qlo, qhi] = qpos.bounds();
    for (std::int64_t p : {qlo, qhi}) {
        const double s = enc.scale.scale(p, q.head_dim());
        require(std::isfinite(s) && s > 0.0, "scale", s, "must be finite and > 0");
    }
    const heads_view<float> row(probe, {1, 1, q.head_dim()});
    for (std::int64_t p : {qlo, qhi}) transform_queries(enc.transform, row, position_ids::constant(p, 1));
    if (!opt.keys_transformed && k.tokens() > 0) {
        const auto [klo, khi] = kpos.bounds();
        for (std::int64_t p : {klo, khi}) transform_keys(enc.transform, row, position_ids::constant(p, 1));
    }
}

/// The order in which threads take units: the last first where the last are the largest (causal
/// work grows with the query tile), else the first.
enum class unit_order { last_first, first_first };

/// f(unit, thread) for every unit on up to `threads` threads (on opt.executor when given, else
/// posenc's own threads), each thread taking the next unit from a shared counter in `order`, so that a
/// thread on a busy core takes fewer (a fixed split left the other waiting); one thread runs them
/// first to last. Which thread runs a unit changes nothing in its result. Every unit runs even after
/// one throws, and the exception of the lowest unit that threw is rethrown after every thread has
/// finished: the one a single thread would have thrown.
template <class F>
void run_units(unsigned threads, const attention_options& opt, std::size_t units, const F& f,
               unit_order order = unit_order::last_first) {
    if (threads <= 1) {
        for (std::size_t i = 0; i < units; ++i) f(i, std::size_t{0});
        return;
    }
    std::atomic<std::size_t> taken{0};
    std::exception_ptr failure;
    std::size_t failed_unit = units;
    std::mutex failure_lock;
    auto slice = [&](std::size_t b, std::size_t e) {
        for (std::size_t tid = b; tid < e; ++tid)
            for (std::size_t k = taken.fetch_add(1, std::memory_order_relaxed); k < units;
                 k = taken.fetch_add(1, std::memory_order_relaxed)) {
                const std::size_t unit = order == unit_order::last_first ? units - 1 - k : k;
                try {
                    f(unit, tid);
                } catch (...) {
                    const std::lock_guard<std::mutex> lock(failure_lock);
                    if (unit < failed_unit) failed_unit = unit, failure = std::current_exception();
                }
            }
    };
    if (opt.executor)
        executor_slices(opt.executor, threads, threads, slice);
    else
        parallel_slices(threads, threads, slice);
    if (failure) std::rethrow_exception(failure);
}

/// Computes every item of a checked call into out (and lse, for a partial result).
template <class Enc, class KV, attention_mask Mask>
void attention_items(const simd::attn_kernels& ker, const Enc& enc, const heads_view<const float>& q,
                     const heads_view<const KV>& k, const heads_view<const KV>& v, const heads_view<float>& out,
                     const std::span<float> lse, const position_ids& qpos, const position_ids& kpos, const Mask& mask,
                     const attention_options& opt) {
    attn_shape sh{};
    sh.Tq = q.tokens();
    sh.Tk = k.tokens();
    sh.Hq = q.heads();
    sh.Hkv = k.heads();
    sh.G = sh.Hq / sh.Hkv;
    sh.D = q.head_dim();
    sh.Dv = v.head_dim();
    const attn_call<Enc, Mask, KV> call{ker, enc, sh, q, k, v, qpos, kpos, mask, opt};
    // A query tile of 128 rows packs each K and V tile for twice as many rows as one of 64 (S5 on one
    // thread about 7 % faster; 256 was no better). Keys transformed in the loop are transformed once per
    // key tile and query tile: a query tile of at least a key tile's worth of tokens (G·64 rows) shares
    // each transformed key among that many rows.
    constexpr std::size_t target_rows = 128;
    const std::size_t min_tokens = call.key_copy() ? simd::attn_key_tile : 1;
    sh.tile_tokens = std::min(sh.Tq, std::max(min_tokens, target_rows / sh.G));
    const std::size_t rows = sh.tile_tokens * sh.G;
    sh.rows_pad = (rows + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
    sh.acc_stride = (sh.Dv + 15) / 16 * 16;
    sh.segments = std::max<std::size_t>(1, (sh.Tk + attn_segment_keys - 1) / attn_segment_keys);
    const std::size_t items = (sh.Tq + sh.tile_tokens - 1) / sh.tile_tokens * sh.Hkv;

    const std::size_t fmas = sh.Tq * sh.Hq * std::max<std::size_t>(sh.Tk, 1) * (sh.D + sh.Dv);
    const std::size_t by_work = opt.min_fmas_per_thread ? std::max<std::size_t>(1, fmas / opt.min_fmas_per_thread) : fmas;
    const std::size_t wanted = std::min<std::size_t>(std::max(1u, opt.threads), by_work);
    // Fewer items than threads (decode): the items' key segments are the units, folded afterwards.
    const bool split = items < wanted && sh.segments > 1;
    const std::size_t units = split ? items * sh.segments : items;
    const auto threads = static_cast<unsigned>(std::min(wanted, units));

    // Allocated here (or taken from the caller's workspace), before any thread starts.
    const attn_scratch_shape scratch_shape(sh, call.key_copy());
    std::vector<attn_scratch> own;
    std::optional<workspace_access::lease> lease;
    if (opt.workspace) {
        lease.emplace(*opt.workspace, scratch_shape, threads);
    } else {
        own.reserve(threads);
        for (unsigned i = 0; i < threads; ++i) own.emplace_back(scratch_shape);
    }
    std::vector<attn_scratch>& scratch = lease ? lease->scratch() : own;
    const attn_sink_and_lse extra{opt.sinks, lse};

    if (!split) {
        run_units(threads, opt, items, [&](std::size_t item, std::size_t tid) {
            attn_scratch& w = scratch[tid];
            const attn_query_tile t = call.load_queries(item, w);
            if (sh.segments == 1) {  // folding one segment into an empty total copies it: finish from it
                call.run_segment(t, 0, w, w.segment());
                finish_rows(t, w.segment(), sh, out, extra);
                return;
            }
            clear_total(w.total(), t.R);
            for (std::size_t seg = 0; seg < sh.segments; ++seg) {
                call.run_segment(t, seg, w, w.segment());
                fold_segment(w.total(), w.segment(), t.R, sh.Dv, sh.acc_stride);
            }
            finish_rows(t, w.total(), sh, out, extra);
        });
        return;
    }
    // Split-KV: the (item, segment) units, item-major, a wave of at most 4·threads at a time into their
    // own states, each then folded into its item's total in unit order (the order one thread folds
    // them in): memory O(threads + items) states, whatever Tk.
    const std::size_t R = sh.rows_pad;
    const std::size_t per_state = R * sh.acc_stride + (2 * R + 15) / 16 * 16;  // acc first: 64-byte aligned
    const std::size_t wave = std::min<std::size_t>(units, 4 * std::size_t{threads});
    std::optional<uninitialized_floats> own_states;
    float* const states = lease ? lease->split_states((wave + items) * per_state)
                                : own_states.emplace((wave + items) * per_state).get();
    float* const totals = states + wave * per_state;
    auto state_at = [&](float* base) { return attn_state{base + R * sh.acc_stride, base + R * sh.acc_stride + R, base}; };
    auto rows_of = [&](std::size_t item) { return std::min(sh.tile_tokens, sh.Tq - item / sh.Hkv * sh.tile_tokens) * sh.G; };
    for (std::size_t item = 0; item < items; ++item) clear_total(state_at(totals + item * per_state), rows_of(item));
    for (std::size_t first = 0; first < units; first += wave) {
        const std::size_t n = std::min(wave, units - first);
        run_units(threads, opt, n, [&](std::size_t i, std::size_t tid) {
            const std::size_t unit = first + i;
            const attn_query_tile t = call.load_queries(unit / sh.segments, scratch[tid]);
            call.run_segment(t, unit % sh.segments, scratch[tid], state_at(states + i * per_state));
        });
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t item = (first + i) / sh.segments;
            fold_segment(state_at(totals + item * per_state), state_at(states + i * per_state), rows_of(item), sh.Dv,
                         sh.acc_stride);
        }
    }
    for (std::size_t item = 0; item < items; ++item) {
        attn_query_tile t;  // the rows' layout only: the queries were transformed by the units
        t.hk = item % sh.Hkv;
        t.t0 = item / sh.Hkv * sh.tile_tokens;
        t.nq = std::min(sh.tile_tokens, sh.Tq - t.t0);
        t.R = t.nq * sh.G;
        finish_rows(t, state_at(totals + item * per_state), sh, out, extra);
    }
}

/// A checked call: with a policy that may throw inside (see may_throw_inside), into scratch first.
template <class Enc, class KV, attention_mask Mask>
void attention_checked(const simd::attn_kernels& ker, const Enc& enc, heads_view<const float> q,
                       heads_view<const KV> k, heads_view<const KV> v, heads_view<float> out, std::span<float> lse,
                       const position_ids& qpos, const position_ids& kpos, const Mask& mask,
                       const attention_options& opt) {
    check_attention(enc, q, k, v, out, qpos, kpos, mask, opt);
    if (q.tokens() == 0 || q.heads() == 0) return;
    if constexpr (may_throw_inside<Enc>) {
        const std::size_t rows = q.tokens() * q.heads();
        attn_floats staged(checked_mul(rows, v.head_dim(), "attention output"));
        std::vector<float> staged_lse(lse.empty() ? 0 : rows);
        const heads_view<float> tmp(staged.data(), {q.tokens(), q.heads(), v.head_dim()});
        attention_items(ker, enc, q, k, v, tmp, std::span<float>(staged_lse), qpos, kpos, mask, opt);
        for (std::size_t t = 0; t < q.tokens(); ++t)
            for (std::size_t h = 0; h < q.heads(); ++h) std::copy_n(tmp.row(t, h), v.head_dim(), out.row(t, h));
        std::copy(staged_lse.begin(), staged_lse.end(), lse.begin());
    } else {
        attention_items(ker, enc, q, k, v, out, lse, qpos, kpos, mask, opt);
    }
}

/// attention() on the given SIMD steps (tests force each architecture through this).
template <class Enc, attention_mask Mask>
void attention_on(const simd::attn_kernels& ker, const Enc& enc, heads_view<const float> q, heads_view<const float> k,
                  heads_view<const float> v, heads_view<float> out, const position_ids& qpos,
                  const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    attention_checked<Enc, float>(ker, enc, q, k, v, out, {}, qpos, kpos, mask, opt);
}
template <class Enc, half_storage KV, attention_mask Mask>
void attention_on(const simd::attn_kernels& ker, const Enc& enc, heads_view<const float> q, heads_view<const KV> k,
                  heads_view<const KV> v, heads_view<float> out, const position_ids& qpos,
                  const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    attention_checked<Enc, KV>(ker, enc, q, k, v, out, {}, qpos, kpos, mask, opt);
}

}  // namespace detail

/// out = softmax(s·T(Q)·T(K)ᵀ + bias, masked)·V; see the top of this file. K and V in float.
template <class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
void attention(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
               heads_view<const float> k, heads_view<const float> v, heads_view<float> out,
               const position_ids& q_positions, const position_ids& k_positions, const Mask& mask = {},
               const attention_options& options = {}) {
    detail::attention_checked<attention_encoding<Transform, Bias, Scale>, float>(
        simd::attention_kernels(), enc, q, k, v, out, {}, q_positions, k_positions, mask, options);
}

/// The same with K and V in bf16 or fp16 (both of one type; each const or not): widened exactly to
/// float a key tile at a time, so the result equals the float call on the same 16-bit values, bit for bit.
/// (A float/16-bit mix stops at its static_assert: half_kv_pair.)
template <class K, class V, class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
    requires half_kv_pair<K, V>
void attention(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q, heads_view<K> k,
               heads_view<V> v, heads_view<float> out, const position_ids& q_positions,
               const position_ids& k_positions, const Mask& mask = {}, const attention_options& options = {}) {
    using H = std::remove_const_t<K>;
    static_assert(std::is_same_v<H, std::remove_const_t<V>>,
                  "posenc::attention: K and V must hold the same element type (float, bf16 or fp16)");
    detail::attention_checked<attention_encoding<Transform, Bias, Scale>, H>(
        simd::attention_kernels(), enc, q, heads_view<const H>(k), heads_view<const H>(v), out, {}, q_positions,
        k_positions, mask, options);
}

}  // namespace posenc
