#pragma once
// From the validated rotate_job to the kernels' plain-data arguments, and the per-thread slices.

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
        const auto& view = job.views[static_cast<std::size_t>(v)];
        if (view.empty()) continue;
        a.data[v] = view.data();
        a.heads[v] = view.heads();
        a.token_stride[v] = view.token_stride();
        a.head_stride[v] = view.head_stride();
    }
    a.tokens = job.positions.size();
    a.pos64 = job.positions.int64_data();
    a.pos32 = job.positions.int32_data();
    a.pos_start = job.positions.start();
    a.pos_step = job.positions.step();
    a.rotary_dim = job.rotary_dim;
    a.layout = std::is_same_v<Layout, interleaved> ? simd::layout_id::interleaved : simd::layout_id::half_split;
    a.inverse = job.inverse;
    a.rows = job.rows;
    a.table = job.table ? job.table->data() : nullptr;
    a.inv_freq = job.inv_freq;
    a.amplitude = job.amplitude;
    a.row_scale = job.row_scale;
    return a;
}

/// The same call restricted to tokens [begin, end).
inline simd::rotate_args slice(simd::rotate_args a, std::size_t begin, std::size_t end) noexcept {
    for (int v = 0; v < 2; ++v)
        if (a.data[v]) a.data[v] += begin * a.token_stride[v];
    if (a.pos64) a.pos64 += begin;
    if (a.pos32) a.pos32 += begin;
    a.pos_start += a.pos_step * static_cast<std::int64_t>(begin);
    if (a.rows) a.rows += begin * a.rotary_dim;
    a.tokens = end - begin;
    return a;
}

/// Runs a validated job on the SIMD kernels (the scalar reference for rotary_dim beyond their
/// reach), on up to `threads` threads.
template <class Layout>
void run(const rotate_job& job, unsigned threads) {
    if (job.rotary_dim > simd::max_rotary_dim) return run_scalar<Layout>(job);
    const simd::rotate_args args = to_args<Layout>(job);
    const std::size_t bytes = simd::bytes_moved(args);
    const unsigned n = useful_threads(threads, args.tokens, bytes / (2 * sizeof(float)));
    if (n <= 1) return simd::rotate(args, bytes);
    parallel_slices(n, args.tokens, [&](std::size_t b, std::size_t e) { simd::rotate(slice(args, b, e), bytes); });
}

}  // namespace posenc::detail
