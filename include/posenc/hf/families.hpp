#pragma once
// The one table of model families the HF config reader knows (detail::families): per model_type its
// lane pairing, the keys it reads under another name, the defaults of its HF config class and its
// per-layer rule. Adding a family is adding an entry; README's family table is printed from it by
// `posenc-inspect --family-table`.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace posenc::hf::detail {

/// How a family pairs the rotary lanes (its HF modeling code).
enum class pairing : std::uint8_t {
    half_split,       ///< rotate_half: lane i with lane i + d/2
    interleaved,      ///< rotate_every_two / view_as_complex: lanes 2i and 2i + 1
    rope_interleave,  ///< DeepSeek: the config's rope_interleave (default true) picks interleaved
    none,             ///< no RoPE (ALiBi or T5 buckets): read with posenc/hf/encoding.hpp
};

/// How layers are typed when the config has no layer_types (read by hf/layers.hpp).
enum class layer_rule : std::uint8_t {
    full,               ///< every layer full attention
    sliding_if_window,  ///< Mistral: every layer sliding when sliding_window is set (not null)
    gemma3_pattern,     ///< every sliding_window_pattern-th layer full (default 6), the others sliding
    llama4_irope,       ///< no_rope_layers / no_rope_layer_interval; RoPE layers chunked
    alternating,        ///< gpt-oss, Gemma-2: layer 0 sliding, then alternating
    qwen2_window,       ///< layers >= max_window_layers sliding, only when use_sliding_window is true
    smollm3_nope,       ///< no_rope_layers / no_rope_layer_interval pick NoPE layers; those slide if use_sliding_window
    cohere2_pattern,    ///< every sliding_window_pattern-th layer (default 4) full and NoPE, the others sliding with RoPE
    mistral_layers,     ///< Mistral / Ministral: layer_types, else every layer sliding when sliding_window is set
    window_all_layers,  ///< Qwen3-MoE: every layer sliding when use_sliding_window (max_window_layers unused)
};

/// The keys by which an HF config class says, per layer, which layers rotate, slide, chunk or use
/// another theta. A family reads only those of its rule (layer_keys_read); a config that sets
/// another is rejected, since posenc would otherwise silently apply a default to those layers.
inline constexpr std::string_view per_layer_keys[] = {
    "layer_types", "sliding_window", "use_sliding_window", "max_window_layers", "sliding_window_pattern",
    "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "rope_local_base_freq",
    "full_attention_interval", "global_attn_every_n_layers",
};

/// Which per_layer_keys a rule reads, as HF's config class and modeling file of its families do
/// (a family's entry names the class checked; `known` false: a model_type without an entry).
///   full              nothing: Llama, Gemma, Phi, GPT-NeoX, OLMo, Granite, GLM, DeepSeek, Qwen3-VL, …
///   sliding_if_window sliding_window (Mistral, Mixtral, Phi-3, PhiMoE: getattr(config, "sliding_window"))
///   gemma3_pattern    layer_types, sliding_window, sliding_window_pattern, rope_local_base_freq
///   llama4_irope      layer_types, no_rope_layers, no_rope_layer_interval, attention_chunk_size
///   alternating       layer_types, sliding_window (Gemma2Config, GptOssConfig)
///   qwen2_window      layer_types, sliding_window, use_sliding_window, max_window_layers
///   smollm3_nope      layer_types, sliding_window, use_sliding_window, no_rope_layers,
///                     no_rope_layer_interval, max_window_layers (stored, unused by HF: noted)
///   cohere2_pattern   layer_types, sliding_window, sliding_window_pattern
///   mistral_layers    layer_types, sliding_window (MinistralConfig; HF reads a Mistral file with
///                     layer_types as Ministral)
///   window_all_layers sliding_window, use_sliding_window, max_window_layers (Qwen3MoeAttention:
///                     getattr(config, "sliding_window") on every layer; max_window_layers noted)
///   no entry          layer_types, sliding_window, attention_chunk_size (the generic reading)
inline bool reads_layer_key(layer_rule rule, bool known, std::string_view key) {
    auto in = [&](std::initializer_list<std::string_view> keys) {
        return std::find(keys.begin(), keys.end(), key) != keys.end();
    };
    if (!known) return in({"layer_types", "sliding_window", "attention_chunk_size"});
    switch (rule) {
        case layer_rule::full: return false;
        case layer_rule::sliding_if_window: return key == "sliding_window";
        case layer_rule::gemma3_pattern:
            return in({"layer_types", "sliding_window", "sliding_window_pattern", "rope_local_base_freq"});
        case layer_rule::llama4_irope:
            return in({"layer_types", "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size"});
        case layer_rule::alternating: return in({"layer_types", "sliding_window"});
        case layer_rule::qwen2_window: return in({"layer_types", "sliding_window", "use_sliding_window", "max_window_layers"});
        case layer_rule::smollm3_nope:
            return in({"layer_types", "sliding_window", "use_sliding_window", "no_rope_layers", "no_rope_layer_interval",
                       "max_window_layers"});
        case layer_rule::cohere2_pattern: return in({"layer_types", "sliding_window", "sliding_window_pattern"});
        case layer_rule::mistral_layers: return in({"layer_types", "sliding_window"});
        case layer_rule::window_all_layers: return in({"sliding_window", "use_sliding_window", "max_window_layers"});
    }
    return false;
}

/// How head_dim follows from hidden_size and the head count when head_dim is absent.
enum class head_rule : std::uint8_t {
    floor,    ///< hidden_size // num_attention_heads (HF's getattr fallback in most modeling files)
    divides,  ///< the config class raises unless the heads divide hidden_size (LlamaConfig v5, GPT-J)
};

/// Everything posenc knows about one model_type: how it pairs lanes, the keys it reads under another
/// name, and the defaults of its HF config class (checked against configuration_<model>.py). 0 or an
/// empty key means "HF's class has none": a config that needs the value must give it.
struct family {
    std::string_view model_type;
    pairing layout = pairing::half_split;
    double rope_theta = 10000.0;               ///< the class's default rope_theta (default_theta)
    std::int64_t max_position_embeddings = 0;  ///< the class's default (under positions_key)
    std::int64_t head_dim = 0;                 ///< the class's default head_dim; 0: from hidden_size / heads
    head_rule heads_rule = head_rule::floor;
    std::string_view theta_key = "rope_theta";               ///< GPT-NeoX: rotary_emb_base (rope_theta wins)
    std::string_view partial_key = "partial_rotary_factor";  ///< GPT-NeoX: rotary_pct
    double partial_rotary_factor = 1.0;                      ///< its default (GPT-NeoX 0.25)
    std::string_view rope_head_dim_key = {};                 ///< DeepSeek: qk_rope_head_dim is the rotary head
    std::int64_t rope_head_dim = 0;                          ///< its default
    std::string_view hidden_key = "hidden_size";             ///< GPT-J: n_embd
    std::string_view heads_key = "num_attention_heads";      ///< GPT-J: n_head
    std::string_view layers_key = "num_hidden_layers";       ///< GPT-J: n_layer (hf/layers.hpp)
    std::int64_t hidden_size = 0;                            ///< defaults of the two keys above
    std::int64_t heads = 0;
    std::string_view rotary_dim_key = {};                    ///< GPT-J: rotary_dim, an absolute width
    std::int64_t rotary_dim = 0;                             ///< its default
    std::string_view positions_key = "max_position_embeddings";  ///< GPT-J: n_positions
    std::int64_t original_max_position_embeddings = 0;       ///< Phi-3: the class's top-level default
    bool fixed_rope = false;              ///< GPT-J: base 10000 and no scaling, whatever the file says
    bool legacy_longrope_names = false;   ///< Phi-3: rope_type su / yarn mean longrope
    bool mrope = false;                   ///< Qwen-VL: mrope_section (and mrope_interleaved) in the rope dict
    /// Qwen3-VL: HF's rotary always interleaves (apply_interleaved_mrope, whatever mrope_interleaved
    /// says) and takes mrope_section [24, 20, 20] when the config has none; Qwen2-VL / 2.5-VL never
    /// interleave.
    bool mrope_interleaved = false;
    double tokens_per_second = 0;         ///< Qwen2.5-VL: vision_config.tokens_per_second default; 0: not read
    bool local_base_freq = false;         ///< Gemma-3 (v4 files): sliding layers on rope_local_base_freq
    std::string_view alibi_key = {};      ///< Falcon: alibi = true means no RoPE
    // Attention side (hf/layers.hpp).
    layer_rule layers = layer_rule::full;
    std::int64_t kv_heads = 0;            ///< default num_key_value_heads; 0: num_attention_heads
    std::int64_t sliding_window = 0;      ///< default sliding_window; 0: required where a layer slides
    std::int64_t max_window_layers = 0;   ///< Qwen2: default max_window_layers
    bool query_pre_attn_scalar = false;   ///< Gemma-3: softmax scale query_pre_attn_scalar^-1/2 (default 256)
    bool yarn_softmax_scale = false;      ///< DeepSeek: softmax scale × YaRN's softmax_scale_multiplier()
    bool sinks = false;                   ///< gpt-oss: learned per-head sinks
    double attn_logit_softcapping = 0;    ///< default attn_logit_softcapping (Gemma-2: 50); 0: off
    /// The entry's defaults were read from its HF config class. An unchecked entry has no trusted
    /// rope_theta default: a config of it without rope_theta is a config_error, not a silent 10000.
    bool checked = false;
};

/// The one table of families. Adding a family is adding an entry. Defaults marked (v5) are those of
/// transformers' current config classes; entries without a max_position_embeddings default keep the key
/// required where a schedule needs it (their classes were not checked).
inline constexpr family families[] = {
    {.model_type = "llama", .max_position_embeddings = 2048, .heads_rule = head_rule::divides,
     .checked = true},  // LlamaConfig (v5)
    // MistralConfig: 8 kv heads, sliding_window 4096, so a file without the key slides every layer
    // (sliding_window: null does not).
    {.model_type = "mistral", .max_position_embeddings = 4096 * 32, .layers = layer_rule::mistral_layers, .kv_heads = 8,
     .sliding_window = 4096, .checked = true},
    // MixtralConfig (v5): default_theta 1e6, 8 kv heads, sliding_window None.
    {.model_type = "mixtral", .rope_theta = 1'000'000.0, .max_position_embeddings = 4096 * 32,
     .layers = layer_rule::sliding_if_window, .kv_heads = 8, .checked = true},
    // MinistralConfig: layer_types, else every layer sliding_attention when sliding_window (default 4096) is set.
    {.model_type = "ministral", .layers = layer_rule::mistral_layers, .sliding_window = 4096},
    {.model_type = "starcoder2", .layers = layer_rule::sliding_if_window},
    // Qwen2Config (v5): use_sliding_window false, sliding_window 4096, max_window_layers 28.
    {.model_type = "qwen2", .max_position_embeddings = 32768, .layers = layer_rule::qwen2_window, .sliding_window = 4096,
     .max_window_layers = 28, .checked = true},
    {.model_type = "qwen2_moe", .layers = layer_rule::qwen2_window, .sliding_window = 4096, .max_window_layers = 28},
    // Qwen3Config (v5): head_dim 128, the same window rule as Qwen2.
    {.model_type = "qwen3", .max_position_embeddings = 32768, .head_dim = 128, .layers = layer_rule::qwen2_window,
     .sliding_window = 4096, .max_window_layers = 28, .checked = true},
    // Qwen3MoeConfig: 4 kv heads, max_position_embeddings 32768, use_sliding_window / sliding_window 4096 as
    // Qwen3 (max_window_layers 28 is v4's; v5's class has none).
    {.model_type = "qwen3_moe", .max_position_embeddings = 32768, .layers = layer_rule::window_all_layers, .kv_heads = 4,
     .sliding_window = 4096, .checked = true},
    {.model_type = "phi"},
    // Phi3Config (v5): max_position_embeddings 4096, original_max_position_embeddings 4096;
    // sliding_window (default None) applies to every layer (modeling_phi3: getattr(config, "sliding_window")).
    {.model_type = "phi3", .max_position_embeddings = 4096, .original_max_position_embeddings = 4096,
     .legacy_longrope_names = true, .layers = layer_rule::sliding_if_window, .checked = true},
    // PhimoeConfig: rope_theta 1e6, max_position_embeddings 4096 * 32; sliding_window (None) as Phi-3.
    {.model_type = "phimoe", .rope_theta = 1'000'000.0, .max_position_embeddings = 4096 * 32,
     .legacy_longrope_names = true, .layers = layer_rule::sliding_if_window, .checked = true},
    // GemmaConfig (v5): head_dim 256, max_position_embeddings 8192.
    {.model_type = "gemma", .max_position_embeddings = 8192, .head_dim = 256, .checked = true},
    // Gemma2Config (v5): head_dim 256, 8 heads / 4 kv heads, layers alternate sliding (4096) / full,
    // query_pre_attn_scalar 256, attn_logit_softcapping 50.
    {.model_type = "gemma2", .max_position_embeddings = 8192, .head_dim = 256, .heads = 8, .layers = layer_rule::alternating,
     .kv_heads = 4, .sliding_window = 4096, .query_pre_attn_scalar = true, .attn_logit_softcapping = 50.0, .checked = true},
    {.model_type = "gemma3", .rope_theta = 1'000'000.0, .head_dim = 256, .heads = 8, .local_base_freq = true,
     .layers = layer_rule::gemma3_pattern, .kv_heads = 4, .sliding_window = 4096, .query_pre_attn_scalar = true,
     .checked = true},
    {.model_type = "gemma3_text", .rope_theta = 1'000'000.0, .head_dim = 256, .heads = 8, .local_base_freq = true,
     .layers = layer_rule::gemma3_pattern, .kv_heads = 4, .sliding_window = 4096, .query_pre_attn_scalar = true,
     .checked = true},
    // GPTNeoXConfig: rotary_emb_base default_theta (10000), rotary_pct 0.25.
    {.model_type = "gpt_neox", .theta_key = "rotary_emb_base", .partial_key = "rotary_pct", .partial_rotary_factor = 0.25,
     .checked = true},
    {.model_type = "falcon", .alibi_key = "alibi"},
    {.model_type = "olmo"},
    {.model_type = "olmo2"},
    {.model_type = "stablelm"},
    {.model_type = "granite"},
    {.model_type = "granitemoe"},
    {.model_type = "gpt_oss", .layers = layer_rule::alternating, .sinks = true},
    {.model_type = "nemotron"},
    // SmolLM3Config (v5): default_theta 2e6, max_position_embeddings 32768, 4 kv heads; no_rope_layers
    // (1 = RoPE) else a NoPE layer every no_rope_layer_interval (4); use_sliding_window false.
    {.model_type = "smollm3", .rope_theta = 2'000'000.0, .max_position_embeddings = 32768,
     .layers = layer_rule::smollm3_nope, .kv_heads = 4, .checked = true},
    // Qwen2-VL / Qwen2.5-VL (v5 Qwen2VLTextConfig, Qwen2_5_VLTextConfig): rope_theta 1e6,
    // max_position_embeddings 32768, max_window_layers 80; the outer model_type for legacy flat files.
    {.model_type = "qwen2_vl", .rope_theta = 1'000'000.0, .max_position_embeddings = 32768, .mrope = true,
     .layers = layer_rule::qwen2_window, .sliding_window = 4096, .max_window_layers = 80,
     .checked = true},
    {.model_type = "qwen2_vl_text", .rope_theta = 1'000'000.0, .max_position_embeddings = 32768, .mrope = true,
     .layers = layer_rule::qwen2_window, .sliding_window = 4096, .max_window_layers = 80,
     .checked = true},
    {.model_type = "qwen2_5_vl", .rope_theta = 1'000'000.0, .max_position_embeddings = 32768, .mrope = true,
     .tokens_per_second = 4, .layers = layer_rule::qwen2_window, .sliding_window = 4096, .max_window_layers = 80,
     .checked = true},
    {.model_type = "qwen2_5_vl_text", .rope_theta = 1'000'000.0, .max_position_embeddings = 32768, .mrope = true,
     .tokens_per_second = 4, .layers = layer_rule::qwen2_window, .sliding_window = 4096, .max_window_layers = 80,
     .checked = true},
    // Qwen3-VL (v5 Qwen3VLTextConfig): default_theta 500000, max_position_embeddings 128000, head_dim 128.
    // (v4's Qwen3VLTextConfig defaulted rope_theta to 5e6; released files give it.)
    {.model_type = "qwen3_vl", .rope_theta = 500'000.0, .max_position_embeddings = 128000, .head_dim = 128, .mrope = true,
     .mrope_interleaved = true, .checked = true},
    {.model_type = "qwen3_vl_text", .rope_theta = 500'000.0, .max_position_embeddings = 128000, .head_dim = 128,
     .mrope = true, .mrope_interleaved = true, .checked = true},
    // Interleaved pairs: GPT-J rotate_every_two; Llama-4 view_as_complex; Cohere and GLM x[..., ::2] / x[..., 1::2].
    // GPT-J (GPTJConfig, modeling_gptj): n_embd 4096, n_head 16 (must divide), rotary_dim 64,
    // n_positions 2048; create_sinusoidal_positions hard-codes base 10000 and applies no scaling.
    {.model_type = "gptj", .layout = pairing::interleaved, .max_position_embeddings = 2048, .heads_rule = head_rule::divides,
     .hidden_key = "n_embd", .heads_key = "n_head", .layers_key = "n_layer", .hidden_size = 4096, .heads = 16, .rotary_dim_key = "rotary_dim",
     .rotary_dim = 64, .positions_key = "n_positions", .fixed_rope = true, .checked = true},
    // Llama4TextConfig (v5): default_theta 500000, 8 kv heads.
    {.model_type = "llama4", .layout = pairing::interleaved, .rope_theta = 500'000.0, .layers = layer_rule::llama4_irope,
     .kv_heads = 8, .checked = true},
    {.model_type = "llama4_text", .layout = pairing::interleaved, .rope_theta = 500'000.0,
     .layers = layer_rule::llama4_irope, .kv_heads = 8, .checked = true},
    {.model_type = "cohere", .layout = pairing::interleaved},
    // Cohere2Config: sliding_window 4096; layer_types else every sliding_window_pattern-th (4) layer
    // full. Cohere2Attention rotates only where the layer's window is set: full layers are NoPE.
    {.model_type = "cohere2", .layout = pairing::interleaved, .layers = layer_rule::cohere2_pattern,
     .sliding_window = 4096},
    {.model_type = "glm", .layout = pairing::interleaved},
    {.model_type = "glm4", .layout = pairing::interleaved},
    // DeepSeek: interleaved pairs unless rope_interleave is false; the rotary head is qk_rope_head_dim (64).
    {.model_type = "deepseek_v2", .layout = pairing::rope_interleave, .rope_head_dim_key = "qk_rope_head_dim",
     .rope_head_dim = 64, .yarn_softmax_scale = true},
    {.model_type = "deepseek_v3", .layout = pairing::rope_interleave, .rope_head_dim_key = "qk_rope_head_dim",
     .rope_head_dim = 64, .yarn_softmax_scale = true},
    // No RoPE: read these with posenc/hf/encoding.hpp.
    {.model_type = "bloom", .layout = pairing::none},
    {.model_type = "mpt", .layout = pairing::none},
    {.model_type = "t5", .layout = pairing::none},
    {.model_type = "mt5", .layout = pairing::none},
    {.model_type = "umt5", .layout = pairing::none},
};

/// The entry of `model_type`, or nullptr for a family posenc does not know.
inline const family* find_family(std::string_view model_type) {
    for (const family& f : families)
        if (f.model_type == model_type) return &f;
    return nullptr;
}

}  // namespace posenc::hf::detail
