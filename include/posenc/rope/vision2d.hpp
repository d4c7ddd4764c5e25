#pragma once
// 2-D RoPE of vision encoders over (row, column) patch positions, as multi_axis_rotary<half_split>
// with two axes (0 = row h, 1 = column w). Both apply cos/sin of width head_dim with HF's rotate_half,
// so the layout is half-split and rotary_dim = head_dim; both need head_dim % 4 == 0 (HF's
// cat(freqs, freqs) has the width of head_dim only then). n = head_dim/2 pairs, m = n/2.
//
// Qwen2-VL / Qwen2.5-VL / Qwen3-VL ViT (HF `VisionRotaryEmbedding(head_dim // 2, theta)`, `rot_pos_emb`):
// inv_freq_k = theta^(−2k/(head_dim/2)) for k < m; a patch's freqs are cat(h·inv_freq, w·inv_freq)
// (width n), emb = cat(freqs, freqs): pair j < m is rotated by h·inv_freq_j, pair m + j by w·inv_freq_j.
// Patch order (before the merger, which groups spatial_merge_size² neighbours): qwen_vision_positions.
// Qwen2.5-VL's window attention additionally permutes the patches by its window_index: permute the
// positions the same way (they are per token, any order).
//
// Pixtral (HF `PixtralRotaryEmbedding`): f_k = theta^(−2k/head_dim) for k < n; pair j < m is rotated by
// h·f_{2j} (HF freqs_h = outer(h, freqs[::2])), pair m + j by w·f_{2j+1} (freqs_w = outer(w, freqs[1::2])).
// HF indexes a precomputed table by h·max_width + w; posenc takes (h, w) directly: pixtral_positions.
//
// Angles in double (HF computes them in float32), cos/sin rounded once to float, as everywhere in posenc.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/multi_axis.hpp"

namespace posenc {

namespace detail {
inline void require_vision_head_dim(std::size_t head_dim) {
    require(head_dim > 0 && head_dim % 4 == 0, "head_dim", head_dim,
            "must be a positive multiple of 4 (2-D RoPE splits the pairs in two halves)");
}
inline std::vector<std::uint8_t> two_halves(std::size_t pairs) {
    std::vector<std::uint8_t> axis(pairs, 0);
    for (std::size_t j = pairs / 2; j < pairs; ++j) axis[j] = 1;
    return axis;
}
}  // namespace detail

/// The Qwen-VL ViT's 2-D RoPE for heads of `head_dim` lanes (Qwen2-VL: 1280/16 = 80; theta 10000).
[[nodiscard]] inline multi_axis_rotary<half_split> qwen_vision_rotary(std::size_t head_dim, double theta = 10000.0) {
    detail::require_vision_head_dim(head_dim);
    detail::require_base(theta);
    const std::size_t n = head_dim / 2, m = n / 2;
    const std::vector<double> base = detail::default_inv_freq(theta, n);  // theta^(−2k/n), k < m
    rope_frequencies f;
    f.inv_freq.resize(n);
    for (std::size_t j = 0; j < m; ++j) f.inv_freq[j] = f.inv_freq[m + j] = base[j];
    return {{.head_dim = head_dim}, std::move(f), detail::two_halves(n), 2};
}

/// Pixtral's 2-D RoPE for heads of `head_dim` lanes (Pixtral-12B's encoder: 1024/16 = 64; rope_theta 10000).
[[nodiscard]] inline multi_axis_rotary<half_split> pixtral_rotary(std::size_t head_dim, double theta = 10000.0) {
    detail::require_vision_head_dim(head_dim);
    detail::require_base(theta);
    const std::size_t n = head_dim / 2, m = n / 2;
    const std::vector<double> f_all = detail::default_inv_freq(theta, head_dim);  // theta^(−2k/head_dim), k < n
    rope_frequencies f;
    f.inv_freq.resize(n);
    for (std::size_t j = 0; j < m; ++j) {
        f.inv_freq[j] = f_all[2 * j];
        f.inv_freq[m + j] = f_all[2 * j + 1];
    }
    return {{.head_dim = head_dim}, std::move(f), detail::two_halves(n), 2};
}

/// (row, column) of each patch; ids() views them for apply() (keep this object alive meanwhile).
struct patch_positions {
    std::vector<std::int64_t> h, w;
    [[nodiscard]] std::size_t size() const noexcept { return h.size(); }
    [[nodiscard]] axis_positions ids() const POSENC_DETAIL_LIFETIMEBOUND { return {position_ids(h), position_ids(w)}; }
};

/// One image or video of `t` × `h` × `w` patches (HF's grid_thw, before spatial merging).
struct patch_grid {
    std::int64_t t = 1, h = 0, w = 0;
};

/// The Qwen-VL ViT's patch positions in its token order (HF rot_pos_emb): per grid and frame, the
/// spatial_merge_size² blocks row by row, inside a block its rows then columns — patch (bh, bw, ih, iw)
/// is at h = bh·s + ih, w = bw·s + iw — and the same for every frame. h and w must be multiples of s.
[[nodiscard]] inline patch_positions qwen_vision_positions(std::span<const patch_grid> grids,
                                                           std::int64_t spatial_merge_size = 2) {
    const std::int64_t s = spatial_merge_size;
    detail::require(s >= 1 && s <= 64, "spatial_merge_size", s, "must be in 1 … 64");
    std::size_t total = 0;
    for (const patch_grid& g : grids) {
        detail::require(g.t >= 1 && g.t <= (1 << 20), "grid.t", g.t, "must be in 1 … 2^20");
        detail::require(g.h >= 1 && g.h <= (1 << 20) && g.h % s == 0, "grid.h", g.h,
                        "must be in 1 … 2^20 and a multiple of spatial_merge_size = " + detail::to_text(s));
        detail::require(g.w >= 1 && g.w <= (1 << 20) && g.w % s == 0, "grid.w", g.w,
                        "must be in 1 … 2^20 and a multiple of spatial_merge_size = " + detail::to_text(s));
        const std::size_t frame = detail::checked_mul(static_cast<std::size_t>(g.h), static_cast<std::size_t>(g.w), "patches");
        total = detail::checked_add(total, detail::checked_mul(frame, static_cast<std::size_t>(g.t), "patches"), "patches");
    }
    detail::require(total <= (std::size_t{1} << 28), "patches", total, "must be at most 2^28");
    patch_positions out;
    out.h.reserve(total);
    out.w.reserve(total);
    for (const patch_grid& g : grids)
        for (std::int64_t f = 0; f < g.t; ++f)
            for (std::int64_t bh = 0; bh < g.h / s; ++bh)
                for (std::int64_t bw = 0; bw < g.w / s; ++bw)
                    for (std::int64_t ih = 0; ih < s; ++ih)
                        for (std::int64_t iw = 0; iw < s; ++iw) {
                            out.h.push_back(bh * s + ih);
                            out.w.push_back(bw * s + iw);
                        }
    return out;
}

/// Pixtral's patch positions (HF position_ids_in_meshgrid): each image's h × w patches row by row,
/// images one after the other.
[[nodiscard]] inline patch_positions pixtral_positions(std::span<const patch_grid> images) {
    std::size_t total = 0;
    for (const patch_grid& g : images) {
        detail::require(g.h >= 1 && g.h <= (1 << 20), "grid.h", g.h, "must be in 1 … 2^20");
        detail::require(g.w >= 1 && g.w <= (1 << 20), "grid.w", g.w, "must be in 1 … 2^20");
        total = detail::checked_add(
            total, detail::checked_mul(static_cast<std::size_t>(g.h), static_cast<std::size_t>(g.w), "patches"), "patches");
    }
    detail::require(total <= (std::size_t{1} << 28), "patches", total, "must be at most 2^28");
    patch_positions out;
    out.h.reserve(total);
    out.w.reserve(total);
    for (const patch_grid& g : images)
        for (std::int64_t i = 0; i < g.h; ++i)
            for (std::int64_t j = 0; j < g.w; ++j) {
                out.h.push_back(i);
                out.w.push_back(j);
            }
    return out;
}

}  // namespace posenc
