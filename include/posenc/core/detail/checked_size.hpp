#pragma once
// Sizes computed from user-supplied counts and strides: an overflow is a range_error, never a
// wrapped-around size that would let a later write leave the buffer.

#include <cstddef>
#include <string_view>

#include "posenc/core/errors.hpp"

namespace posenc::detail {

inline std::size_t checked_mul(std::size_t a, std::size_t b, std::string_view what) {
    std::size_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        throw range_error("posenc: " + std::string(what) + " (" + to_text(a) + " × " + to_text(b) + ") overflows");
    return r;
}

inline std::size_t checked_add(std::size_t a, std::size_t b, std::string_view what) {
    std::size_t r = 0;
    if (__builtin_add_overflow(a, b, &r))
        throw range_error("posenc: " + std::string(what) + " (" + to_text(a) + " + " + to_text(b) + ") overflows");
    return r;
}

/// Elements spanned by `count` rows of `width` elements, `stride` apart: (count − 1)·stride + width.
inline std::size_t checked_extent(std::size_t count, std::size_t stride, std::size_t width, std::string_view what) {
    if (count == 0) return 0;
    return checked_add(checked_mul(count - 1, stride, what), width, what);
}

}  // namespace posenc::detail
