#pragma once
// What every frequency schedule produces: the inverse frequencies of the rotary pairs (double) and
// the amplitude HF calls `attention_scaling`, multiplied into both cos and sin. Plus rope_dims, the
// head width and the rotary width the schedule is evaluated for. In core/ because the
// frequency_schedule concept (core/concepts.hpp) names rope_frequencies.

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "posenc/core/errors.hpp"

namespace posenc {

/// Head width and rotary width. Pairs live inside the first `rotary_dim` lanes of a head; lanes
/// rotary_dim..head_dim-1 pass through untouched (partial rotary, GPT-NeoX `rotary_pct`).
struct rope_dims {
    std::size_t head_dim = 0;
    std::size_t rotary_dim = 0;  ///< 0 means head_dim

    [[nodiscard]] std::size_t rotary() const noexcept { return rotary_dim ? rotary_dim : head_dim; }
    [[nodiscard]] std::size_t pairs() const noexcept { return rotary() / 2; }

    /// HF's rule: rotary_dim = int(head_dim × partial_rotary_factor), truncating.
    [[nodiscard]] static rope_dims partial(std::size_t head_dim, double partial_rotary_factor) {
        detail::require(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0,
                        "partial_rotary_factor", partial_rotary_factor, "must be in (0, 1]");
        const auto rotary = static_cast<std::size_t>(static_cast<double>(head_dim) * partial_rotary_factor);
        // rotary_dim 0 would mean "all of head_dim": a factor that truncates to 0 lanes is an error.
        detail::require(rotary > 0 || head_dim == 0, "partial_rotary_factor", partial_rotary_factor,
                        "gives rotary_dim = 0 for head_dim = " + detail::to_text(head_dim));
        return {head_dim, rotary};
    }

    void validate() const {
        detail::require(head_dim > 0, "head_dim", head_dim, "must be > 0");
        detail::require(rotary() > 0, "rotary_dim", rotary(), "must be > 0");
        detail::require(rotary() % 2 == 0, "rotary_dim", rotary(), "must be even (lanes rotate in pairs)");
        detail::require(rotary() <= head_dim, "rotary_dim", rotary(),
                        "must not exceed head_dim = " + detail::to_text(head_dim));
    }
};

struct rope_frequencies {
    std::vector<double> inv_freq{};  ///< rotary_dim/2 values, angle of pair i at position p = p·inv_freq[i]
    double attention_factor = 1.0;  ///< cos/sin amplitude (HF `attention_scaling`)
};

}  // namespace posenc
