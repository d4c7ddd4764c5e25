#pragma once
// A model as attention sees it: one encoding per layer, read from a HuggingFace config.json (needs
// nlohmann-json; link posenc::hf), so that an engine does not parse the file a second time.
//
//   auto model = posenc::hf::load_layers("config.json");
//   for (const auto& layer : model.layers) { layer.rope (or NoPE), layer.kind, layer.window, … }
//
// Keys read, on top of parse_config's (config.hpp): num_attention_heads, num_key_value_heads (default:
// num_attention_heads), head_dim (through parse_config), num_hidden_layers (GPT-J: n_head, n_layer), layer_types,
// sliding_window, use_sliding_window, max_window_layers, sliding_window_pattern, no_rope_layers /
// no_rope_layer_interval, attention_chunk_size,
// attn_temperature_tuning / floor_scale / attn_scale, attn_logit_softcapping, query_pre_attn_scalar.
//
// Per family (HF's config classes and modeling code):
// - Gemma-3: layer_types (default: every 6th layer full, from sliding_window_pattern); sliding layers
//   use rope_local_base_freq (or rope_parameters.sliding_attention) and sliding_window (default 4096),
//   full layers rope_theta with rope_scaling; scale query_pre_attn_scalar^−½ (default 256);
//   attn_logit_softcapping when set. Defaults of Gemma3TextConfig: 8 heads, 4 kv heads.
// - Llama 4 (iRoPE): layer i uses RoPE iff no_rope_layers[i] (1 = RoPE) or, without the list,
//   (i + 1) % no_rope_layer_interval != 0 (default 4). RoPE layers: chunked attention of
//   attention_chunk_size (default 8192); NoPE layers: full attention, with Llama 4's temperature when
//   attn_temperature_tuning (default true; floor_scale 8192, attn_scale 0.1).
// - gpt-oss: layer_types (default: alternating, layer 0 sliding), sliding_window, learned sinks.
// - Gemma-2: as gpt-oss without sinks; sliding_window 4096, query_pre_attn_scalar^−½ (default 256),
//   attn_logit_softcapping (default 50, null = off), 8 heads / 4 kv heads by default.
// - Mistral / Ministral: layer_types when given (HF reads a Mistral file with layer_types as
//   Ministral), else as Mixtral / Starcoder2: every layer sliding when sliding_window is set (not
//   null), else full; absent, Mistral takes MistralConfig's 4096 (every layer slides), Mixtral None.
// - Qwen2 / Qwen2-MoE / Qwen3 / Qwen2-VL / Qwen2.5-VL: layer_types when given; else layers i >=
//   max_window_layers (default 28; 80 for the VL models) slide with sliding_window (default 4096), and
//   only when use_sliding_window is true (default false), as Qwen2Config derives layer_types. With
//   layer_types given and use_sliding_window false, sliding_attention layers attend fully (HF drops
//   the window in __post_init__).
// - SmolLM3: layer i uses RoPE iff no_rope_layers[i] (1 = RoPE) or, without the list,
//   (i + 1) % no_rope_layer_interval != 0 (default 4); layer_types, else NoPE layers slide when
//   use_sliding_window (default false) and sliding_window are set; a sliding layer attends fully
//   unless use_sliding_window. max_window_layers is stored by HF and unused (noted).
// - Cohere2: layer_types, else every sliding_window_pattern-th layer (default 4) full; sliding
//   layers use RoPE and sliding_window (default 4096), full layers are NoPE. sliding_window null:
//   no layer rotates or slides.
// - Phi-3 / PhiMoE: as Mistral, sliding_window (default None) on every layer.
// - Qwen3-MoE: every layer slides with sliding_window (default 4096) when use_sliding_window is true.
// - Gemma-2/3, gpt-oss, Mistral with sliding_window null: every layer attends fully (HF's None).
// - Any other family of the table reads none of these per-layer keys (families.hpp's
//   per_layer_keys): a family whose HF attention reads none (Llama, OLMo, …) ignores one, with a
//   note; false and null change nothing. A model_type without an entry (read with an explicit
//   layout): layer_types, sliding_window (only with layer_types) and attention_chunk_size, else
//   every layer full.
// The per-family rules and defaults are entries of hf/families.hpp's family table.
// DeepSeek-V2/V3: the scale carries YaRN's softmax_scale_multiplier().

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "posenc/hf/config.hpp"
#include "posenc/logit/nope.hpp"

namespace posenc::hf {

enum class attention_kind { full, sliding, chunked };

/// One layer's encoding.
struct layer_encoding {
    std::string layer_type;          ///< "full_attention", "sliding_attention", "chunked_attention"
    std::optional<rope_spec> rope;   ///< empty: NoPE
    attention_kind kind = attention_kind::full;
    std::int64_t window = 0;         ///< sliding_window (kind == sliding): key j visible iff i − W < j ≤ i
    std::int64_t chunk = 0;          ///< attention_chunk_size (kind == chunked)
    double scale = 0.0;              ///< the softmax scale s (fixed_scale{scale}); with temperature: 1/√head_dim
    std::optional<llama4_attn_temperature> temperature;  ///< Llama 4's NoPE layers (temperature_scale)
    float softcap = 0.0f;            ///< attn_logit_softcapping, 0 = off
    bool sinks = false;              ///< learned per-head sink logits (gpt-oss), weights not in config.json
};

struct model_layers {
    std::string model_type;
    std::size_t heads = 0;     ///< num_attention_heads
    std::size_t kv_heads = 0;  ///< num_key_value_heads
    std::size_t head_dim = 0;
    std::vector<layer_encoding> layers;
};

/// Reads a parsed config.json into one encoding per layer; `layout` as for parse_config.
[[nodiscard]] inline model_layers parse_layers(const nlohmann::json& config, std::optional<rope_layout> layout = std::nullopt) {
    using detail::reader;
    const model_config cfg = parse_config(config, layout);  // checks the object and every RoPE key
    const nlohmann::json& text =
        config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
    const reader top(text, &text == &config ? "" : "text_config");
    const std::string& type = cfg.model_type;
    // The family's rules (config.hpp's table); a family posenc does not know, read with an explicit
    // layout, follows the generic rules.
    const detail::family* known = detail::find_family(type);
    const detail::family fam = known ? *known : detail::family{};
    using detail::layer_rule;
    const bool llama4 = fam.layers == layer_rule::llama4_irope;

    model_layers out;
    out.model_type = type;
    // The family's names (GPT-J n_head, n_layer); the generic name wins when present, as HF's
    // attribute_map maps it onto the alias.
    auto key_of = [&](std::string_view generic, std::string_view alias) {
        return std::string(top.has(generic) || alias == generic ? generic : alias);
    };
    const std::string heads_key = key_of("num_attention_heads", fam.heads_key);
    const std::string layers_key = key_of("num_hidden_layers", fam.layers_key);
    out.heads = static_cast<std::size_t>(fam.heads ? top.integer(heads_key, 1, limits::heads, fam.heads)
                                                   : top.integer(heads_key, 1, limits::heads));
    const std::int64_t kv_default = fam.kv_heads ? fam.kv_heads : static_cast<std::int64_t>(out.heads);
    out.kv_heads = static_cast<std::size_t>(top.integer("num_key_value_heads", 1, limits::heads, kv_default));
    if (out.heads % out.kv_heads != 0)
        throw config_error(top.name("num_key_value_heads"), detail::to_text(out.kv_heads),
                           "must divide " + heads_key + " = " + detail::to_text(out.heads));
    out.head_dim = cfg.rope.dims.head_dim;

    // The layer count: num_hidden_layers, or the length of layer_types.
    std::int64_t n = 0;
    if (top.has(layers_key)) n = top.integer(layers_key, 1, limits::layers);
    if (!cfg.layer_types.empty()) {
        if (n != 0 && static_cast<std::size_t>(n) != cfg.layer_types.size())
            throw config_error(top.name("layer_types"), "of " + detail::to_text(cfg.layer_types.size()) + " entries",
                               "must have " + layers_key + " = " + detail::to_text(n) + " entries");
        n = static_cast<std::int64_t>(cfg.layer_types.size());
    }
    if (n == 0) (void)top.at(layers_key);  // reports the missing key

    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(out.head_dim));
    double scale = inv_sqrt_d;
    if (fam.query_pre_attn_scalar) {
        const double s = top.number("query_pre_attn_scalar", 256.0);
        if (!(s > 0.0)) throw config_error(top.name("query_pre_attn_scalar"), detail::to_text(s), "must be > 0");
        scale = 1.0 / std::sqrt(s);
    } else if (fam.yarn_softmax_scale) {
        scale = inv_sqrt_d * cfg.rope.softmax_scale_multiplier();
    }
    // Absent: the class default (Gemma-2: 50); an explicit null turns it off, as HF's None does.
    const auto cap = top.object().find("attn_logit_softcapping");
    const bool cap_null = cap != top.object().end() && cap->is_null();
    float softcap = cap_null ? 0.0f : static_cast<float>(fam.attn_logit_softcapping);
    if (top.has("attn_logit_softcapping")) {
        const double c = top.number("attn_logit_softcapping");
        if (!(c > 0.0) || c > 1e30) throw config_error(top.name("attn_logit_softcapping"), detail::to_text(c), "must be > 0");
        softcap = static_cast<float>(c);
    }
    // Gemma-3 and Qwen2 default sliding_window to 4096; elsewhere a sliding layer needs it.
    auto window = [&] {
        return fam.sliding_window ? top.integer("sliding_window", 1, limits::positions, fam.sliding_window)
                                  : top.integer("sliding_window", 1, limits::positions);
    };
    // Qwen2 (Qwen2Config.__post_init__): sliding_window is dropped unless use_sliding_window; then
    // layers i >= max_window_layers slide. An explicit null window means none, like HF's None.
    // That holds for a layer_types list too: its sliding_attention layers attend fully (HF's
    // window None) unless use_sliding_window.
    const auto w = top.object().find("sliding_window");
    const bool null_window = w != top.object().end() && w->is_null();
    bool qwen2_sliding = false;
    std::int64_t max_window_layers = 0;
    if (fam.layers == layer_rule::qwen2_window) {
        qwen2_sliding = top.boolean("use_sliding_window", false) && !null_window;
        if (cfg.layer_types.empty())
            max_window_layers = top.integer("max_window_layers", 0, limits::layers, fam.max_window_layers);
    }
    // Mistral: sliding_window absent takes the class default (MistralConfig 4096: every layer
    // slides); null, or a family whose class defaults to None (Mixtral), attends fully.
    const bool mistral_sliding = (fam.layers == layer_rule::sliding_if_window || fam.layers == layer_rule::mistral_layers) &&
                                 (top.has("sliding_window") || (w == top.object().end() && fam.sliding_window));
    // Qwen3-MoE: the window (None unless use_sliding_window) on every layer.
    const bool window_all = fam.layers == layer_rule::window_all_layers && top.boolean("use_sliding_window", false) &&
                            !null_window;

    out.layers.reserve(static_cast<std::size_t>(n));
    const bool smollm3 = fam.layers == layer_rule::smollm3_nope;
    // Llama 4 and SmolLM3: no_rope_layers (1 = RoPE), else a NoPE layer every no_rope_layer_interval
    // (default 4). Llama 4 takes an empty list as absent (`no_rope_layers if no_rope_layers else …`);
    // SmolLM3 tests `is None`, so [] there is a list of the wrong length.
    std::vector<bool> use_rope(static_cast<std::size_t>(n), true);
    if (llama4 || smollm3) {
        if (top.has("no_rope_layers") && (smollm3 || !top.at("no_rope_layers").empty())) {
            const auto list = top.numbers("no_rope_layers", static_cast<std::size_t>(limits::layers));
            if (list.size() != static_cast<std::size_t>(n))
                throw config_error(top.name("no_rope_layers"), "of " + detail::to_text(list.size()) + " entries",
                                   "must have " + layers_key + " = " + detail::to_text(n) + " entries");
            for (std::size_t i = 0; i < list.size(); ++i) {
                if (list[i] != 0.0 && list[i] != 1.0)
                    throw config_error(top.name("no_rope_layers"), detail::to_text(list[i]), "entries must be 0 (NoPE) or 1 (RoPE)");
                use_rope[i] = list[i] == 1.0;
            }
        } else {
            const std::int64_t interval = top.integer("no_rope_layer_interval", 1, limits::layers, 4);
            for (std::int64_t i = 0; i < n; ++i) use_rope[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
        }
    }
    if (llama4) {
        const std::int64_t chunk = top.integer("attention_chunk_size", 1, limits::positions, 8192);
        // HF tests its truth (`if self.attn_temperature_tuning and …`): Llama 4's released files say 4.
        bool tuning = true;
        if (top.has("attn_temperature_tuning")) {
            const nlohmann::json& v = top.at("attn_temperature_tuning");
            if (v.is_boolean())
                tuning = v.get<bool>();
            else if (v.is_number())
                tuning = v.get<double>() != 0.0;
            else
                throw config_error(top.name("attn_temperature_tuning"), detail::describe(v), "must be true, false or a number");
        }
        llama4_attn_temperature t{.floor_scale = top.number("floor_scale", 8192.0), .attn_scale = top.number("attn_scale", 0.1)};
        try {
            t.validate();
        } catch (const config_error& e) {
            throw config_error(top.name(e.key()), e.value(), e.why());
        }
        for (std::int64_t i = 0; i < n; ++i) {
            const auto at = static_cast<std::size_t>(i);
            layer_encoding l;
            l.scale = scale;
            l.softcap = softcap;
            // Llama4TextConfig: layer_types (default: chunked_attention where no_rope_layers is 1)
            // picks the mask; no_rope_layers alone picks the rotation.
            l.layer_type = !cfg.layer_types.empty() ? cfg.layer_types[at]
                           : use_rope[at]           ? "chunked_attention"
                                                    : "full_attention";
            if (l.layer_type == "chunked_attention") {
                l.kind = attention_kind::chunked;
                l.chunk = chunk;
            } else if (l.layer_type != "full_attention") {
                throw config_error(top.name("layer_types"), detail::echo_string(l.layer_type),
                                   "is not full_attention or chunked_attention (Llama 4)");
            }
            if (use_rope[at])
                l.rope = cfg.rope;
            else if (tuning)
                l.temperature = t;
            out.layers.push_back(std::move(l));
        }
        return out;
    }
    // SmolLM3Config: layer_types, else sliding_attention where use_sliding_window, sliding_window set
    // and the layer is NoPE; SmolLM3Attention slides only where use_sliding_window too.
    const bool smollm3_sliding = smollm3 && top.boolean("use_sliding_window", false) && top.has("sliding_window");

    for (std::int64_t i = 0; i < n; ++i) {
        layer_encoding l;
        l.scale = scale;
        l.softcap = softcap;
        l.sinks = fam.sinks;
        if (!cfg.layer_types.empty())
            l.layer_type = cfg.layer_types[static_cast<std::size_t>(i)];
        else if (smollm3)
            l.layer_type = smollm3_sliding && !use_rope[static_cast<std::size_t>(i)] ? "sliding_attention" : "full_attention";
        else if (fam.layers == layer_rule::alternating)
            l.layer_type = (i + 1) % 2 ? "sliding_attention" : "full_attention";
        else if (mistral_sliding || window_all)
            l.layer_type = "sliding_attention";
        else if (qwen2_sliding && i >= max_window_layers)
            l.layer_type = "sliding_attention";
        else
            l.layer_type = "full_attention";
        // Window None in HF: Qwen2 with layer_types and no use_sliding_window, SmolLM3 likewise (or
        // without sliding_window), Cohere2 with sliding_window null. The layer keeps its type (and
        // rope entry) but attends fully.
        // Gemma-2/3 and gpt-oss with sliding_window null: HF's None, every layer attends fully.
        const bool window_none = (fam.layers == layer_rule::qwen2_window && !qwen2_sliding) ||
                                 (smollm3 && !smollm3_sliding) ||
                                 ((fam.layers == layer_rule::cohere2_pattern || fam.layers == layer_rule::alternating ||
                                   fam.layers == layer_rule::gemma3_pattern || fam.layers == layer_rule::mistral_layers) &&
                                  null_window);
        if (l.layer_type == "sliding_attention" && window_none) {
        } else if (l.layer_type == "sliding_attention") {
            l.kind = attention_kind::sliding;
            l.window = window();
        } else if (l.layer_type == "chunked_attention") {
            l.kind = attention_kind::chunked;
            l.chunk = top.integer("attention_chunk_size", 1, limits::positions);
        } else if (l.layer_type != "full_attention") {
            throw config_error(top.name("layer_types"), detail::echo_string(l.layer_type),
                               "is not full_attention, sliding_attention or chunked_attention");
        }
        l.rope = cfg.rope_by_layer_type.empty() ? cfg.rope : cfg.rope_for(l.layer_type);
        // SmolLM3Attention rotates iff no_rope_layers[i]; Cohere2Attention iff the layer's window is set.
        if ((smollm3 && !use_rope[static_cast<std::size_t>(i)]) ||
            (fam.layers == layer_rule::cohere2_pattern && l.kind != attention_kind::sliding))
            l.rope.reset();
        out.layers.push_back(std::move(l));
    }
    return out;
}

/// parse_layers of config.json text, with the checks of config_from_string.
[[nodiscard]] inline model_layers layers_from_string(std::string_view json_text, std::optional<rope_layout> layout = std::nullopt) {
    return parse_layers(detail::parse_json(json_text, "<string>"), layout);
}

[[nodiscard]] inline model_layers load_layers(const std::filesystem::path& path, std::optional<rope_layout> layout = std::nullopt) {
    return parse_layers(detail::read_json(path), layout);
}

}  // namespace posenc::hf
