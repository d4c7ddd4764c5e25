#pragma once
// A [T][H][D] view of a dense test buffer.
#include <cstddef>
#include <span>
#include <vector>

#include <posenc/posenc.hpp>

namespace posenc_test {

inline posenc::heads_view<float> hv(std::vector<float>& x, std::size_t T, std::size_t H, std::size_t D) {
    return {std::span<float>(x), {T, H, D}};
}

}  // namespace posenc_test
