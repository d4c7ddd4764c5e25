#pragma once
// no_bias: the score bias of every encoding that has none (RoPE, xPos, NoPE, sinusoidal). It adds
// nothing, so an attention kernel templated on a score_bias compiles the bias away.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "posenc/core/concepts.hpp"
#include "posenc/core/positions.hpp"

namespace posenc {

struct no_bias {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    static constexpr std::string_view name = "none";

    [[nodiscard]] constexpr bias_order order() const noexcept { return bias_order::scale_then_add; }

    void add_to_scores(std::size_t /*head*/, std::int64_t /*query_pos*/, const position_ids& /*keys*/,
                       std::span<float> /*scores*/) const noexcept {}
};

static_assert(score_bias<no_bias>);

}  // namespace posenc
