#pragma once
// The checks every score_bias runs before it writes a row segment of scores.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"

namespace posenc::detail {

/// key − query, saturated to ±2^62: a relative bias's distance for any two int64 positions (their
/// plain difference overflows past ±2^63), with room left for the small offsets (±max_distance,
/// + j) the biases add to it. Every bias saturates beyond its own range long before 2^62 (T5's cap,
/// Shaw's clip) or gives a score no softmax tells apart (ALiBi's −m·2^62).
[[nodiscard]] constexpr std::int64_t relative_position(std::int64_t key, std::int64_t query) noexcept {
    constexpr std::int64_t cap = std::int64_t{1} << 62;
    std::int64_t d = 0;
    if (__builtin_sub_overflow(key, query, &d)) return key > query ? cap : -cap;
    return d > cap ? cap : (d < -cap ? -cap : d);
}

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
