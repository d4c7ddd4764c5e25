#pragma once
// M-RoPE for a loaded Qwen-VL config.json (qwen2_vl, qwen2_5_vl, qwen3_vl): the rotary comes from
// cfg.rope.make_mrope(), the settings of HF's get_rope_index (model, spatial_merge_size,
// tokens_per_second, token ids) from here.
//
//   const auto cfg = posenc::hf::load_config("config.json");
//   const auto rope = cfg.rope.make_mrope();
//   const auto pos = posenc::build_mrope_positions(prompt, posenc::hf::mrope_options(cfg));
//   rope.apply(q, k, pos.ids());

#include <string>

#include "posenc/core/errors.hpp"
#include "posenc/hf/config.hpp"
#include "posenc/rope/mrope_positions.hpp"

namespace posenc::hf {

/// Which get_rope_index a model_type uses; config_error for a model_type without one.
[[nodiscard]] inline mrope_model mrope_model_of(std::string_view model_type) {
    if (model_type == "qwen2_vl" || model_type == "qwen2_vl_text") return mrope_model::qwen2_vl;
    if (model_type == "qwen2_5_vl" || model_type == "qwen2_5_vl_text") return mrope_model::qwen2_5_vl;
    if (model_type == "qwen3_vl" || model_type == "qwen3_vl_text") return mrope_model::qwen3_vl;
    throw config_error("model_type", std::string(model_type), "has no M-RoPE position rule (qwen2_vl, qwen2_5_vl, qwen3_vl)");
}

/// get_rope_index's settings of a Qwen-VL config (its vision_config values, HF's defaults where absent).
[[nodiscard]] inline mrope_position_options mrope_options(const model_config& cfg) {
    mrope_position_options o;
    o.model = mrope_model_of(cfg.model_type);
    if (cfg.vision) {
        o.spatial_merge_size = cfg.vision->spatial_merge_size;
        if (cfg.vision->tokens_per_second) o.tokens_per_second = *cfg.vision->tokens_per_second;
    }
    return o;
}

/// The image / video / vision_start token ids of a Qwen-VL config (for prompt_segments_from_tokens).
[[nodiscard]] inline vision_token_ids mrope_token_ids(const model_config& cfg) {
    vision_token_ids t;
    if (cfg.vision) {
        t.image = cfg.vision->image_token_id;
        t.video = cfg.vision->video_token_id;
        t.vision_start = cfg.vision->vision_start_token_id;
    }
    return t;
}

}  // namespace posenc::hf
