#pragma once
// Reading the RoPE a model uses from its HuggingFace config.json (needs nlohmann-json; link
// posenc::hf). Families: Llama, Mistral/Mixtral, Qwen2/Qwen3, Phi-3, DeepSeek-V2/V3, GPT-NeoX, GPT-J,
// Gemma-3, and any config that follows HF's generic keys.
//
//   auto cfg = posenc::hf::load_config("config.json");
//   posenc::any_rotary rope = cfg.rope.make_rotary(/*seq_len=*/prompt_length);
//   rope.apply(q, k, positions);
//
// Keys read: the generic ones (rope_theta, head_dim else hidden_size // num_attention_heads,
// partial_rotary_factor, max_position_embeddings, top-level original_max_position_embeddings,
// rope_scaling (transformers v4) or rope_parameters (v5, also as one dict per layer type) with
// rope_type (legacy: type) and every key of each type), plus each family's aliases and defaults, all
// in ONE table (detail::families in hf/families.hpp): GPT-NeoX rotary_emb_base / rotary_pct, GPT-J
// n_embd / n_head / rotary_dim / n_positions, DeepSeek qk_rope_head_dim, Qwen-VL mrope_section /
// mrope_interleaved, ….
// Multimodal configs are read from their text_config. A key that is absent takes the default of the
// family's HF config class where the table has one.
//
// Strictness: an unknown rope_type, an unknown key inside the rope dict, a missing required key or a
// value of the wrong type throws config_error naming the key (e.g. "rope_scaling.factor") — nothing
// is silently ignored. A per-layer key (layer_types, sliding_window, no_rope_layers, …; see
// detail::per_layer_keys) that the family's rule does not read throws too.
//
// Where we differ from HF on purpose:
// - yarn: `factor` is authoritative; it is derived as max_position_embeddings / original only when
//   absent (HF ≥ PR #40320; older releases replaced it and turned some Qwen configs into plain RoPE).
// - longrope: an explicit `factor` is kept (v5); v4.45 replaced it by max/original when Phi-3's
//   top-level original_max_position_embeddings exists. The two agree on every shipped Phi-3 config.
// - dynamic: the schedule is a pure function of the sequence length you pass (HF caches the largest
//   length seen; see posenc/rope/dynamic_ntk.hpp).
//
// The pieces: hf/types.hpp (the types returned), hf/families.hpp (the family table),
// hf/detail/json_reader.hpp (reading JSON values), hf/detail/rope_reader.hpp (the rope dict and
// layer types); this header reads a whole config with them.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "posenc/core/errors.hpp"
#include "posenc/hf/detail/json_reader.hpp"
#include "posenc/hf/detail/rope_reader.hpp"
#include "posenc/hf/families.hpp"
#include "posenc/hf/types.hpp"

namespace posenc::hf {

/// Reads a parsed config.json. The rotary layout comes from the model family; `layout` overrides it,
/// and is required for a family posenc does not know.
[[nodiscard]] inline model_config parse_config(const nlohmann::json& config,
                                               std::optional<rope_layout> layout = std::nullopt) {
    using detail::reader;
    if (!config.is_object()) throw config_error("config", detail::describe(config), "must be a JSON object");
    const nlohmann::json& text = config.contains("text_config") && config["text_config"].is_object()
                                     ? config["text_config"]
                                     : config;
    const reader top(text, &text == &config ? "" : "text_config");
    const reader outer(config, "");
    model_config out;
    out.model_type = top.string("model_type", outer.string("model_type", ""));
    const detail::family fam = detail::family_of(out.model_type, top, layout);
    detail::check_layer_keys(top, fam, out.model_type, out.notes);
    detail::rope_context ctx;
    ctx.fam = fam;
    ctx.layout = detail::layout_of(fam, top, layout);
    const auto head = detail::head_dim_of(top, fam);
    ctx.head_dim = head.value;
    ctx.head_dim_key = head.key;
    // A family's alias (GPT-NeoX rotary_emb_base, rotary_pct) is read when the generic key is absent.
    const bool theta_alias = fam.theta_key != "rope_theta" && !top.has("rope_theta");
    ctx.rope_theta_key = top.name(theta_alias ? fam.theta_key : "rope_theta");
    ctx.rope_theta = top.number(theta_alias ? fam.theta_key : "rope_theta", fam.rope_theta);
    // A table entry whose class posenc has not read has no trusted default (a family read with an
    // explicit layout and no entry takes PreTrainedConfig's generic 10000).
    ctx.rope_theta_known = top.has(theta_alias ? fam.theta_key : "rope_theta") || fam.checked ||
                           !detail::find_family(out.model_type) || fam.fixed_rope;
    ctx.partial_rotary_factor = top.number(fam.partial_key, fam.partial_rotary_factor);
    ctx.partial_key = top.name(fam.partial_key);
    if (!fam.rotary_dim_key.empty()) {
        ctx.gptj_rotary_dim = top.integer(fam.rotary_dim_key, 1, limits::head_dim, fam.rotary_dim);
        ctx.rotary_dim_key = top.name(fam.rotary_dim_key);
    }
    // max_position_embeddings (GPT-J: n_positions, its attribute_map alias); absent: the class default.
    const std::string_view positions_key =
        top.has("max_position_embeddings") || fam.positions_key == "max_position_embeddings" ? std::string_view("max_position_embeddings")
                                                                                             : fam.positions_key;
    ctx.max_positions_key = top.name(positions_key);
    if (top.has(positions_key)) {
        ctx.max_position_embeddings = top.integer(positions_key, 1, limits::positions);
        out.max_position_embeddings_source = ctx.max_positions_key;
    } else if (fam.max_position_embeddings) {
        ctx.max_position_embeddings = fam.max_position_embeddings;
        out.max_position_embeddings_source =
            "default of " + std::string(fam.model_type) + " (" + detail::to_text(fam.max_position_embeddings) + ")";
    }
    // The top-level original_max_position_embeddings wins over the rope dict's for llama3, yarn and
    // longrope (HF v5 standardize_rope_params gives the config attribute priority; v4 read it in
    // longrope only). Phi-3's class always has one (default 4096).
    if (top.has("original_max_position_embeddings")) {
        ctx.top_level_original = top.integer("original_max_position_embeddings", 1, limits::positions);
        ctx.top_level_original_key = top.name("original_max_position_embeddings");
    } else if (fam.original_max_position_embeddings) {
        ctx.top_level_original = fam.original_max_position_embeddings;
        ctx.top_level_original_key = "default of " + std::string(fam.model_type) + " original_max_position_embeddings";
    }
    out.max_position_embeddings = ctx.max_position_embeddings;

    // rope_parameters (v5) wins over rope_scaling (v4); both may be null.
    const char* key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json& dict = top.has(key) ? top.at(key) : empty;

    if (fam.fixed_rope) {
        // GPT-J: HF's modeling code builds its table with base 10000 and no scaling, whatever the
        // config says; posenc computes the same numbers and says what it ignored.
        for (const char* k : {"rope_theta", "rope_scaling", "rope_parameters"})
            if (top.has(k)) out.notes.push_back(top.name(k) + " ignored: HF's " + std::string(fam.model_type) +
                                                " hard-codes base 10000 and applies no scaling");
        detail::rope_context fixed = ctx;
        fixed.rope_theta = 10000.0;
        out.rope = detail::read_rope(empty, top.name(key), fixed);
    } else if (detail::is_per_layer_type(dict)) {
        // HF v5 (standardize_rope_params, per-layer case): each dict keeps its own
        // original_max_position_embeddings, else takes max_position_embeddings; the top-level value
        // (Phi-3's priority in the single-dict case) is not used.
        detail::rope_context per_layer = ctx;
        per_layer.top_level_original.reset();
        for (const auto& [layer_type, sub] : dict.items())
            out.rope_by_layer_type.emplace(layer_type, detail::read_rope(sub, top.name(key) + "." + layer_type, per_layer));
        const auto full = out.rope_by_layer_type.find("full_attention");
        out.rope = full != out.rope_by_layer_type.end() ? full->second : out.rope_by_layer_type.begin()->second;
    } else {
        out.rope = detail::read_rope(dict, top.name(key), ctx);
        if (fam.local_base_freq) {
            // Gemma-3 (transformers v4): rope_scaling applies to global layers only; sliding-window
            // layers use the default schedule with rope_local_base_freq.
            detail::rope_context local = ctx;
            local.rope_theta = top.number("rope_local_base_freq", 10000.0);
            local.rope_theta_key = top.name("rope_local_base_freq");
            local.rope_theta_known = true;
            out.rope_by_layer_type.emplace("full_attention", out.rope);
            out.rope_by_layer_type.emplace("sliding_attention",
                                           detail::read_rope(nlohmann::json::object(), top.name("rope_local_base_freq"), local));
        }
    }
    if (fam.mrope) out.vision = detail::read_vision_tokens(outer, top, fam);

    out.layer_types = detail::read_layer_types(top, fam);
    for (const auto& t : out.layer_types)
        if (!out.rope_by_layer_type.empty() && !out.rope_by_layer_type.contains(t))
            throw config_error(top.name("layer_types"), detail::echo_string(t), "has no entry in " + top.name(key));
    return out;
}

/// Reads config.json text (the bytes of the file). Malformed JSON, nesting deeper than limits::depth,
/// a number beyond double's range or a bad value throws config_error; nothing else escapes.
[[nodiscard]] inline model_config config_from_string(std::string_view json_text,
                                                     std::optional<rope_layout> layout = std::nullopt) {
    return parse_config(detail::parse_json(json_text, "<string>"), layout);
}

/// Reads a config.json file. An unreadable file, malformed JSON or a bad value throws config_error
/// naming the file or the key.
[[nodiscard]] inline model_config load_config(const std::filesystem::path& path,
                                              std::optional<rope_layout> layout = std::nullopt) {
    return parse_config(detail::read_json(path), layout);
}

}  // namespace posenc::hf
