#pragma once
// The roles a policy can play, as concepts, so that a type that does not fit fails with a message
// naming the missing member.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "posenc/core/rope_frequencies.hpp"

namespace posenc {

/// Answers "what are the inverse frequencies and the cos/sin amplitude for this rotary width (and,
/// for dynamic schedules, this current sequence length)?". seq_len = 0 means "not known".
template <class S>
concept frequency_schedule = requires(const S& s, std::size_t rotary_dim, std::int64_t seq_len) {
    { S::rope_type } -> std::convertible_to<std::string_view>;
    { s.frequencies(rotary_dim, seq_len) } -> std::same_as<rope_frequencies>;
};

/// A schedule that blends each pair between its original (extrapolated) and its interpolated
/// frequency: θ' = w·θ/s + (1 − w)·θ, with the per-pair weight w ∈ [0, 1] from interpolation().
template <class S>
concept blending_schedule = frequency_schedule<S> && requires(const S& s, std::size_t rotary_dim) {
    { s.interpolation(rotary_dim) } -> std::same_as<std::vector<double>>;
};

/// Answers "which two lanes form pair i?".
template <class L>
concept rotary_layout = requires(std::size_t i, std::size_t rotary_dim) {
    { L::name } -> std::convertible_to<std::string_view>;
    { L::first(i, rotary_dim) } -> std::same_as<std::size_t>;
    { L::second(i, rotary_dim) } -> std::same_as<std::size_t>;
};

}  // namespace posenc

// ---- attention roles: score biases and query/key transforms ---------------------------------------
#include <span>

#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"

namespace posenc {

/// Where a score bias enters relative to the softmax scale s (1/√d unless the model says otherwise):
///   scale_then_add: logit = s·qᵀk + bias     (BLOOM's baddbmm(alibi, q, k, alpha = 1/√d); T5 with s = 1)
///   add_then_scale: logit = s·(qᵀk + bias)   (Falcon: (scores + alibi) · inv_norm_factor)
enum class bias_order { scale_then_add, add_then_scale };

/// Answers "what is added to the logit of query position i against key position j in head h?", a
/// whole row segment at a time, so that an attention kernel never materializes a T×T matrix:
/// `add_to_scores(head, query_pos, key_positions, scores)` does scores[j] += bias(head, query_pos,
/// key_positions[j]) for every j (key positions are real positions: a KV cache may hold any). `order()`
/// says where the bias goes relative to the softmax scale. The scores of keys the mask hides may hold
/// anything (the mask overwrites them afterwards): a bias must not act on their values.
///
/// A bias that needs the query vector (Shaw's q·a^K) takes it as a fifth argument instead:
/// `add_to_scores(head, query_pos, key_positions, scores, query)`, with query the transformed q row.
/// A bias that also adds to the output (Shaw's Σⱼ pᵢⱼ·a^V) has `add_to_output(head, query_pos,
/// key_positions, weights, out)`: out += Σⱼ weights[j]·term(j), weights the (unnormalised) softmax
/// numerators of those keys. Both are optional; add_bias_to_scores / add_bias_to_output below supply
/// the defaults, so an attention kernel calls them for every bias alike.
template <class B>
concept score_bias = requires(const B& b) {
    { B::name } -> std::convertible_to<std::string_view>;
    { b.order() } -> std::same_as<bias_order>;
} && (requires(const B& b, std::size_t head, std::int64_t query_pos, const position_ids& keys, std::span<float> scores) {
         { b.add_to_scores(head, query_pos, keys, scores) } -> std::same_as<void>;
     } || requires(const B& b, std::size_t head, std::int64_t query_pos, const position_ids& keys,
                   std::span<float> scores, std::span<const float> query) {
         { b.add_to_scores(head, query_pos, keys, scores, query) } -> std::same_as<void>;
     });

/// scores[j] += bias(head, query_pos, keys[j]), giving the query row to a bias that wants it.
template <score_bias B>
void add_bias_to_scores(const B& b, std::size_t head, std::int64_t query_pos, const position_ids& keys,
                        std::span<float> scores, std::span<const float> query) {
    if constexpr (requires { b.add_to_scores(head, query_pos, keys, scores, query); })
        b.add_to_scores(head, query_pos, keys, scores, query);
    else
        b.add_to_scores(head, query_pos, keys, scores);
}

/// out += the bias's output term for these keys; nothing for a bias that has none.
template <score_bias B>
void add_bias_to_output(const B& b, std::size_t head, std::int64_t query_pos, const position_ids& keys,
                        std::span<const float> weights, std::span<float> out) {
    if constexpr (requires { b.add_to_output(head, query_pos, keys, weights, out); })
        b.add_to_output(head, query_pos, keys, weights, out);
}

/// Shape checks a bias wants before an attention call writes anything (heads, q width D, value width
/// Dv). The default probes the last head with an empty row, which every bias range-checks.
template <score_bias B>
void check_bias_shape(const B& b, std::size_t heads, std::size_t head_dim, std::size_t value_dim) {
    if constexpr (requires { b.check_shape(heads, head_dim, value_dim); }) b.check_shape(heads, head_dim, value_dim);
    if (heads > 0) add_bias_to_scores(b, heads - 1, 0, position_ids::consecutive(0, 0), {}, {});
}

/// The softmax scale of one query row: 1/√head_dim, a fixed λ, or one that depends on the query's
/// position (Llama 4's temperature tuning).
template <class S>
concept logit_scale = requires(const S& s, std::int64_t query_pos, std::size_t head_dim) {
    { s.scale(query_pos, head_dim) } -> std::convertible_to<double>;
};

/// Transforms Q and K in place before qᵀk, given one position per token: a rotary, xPos, or NoPE's
/// identity.
template <class T>
concept qk_transform = requires(const T& t, heads_view<float> q, heads_view<float> k, const position_ids& pos) {
    { t.apply(q, k, pos) } -> std::same_as<void>;
};

/// A transform marks itself the identity (NoPE) with `static constexpr bool is_identity = true`, so
/// that an attention kernel reads K in place instead of transforming a copy.
template <class T>
inline constexpr bool is_identity_transform = requires { requires T::is_identity; };

/// Transforms queries (resp. keys) alone: apply_queries / apply_keys where the transform has them
/// (xPos scales the two directions differently), else apply with the other view empty.
template <qk_transform T>
void transform_queries(const T& t, heads_view<float> q, const position_ids& pos) {
    if constexpr (requires { t.apply_queries(q, pos); })
        t.apply_queries(q, pos);
    else
        t.apply(q, heads_view<float>{}, pos);
}
template <qk_transform T>
void transform_keys(const T& t, heads_view<float> k, const position_ids& pos) {
    if constexpr (requires { t.apply_keys(k, pos); })
        t.apply_keys(k, pos);
    else
        t.apply(heads_view<float>{}, k, pos);
}

}  // namespace posenc
