#pragma once
// Attention over part of the keys, and the exact merge of such parts: what flash-decoding, ring
// attention and context parallelism need (each thread or machine attends to its shard of the cache,
// the shards' results are merged).
//
//   posenc::attention_partial(enc, q, k_shard, v_shard, out_shard, lse_shard, q_pos, k_pos_shard, mask);
//   posenc::merge_attention_partials({{out_a, lse_a}, {out_b, lse_b}}, out);   // = attention over a ∪ b
//
// A partial result is `out` normalised over the shard's visible keys and, per query row, the
// log-sum-exp of those keys' logits, lse[t·Hq + h] = log Σⱼ exp(logitⱼ) (natural log; −∞ and out = 0
// where the shard shows the row no key; NaN, with out NaN, where it shows the row a NaN logit; +∞
// where it shows +∞ logits). A NaN or +∞ part makes the merged row NaN (a +∞ part's share is
// unknown). Merging weighs each part by exp(lse − max) in double:
//   out = Σᵢ exp(lseᵢ − L)·outᵢ,  L = log(Σᵢ exp(lseᵢ) + exp(sink))
// which equals one call over the union of the keys to float rounding (not bit for bit: the sums are
// grouped differently). Since a merged lse includes the sinks, a tree of merges adds them once at
// the root, or at any one level. gpt-oss's sinks join the denominator once, so they go to the merge, not to
// the parts.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"

namespace posenc {

/// One part as merge_attention_partials reads it: out [Tq, Hq, Dv] and lse [Tq·Hq].
struct attention_part {
    heads_view<const float> out;
    std::span<const float> lse;
};

namespace detail {

template <class A, class B>
bool spans_overlap(std::span<A> a, std::span<B> b) noexcept {
    if (a.empty() || b.empty()) return false;
    const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), a1 = a0 + a.size_bytes();
    const auto b0 = reinterpret_cast<std::uintptr_t>(b.data()), b1 = b0 + b.size_bytes();
    return a0 < b1 && b0 < a1;
}

template <class T>
std::span<const std::byte> view_bytes(const heads_view<T>& v) noexcept {
    if (v.empty()) return {};
    const std::size_t n = (v.tokens() - 1) * v.token_stride() + (v.heads() - 1) * v.head_stride() + v.head_dim();
    return {reinterpret_cast<const std::byte*>(v.data()), n * sizeof(T)};
}

template <class Enc, class KV, attention_mask Mask>
void attention_partial_checked(const Enc& enc, heads_view<const float> q, heads_view<const KV> k, heads_view<const KV> v,
                               heads_view<float> out, std::span<float> lse, const position_ids& qpos,
                               const position_ids& kpos, const Mask& mask, const attention_options& opt) {
    require(opt.sinks.empty(), "sinks", [&] { return "of " + to_text(opt.sinks.size()) + " values"; },
            "belong to merge_attention_partials, which adds each once (a part's lse covers its keys only)");
    require(lse.size() == q.tokens() * q.heads(), "lse", [&] { return "of " + to_text(lse.size()) + " values"; },
            [&] { return "needs one per query row = q.tokens * q.heads = " + to_text(q.tokens() * q.heads()); });
    const std::span<const float> l(lse.data(), lse.size());
    require(!spans_overlap(std::as_bytes(l), view_bytes(out)), "lse", "span", "overlaps out");
    require(!spans_overlap(std::as_bytes(l), view_bytes(q)), "lse", "span", "overlaps q");
    require(!spans_overlap(std::as_bytes(l), view_bytes(k)), "lse", "span", "overlaps k");
    require(!spans_overlap(std::as_bytes(l), view_bytes(v)), "lse", "span", "overlaps v");
    attention_checked<Enc, KV>(simd::attention_kernels(), enc, q, k, v, out, lse, qpos, kpos, mask, opt);
}

}  // namespace detail

/// Attention over the keys given (a shard), with each query row's log-sum-exp in `lse` (Tq·Hq values,
/// row t·Hq + h): the part merge_attention_partials combines. Same checks, threads and bits as
/// attention(); options.sinks must be empty (they go to the merge).
template <class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
void attention_partial(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                       heads_view<const float> k, heads_view<const float> v, heads_view<float> out, std::span<float> lse,
                       const position_ids& q_positions, const position_ids& k_positions, const Mask& mask = {},
                       const attention_options& options = {}) {
    detail::attention_partial_checked<attention_encoding<Transform, Bias, Scale>, float>(enc, q, k, v, out, lse, q_positions,
                                                                                        k_positions, mask, options);
}
/// The same with 16-bit K and V (see attention()).
template <class K, class V, class Transform, class Bias, class Scale, attention_mask Mask = no_mask>
    requires half_kv_pair<K, V>
void attention_partial(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q, heads_view<K> k,
                       heads_view<V> v, heads_view<float> out, std::span<float> lse, const position_ids& q_positions,
                       const position_ids& k_positions, const Mask& mask = {}, const attention_options& options = {}) {
    using H = std::remove_const_t<K>;
    static_assert(std::is_same_v<H, std::remove_const_t<V>>,
                  "posenc::attention_partial: K and V must hold the same element type (float, bf16 or fp16)");
    detail::attention_partial_checked<attention_encoding<Transform, Bias, Scale>, H>(
        enc, q, heads_view<const H>(k), heads_view<const H>(v), out, lse, q_positions, k_positions, mask, options);
}

/// attention_partial over everything a kv_cache holds (its keys are rotated: the query transform is
/// checked against the cache's, as attention() over a cache does).
template <class Transform, class Bias, class Scale, class CacheTransform, class Storage, attention_mask Mask = no_mask>
void attention_partial(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
                       const kv_cache<CacheTransform, Storage>& cache, heads_view<float> out, std::span<float> lse,
                       const position_ids& q_positions, const Mask& mask = {}, attention_options options = {}) {
    detail::require_cache_transform(enc.transform, cache.transform());
    detail::require(q.head_dim() == cache.head_dim(), "q.head_dim", q.head_dim(),
                    [&] { return "must equal the cache's head_dim = " + detail::to_text(cache.head_dim()); });
    options.keys_transformed = true;
    detail::attention_partial_checked<attention_encoding<Transform, Bias, Scale>, Storage>(
        enc, q, cache.keys(), cache.values(), out, lse, q_positions, cache.positions(), mask, options);
}

namespace detail {
/// A first member no value converts to: {sinks} cannot fill merge_options by position.
struct by_name_only {
    explicit by_name_only() = default;
};
}  // namespace detail

/// What merge_attention_partials takes besides the parts and out, by name only ({.lse = l, .sinks = s}):
/// by position a vector of sinks would bind to the lse output. The spans view the caller's buffers:
/// build the options in the call, or over buffers that outlive them.
struct merge_options {
    [[no_unique_address]] detail::by_name_only by_name = detail::by_name_only{};
    std::span<float> lse = {};          ///< where the merged rows' log-sum-exp go (Tq·Hq values), or none
    std::span<const float> sinks = {};  ///< one per query head, joining each row's denominator once, or none
};

/// out (and options.lse, if given) = the merge of `parts` (see the top of this file), with
/// options.sinks joining each row's denominator once. Every part has out's shape and Tq·Hq lse values.
/// out may be one part's view itself (same memory and strides) and lse one part's lse, so a reduction
/// can merge in place; any other overlap is rejected. Everything is checked first.
inline void merge_attention_partials(std::span<const attention_part> parts, heads_view<float> out,
                                     const merge_options& options = {}) {
    using detail::require;
    using detail::to_text;
    const std::span<float> lse = options.lse;
    const std::span<const float> sinks = options.sinks;
    const std::size_t T = out.tokens(), H = out.heads(), Dv = out.head_dim(), rows = T * H;
    require(!parts.empty(), "parts", "empty", "needs at least one partial result");
    require(lse.empty() || lse.size() == rows, "lse", [&] { return "of " + to_text(lse.size()) + " values"; },
            [&] { return "needs one per row of out = " + to_text(rows) + " (or none)"; });
    require(sinks.empty() || sinks.size() == H, "sinks", [&] { return "of " + to_text(sinks.size()) + " values"; },
            [&] { return "needs one per head of out = " + to_text(H); });
    for (float s : sinks) require(std::isfinite(s), "sinks", s, "must be finite");
    const std::span<const float> lse_out(lse.data(), lse.size());
    require(!detail::spans_overlap(std::as_bytes(lse_out), detail::view_bytes(out)), "lse", "span", "overlaps out");
    require(!detail::spans_overlap(std::as_bytes(sinks), detail::view_bytes(out)), "sinks", "span", "overlaps out");
    require(!detail::spans_overlap(sinks, lse_out), "sinks", "span", "overlaps lse");
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const attention_part& p = parts[i];
        const auto name = [i] { return "parts[" + to_text(i) + "]"; };  // built only for a message
        require(p.out.tokens() == T && p.out.heads() == H && p.out.head_dim() == Dv, [&] { return name() + ".out shape"; },
                [&] { return to_text(p.out.tokens()) + "x" + to_text(p.out.heads()) + "x" + to_text(p.out.head_dim()); },
                [&] { return "must equal out's " + to_text(T) + "x" + to_text(H) + "x" + to_text(Dv); });
        require(p.lse.size() == rows, [&] { return name() + ".lse"; },
                [&] { return "of " + to_text(p.lse.size()) + " values"; },
                [&] { return "needs one per row of out = " + to_text(rows); });
        const bool same_out = p.out.data() == out.data() && p.out.token_stride() == out.token_stride() &&
                              p.out.head_stride() == out.head_stride();
        require(same_out || !detail::spans_overlap(detail::view_bytes(p.out), detail::view_bytes(out)),
                [&] { return name() + ".out"; },
                "view", "overlaps out without being out itself");
        require(!detail::spans_overlap(std::as_bytes(p.lse), detail::view_bytes(out)), [&] { return name() + ".lse"; }, "span",
                "overlaps out");
        const bool same_lse = p.lse.data() == lse.data() && p.lse.size() == lse.size();
        require(same_lse || !detail::spans_overlap(p.lse, lse_out), [&] { return name() + ".lse"; }, "span",
                "overlaps lse without being lse itself");
        require(!detail::spans_overlap(std::as_bytes(lse_out), detail::view_bytes(p.out)), "lse", "span",
                [&] { return "overlaps " + name() + ".out"; });
    }
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    std::vector<double> acc(Dv), w(parts.size());
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t r = t * H + h;
            double m = sinks.empty() ? ninf : static_cast<double>(sinks[h]);
            // A NaN part makes the row NaN (std::max would drop it); a +∞ one does through its weight
            // exp(∞ − ∞) below (its +∞ logits' count, and so its share, is unknown).
            for (const attention_part& p : parts)
                m = std::isnan(p.lse[r]) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, static_cast<double>(p.lse[r]));
            std::fill(acc.begin(), acc.end(), 0.0);
            if (m == ninf) {  // no part saw a key, and no sink
                std::fill_n(out.row(t, h), Dv, 0.0f);
                if (!lse.empty()) lse[r] = -std::numeric_limits<float>::infinity();
                continue;
            }
            double sum = sinks.empty() ? 0.0 : std::exp(static_cast<double>(sinks[h]) - m);
            for (std::size_t i = 0; i < parts.size(); ++i) {
                w[i] = std::exp(static_cast<double>(parts[i].lse[r]) - m);  // exp(−∞) = 0: a part that saw nothing
                sum += w[i];
                if (w[i] == 0.0) continue;
                const float* o = parts[i].out.row(t, h);
                for (std::size_t d = 0; d < Dv; ++d) acc[d] += w[i] * o[d];
            }
            float* o = out.row(t, h);  // written after every part's row was read (out may be a part)
            for (std::size_t d = 0; d < Dv; ++d) o[d] = static_cast<float>(acc[d] / sum);
            if (!lse.empty()) lse[r] = static_cast<float>(m + std::log(sum));
        }
}
inline void merge_attention_partials(std::initializer_list<attention_part> parts, heads_view<float> out,
                                     const merge_options& options = {}) {
    merge_attention_partials(std::span<const attention_part>(parts.begin(), parts.size()), out, options);
}

}  // namespace posenc
