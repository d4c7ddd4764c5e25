#pragma once
// The public types of the HF config reader: what posenc::hf::load_config returns (model_config, its
// rope_spec per layer type, Qwen-VL's vision_tokens) and the size limits a config may ask for.
// Include posenc/hf/config.hpp to read a config; this header holds no JSON.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/any_rotary.hpp"
#include "posenc/rope/any_schedule.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/mrope.hpp"

namespace posenc::hf {

/// The RoPE of one kind of layer: dimensions, schedule and layout.
struct rope_spec {
    rope_dims dims{};
    any_schedule schedule = default_rope{};
    rope_layout layout = rope_layout::half_split;
    /// M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): pairs per position component (t, h, w), summing to
    /// rotary_dim / 2; empty for every other model. The schedule is the rope dict's (Qwen3-VL: yarn).
    std::vector<std::int64_t> mrope_section;
    bool mrope_interleaved = false;  ///< Qwen3-VL: components cycle t, h, w across pairs

    [[nodiscard]] std::string_view rope_type() const { return posenc::rope_type(schedule); }

    /// A ready 1-D rotary; `seq_len` selects dynamic_ntk's base and longrope's factors (0 = not known).
    /// On an M-RoPE spec (is_mrope()) it is right only for text tokens (t = h = w); image and video
    /// tokens need make_mrope().
    [[nodiscard]] any_rotary make_rotary(std::int64_t seq_len = 0) const { return {layout, dims, schedule, seq_len}; }

    /// Whether this is an M-RoPE spec (mrope_section given).
    [[nodiscard]] bool is_mrope() const noexcept { return !mrope_section.empty(); }

    /// M-RoPE's split as posenc::mrope; config_error unless mrope_section has 3 entries.
    [[nodiscard]] mrope mrope_params() const {
        if (mrope_section.size() != 3)
            throw config_error("mrope_section", "list of length " + posenc::detail::to_text(mrope_section.size()),
                               "needs 3 entries (t, h, w) for an M-RoPE rotary");
        mrope m{.interleaved = mrope_interleaved};
        for (std::size_t i = 0; i < 3; ++i) {
            if (mrope_section[i] < 0)
                throw config_error("mrope_section", posenc::detail::to_text(mrope_section[i]), "entries must be >= 0");
            m.section[i] = static_cast<std::size_t>(mrope_section[i]);
        }
        return m;
    }

    /// A ready M-RoPE rotary (positions (t, h, w) per token; text tokens t = h = w are plain RoPE).
    /// config_error if this spec has no mrope_section or its layout is not `Layout`.
    template <rotary_layout Layout = half_split>
    [[nodiscard]] mrope_rotary<Layout> make_mrope(std::int64_t seq_len = 0) const {
        constexpr rope_layout want = std::is_same_v<Layout, half_split> ? rope_layout::half_split : rope_layout::interleaved;
        if (layout != want)
            throw config_error("layout", std::string(layout == rope_layout::half_split ? "half_split" : "interleaved"),
                               "differs from the M-RoPE rotary's layout requested");
        const mrope m = mrope_params();
        dims.validate();
        return mrope_rotary<Layout>(dims, posenc::frequencies(schedule, dims.rotary(), seq_len), m);
    }

    /// Multiplier of the softmax scale 1/√d that DeepSeek applies outside the rope code (YaRN's
    /// mscale(s, mscale_all_dim)²); 1 for every other schedule.
    [[nodiscard]] double softmax_scale_multiplier() const {
        if (const auto* y = std::get_if<yarn>(&schedule)) return y->softmax_scale_multiplier();
        return 1.0;
    }
};

/// What HF's get_rope_index reads besides the rope dict (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), as plain
/// data for a position builder. Absent keys take the HF config classes' defaults.
struct vision_tokens {
    std::int64_t spatial_merge_size = 2;      ///< vision_config.spatial_merge_size
    std::optional<double> tokens_per_second;  ///< vision_config.tokens_per_second (Qwen2.5-VL only; default 4)
    std::int64_t image_token_id = 151655;
    std::int64_t video_token_id = 151656;
    std::int64_t vision_start_token_id = 151652;
};

struct model_config {
    std::string model_type;                    ///< "" when the config names none
    std::int64_t max_position_embeddings = 0;  ///< 0 when the config has none and its family no default
    /// Where max_position_embeddings came from: the key as written ("max_position_embeddings",
    /// "text_config.max_position_embeddings", "n_positions"), "default of <model_type> (N)" when HF's
    /// config class default was taken, "" when there is none.
    std::string max_position_embeddings_source;
    std::vector<std::string> notes;            ///< keys read but ignored because HF ignores them (GPT-J)
    std::optional<vision_tokens> vision;       ///< Qwen-VL (M-RoPE) configs
    rope_spec rope;                            ///< full-attention layers (all layers of most models)
    std::map<std::string, rope_spec, std::less<>> rope_by_layer_type;  ///< Gemma-3: full/sliding_attention
    std::vector<std::string> layer_types;      ///< per layer, when the config says

    /// The RoPE of layers of `layer_type` ("full_attention", "sliding_attention", …).
    [[nodiscard]] const rope_spec& rope_for(std::string_view layer_type) const POSENC_DETAIL_LIFETIMEBOUND {
        if (const auto it = rope_by_layer_type.find(layer_type); it != rope_by_layer_type.end()) return it->second;
        const bool listed = std::find(layer_types.begin(), layer_types.end(), layer_type) != layer_types.end();
        if (rope_by_layer_type.empty() && (listed || (layer_types.empty() && layer_type == "full_attention")))
            return rope;
        throw config_error("layer_type", std::string(layer_type), "this config has no layers of that type");
    }
};

/// Sizes a config may ask for. They bound the work and memory that reading a config, and building
/// what it describes, can cost; every released model is far inside them. A value outside throws
/// config_error naming the key as written in the file.
struct limits {
    static constexpr std::int64_t head_dim = 65536;              ///< head_dim, qk_rope_head_dim, rotary_dim, hidden_size / heads
    static constexpr std::int64_t hidden_size = 1 << 24;         ///< hidden_size, n_embd
    static constexpr std::int64_t heads = 65536;                 ///< num_attention_heads, n_head, n_heads, num_heads
    static constexpr std::int64_t layers = 65536;                ///< num_hidden_layers, entries of layer_types
    static constexpr std::int64_t positions = std::int64_t{1} << 31;  ///< max_position_embeddings, original_…, n_positions, relative_attention_max_distance
    static constexpr std::int64_t buckets = 65536;               ///< relative_attention_num_buckets
    static constexpr int depth = 64;                             ///< nesting of JSON arrays and objects
    static constexpr std::size_t file_bytes = std::size_t{64} << 20;  ///< size of a config file or string
};

}  // namespace posenc::hf
