#pragma once
// dX = J_T(pos)ᵀ·dY for a Q/K transform T, in place: grad/transform.hpp's transform_backward for the
// transforms it knows (rotary, any_rotary, table_transform, xPos, M-RoPE, NoPE), else, only for a T
// that declares `static constexpr bool linear_in_x = true;` (declares_linear_in_x), from T's forward:
// such a T is linear in x at a fixed position with the same map for every head, so column c of J is
// T(e_c), and one forward call on the D basis vectors (as D heads of one token) gives J for a token.
// O(D²) per token and head, small next to attention's O(Tk·D) per row.

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
        static_assert(declares_linear_in_x<Transform>,
                      "posenc::attention_backward: this Q/K transform has no transform_backward, and its Jacobian "
                      "can be built from its forward only if it is linear in x at a fixed position, the same for "
                      "every head. If it is, declare `static constexpr bool linear_in_x = true;` in it. If not (a "
                      "norm before the rotation, as rotary::apply_normed), give attention_backward the part that "
                      "has a backward (the rotary, on normalised q and k) and run the rest's backward on dq, dk yourself");
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
