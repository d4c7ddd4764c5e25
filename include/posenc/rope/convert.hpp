#pragma once
// Converting Q/K projection weights between the two rotary layouts.
//
// Meta's Llama checkpoints rotate interleaved pairs (2i, 2i+1); HF's rotate half-split pairs
// (i, i + d/2). HF's conversion script therefore permutes the output rows of W_q and W_k within
// each head: half-split row j takes interleaved row 2j (j < d/2) or 2(j − d/2) + 1 (j ≥ d/2). With
// P that permutation, half_split(P·W·x) = P·interleaved(W·x), so attention scores are unchanged.
// A converter that skips P produces gibberish (docs/peer-bug-classes.md, class 7).
//
// With partial rotary only the first rotary_dim rows of each head move; the rest stay in place.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/rope/frequencies.hpp"

namespace posenc {

/// The interleaved lane that half-split lane `j` comes from (identity for j ≥ rotary_dim).
[[nodiscard]] constexpr std::size_t interleaved_lane_of_half_split(std::size_t j, std::size_t rotary_dim) noexcept {
    if (j >= rotary_dim) return j;
    const std::size_t half = rotary_dim / 2;
    return j < half ? 2 * j : 2 * (j - half) + 1;
}

namespace detail {
template <class T>
void permute_head_rows(std::span<T> weight, std::size_t heads, const rope_dims& dims, std::size_t cols,
                       bool to_half_split) {
    dims.validate();
    require(cols > 0, "cols", cols, "must be > 0");
    // Checked: a wrapped-around product could equal weight.size() and send the copies past its end.
    const std::size_t expected = checked_mul(checked_mul(heads, dims.head_dim, "weight rows"), cols, "weight size");
    require(weight.size() == expected, "weight.size", weight.size(),
            "must equal heads × head_dim × cols = " + to_text(expected));
    const std::size_t r = dims.rotary();
    std::vector<T> head(r * cols);
    for (std::size_t h = 0; h < heads; ++h) {
        T* base = weight.data() + h * dims.head_dim * cols;
        std::copy(base, base + r * cols, head.begin());
        for (std::size_t j = 0; j < r; ++j) {
            const std::size_t i = interleaved_lane_of_half_split(j, r);
            const std::size_t dst = to_half_split ? j : i, src = to_half_split ? i : j;
            std::copy_n(head.begin() + static_cast<std::ptrdiff_t>(src * cols), cols, base + dst * cols);
        }
    }
}
}  // namespace detail

/// Permutes the rows of a row-major [heads × head_dim, cols] Q or K projection weight (cols = 1 for
/// a bias) from the interleaved layout to the half-split one, in place. T is any element type
/// (float, or raw 16-bit words of bf16/fp16 weights).
template <class T>
void interleaved_to_half_split(std::span<T> weight, std::size_t heads, const rope_dims& dims, std::size_t cols) {
    detail::permute_head_rows(weight, heads, dims, cols, true);
}

/// The inverse permutation: half-split rows back to interleaved.
template <class T>
void half_split_to_interleaved(std::span<T> weight, std::size_t heads, const rope_dims& dims, std::size_t cols) {
    detail::permute_head_rows(weight, heads, dims, cols, false);
}

}  // namespace posenc
