#pragma once
// The roles a policy can play, as concepts, so that a type that does not fit fails with a message
// naming the missing member.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "posenc/rope/frequencies.hpp"

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
/// says where the bias goes relative to the softmax scale.
template <class B>
concept score_bias = requires(const B& b, std::size_t head, std::int64_t query_pos, const position_ids& keys,
                              std::span<float> scores) {
    { B::name } -> std::convertible_to<std::string_view>;
    { b.order() } -> std::same_as<bias_order>;
    { b.add_to_scores(head, query_pos, keys, scores) } -> std::same_as<void>;
};

/// Transforms Q and K in place before qᵀk, given one position per token: a rotary, xPos, or NoPE's
/// identity.
template <class T>
concept qk_transform = requires(const T& t, heads_view<float> q, heads_view<float> k, const position_ids& pos) {
    { t.apply(q, k, pos) } -> std::same_as<void>;
};

}  // namespace posenc
