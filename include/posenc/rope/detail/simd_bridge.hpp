#pragma once
// From the validated rotate_job to the kernels' plain-data arguments, and the slices of a call.

#include <cstring>

#include "posenc/core/detail/parallel.hpp"
#include "posenc/rope/detail/rotate_job.hpp"
#include "posenc/rope/detail/rotate_scalar.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/simd/dispatch.hpp"

namespace posenc::detail {

/// One view's arguments (all null / zero for an empty view).
[[nodiscard]] inline simd::view_args to_view_args(const job_view& j) noexcept {
    if (j.empty()) return {};
    return {j.src,          j.dst,         j.src_type,         j.dst_type,         j.heads,       j.src_token_stride,
            j.src_head_stride, j.dst_token_stride, j.dst_head_stride, j.norm_weight, j.norm_eps};
}

/// Every field initialized in place: g++ zeroed a default-constructed rotate_args with a rep stos
/// before filling it in, slow to start in a one-token call.
template <class Layout>
simd::rotate_args to_args(const rotate_job& job) noexcept {
    return simd::rotate_args{
        .view = {to_view_args(job.views[0]), to_view_args(job.views[1])},
        .tokens = job.positions.size(),
        .pos64 = job.positions.int64_data(),
        .pos32 = job.positions.int32_data(),
        .pos_start = job.positions.start(),
        .pos_step = job.positions.step(),
        .head_dim = job.head_dim(),
        .rotary_dim = job.rotary_dim,
        .layout = std::is_same_v<Layout, interleaved> ? simd::layout_id::interleaved : simd::layout_id::half_split,
        .inverse = job.inverse,
        .rows = job.rows,
        .table = job.table ? job.table->data() : nullptr,
        .inv_freq = job.inv_freq,
        .amplitude = job.amplitude,
        .row_scale = job.row_scale,
        .prefetch_16bit = simd::prefetch_16bit(),
    };
}

/// The same call restricted to tokens [begin, end).
inline simd::rotate_args slice(simd::rotate_args a, std::size_t begin, std::size_t end) noexcept {
    for (auto& v : a.view) {
        if (!v.src) continue;
        v.src = static_cast<const char*>(v.src) + begin * v.src_token_stride * size_of(v.src_type);
        v.dst = static_cast<char*>(v.dst) + begin * v.dst_token_stride * size_of(v.dst_type);
    }
    if (a.pos64) a.pos64 += begin;
    if (a.pos32) a.pos32 += begin;
    a.pos_start += a.pos_step * static_cast<std::int64_t>(begin);
    if (a.rows) a.rows += begin * a.rotary_dim;
    a.tokens = end - begin;
    return a;
}

/// Whether the SIMD kernels can run the job (their rows and the norm's head live on the stack).
[[nodiscard]] inline bool simd_can_run(const rotate_job& job) noexcept {
    if (job.rotary_dim > simd::max_rotary_dim) return false;
    for (const auto& v : job.views)
        if (!v.empty() && v.norm_weight && v.head_dim > simd::max_rotary_dim) return false;
    return true;
}

/// Runs a validated job on the SIMD kernels (the scalar reference beyond their reach), split into
/// up to `threads` slices: on `ex` when given, else on posenc's own threads.
template <class Layout>
void run(const rotate_job& job, unsigned threads, const executor* ex = nullptr) {
    if (!simd_can_run(job)) return run_scalar<Layout>(job);
    const simd::rotate_args args = to_args<Layout>(job);
    // One slice (every one-token call): the arguments as they are, no slice copy, no executor.
    if (threads <= 1 || args.tokens <= 1) return simd::rotate(args);
    const std::size_t floats = simd::bytes_moved(args) / (2 * sizeof(float));
    run_slices(threads, ex, args.tokens, floats, [&](std::size_t b, std::size_t e) { simd::rotate(slice(args, b, e)); });
}

}  // namespace posenc::detail
