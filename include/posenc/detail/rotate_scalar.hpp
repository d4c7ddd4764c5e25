#pragma once
// The scalar reference backend: every product in double, one rounding to float per output lane.
// Slow and obviously right; the SIMD backends are tested against it.

#include <vector>

#include "posenc/detail/angles.hpp"
#include "posenc/detail/rotate_job.hpp"

namespace posenc::detail {

template <class Layout>
void rotate_head_scalar(float* x, std::size_t rotary_dim, const float* cos, const float* sin, bool inverse,
                        double scale) noexcept {
    const double sign = inverse ? -1.0 : 1.0;
    for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
        const std::size_t a = Layout::first(i, rotary_dim), b = Layout::second(i, rotary_dim);
        const double x1 = x[a], x2 = x[b];
        const double c = static_cast<float>(scale * cos[i]), s = sign * static_cast<float>(scale * sin[i]);
        x[a] = static_cast<float>(x1 * c - x2 * s);
        x[b] = static_cast<float>(x2 * c + x1 * s);
    }
}

template <class Layout>
void run_scalar(const rotate_job& job) {
    const std::size_t n = job.pairs();
    std::vector<float> scratch(job.rows || job.table ? 0 : 2 * n);
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
            for (std::size_t h = 0; h < v.heads(); ++h)
                rotate_head_scalar<Layout>(v.row(t, h), job.rotary_dim, row, row + n, job.inverse, scale);
    }
}

}  // namespace posenc::detail
