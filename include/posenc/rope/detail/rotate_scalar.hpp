#pragma once
// The scalar reference backend: every product in double, one rounding per output lane (to float;
// a 16-bit destination is rounded from that float). Slow and obviously right; the SIMD backends are
// tested against it, and it runs the calls the kernels cannot (rotary_dim beyond their reach).

#include <cmath>
#include <cstring>
#include <vector>

#include "posenc/core/dtypes.hpp"
#include "posenc/core/detail/angles.hpp"
#include "posenc/rope/detail/rotate_job.hpp"

namespace posenc::detail {

inline double load_element(dtype t, const void* base, std::size_t i) noexcept {
    switch (t) {
        case dtype::bf16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
        case dtype::fp16: return fp16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
        case dtype::f32: break;
    }
    return static_cast<const float*>(base)[i];
}

inline void store_element(dtype t, void* base, std::size_t i, double v) noexcept {
    const float f = static_cast<float>(v);
    switch (t) {
        case dtype::bf16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16_bits(f); return;
        case dtype::fp16: static_cast<std::uint16_t*>(base)[i] = float_to_fp16_bits(f); return;
        case dtype::f32: break;
    }
    static_cast<float*>(base)[i] = f;
}

/// One head: read head_dim lanes, normalise if asked, rotate the first rotary_dim, write all that
/// changed (every lane when out of place or normalised).
template <class Layout>
void rotate_head_scalar(const job_view& v, std::size_t t, std::size_t h, std::size_t rotary_dim, const float* cos,
                        const float* sin, bool inverse, double scale, std::vector<double>& x) {
    const std::size_t hd = v.head_dim;
    const std::size_t src_at = t * v.src_token_stride + h * v.src_head_stride;
    const std::size_t dst_at = t * v.dst_token_stride + h * v.dst_head_stride;
    x.resize(hd);
    for (std::size_t i = 0; i < hd; ++i) x[i] = load_element(v.src_type, v.src, src_at + i);
    if (v.norm_weight) {
        double sq = 0;
        for (double e : x) sq += e * e;
        const double inv_rms = 1.0 / std::sqrt(sq / static_cast<double>(hd) + v.norm_eps);
        for (std::size_t i = 0; i < hd; ++i) x[i] *= inv_rms * static_cast<double>(v.norm_weight[i]);
    }
    const double sign = inverse ? -1.0 : 1.0;
    for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
        const std::size_t a = Layout::first(i, rotary_dim), b = Layout::second(i, rotary_dim);
        const double x1 = x[a], x2 = x[b];
        const double c = static_cast<float>(scale * cos[i]), s = sign * static_cast<float>(scale * sin[i]);
        store_element(v.dst_type, v.dst, dst_at + a, x1 * c - x2 * s);
        store_element(v.dst_type, v.dst, dst_at + b, x2 * c + x1 * s);
    }
    if (!v.in_place_call() || v.norm_weight)
        for (std::size_t i = rotary_dim; i < hd; ++i) store_element(v.dst_type, v.dst, dst_at + i, x[i]);
}

template <class Layout>
void run_scalar(const rotate_job& job) {
    const std::size_t n = job.pairs();
    std::vector<float> scratch(job.rows || job.table ? 0 : 2 * n);
    std::vector<double> x;
    for (std::size_t t = 0; t < job.positions.size(); ++t) {
        const std::int64_t p = job.positions[t];
        const float* row = nullptr;
        double scale = job.row_scale;
        if (job.rows) {
            row = job.rows + t * 2 * n;
        } else if (job.table) {
            row = job.table->row(p);
        } else {
            cos_sin_row(job.inv_freq, n, p, job.amplitude, scratch.data(), scratch.data() + n);
            row = scratch.data();
            scale = 1.0;
        }
        for (const auto& v : job.views)
            if (!v.empty())
                for (std::size_t h = 0; h < v.heads; ++h)
                    rotate_head_scalar<Layout>(v, t, h, job.rotary_dim, row, row + n, job.inverse, scale, x);
    }
}

}  // namespace posenc::detail
