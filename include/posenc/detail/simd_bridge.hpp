#pragma once
// From the validated rotate_job to the kernels' plain-data arguments, and the slices of a call.

#include <cstring>

#include "posenc/detail/parallel.hpp"
#include "posenc/detail/rotate_job.hpp"
#include "posenc/detail/rotate_scalar.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/simd/dispatch.hpp"

namespace posenc::detail {

template <class Layout>
simd::rotate_args to_args(const rotate_job& job) noexcept {
    simd::rotate_args a;
    for (int v = 0; v < 2; ++v) {
        const job_view& j = job.views[static_cast<std::size_t>(v)];
        if (j.empty()) continue;
        simd::view_args& w = a.view[v];
        w.src = j.src;
        w.dst = j.dst;
        w.src_type = j.src_type;
        w.dst_type = j.dst_type;
        w.heads = j.heads;
        w.src_token_stride = j.src_token_stride;
        w.src_head_stride = j.src_head_stride;
        w.dst_token_stride = j.dst_token_stride;
        w.dst_head_stride = j.dst_head_stride;
        w.norm_weight = j.norm_weight;
        w.norm_eps = j.norm_eps;
    }
    a.tokens = job.positions.size();
    a.pos64 = job.positions.int64_data();
    a.pos32 = job.positions.int32_data();
    a.pos_start = job.positions.start();
    a.pos_step = job.positions.step();
    a.head_dim = job.head_dim();
    a.rotary_dim = job.rotary_dim;
    a.layout = std::is_same_v<Layout, interleaved> ? simd::layout_id::interleaved : simd::layout_id::half_split;
    a.inverse = job.inverse;
    a.rows = job.rows;
    a.table = job.table ? job.table->data() : nullptr;
    a.inv_freq = job.inv_freq;
    a.amplitude = job.amplitude;
    a.row_scale = job.row_scale;
    a.prefetch_16bit = simd::prefetch_16bit();
    return a;
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
