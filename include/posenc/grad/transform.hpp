#pragma once
// The backward pass of a Q/K transform: given dY = ∂L/∂T(x) for T(x) the transformed Q or K, overwrite
// dY in place with dX = ∂L/∂x = J_T(pos)ᵀ·dY.
//
//   posenc::rotary<posenc::half_split> rope({.head_dim = 64}, posenc::yarn{...});
//   rope.apply(q, k, positions);                                // forward
//   ...                                                         // dq, dk = ∂L/∂(rotated q, k)
//   posenc::transform_backward(rope, dq, dk, positions);        // now ∂L/∂(q, k) before the rotation
//   posenc::transform_backward_queries(rope, dq, q_positions);  // one side (Q and K at different positions;
//   posenc::transform_backward_keys(rope, dk, k_positions);     // xPos scales the two sides differently)
//
// What Jᵀ is, per transform (each pair (x₁, x₂) of the rotary dims; dims past rotary_dim pass dY through):
//   rotary<Layout>, any_rotary, table_transform   a·R(θ)ᵀ = a·R(−θ), a the amplitude (YaRN's attention
//                                                 factor): rotation::inverse would divide by a instead
//   xpos_rotary<Layout>                           s·R(−θ) with the forward's own s: ζ^(+(p−c)/scale_base)
//                                                 for queries, ζ^(−(p−c)/scale_base) for keys
//   multi_axis_rotary<Layout> (M-RoPE, 2-D)       a·R(−θ) with each pair's angle from its axis
//   nope                                          the identity (the token counts are still checked)
// rotary::apply_normed (per-head RMSNorm fused with RoPE) has no backward here: run transform_backward
// on dY for the rotation, then the norm's backward of your own.
// Each runs the forward's SIMD kernels with the transposed rotation (the kernels' inverse direction
// negates the sines and keeps whatever scale the row carries), so the same views (any strides,
// float/bf16/fp16 in place: dY read as float32, dX rounded once to the view's type), the same checks
// (before anything is written), the same threads and executor, and the same bits whatever the thread
// count as the forward.

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/rope/detail/rotate_job.hpp"
#include "posenc/rope/detail/simd_bridge.hpp"
#include "posenc/logit/nope.hpp"
#include "posenc/rope/any_rotary.hpp"
#include "posenc/rope/multi_axis.hpp"
#include "posenc/rope/rotary.hpp"
#include "posenc/xpos/xpos.hpp"

namespace posenc {

namespace detail::transform_grad {

template <class T>
struct is_rotary : std::false_type {};
template <class L>
struct is_rotary<rotary<L>> : std::true_type {};

template <class T>
struct is_xpos : std::false_type {};
template <class L>
struct is_xpos<xpos_rotary<L>> : std::true_type {};

template <class T>
struct is_table_transform : std::false_type {};
template <class R>
struct is_table_transform<table_transform<R>> : std::true_type {};

/// multi_axis_rotary and the classes built on it (mrope_rotary).
template <class T>
inline constexpr bool is_multi_axis =
    std::is_base_of_v<multi_axis_rotary<half_split>, T> || std::is_base_of_v<multi_axis_rotary<interleaved>, T>;

template <class T>
using multi_axis_layout =
    std::conditional_t<std::is_base_of_v<multi_axis_rotary<half_split>, T>, half_split, interleaved>;

/// The gradient views of a call: one token per position, head_dim as the transform's (0: any), and
/// not the same memory (each would be transformed twice). Named dq and dk in errors.
template <class T>
void require_grad_views(const heads_view<T>& dq, const heads_view<T>& dk, std::size_t tokens, std::size_t head_dim) {
    for (const auto& [v, name] : {std::pair{&dq, std::string_view("dq")}, std::pair{&dk, std::string_view("dk")}}) {
        if (absent(*v)) continue;
        if (head_dim != 0 && v->head_dim() != head_dim)
            throw config_error(std::string(name) + ".head_dim", to_text(v->head_dim()),
                               "must equal the encoding's head_dim = " + to_text(head_dim));
        if (v->tokens() != tokens)
            throw config_error(std::string(name) + ".tokens", to_text(v->tokens()),
                               "must equal the number of positions = " + to_text(tokens));
    }
    if (!dq.empty() && !dk.empty() && dq.data() == dk.data())
        throw config_error("dk", "the memory of dq",
                           "dQ and dK of one call must be different memory (each would be transformed twice)");
}

/// The table of a table_transform was built from the rotary's frequencies, and holds every position.
inline void require_table_of(const cos_sin_table& table, const rope_frequencies& freq, const position_ids& pos) {
    if (table.inv_freq() != freq.inv_freq || table.amplitude() != freq.attention_factor)
        throw config_error("table", "of " + to_text(table.pairs()) + " pairs",
                           "was built from other frequencies than this rotary's");
    table.check(pos);
}

/// a·R(−θ) on validated views: the kernels' inverse direction with the forward's amplitude (on-the-fly
/// rows × a; table rows already hold a, so no row scale).
template <class Layout, class T>
void rotary_transpose(const rope_dims& dims, const rope_frequencies& freq, unsigned threads, const executor& ex,
                      const cos_sin_table* table, heads_view<T> dq, heads_view<T> dk, const position_ids& pos) {
    require_grad_views(dq, dk, pos.size(), dims.head_dim);
    if (table) require_table_of(*table, freq, pos);
    rotate_job job;
    job.views = {job_view::in_place(dq), job_view::in_place(dk)};
    job.positions = pos;
    job.rotary_dim = dims.rotary();
    job.inverse = true;
    job.table = table;
    job.inv_freq = freq.inv_freq.data();
    job.amplitude = freq.attention_factor;
    job.row_scale = 1.0;
    run<Layout>(job, threads, ex ? &ex : nullptr);
}

/// rotary<Layout> or any_rotary, cos/sin per token or from `table`.
template <class Rotary, class T>
void rotary_backward(const Rotary& r, const cos_sin_table* table, heads_view<T> dq, heads_view<T> dk,
                     const position_ids& pos) {
    if constexpr (std::is_same_v<Rotary, any_rotary>) {
        if (r.layout() == rope_layout::interleaved)
            return rotary_transpose<interleaved>(r.dims(), r.frequencies(), r.threads(), r.slice_executor(), table, dq,
                                                 dk, pos);
        return rotary_transpose<half_split>(r.dims(), r.frequencies(), r.threads(), r.slice_executor(), table, dq, dk,
                                            pos);
    } else {
        rotary_transpose<typename Rotary::layout>(r.dims(), r.frequencies(), r.threads(), r.slice_executor(), table, dq,
                                                  dk, pos);
    }
}

/// Runs the kernels' inverse direction over per-token rows that already carry the forward's scale.
template <class Layout>
void run_transposed_rows(const job_view& x, const job_view& y, const position_ids& pos, std::size_t rotary_dim,
                         const std::vector<float>& rows, unsigned threads) {
    if (x.empty() && y.empty()) return;
    rotate_job job;
    job.views = {x, y};
    job.positions = pos;
    job.rotary_dim = rotary_dim;
    job.inverse = true;
    job.rows = rows.data();
    run<Layout>(job, threads);
}

/// xPos: each side with its own rows (scale s, s·R(θ) forward, s·R(−θ) here), one thread as the forward.
template <class Layout, class T>
void xpos_backward(const xpos_rotary<Layout>& xp, heads_view<T> dq, heads_view<T> dk, const position_ids& pos) {
    require_grad_views(dq, dk, pos.size(), xp.dims().head_dim);
    // Every row (and its range check) before anything is written.
    const auto q_rows = dq.empty() ? std::vector<float>{} : xp.rows(pos, xpos_role::query);
    const auto k_rows = dk.empty() ? std::vector<float>{} : xp.rows(pos, xpos_role::key);
    run_transposed_rows<Layout>(job_view::in_place(dq), {}, pos, xp.dims().rotary(), q_rows, 1);
    run_transposed_rows<Layout>(job_view::in_place(dk), {}, pos, xp.dims().rotary(), k_rows, 1);
}

/// M-RoPE and other multi-axis rotaries: the forward's rows (amplitude included), rotated by −θ.
template <class MultiAxis, class T>
void multi_axis_backward(const MultiAxis& r, heads_view<T> dq, heads_view<T> dk, const axis_positions& pos) {
    pos.check(r.axes());
    require_grad_views(dq, dk, pos.size(), r.dims().head_dim);
    if (dq.empty() && dk.empty()) return;
    const std::vector<float> rows = r.rows(pos);
    run_transposed_rows<multi_axis_layout<MultiAxis>>(job_view::in_place(dq), job_view::in_place(dk),
                                                      position_ids::constant(0, pos.size()), r.dims().rotary(), rows,
                                                      r.threads());
}

template <class Transform, class T>
void backward(const Transform& t, heads_view<T> dq, heads_view<T> dk, const position_ids& pos) {
    if constexpr (std::is_same_v<Transform, any_rotary> || is_rotary<Transform>::value) {
        rotary_backward(t, nullptr, dq, dk, pos);
    } else if constexpr (is_table_transform<Transform>::value) {
        if constexpr (is_multi_axis<std::remove_cvref_t<decltype(t.rotary)>>) {
            // Checked as the forward; the rows computed per token (the table's values, to float rounding).
            require_table_of(t.table, t.rotary.frequencies(), pos);
            multi_axis_backward(t.rotary, dq, dk, axis_positions(pos));
        } else {
            rotary_backward(t.rotary, &t.table, dq, dk, pos);
        }
    } else if constexpr (is_xpos<Transform>::value) {
        xpos_backward(t, dq, dk, pos);
    } else if constexpr (is_multi_axis<Transform>) {
        multi_axis_backward(t, dq, dk, axis_positions(pos));
    } else if constexpr (std::is_same_v<Transform, nope>) {
        require_grad_views(dq, dk, pos.size(), 0);
    } else {
        static_assert(!sizeof(Transform), "posenc::transform_backward: no backward for this transform");
    }
}

}  // namespace detail::transform_grad

/// True for the transforms transform_backward has a closed form for; the others are rejected there at
/// compile time (grad/attention.hpp builds their Jacobian from the forward only when they declare
/// declares_linear_in_x below).
template <class T>
inline constexpr bool has_transform_backward =
    std::is_same_v<T, any_rotary> || std::is_same_v<T, nope> || detail::transform_grad::is_rotary<T>::value ||
    detail::transform_grad::is_table_transform<T>::value || detail::transform_grad::is_xpos<T>::value ||
    detail::transform_grad::is_multi_axis<T>;

/// True when T declares `static constexpr bool linear_in_x = true;`: at a fixed position T(x) = J(pos)·x
/// with the same J for every head. attention_backward then takes J's columns from T's forward on the
/// basis vectors; a transform with neither this nor a transform_backward is a compile-time error there,
/// since a forward that is not linear in x (a norm before the rotation, as rotary::apply_normed) would
/// give a silently wrong gradient.
template <class T>
inline constexpr bool declares_linear_in_x = requires {
    { std::bool_constant<T::linear_in_x>{} } -> std::same_as<std::true_type>;
};

/// dq ← J_T(pos)ᵀ·dq and dk ← J_T(pos)ᵀ·dk in place, Q and K at the same positions; either view may be
/// empty. float storage.
template <class Transform>
void transform_backward(const Transform& t, heads_view<float> dq, heads_view<float> dk, const position_ids& pos) {
    detail::transform_grad::backward(t, dq, dk, pos);
}
/// The same on bf16/fp16 storage: dY read as float32, dX rounded once to the view's type.
template <class Transform, half_storage T>
void transform_backward(const Transform& t, heads_view<T> dq, heads_view<T> dk, const position_ids& pos) {
    detail::transform_grad::backward(t, dq, dk, pos);
}

/// Queries alone (xPos: the query scale).
template <class Transform>
void transform_backward_queries(const Transform& t, heads_view<float> dq, const position_ids& pos) {
    detail::transform_grad::backward(t, dq, heads_view<float>{}, pos);
}
template <class Transform, half_storage T>
void transform_backward_queries(const Transform& t, heads_view<T> dq, const position_ids& pos) {
    detail::transform_grad::backward(t, dq, heads_view<T>{}, pos);
}

/// Keys alone (xPos: the key scale).
template <class Transform>
void transform_backward_keys(const Transform& t, heads_view<float> dk, const position_ids& pos) {
    detail::transform_grad::backward(t, heads_view<float>{}, dk, pos);
}
template <class Transform, half_storage T>
void transform_backward_keys(const Transform& t, heads_view<T> dk, const position_ids& pos) {
    detail::transform_grad::backward(t, heads_view<T>{}, dk, pos);
}

/// Multi-axis rotaries (M-RoPE: t, h, w per token) with their component-major positions.
template <rotary_layout Layout, storage_type T>
void transform_backward(const multi_axis_rotary<Layout>& t, heads_view<T> dq, heads_view<T> dk,
                        const axis_positions& pos) {
    detail::transform_grad::multi_axis_backward(t, dq, dk, pos);
}

}  // namespace posenc
