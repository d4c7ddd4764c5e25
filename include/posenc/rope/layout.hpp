#pragma once
// Rotary layouts: which two lanes of a head form pair i (0 ≤ i < rotary_dim/2).
//   interleaved: (2i, 2i+1)            GPT-J, RoFormer, ggml NORMAL, DeepSeek's q_pe/k_pe
//   half_split:  (i, i + rotary_dim/2)  GPT-NeoX, Llama, Mistral, Qwen, Phi, Gemma (HF rotate_half)
// Both rotate the pair by the same angle: (x₁, x₂) ↦ (x₁cos − x₂sin, x₂cos + x₁sin).

#include <cstddef>
#include <string_view>

#include "posenc/core/errors.hpp"

namespace posenc {

struct interleaved {
    static constexpr std::string_view name = "interleaved";
    static constexpr std::size_t first(std::size_t i, std::size_t /*rotary_dim*/) noexcept { return 2 * i; }
    static constexpr std::size_t second(std::size_t i, std::size_t /*rotary_dim*/) noexcept { return 2 * i + 1; }
};

struct half_split {
    static constexpr std::string_view name = "half_split";
    static constexpr std::size_t first(std::size_t i, std::size_t /*rotary_dim*/) noexcept { return i; }
    static constexpr std::size_t second(std::size_t i, std::size_t rotary_dim) noexcept { return i + rotary_dim / 2; }
};

/// The layout chosen at run time (from a config file or a command line).
enum class rope_layout { interleaved, half_split };

[[nodiscard]] constexpr std::string_view to_string(rope_layout l) noexcept {
    return l == rope_layout::interleaved ? interleaved::name : half_split::name;
}

[[nodiscard]] inline rope_layout parse_layout(std::string_view text) {
    if (text == interleaved::name) return rope_layout::interleaved;
    if (text == half_split::name) return rope_layout::half_split;
    throw config_error("layout", std::string(text), "must be \"interleaved\" or \"half_split\"");
}

}  // namespace posenc
