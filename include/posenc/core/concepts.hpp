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
