#pragma once
// `posenc-inspect --family-table`: README's table of model families, printed from the family table
// itself (posenc::hf::detail::families), so that the README cannot drift from the code.
#include <posenc/core/errors.hpp>
#include <posenc/hf/families.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace posenc_inspect {

/// A default as the README writes it: integral values without a fraction (1000000, not 1e+06).
inline std::string family_number(double v) {
    if (std::trunc(v) == v && std::abs(v) < 0x1p53) return std::to_string(static_cast<std::int64_t>(v));
    return posenc::detail::to_text(v);
}

inline std::string family_code(std::string_view key) { return "`" + std::string(key) + "`"; }

/// The keys a per-layer rule reads besides the generic ones (the table's third column).
inline std::string_view layer_rule_keys(posenc::hf::detail::layer_rule rule) {
    using posenc::hf::detail::layer_rule;
    switch (rule) {
        case layer_rule::full: return "";
        case layer_rule::sliding_if_window: return "`sliding_window`";
        case layer_rule::gemma3_pattern: return "";  // listed with rope_local_base_freq
        case layer_rule::llama4_irope:
            return "`no_rope_layers`, `no_rope_layer_interval`, `attention_chunk_size`, `attn_temperature_tuning`";
        case layer_rule::alternating: return "`sliding_window` (layers alternate)";
        case layer_rule::qwen2_window: return "`use_sliding_window`, `max_window_layers`, `sliding_window`";
        case layer_rule::smollm3_nope:
            return "`no_rope_layers`, `no_rope_layer_interval` (NoPE layers), `use_sliding_window`, `sliding_window`, "
                   "`max_window_layers` (ignored, noted)";
        case layer_rule::cohere2_pattern: return "`sliding_window_pattern`, `sliding_window` (full layers NoPE)";
        case layer_rule::mistral_layers: return "`layer_types`, else `sliding_window` on every layer";
        case layer_rule::window_all_layers:
            return "`use_sliding_window`, `sliding_window` (every layer), `max_window_layers` (ignored, noted)";
    }
    return "";
}

inline std::string join_cells(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts)
        if (!p.empty()) out += (out.empty() ? "" : ", ") + p;
    return out.empty() ? "—" : out;
}

/// One row: model_type, layout, keys besides the generic ones, the HF class defaults posenc applies.
inline std::string family_row(const posenc::hf::detail::family& f) {
    using namespace posenc::hf::detail;
    const family generic{};
    std::string layout;
    switch (f.layout) {
        case pairing::half_split: layout = "half_split"; break;
        case pairing::interleaved: layout = "interleaved"; break;
        case pairing::rope_interleave: layout = "interleaved (`rope_interleave`: false → half_split)"; break;
        case pairing::none: layout = "— (no RoPE: `hf/encoding.hpp`)"; break;
    }
    std::vector<std::string> keys;
    if (f.theta_key != generic.theta_key) keys.push_back(family_code(f.theta_key) + " (if no `rope_theta`)");
    if (f.partial_key != generic.partial_key) keys.push_back(family_code(f.partial_key));
    if (!f.rope_head_dim_key.empty()) keys.push_back(family_code(f.rope_head_dim_key) + " (rotary head)");
    if (f.hidden_key != generic.hidden_key) keys.push_back(family_code(f.hidden_key) + " / " + family_code(f.heads_key));
    if (f.layers_key != generic.layers_key) keys.push_back(family_code(f.layers_key));
    if (!f.rotary_dim_key.empty()) keys.push_back(family_code(f.rotary_dim_key));
    if (f.positions_key != generic.positions_key) keys.push_back(family_code(f.positions_key));
    if (f.mrope)
        keys.push_back(std::string("`mrope_section`, `mrope_interleaved`, `vision_config.spatial_merge_size`") +
                       (f.tokens_per_second > 0 ? ", `vision_config.tokens_per_second`" : "") +
                       ", `image_token_id`, `video_token_id`, `vision_start_token_id`");
    if (f.local_base_freq) keys.emplace_back("`rope_local_base_freq`, `sliding_window_pattern`, `query_pre_attn_scalar`");
    if (!f.alibi_key.empty()) keys.push_back(family_code(f.alibi_key) + " (true: ALiBi)");
    keys.emplace_back(layer_rule_keys(f.layers));
    if (f.sinks) keys.emplace_back("learned sinks");
    if (f.query_pre_attn_scalar && !f.local_base_freq) keys.emplace_back("`query_pre_attn_scalar`");

    std::vector<std::string> defaults;
    auto add = [&](std::string_view key, double v) { defaults.push_back(std::string(key) + " " + family_number(v)); };
    if (f.rope_theta != generic.rope_theta) add("rope_theta", f.rope_theta);
    if (f.max_position_embeddings) add(f.positions_key, static_cast<double>(f.max_position_embeddings));
    if (f.original_max_position_embeddings)
        add("original_max_position_embeddings", static_cast<double>(f.original_max_position_embeddings));
    if (f.head_dim) add("head_dim", static_cast<double>(f.head_dim));
    if (f.rope_head_dim) add(f.rope_head_dim_key, static_cast<double>(f.rope_head_dim));
    if (f.hidden_size) {
        add(f.hidden_key, static_cast<double>(f.hidden_size));
        add(f.heads_key, static_cast<double>(f.heads));
    } else if (f.heads) {
        add(f.heads_key, static_cast<double>(f.heads));
    }
    if (f.kv_heads) add("num_key_value_heads", static_cast<double>(f.kv_heads));
    if (f.rotary_dim) add(f.rotary_dim_key, static_cast<double>(f.rotary_dim));
    if (f.partial_rotary_factor != generic.partial_rotary_factor) add(f.partial_key, f.partial_rotary_factor);
    if (f.sliding_window) add("sliding_window", static_cast<double>(f.sliding_window));
    if (f.max_window_layers) add("max_window_layers", static_cast<double>(f.max_window_layers));
    if (f.attn_logit_softcapping != 0) add("attn_logit_softcapping", f.attn_logit_softcapping);
    if (f.tokens_per_second > 0) add("tokens_per_second", f.tokens_per_second);
    if (f.heads_rule == head_rule::divides) defaults.emplace_back("heads must divide the hidden size");
    if (f.fixed_rope) defaults.emplace_back("**base 10000, no scaling: `rope_theta` / `rope_scaling` ignored (noted)**");
    if (f.legacy_longrope_names) defaults.emplace_back("`su` / `yarn` = longrope");
    if (!f.checked && f.layout != pairing::none) defaults.emplace_back("*class not checked: `rope_theta` required*");
    return "| `" + std::string(f.model_type) + "` | " + layout + " | " + join_cells(keys) + " | " + join_cells(defaults) +
           " |\n";
}

inline constexpr std::string_view family_table_begin =
    "<!-- families table: printed by posenc-inspect --family-table from hf/families.hpp -->";
inline constexpr std::string_view family_table_end = "<!-- families table end -->";

/// The whole table in markdown, between the markers README.md keeps it in.
inline std::string family_table_markdown() {
    std::string out = std::string(family_table_begin) + "\n";
    out += "| `model_type` | layout | keys besides the generic ones | HF config-class defaults posenc applies |\n";
    out += "|---|---|---|---|\n";
    for (const auto& f : posenc::hf::detail::families) out += family_row(f);
    out += std::string(family_table_end) + "\n";
    return out;
}

}  // namespace posenc_inspect
