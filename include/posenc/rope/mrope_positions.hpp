#pragma once
// M-RoPE positions (t, h, w) of a mixed text/image/video prompt, as HF's `get_rope_index` of Qwen2-VL,
// Qwen2.5-VL and Qwen3-VL builds them, and the offset decoding continues from.
//
//   std::vector<posenc::prompt_segment> prompt = {posenc::prompt_segment::text(3),
//                                                 posenc::prompt_segment::image(1, 4, 4),  // patches
//                                                 posenc::prompt_segment::text(2)};
//   auto pos = posenc::build_mrope_positions(prompt, {.model = posenc::mrope_model::qwen2_vl});
//   rope.apply(q, k, pos.ids());
//   // decoding: token i ≥ pos.size() is at i + pos.delta on every axis (= pos.next_position for the first)
//
// The rules (HF, per vision block in prompt order; `start` = 1 + the largest id so far, 0 at first):
// - text tokens get start, start+1, … on all three axes;
// - a grid of t × h × w patches becomes t × (h/s) × (w/s) tokens (s = spatial_merge_size), frame by
//   frame and row by row; token (k, i, j) gets (start + τ_k, start + i, start + j);
// - τ_k = k for Qwen2-VL; for Qwen2.5-VL τ_k = 0 for images and, for videos,
//   long(k · second_per_grid_t · tokens_per_second), evaluated as torch does (float32, in that order,
//   truncated toward zero) — HF ≥ #48669 (v4.5x); earlier versions truncated second_per_grid_t to an
//   integer first, which made every τ_k 0 below one second per grid. (A later refactor of
//   get_rope_index seen in public code truncates again and starts the text after a video at
//   max(h, w)/s rather than after the largest id: not verified against transformers main, not followed);
// - Qwen3-VL splits a video into its t frames, each a grid of 1 × h × w (its processor puts timestamp
//   text between frames: give those as text segments between one-frame videos or images);
// - delta (HF `mrope_position_deltas`) = largest id + 1 − number of tokens.
// Segments are counts, not token ids: a text segment counts every token that is not an image/video
// token (image_token_id / video_token_id; vision_start/vision_end included). prompt_segments_from_tokens reads HF's token ids.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/multi_axis.hpp"

namespace posenc {

enum class mrope_model { qwen2_vl, qwen2_5_vl, qwen3_vl };

/// One run of a prompt: `tokens` text tokens, or an image / video of t × h × w patches (HF's
/// image_grid_thw / video_grid_thw, before merging) with a video's second_per_grid_t.
struct prompt_segment {
    enum class kind { text, image, video };
    kind type = kind::text;
    std::int64_t tokens = 0;             ///< text
    std::int64_t t = 1, h = 0, w = 0;    ///< image / video grid, in patches
    double second_per_grid = 1.0;        ///< video (HF second_per_grid_ts; its default 1.0)

    [[nodiscard]] static prompt_segment text(std::int64_t n) { return {kind::text, n, 1, 0, 0, 1.0}; }
    [[nodiscard]] static prompt_segment image(std::int64_t t, std::int64_t h, std::int64_t w) {
        return {kind::image, 0, t, h, w, 1.0};
    }
    [[nodiscard]] static prompt_segment video(std::int64_t t, std::int64_t h, std::int64_t w,
                                              double second_per_grid = 1.0) {
        return {kind::video, 0, t, h, w, second_per_grid};
    }
};

struct mrope_position_options {
    mrope_model model = mrope_model::qwen2_vl;
    std::int64_t spatial_merge_size = 2;  ///< vision_config.spatial_merge_size
    double tokens_per_second = 2.0;       ///< Qwen2.5-VL vision_config.tokens_per_second (its checkpoints: 2)
};

/// (t, h, w) per token, component-major; ids() views them for apply() (keep this object alive meanwhile).
struct mrope_positions {
    std::vector<std::int64_t> t, h, w;
    std::int64_t next_position = 0;  ///< largest id + 1: the first decoded token's position on every axis
    std::int64_t delta = 0;          ///< next_position − size(): token i ≥ size() decodes at i + delta

    [[nodiscard]] std::size_t size() const noexcept { return t.size(); }
    [[nodiscard]] axis_positions ids() const POSENC_DETAIL_LIFETIMEBOUND { return {position_ids(t), position_ids(h), position_ids(w)}; }
};

namespace detail {

inline constexpr std::int64_t max_prompt_tokens = std::int64_t{1} << 28;

/// τ_k of Qwen2.5-VL's videos: torch's arange(t) * second_per_grid_t * tokens_per_second in float32,
/// then .long() (truncation toward zero).
inline std::int64_t qwen2_5_time(std::int64_t k, double second_per_grid, double tokens_per_second) {
    const float v = (static_cast<float>(k) * static_cast<float>(second_per_grid)) * static_cast<float>(tokens_per_second);
    return static_cast<std::int64_t>(v);
}

struct mrope_builder {
    const mrope_position_options& opt;
    mrope_positions out{};
    std::int64_t start = 0;  // where the next block starts
    std::int64_t next = 0;   // 1 + the largest id so far

    void push(std::int64_t t, std::int64_t h, std::int64_t w) {
        out.t.push_back(t);
        out.h.push_back(h);
        out.w.push_back(w);
        const std::int64_t m = t > h ? (t > w ? t : w) : (h > w ? h : w);
        if (m + 1 > next) next = m + 1;
    }

    void text(std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i) push(start + i, start + i, start + i);
        start = next;
    }
    // One vision block of grid_t frames of gh × gw merged tokens; τ(k) the temporal id of frame k.
    template <class Tau>
    void grid(std::int64_t grid_t, std::int64_t gh, std::int64_t gw, Tau tau) {
        for (std::int64_t k = 0; k < grid_t; ++k) {
            const std::int64_t tk = tau(k);
            for (std::int64_t i = 0; i < gh; ++i)
                for (std::int64_t j = 0; j < gw; ++j) push(start + tk, start + i, start + j);
        }
        start = next;
    }
};

}  // namespace detail

/// The positions of `prompt` (see the top of this header). Throws config_error naming the segment
/// and field for a grid that is not a multiple of spatial_merge_size, a negative count, a
/// second_per_grid that is not finite and ≥ 0, or more than 2^28 tokens.
[[nodiscard]] inline mrope_positions build_mrope_positions(std::span<const prompt_segment> prompt,
                                                           const mrope_position_options& opt) {
    const std::int64_t s = opt.spatial_merge_size;
    detail::require(s >= 1 && s <= 64, "spatial_merge_size", s, "must be in 1 … 64");
    detail::require(std::isfinite(opt.tokens_per_second) && opt.tokens_per_second >= 0 && opt.tokens_per_second <= 1e6,
                    "tokens_per_second", opt.tokens_per_second, "must be finite and in [0, 1e6]");
    std::int64_t total = 0;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
        const prompt_segment& g = prompt[i];
        const std::string at = "prompt[" + detail::to_text(i) + "].";
        std::int64_t n = 0;
        if (g.type == prompt_segment::kind::text) {
            detail::require(g.tokens >= 0 && g.tokens <= detail::max_prompt_tokens, at + "tokens", g.tokens,
                            "must be in 0 … 2^28");
            n = g.tokens;
        } else {
            detail::require(g.t >= 1 && g.t <= detail::max_prompt_tokens, at + "t", g.t, "must be in 1 … 2^28");
            detail::require(g.h >= s && g.h <= detail::max_prompt_tokens && g.h % s == 0, at + "h", g.h,
                            "must be a positive multiple of spatial_merge_size = " + detail::to_text(s));
            detail::require(g.w >= s && g.w <= detail::max_prompt_tokens && g.w % s == 0, at + "w", g.w,
                            "must be a positive multiple of spatial_merge_size = " + detail::to_text(s));
            detail::require(std::isfinite(g.second_per_grid) && g.second_per_grid >= 0 && g.second_per_grid <= 1e6,
                            at + "second_per_grid", g.second_per_grid, "must be finite and in [0, 1e6]");
            // Bounded so that no id can overflow: τ < 2^31 per video, fewer than 2^28 blocks.
            const double tau_max = static_cast<double>(g.t - 1) * g.second_per_grid * opt.tokens_per_second;
            detail::require(opt.model != mrope_model::qwen2_5_vl || g.type != prompt_segment::kind::video ||
                                tau_max < 2147483648.0,
                            at + "second_per_grid", g.second_per_grid,
                            "gives temporal ids of 2^31 or more (with t and tokens_per_second)");
            const std::int64_t frame = (g.h / s) * (g.w / s);  // both ≤ 2^28, so no overflow
            detail::require(frame <= detail::max_prompt_tokens / g.t, at + "grid", frame,
                            "tokens × frames must be at most 2^28");
            n = frame * g.t;
        }
        total += n;
        detail::require(total <= detail::max_prompt_tokens, "prompt tokens", total, "must be at most 2^28");
    }

    detail::mrope_builder b{opt};
    b.out.t.reserve(static_cast<std::size_t>(total));
    b.out.h.reserve(static_cast<std::size_t>(total));
    b.out.w.reserve(static_cast<std::size_t>(total));
    for (const prompt_segment& g : prompt) {
        if (g.type == prompt_segment::kind::text) {
            b.text(g.tokens);
            continue;
        }
        const std::int64_t gh = g.h / s, gw = g.w / s;
        const bool video = g.type == prompt_segment::kind::video;
        switch (opt.model) {
            case mrope_model::qwen2_vl:
                b.grid(g.t, gh, gw, [](std::int64_t k) { return k; });
                break;
            case mrope_model::qwen2_5_vl:
                if (video)
                    b.grid(g.t, gh, gw, [&](std::int64_t k) {
                        return detail::qwen2_5_time(k, g.second_per_grid, opt.tokens_per_second);
                    });
                else
                    b.grid(g.t, gh, gw, [](std::int64_t) { return std::int64_t{0}; });
                break;
            case mrope_model::qwen3_vl:
                if (video)  // HF repeats the video's grid per frame with t = 1: one block per frame
                    for (std::int64_t k = 0; k < g.t; ++k) b.grid(1, gh, gw, [](std::int64_t) { return std::int64_t{0}; });
                else
                    b.grid(g.t, gh, gw, [](std::int64_t k) { return k; });
                break;
        }
    }
    b.out.next_position = b.next;
    b.out.delta = b.next - total;
    return std::move(b.out);
}

/// HF's token ids of a Qwen-VL model (config.json: image_token_id, video_token_id, vision_start_token_id).
struct vision_token_ids {
    std::int64_t image = 151655, video = 151656, vision_start = 151652;  ///< Qwen2-VL/2.5-VL's values
};

/// The segments of a tokenized prompt, read as HF's get_rope_index reads input_ids: the number of
/// images and videos is the number of vision_start tokens followed by an image / video token; then,
/// for each block, the next image or video token (whichever comes first) starts it, the grid's
/// merged token count is skipped, and what lies between is text. `image_grids` / `video_grids` are
/// HF's image_grid_thw / video_grid_thw rows (t, h, w) in prompt order, `second_per_grid` one entry
/// per video (empty: HF's default 1.0). For Qwen3-VL pass the video grids as HF does after its split:
/// one (1, h, w) row per frame. Throws config_error when the ids and the grids disagree.
[[nodiscard]] inline std::vector<prompt_segment> prompt_segments_from_tokens(
    std::span<const std::int64_t> ids, std::span<const std::array<std::int64_t, 3>> image_grids,
    std::span<const std::array<std::int64_t, 3>> video_grids, std::span<const double> second_per_grid,
    const vision_token_ids& tok, std::int64_t spatial_merge_size) {
    const std::int64_t s = spatial_merge_size;
    detail::require(s >= 1 && s <= 64, "spatial_merge_size", s, "must be in 1 … 64");
    detail::require(second_per_grid.empty() || second_per_grid.size() == video_grids.size(), "second_per_grid",
                    "of " + detail::to_text(second_per_grid.size()) + " entries",
                    "needs one per video grid (" + detail::to_text(video_grids.size()) + ") or none");
    std::size_t images = 0, videos = 0;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i)
        if (ids[i] == tok.vision_start) {
            images += ids[i + 1] == tok.image;
            videos += ids[i + 1] == tok.video;
        }
    detail::require(images <= image_grids.size(), "image_grids", "of " + detail::to_text(image_grids.size()) + " rows",
                    "the prompt has " + detail::to_text(images) + " images");
    detail::require(videos <= video_grids.size(), "video_grids", "of " + detail::to_text(video_grids.size()) + " rows",
                    "the prompt has " + detail::to_text(videos) + " videos");
    auto find = [&](std::int64_t id, std::size_t from) {
        for (std::size_t i = from; i < ids.size(); ++i)
            if (ids[i] == id) return i;
        return ids.size() + 1;
    };
    std::vector<prompt_segment> out;
    std::size_t st = 0, image = 0, video = 0;
    for (std::size_t b = 0; b < images + videos; ++b) {
        const std::size_t ed_image = image < images ? find(tok.image, st) : ids.size() + 1;
        const std::size_t ed_video = video < videos ? find(tok.video, st) : ids.size() + 1;
        const std::size_t ed = ed_image < ed_video ? ed_image : ed_video;
        detail::require(ed <= ids.size(), "input_ids", "block " + detail::to_text(b),
                        "has no image or video token after token " + detail::to_text(st));
        out.push_back(prompt_segment::text(static_cast<std::int64_t>(ed - st)));
        const bool is_image = ed_image < ed_video;
        const auto& g = is_image ? image_grids[image] : video_grids[video];
        out.push_back(is_image ? prompt_segment::image(g[0], g[1], g[2])
                               : prompt_segment::video(g[0], g[1], g[2],
                                                       second_per_grid.empty() ? 1.0 : second_per_grid[video]));
        detail::require(g[0] >= 1 && g[1] >= s && g[2] >= s && g[1] % s == 0 && g[2] % s == 0 && g[0] <= (1 << 28) &&
                            g[1] <= (1 << 28) && g[2] <= (1 << 28),
                        is_image ? "image_grids" : "video_grids", "row " + detail::to_text(is_image ? image : video),
                        "needs t ≥ 1 and h, w positive multiples of spatial_merge_size = " + detail::to_text(s));
        // In double first: each factor is ≤ 2^28, so the int64 product could overflow.
        const double tokens_d = static_cast<double>(g[0]) * static_cast<double>(g[1] / s) * static_cast<double>(g[2] / s);
        detail::require(tokens_d <= static_cast<double>(ids.size() - ed), "input_ids", "of " + detail::to_text(ids.size()) + " tokens",
                        "ends inside a vision block of " + detail::to_text(tokens_d) + " tokens");
        const auto tokens = static_cast<std::size_t>(tokens_d);
        (is_image ? image : video) += 1;
        st = ed + tokens;
        detail::require(st <= ids.size(), "input_ids", "of " + detail::to_text(ids.size()) + " tokens",
                        "ends inside a vision block of " + detail::to_text(tokens) + " tokens");
    }
    if (st < ids.size()) out.push_back(prompt_segment::text(static_cast<std::int64_t>(ids.size() - st)));
    return out;
}

}  // namespace posenc
