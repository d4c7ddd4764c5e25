#pragma once
// The checks every score_bias runs before it writes a row segment of scores.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"

namespace posenc::detail {

/// Throws range_error if head ≥ heads or the key positions and the scores differ in number.
inline void check_score_row(std::string_view bias, std::size_t head, std::size_t heads, const position_ids& keys,
                            std::span<float> scores) {
    if (head >= heads)
        throw range_error("posenc: " + std::string(bias) + " head " + to_text(head) + " is outside [0, " +
                          to_text(heads) + ")");
    if (keys.size() != scores.size())
        throw range_error("posenc: " + to_text(keys.size()) + " key positions for " + to_text(scores.size()) + " scores");
}

}  // namespace posenc::detail
