#pragma once
// attention_layer objects (attention/layer.hpp) from a config.json's layers (hf/layers.hpp); needs
// nlohmann-json (link posenc::hf). The layer object itself does not.
//
//   const auto model = posenc::hf::load_layers("config.json");
//   std::vector<posenc::attention_layer> layers = posenc::hf::make_attention_layers(model, /*capacity=*/4096);
//
// Per layer_encoding: the rotary from its rope_spec (make_rotary(seq_len); NoPE when it has none),
// full → causal_mask (every model load_layers reads is a decoder), sliding → sliding_window_mask,
// chunked → chunked_mask; the scale fixed_scale{scale}, or Llama 4's temperature_scale; softcap; and
// for gpt-oss, whose learned sinks are weights and not in config.json, a layer that refuses to attend
// until set_sinks gives them. M-RoPE configs (Qwen-VL) get their 1-D rotary: right for text tokens.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "posenc/attention/layer.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/hf/layers.hpp"

namespace posenc::hf {

[[nodiscard]] inline any_mask mask_of(const layer_encoding& l) {
    switch (l.kind) {
        case attention_kind::sliding: return sliding_window_mask{.window = l.window};
        case attention_kind::chunked: return chunked_mask{.chunk = l.chunk};
        case attention_kind::full: break;
    }
    return causal_mask{};
}

/// The engine's options with the layer's own softcap and sinks requirement from the config.
[[nodiscard]] inline attention_layer_options with_config(attention_layer_options o, const layer_encoding& l) {
    o.softcap = l.softcap;
    o.sinks.clear();
    o.needs_sinks = l.sinks;
    return o;
}

[[nodiscard]] inline any_scale scale_of(const layer_encoding& l) {
    if (l.temperature) return temperature_scale{*l.temperature};
    return fixed_scale{l.scale};
}

/// Layer `index` of `model`, its cache holding `capacity` tokens; `seq_len` selects dynamic_ntk's
/// base and longrope's factors (0 = not known), as rope_spec::make_rotary.
/// `options`: the engine's threads, executor, work threshold and workspace (softcap and sinks come
/// from the config: the ones given here are replaced).
template <storage_type Storage = float>
[[nodiscard]] basic_attention_layer<Storage> make_attention_layer(const model_layers& model, std::size_t index,
                                                                  std::size_t capacity, std::int64_t seq_len = 0,
                                                                  attention_layer_options options = {}) {
    if (index >= model.layers.size())
        throw range_error("posenc: layer " + posenc::detail::to_text(index) + " of a model of " + posenc::detail::to_text(model.layers.size()) +
                          " layers");
    // load_layers gives DeepSeek's rope part as head_dim; its MLA heads are wider and rotate their last lanes.
    if (model.model_type == "deepseek_v2" || model.model_type == "deepseek_v3")
        throw config_error("model_type", model.model_type,
                           "multi-head latent attention is not an attention_layer; use the typed templates");
    const layer_encoding& l = model.layers[index];
    std::optional<any_rotary> rope;
    if (l.rope) rope.emplace(l.rope->make_rotary(seq_len));
    return basic_attention_layer<Storage>(std::move(rope), mask_of(l), scale_of(l),
                           {.heads = model.heads, .kv_heads = model.kv_heads, .head_dim = model.head_dim, .capacity = capacity},
                           with_config(std::move(options), l));
}

/// Every layer of `model`, in order (make_attention_layers<posenc::bf16>(...): bf16 caches). seq_len
/// fixes dynamic_ntk's base and longrope's factors for the layers' lifetime (0: the short ones, as
/// rope_spec::make_rotary): a Phi-3-128k engine serving long prompts builds its layers with the length.
template <storage_type Storage = float>
[[nodiscard]] std::vector<basic_attention_layer<Storage>> make_attention_layers(const model_layers& model, std::size_t capacity,
                                                                                std::int64_t seq_len = 0,
                                                                                const attention_layer_options& options = {}) {
    std::vector<basic_attention_layer<Storage>> out;
    out.reserve(model.layers.size());
    for (std::size_t i = 0; i < model.layers.size(); ++i)
        out.push_back(make_attention_layer<Storage>(model, i, capacity, seq_len, options));
    return out;
}

}  // namespace posenc::hf
