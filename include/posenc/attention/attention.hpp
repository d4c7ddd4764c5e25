#pragma once
// posenc::attention: out = softmax(s·T(Q)·T(K)ᵀ + bias, masked)·V per head, for any encoding.
//
//   posenc::attention(posenc::attention_encoding{rope}, q, k, v, out, q_positions, k_positions,
//                     posenc::causal_mask{}, {.threads = 2});
//
// Shapes: Q [Tq, Hq, D], K [Tk, Hkv, D], V [Tk, Hkv, Dv], out [Tq, Hq, Dv], heads_views with any
// strides; Hq a multiple of Hkv (MHA, GQA, MQA): query head h reads kv head h / (Hq/Hkv). Positions
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
// How (FlashAttention-2's loop, on a CPU): work items are (kv head, tile of query tokens); an item
// holds the G = Hq/Hkv query heads of its kv head together (rows = G·tokens, at most 64 or G), so K
// and V are read once per group. For each tile of 64 keys the mask classifies the tile from its
// position ranges (skipped when nothing is visible, no per-element test when everything is),
// K's tile is transformed into scratch (unless the transform is the identity or keys_transformed),
// the SIMD steps (attention/kernels.hpp) form S = QKᵀ, the policies scale/bias/mask S in place, and
// an online softmax (running max and sum) folds exp(S − m)·V into the accumulator. Extra memory is
// per thread and O(tile): Q tile, K tile, its transpose, S, the accumulator; nothing grows with T.
//
// K per key tile vs pre-rotated once: rotating K once would need a copy of all of K (O(T) memory);
// per tile, K is re-rotated once per query tile (Tq/tokens-per-tile times), which on-the-fly
// cos/sin makes the dominant overhead for long RoPE prefill; a cos/sin table (table_transform below)
// turns it into a table lookup. Measured numbers: README, "Attention".
//
// Threads split the work items round-robin; each item is computed by the same code whatever the
// thread count, so the output is bit-identical for any count.
//
// Every check runs before anything is written (out's bytes are unchanged after a throw): shapes, head
// ratio, positions, out overlapping Q/K/V, mask parameters, sinks, sequence ids, the bias's heads and
// widths, the scale and the transform at the extreme positions.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <span>
#include <vector>

#include "posenc/attention/dispatch.hpp"
#include "posenc/attention/mask.hpp"
#include "posenc/attention/options.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/detail/parallel.hpp"
#include "posenc/rope/table.hpp"

namespace posenc {

/// A rotary (or any_rotary) that takes cos/sin from a prebuilt table instead of computing them per
/// token: what attention should use for long RoPE prefill, where K tiles are rotated once per query
/// tile. Both are borrowed. Positions outside the table throw (checked before anything is written).
template <class Rotary>
struct table_transform {
    const Rotary& rotary;
    const cos_sin_table& table;
    void apply(heads_view<float> q, heads_view<float> k, const position_ids& pos) const { rotary.apply(table, q, k, pos); }
};
template <class Rotary>
table_transform(const Rotary&, const cos_sin_table&) -> table_transform<Rotary>;

namespace detail {

/// Positions [begin, begin + count) of `p`, without copying.
inline position_ids slice_positions(const position_ids& p, std::size_t begin, std::size_t count) {
    if (const auto* d = p.int64_data()) return std::span<const std::int64_t>(d + begin, count);
    if (const auto* d = p.int32_data()) return std::span<const std::int32_t>(d + begin, count);
    if (count == 0) return position_ids::consecutive(0, 0);
    const std::int64_t start = p.start() + p.step() * static_cast<std::int64_t>(begin);
    return p.step() == 0 ? position_ids::constant(start, count) : position_ids::consecutive(start, count);
}

template <class T>
bool views_overlap(const heads_view<float>& out, const heads_view<T>& in) noexcept {
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

/// 64-byte aligned storage through the aligned operator new (so that allocation hooks see it).
template <class T>
struct aligned64_allocator {
    using value_type = T;
    aligned64_allocator() = default;
    template <class U>
    aligned64_allocator(const aligned64_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
    friend bool operator==(const aligned64_allocator&, const aligned64_allocator&) noexcept { return true; }
};
using attn_floats = std::vector<float, aligned64_allocator<float>>;

/// One thread's scratch: everything the kernel needs besides the caller's buffers.
struct attn_scratch {
    attn_floats q, kt, s, acc, krot;
    std::vector<float> m, l, scale;
    attn_scratch(std::size_t rows, std::size_t tokens, std::size_t D, std::size_t acc_stride, bool rotate_keys)
        : q(rows * D), kt(D * simd::attn_key_tile), s(rows * simd::attn_key_tile), acc(rows * acc_stride),
          krot(rotate_keys ? simd::attn_key_tile * D : 0), m(rows), l(rows), scale(tokens) {}
};

struct attn_shape {
    std::size_t Tq, Tk, Hq, Hkv, G, D, Dv, tile_tokens, rows_pad, acc_stride;
};

template <class Enc, attention_mask Mask>
void check_attention(const Enc& enc, const heads_view<const float>& q, const heads_view<const float>& k,
                     const heads_view<const float>& v, const heads_view<float>& out, const position_ids& qpos,
                     const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    mask.validate();
    require(q.tokens() == qpos.size(), "q.tokens", q.tokens(), "must equal the number of query positions");
    require(k.tokens() == kpos.size(), "k.tokens", k.tokens(), "must equal the number of key positions");
    require(v.tokens() == k.tokens(), "v.tokens", v.tokens(), "must equal k.tokens = " + to_text(k.tokens()));
    require(out.tokens() == q.tokens(), "out.tokens", out.tokens(), "must equal q.tokens = " + to_text(q.tokens()));
    require(out.heads() == q.heads(), "out.heads", out.heads(), "must equal q.heads = " + to_text(q.heads()));
    require(v.heads() == k.heads(), "v.heads", v.heads(), "must equal k.heads = " + to_text(k.heads()));
    require(k.heads() > 0 && q.heads() % k.heads() == 0, "q.heads", q.heads(),
            "must be a multiple of k.heads = " + to_text(k.heads()));
    require(k.head_dim() == q.head_dim(), "k.head_dim", k.head_dim(), "must equal q.head_dim = " + to_text(q.head_dim()));
    require(out.head_dim() == v.head_dim(), "out.head_dim", out.head_dim(),
            "must equal v.head_dim = " + to_text(v.head_dim()));
    require(opt.sinks.empty() || opt.sinks.size() == q.heads(), "sinks", "of " + to_text(opt.sinks.size()) + " values",
            "needs one per query head = " + to_text(q.heads()));
    for (float s : opt.sinks) require(std::isfinite(s), "sinks", s, "must be finite");
    require(std::isfinite(opt.softcap) && opt.softcap >= 0.0f, "softcap", opt.softcap, "must be finite and >= 0");
    require(opt.query_sequence.empty() == opt.key_sequence.empty(), "query_sequence",
            "of " + to_text(opt.query_sequence.size()) + " ids", "and key_sequence must be given together");
    if (!opt.query_sequence.empty()) {
        require(opt.query_sequence.size() == q.tokens(), "query_sequence", "of " + to_text(opt.query_sequence.size()) + " ids",
                "needs one per query = " + to_text(q.tokens()));
        require(opt.key_sequence.size() == k.tokens(), "key_sequence", "of " + to_text(opt.key_sequence.size()) + " ids",
                "needs one per key = " + to_text(k.tokens()));
    }
    require(!views_overlap(out, q), "out", "view", "overlaps q");
    require(!views_overlap(out, k), "out", "view", "overlaps k");
    require(!views_overlap(out, v), "out", "view", "overlaps v");
    check_bias_shape(enc.bias, q.heads(), q.head_dim(), v.head_dim());
    std::vector<float> probe(q.head_dim(), 0.0f);
    if (q.tokens() == 0) {  // the transform still checks q's shape (head_dim): an empty view of it
        transform_queries(enc.transform, heads_view<float>(probe.data(), {0, 1, q.head_dim()}), position_ids::consecutive(0, 0));
        return;
    }
    // The scale and the transform at the extreme positions: what a position can make them reject
    // (a table's range, xPos's float range, Llama 4's negative positions) is rejected here.
    const auto [qlo, qhi] = qpos.bounds();
    for (std::int64_t p : {qlo, qhi}) {
        const double s = enc.scale.scale(p, q.head_dim());
        require(std::isfinite(s) && s > 0.0, "scale", s, "must be finite and > 0");
    }
    const heads_view<float> row(probe.data(), {1, 1, q.head_dim()});
    for (std::int64_t p : {qlo, qhi}) transform_queries(enc.transform, row, position_ids::constant(p, 1));
    if (!opt.keys_transformed && k.tokens() > 0) {
        const auto [klo, khi] = kpos.bounds();
        for (std::int64_t p : {klo, khi}) transform_keys(enc.transform, row, position_ids::constant(p, 1));
    }
}

template <class Enc, attention_mask Mask>
void attention_item(const simd::attn_kernels& ker, const Enc& enc, const attn_shape& sh, std::size_t item,
                    attn_scratch& w, const heads_view<const float>& q, const heads_view<const float>& k,
                    const heads_view<const float>& v, const heads_view<float>& out, const position_ids& qpos,
                    const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    using Transform = std::remove_cvref_t<decltype(enc.transform)>;
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    constexpr std::size_t BK = simd::attn_key_tile;
    const std::size_t hk = item % sh.Hkv, qt = item / sh.Hkv;
    const std::size_t t0 = qt * sh.tile_tokens, nq = std::min(sh.tile_tokens, sh.Tq - t0);
    const std::size_t G = sh.G, D = sh.D, R = nq * G;
    const std::size_t rows_pad = (R + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
    const bool rotate_keys = !is_identity_transform<Transform> && !opt.keys_transformed;
    const bool seq = !opt.query_sequence.empty();

    // Q tile: row t·G + g is token t0 + t, head hk·G + g; transformed here, at the queries' positions.
    std::fill_n(w.q.begin(), rows_pad * D, 0.0f);
    for (std::size_t t = 0; t < nq; ++t)
        for (std::size_t g = 0; g < G; ++g) std::copy_n(q.row(t0 + t, hk * G + g), D, w.q.data() + (t * G + g) * D);
    const position_ids qs = slice_positions(qpos, t0, nq);
    transform_queries(enc.transform, heads_view<float>(w.q.data(), {nq, G, D}), qs);
    for (std::size_t t = 0; t < nq; ++t) w.scale[t] = static_cast<float>(enc.scale.scale(qs[t], D));
    std::fill_n(w.m.begin(), R, ninf);
    std::fill_n(w.l.begin(), R, 0.0f);
    std::fill_n(w.acc.begin(), R * sh.acc_stride, 0.0f);

    const auto [q_lo, q_hi] = qs.bounds();
    std::int32_t qs_lo = 0, qs_hi = 0;
    if (seq) {
        const auto ids = opt.query_sequence.subspan(t0, nq);
        qs_lo = *std::min_element(ids.begin(), ids.end());
        qs_hi = *std::max_element(ids.begin(), ids.end());
    }
    const bool add_then_scale = enc.bias.order() == bias_order::add_then_scale;

    for (std::size_t j0 = 0; j0 < sh.Tk; j0 += BK) {
        const std::size_t nk = std::min(BK, sh.Tk - j0);
        const position_ids ks = slice_positions(kpos, j0, nk);
        const auto [k_lo, k_hi] = ks.bounds();
        tile_visibility vis = mask.classify({q_lo, q_hi, k_lo, k_hi});
        if (seq && vis != tile_visibility::none) {
            const auto ids = opt.key_sequence.subspan(j0, nk);
            const std::int32_t lo = *std::min_element(ids.begin(), ids.end());
            const std::int32_t hi = *std::max_element(ids.begin(), ids.end());
            if (hi < qs_lo || lo > qs_hi)
                vis = tile_visibility::none;
            else if (!(lo == hi && qs_lo == qs_hi && lo == qs_lo))
                vis = tile_visibility::partial;
        }
        if (vis == tile_visibility::none) continue;

        const float* kbase = k.row(j0, hk);
        std::size_t kstride = k.token_stride();
        if (rotate_keys) {
            for (std::size_t j = 0; j < nk; ++j) std::copy_n(k.row(j0 + j, hk), D, w.krot.data() + j * D);
            transform_keys(enc.transform, heads_view<float>(w.krot.data(), {nk, 1, D}), ks);
            kbase = w.krot.data();
            kstride = D;
        }
        ker.qk({w.q.data(), rows_pad, D, kbase, kstride, nk, w.kt.data(), w.s.data()});

        for (std::size_t r = 0; r < R; ++r) {
            const std::size_t t = r / G, head = hk * G + r % G;
            const std::int64_t qp = qs[t];
            float* srow = w.s.data() + r * BK;
            const std::span<float> row(srow, nk);
            const std::span<const float> qrow(w.q.data() + r * D, D);
            const float sc = w.scale[t];
            if (add_then_scale) {
                add_bias_to_scores(enc.bias, head, qp, ks, row, qrow);
                for (std::size_t j = 0; j < nk; ++j) srow[j] *= sc;
            } else {
                for (std::size_t j = 0; j < nk; ++j) srow[j] *= sc;
                add_bias_to_scores(enc.bias, head, qp, ks, row, qrow);
            }
            if (vis == tile_visibility::partial) {
                const std::int32_t qid = seq ? opt.query_sequence[t0 + t] : 0;
                for (std::size_t j = 0; j < nk; ++j)
                    if (!mask.visible(qp, ks[j]) || (seq && opt.key_sequence[j0 + j] != qid)) srow[j] = ninf;
            }
        }
        ker.softmax({w.s.data(), R, nk, w.m.data(), w.l.data(), w.acc.data(), sh.acc_stride, sh.Dv, opt.softcap});
        ker.pv({w.s.data(), R, nk, v.row(j0, hk), v.token_stride(), sh.Dv, w.acc.data(), sh.acc_stride});
        for (std::size_t r = 0; r < R; ++r)
            add_bias_to_output(enc.bias, hk * G + r % G, qs[r / G], ks, std::span<const float>(w.s.data() + r * BK, nk),
                               std::span<float>(w.acc.data() + r * sh.acc_stride, sh.Dv));
    }

    // out = acc / (l + exp(sink)), all relative to the running max; zeros where nothing was visible.
    for (std::size_t r = 0; r < R; ++r) {
        const std::size_t t = r / G, head = hk * G + r % G;
        float* o = out.row(t0 + t, head);
        const float* acc = w.acc.data() + r * sh.acc_stride;
        if (w.m[r] == ninf) {
            std::fill_n(o, sh.Dv, 0.0f);
            continue;
        }
        double m = w.m[r], l = w.l[r], num = 1.0;
        if (!opt.sinks.empty()) {
            const double sink = opt.sinks[head], mf = std::max(m, sink);
            num = std::exp(m - mf);
            l = l * num + std::exp(sink - mf);
        }
        const double f = num / l;
        for (std::size_t d = 0; d < sh.Dv; ++d) o[d] = static_cast<float>(acc[d] * f);
    }
}

/// attention() on the given SIMD steps (tests force each architecture through this).
template <class Enc, attention_mask Mask>
void attention_on(const simd::attn_kernels& ker, const Enc& enc, heads_view<const float> q, heads_view<const float> k,
                  heads_view<const float> v, heads_view<float> out, const position_ids& qpos,
                  const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    using Transform = std::remove_cvref_t<decltype(enc.transform)>;
    check_attention(enc, q, k, v, out, qpos, kpos, mask, opt);
    if (q.tokens() == 0 || q.heads() == 0) return;
    attn_shape sh{};
    sh.Tq = q.tokens();
    sh.Tk = k.tokens();
    sh.Hq = q.heads();
    sh.Hkv = k.heads();
    sh.G = sh.Hq / sh.Hkv;
    sh.D = q.head_dim();
    sh.Dv = v.head_dim();
    constexpr std::size_t target_rows = 64;
    sh.tile_tokens = std::min(sh.Tq, std::max<std::size_t>(1, target_rows / sh.G));
    const std::size_t rows = sh.tile_tokens * sh.G;
    sh.rows_pad = (rows + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
    sh.acc_stride = (sh.Dv + 15) / 16 * 16;
    const std::size_t tiles = (sh.Tq + sh.tile_tokens - 1) / sh.tile_tokens;
    const std::size_t items = tiles * sh.Hkv;
    const bool rotate_keys = !is_identity_transform<Transform> && !opt.keys_transformed;
    const auto threads = static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(opt.threads, items)));

    std::vector<attn_scratch> scratch;  // allocated here, before any thread starts
    scratch.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) scratch.emplace_back(sh.rows_pad, sh.tile_tokens, sh.D, sh.acc_stride, rotate_keys);
    auto run = [&](std::size_t item, attn_scratch& w) {
        attention_item(ker, enc, sh, item, w, q, k, v, out, qpos, kpos, mask, opt);
    };
    if (threads == 1) {
        for (std::size_t i = 0; i < items; ++i) run(i, scratch[0]);
        return;
    }
    // Round-robin, so that causal work (which grows with the query tile) spreads evenly.
    std::exception_ptr failure;
    std::mutex failure_lock;
    parallel_slices(threads, threads, [&](std::size_t b, std::size_t e) {
        for (std::size_t tid = b; tid < e; ++tid) try {
                for (std::size_t i = tid; i < items; i += threads) run(i, scratch[tid]);
            } catch (...) {
                const std::lock_guard<std::mutex> lock(failure_lock);
                if (!failure) failure = std::current_exception();
            }
    });
    if (failure) std::rethrow_exception(failure);
}

}  // namespace detail

/// out = softmax(s·T(Q)·T(K)ᵀ + bias, masked)·V; see the top of this file.
template <class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
void attention(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
               heads_view<const float> k, heads_view<const float> v, heads_view<float> out,
               const position_ids& q_positions, const position_ids& k_positions, const Mask& mask = {},
               const attention_options& options = {}) {
    detail::attention_on(simd::attention_kernels(), enc, q, k, v, out, q_positions, k_positions, mask, options);
}

}  // namespace posenc
