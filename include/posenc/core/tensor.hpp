#pragma once
// heads_view: a [tokens, heads, head_dim] view over the caller's memory, head_dim contiguous, the
// other two dimensions strided (in elements). It never owns or copies. A token stride larger than
// heads × head_dim describes Q inside a fused QKV row; a head stride larger than head_dim describes
// the rotary part of a wider head (DeepSeek's q_pe after q_nope).

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <span>
#include <type_traits>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/checked_size.hpp"

namespace posenc {

struct heads_shape {
    std::size_t tokens = 0;
    std::size_t heads = 0;
    std::size_t head_dim = 0;
};

/// Element strides; 0 means dense (head_stride = head_dim, token_stride = heads × head_stride).
struct heads_strides {
    std::size_t token = 0;
    std::size_t head = 0;
};

template <class T>
class heads_view {
public:
    heads_view() = default;

    /// Checked: the view must fit inside `buffer` and its rows must not overlap.
    heads_view(std::span<T> buffer, heads_shape shape, heads_strides strides = {})
        : heads_view(buffer.data(), shape, strides) {
        if (shape_.tokens == 0 || shape_.heads == 0) return;
        const std::size_t extent =
            detail::checked_add(detail::checked_extent(shape_.tokens, token_stride_, 0, "heads_view extent"),
                                detail::checked_extent(shape_.heads, head_stride_, shape_.head_dim, "heads_view extent"),
                                "heads_view extent");
        if (extent > buffer.size())
            throw range_error("posenc: heads_view of " + detail::to_text(shape_.tokens) + "x" + detail::to_text(shape_.heads) +
                              "x" + detail::to_text(shape_.head_dim) + " (token stride " + detail::to_text(token_stride_) +
                              ", head stride " + detail::to_text(head_stride_) + ") needs " + detail::to_text(extent) +
                              " elements but the buffer holds " + detail::to_text(buffer.size()));
    }

    /// Unchecked extent: the caller guarantees that `data` addresses the whole view.
    heads_view(T* data, heads_shape shape, heads_strides strides = {})
        : data_(data), shape_(shape) {
        head_stride_ = strides.head ? strides.head : shape.head_dim;
        token_stride_ = strides.token ? strides.token : shape.heads * head_stride_;
        detail::require(shape.head_dim > 0, "head_dim", shape.head_dim, "must be > 0");
        detail::require(data != nullptr || shape.tokens == 0 || shape.heads == 0, "data", "null",
                        "a non-empty view needs memory");
        if (shape.tokens == 0 || shape.heads == 0) return;  // no rows: an empty view, whatever the strides
        // Rows (one head of one token) must not overlap, whichever of the two strides is inner.
        const bool heads_inner = head_stride_ <= token_stride_;
        const std::size_t inner = heads_inner ? head_stride_ : token_stride_;
        const std::size_t outer = heads_inner ? token_stride_ : head_stride_;
        const std::size_t inner_count = heads_inner ? shape.heads : shape.tokens;
        const std::size_t outer_count = heads_inner ? shape.tokens : shape.heads;
        detail::require(inner >= shape.head_dim || (inner_count <= 1 && outer_count <= 1),
                        heads_inner ? "head_stride" : "token_stride", inner,
                        "rows of head_dim elements would overlap");
        detail::require(outer_count <= 1 || outer >= detail::checked_mul(inner, inner_count, "heads_view stride"),
                        heads_inner ? "token_stride" : "head_stride", outer,
                        "rows of different tokens/heads would overlap");
    }

    /// A read-only view of a mutable one.
    operator heads_view<const T>() const  // NOLINT(google-explicit-constructor)
        requires(!std::is_const_v<T>)
    {
        return heads_view<const T>(data_, shape_, {token_stride_, head_stride_});
    }

    [[nodiscard]] T* data() const noexcept { return data_; }
    [[nodiscard]] bool empty() const noexcept { return shape_.tokens == 0 || shape_.heads == 0; }
    [[nodiscard]] std::size_t tokens() const noexcept { return shape_.tokens; }
    [[nodiscard]] std::size_t heads() const noexcept { return shape_.heads; }
    [[nodiscard]] std::size_t head_dim() const noexcept { return shape_.head_dim; }
    [[nodiscard]] std::size_t token_stride() const noexcept { return token_stride_; }
    [[nodiscard]] std::size_t head_stride() const noexcept { return head_stride_; }

    /// Tokens [first, first + count) of this view, same heads and strides (a shard of a cache, a chunk
    /// of a prompt); a range past tokens() throws.
    [[nodiscard]] heads_view tokens_slice(std::size_t first, std::size_t count) const {
        if (first > shape_.tokens || count > shape_.tokens - first)
            throw range_error("posenc: tokens_slice(" + detail::to_text(first) + ", " + detail::to_text(count) +
                              ") of a view of " + detail::to_text(shape_.tokens) + " tokens");
        if (count == 0) return heads_view(data_, {0, shape_.heads, shape_.head_dim}, {token_stride_, head_stride_});
        return heads_view(data_ + first * token_stride_, {count, shape_.heads, shape_.head_dim}, {token_stride_, head_stride_});
    }

    /// Pointer to head `h` of token `t` (head_dim contiguous elements).
    [[nodiscard]] T* row(std::size_t t, std::size_t h) const noexcept {
        assert(t < shape_.tokens && h < shape_.heads);
        return data_ + t * token_stride_ + h * head_stride_;
    }

private:
    T* data_ = nullptr;
    heads_shape shape_{};
    std::size_t token_stride_ = 0;
    std::size_t head_stride_ = 0;
};

namespace detail {
/// No view at all: a default-constructed heads_view (the other view of a single-view call, or a view
/// the caller leaves out). A call checks every other view, an empty one too: {0 tokens} for a call of
/// five positions is a caller's bug, not a no-op.
template <class T>
[[nodiscard]] bool absent(const heads_view<T>& v) noexcept {
    return v.data() == nullptr && v.tokens() == 0 && v.heads() == 0;
}
}  // namespace detail

}  // namespace posenc
