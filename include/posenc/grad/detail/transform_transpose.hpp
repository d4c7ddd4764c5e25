#pragma once
// dX = J_T(pos)ᵀ·dY for a Q/K transform T, in place: grad/transform.hpp's transform_backward for the
// transforms it knows (rotary, any_rotary, table_transform, xPos, NoPE), else from T's forward alone.
// A Q/K transform is linear in x at a fixed position, so column c of J is T(e_c), and one forward call
// on the D basis vectors (as D heads of one token) gives J for a token: O(D²) per token and head, small
// next to attention's O(Tk·D) per row, for a custom transform that has no backward of its own.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/grad/transform.hpp"

namespace posenc::detail {

template <bool Keys, class Transform>
void grad_transform_transpose(const Transform& t, const heads_view<float>& dx, const position_ids& pos) {
    if constexpr (is_identity_transform<Transform>) {
        return;
    } else if constexpr (has_transform_backward<Transform>) {
        if constexpr (Keys)
            transform_backward_keys(t, dx, pos);
        else
            transform_backward_queries(t, dx, pos);
    } else {
        const std::size_t D = dx.head_dim(), T = dx.tokens(), H = dx.heads();
        if (T == 0 || H == 0 || D == 0) return;
        std::vector<float> basis(D * D), row(D);
        for (std::size_t tok = 0; tok < T; ++tok) {
            std::fill(basis.begin(), basis.end(), 0.0f);
            for (std::size_t c = 0; c < D; ++c) basis[c * D + c] = 1.0f;
            const heads_view<float> cols(basis.data(), {1, D, D});  // head c holds T(e_c) = column c of J
            if constexpr (Keys)
                transform_keys(t, cols, position_ids::constant(pos[tok], 1));
            else
                transform_queries(t, cols, position_ids::constant(pos[tok], 1));
            for (std::size_t h = 0; h < H; ++h) {
                float* y = dx.row(tok, h);
                for (std::size_t c = 0; c < D; ++c) {
                    double acc = 0.0;
                    const float* col = basis.data() + c * D;
                    for (std::size_t d = 0; d < D; ++d) acc += static_cast<double>(col[d]) * y[d];
                    row[c] = static_cast<float>(acc);
                }
                std::copy(row.begin(), row.end(), y);
            }
        }
    }
}

template <class Transform>
void grad_transform_transpose_queries(const Transform& t, const heads_view<float>& dq, const position_ids& pos) {
    grad_transform_transpose<false>(t, dq, pos);
}
template <class Transform>
void grad_transform_transpose_keys(const Transform& t, const heads_view<float>& dk, const position_ids& pos) {
    grad_transform_transpose<true>(t, dk, pos);
}

}  // namespace posenc::detail
