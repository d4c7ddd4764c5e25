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
// in ONE table (detail::families below): GPT-NeoX rotary_emb_base / rotary_pct, GPT-J n_embd / n_head /
// rotary_dim / n_positions, DeepSeek qk_rope_head_dim, Qwen-VL mrope_section / mrope_interleaved, ….
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

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/core/errors.hpp"
#include "posenc/detail/lifetimebound.hpp"
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
            throw config_error("mrope_section", "list of length " + detail::to_text(mrope_section.size()),
                               "needs 3 entries (t, h, w) for an M-RoPE rotary");
        mrope m{.interleaved = mrope_interleaved};
        for (std::size_t i = 0; i < 3; ++i) {
            if (mrope_section[i] < 0)
                throw config_error("mrope_section", detail::to_text(mrope_section[i]), "entries must be >= 0");
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

namespace detail {

using nlohmann::json;
using posenc::detail::to_text;

/// Appends `s` as a quoted JSON-like string, stopping once `out` reaches `limit` bytes.
inline void append_quoted(std::string& out, std::string_view s, std::size_t limit) {
    out += '"';
    for (const char ch : s) {
        if (out.size() >= limit) return;
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20 || c == 0x7f) {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += ch;
        }
    }
    out += '"';
}

/// Appends a compact rendering of `v`, stopping once `out` reaches `limit` bytes. Each nesting level
/// appends a bracket first, so the recursion is at most `limit` deep whatever the depth of `v`.
inline void append_short(std::string& out, const json& v, std::size_t limit) {
    if (out.size() >= limit) return;
    switch (v.type()) {
        case json::value_t::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it, first = false) {
                if (!first) out += ", ";
                append_quoted(out, it.key(), limit);
                out += ": ";
                append_short(out, it.value(), limit);
            }
            out += '}';
            return;
        }
        case json::value_t::array: {
            out += '[';
            bool first = true;
            for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it, first = false) {
                if (!first) out += ", ";
                append_short(out, *it, limit);
            }
            out += ']';
            return;
        }
        case json::value_t::string: append_quoted(out, v.get_ref<const std::string&>(), limit); return;
        case json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
        case json::value_t::number_integer: out += to_text(v.get<std::int64_t>()); return;
        case json::value_t::number_unsigned: out += to_text(v.get<std::uint64_t>()); return;
        case json::value_t::number_float: out += to_text(v.get<double>()); return;
        case json::value_t::null: out += "null"; return;
        default: out += "<binary>"; return;
    }
}

/// The one way a config value is echoed into a message: at most ~80 characters, escaped (no NUL,
/// newline or control character survives), never a recursive dump() of the whole value.
inline std::string describe(const json& v) {
    constexpr std::size_t limit = 80;
    std::string out;
    append_short(out, v, limit + 1);
    if (out.size() <= limit) return out;
    std::size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
    if (v.is_string()) out += " (string of " + to_text(v.get_ref<const std::string&>().size()) + " bytes)";
    if (v.is_array()) out += " (array of " + to_text(v.size()) + ")";
    if (v.is_object()) out += " (object of " + to_text(v.size()) + " keys)";
    return out;
}

/// A string from the config (model_type, rope_type, a layer type) as describe() echoes it.
inline std::string echo_string(std::string_view s) { return describe(json(std::string(s))); }

/// Reads typed values out of one JSON object, naming keys as "prefix.key" in errors.
class reader {
public:
    reader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

    [[nodiscard]] std::string name(std::string_view key) const {
        return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
    }
    /// Present and not null (HF treats null as "not set").
    [[nodiscard]] bool has(std::string_view key) const {
        if (!obj_.is_object()) return false;
        const auto it = obj_.find(key);
        return it != obj_.end() && !it->is_null();
    }
    [[nodiscard]] const json& at(std::string_view key) const {
        if (!has(key)) throw config_error(name(key), "missing", "this key is required here");
        return *obj_.find(key);
    }

    /// A finite number (JSON integers included).
    [[nodiscard]] double number(std::string_view key) const {
        const json& v = at(key);
        if (!v.is_number()) throw config_error(name(key), describe(v), "must be a number");
        const double d = v.get<double>();
        if (!std::isfinite(d)) throw config_error(name(key), describe(v), "must be a finite number");
        return d;
    }
    [[nodiscard]] double number(std::string_view key, double fallback) const { return has(key) ? number(key) : fallback; }
    [[nodiscard]] std::optional<double> optional_number(std::string_view key) const {
        return has(key) ? std::optional<double>(number(key)) : std::nullopt;
    }

    /// The one integer reader: an integer (or an integral float) in [lo, hi]. Unsigned values beyond
    /// int64 and floats beyond the range are errors, never wrapped or rounded into range.
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t lo, std::int64_t hi) const {
        const json& v = at(key);
        auto out_of_range = [&] {
            return config_error(name(key), describe(v),
                                "must be an integer in [" + to_text(lo) + ", " + to_text(hi) + "]");
        };
        if (v.is_number_unsigned()) {
            const std::uint64_t u = v.get<std::uint64_t>();
            if (hi < 0 || u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo) throw out_of_range();
            return static_cast<std::int64_t>(u);
        }
        if (v.is_number_integer()) {
            const std::int64_t i = v.get<std::int64_t>();
            if (i < lo || i > hi) throw out_of_range();
            return i;
        }
        if (v.is_number_float()) {
            const double d = v.get<double>();
            // [lo, hi] is inside ±2^53 for every key posenc reads, so the comparison is exact.
            if (!(std::trunc(d) == d && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) throw out_of_range();
            return static_cast<std::int64_t>(d);
        }
        throw out_of_range();
    }
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const {
        return has(key) ? integer(key, lo, hi) : fallback;
    }

    [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
        if (!has(key)) return fallback;
        const json& v = at(key);
        if (!v.is_boolean()) throw config_error(name(key), describe(v), "must be true or false");
        return v.get<bool>();
    }

    [[nodiscard]] std::string string(std::string_view key, std::string fallback) const {
        if (!has(key)) return fallback;
        const json& v = at(key);
        if (!v.is_string()) throw config_error(name(key), describe(v), "must be a string");
        return v.get<std::string>();
    }

    /// A list of finite numbers, at most `max_size` long.
    [[nodiscard]] std::vector<double> numbers(std::string_view key, std::size_t max_size) const {
        const json& v = at(key);
        if (!v.is_array()) throw config_error(name(key), describe(v), "must be a list of numbers");
        if (v.size() > max_size)
            throw config_error(name(key), describe(v), "has more than " + to_text(max_size) + " entries");
        std::vector<double> out;
        out.reserve(v.size());
        for (const json& x : v) {
            if (!x.is_number() || !std::isfinite(x.get<double>()))
                throw config_error(name(key), describe(x), "must contain only finite numbers");
            out.push_back(x.get<double>());
        }
        return out;
    }

    void allow_only(const std::set<std::string, std::less<>>& keys, std::string_view rope_type) const {
        for (const auto& [k, v] : obj_.items())
            if (!keys.contains(k))
                throw config_error(name(k), describe(v),
                                   "unknown key for rope_type " + echo_string(rope_type) + " (posenc ignores nothing)");
    }

    [[nodiscard]] const json& object() const noexcept { return obj_; }

private:
    const json& obj_;
    std::string prefix_;
};

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
    {.model_type = "mistral", .max_position_embeddings = 4096 * 32, .layers = layer_rule::sliding_if_window, .kv_heads = 8,
     .sliding_window = 4096, .checked = true},
    // MixtralConfig (v5): default_theta 1e6, 8 kv heads, sliding_window None.
    {.model_type = "mixtral", .rope_theta = 1'000'000.0, .max_position_embeddings = 4096 * 32,
     .layers = layer_rule::sliding_if_window, .kv_heads = 8, .checked = true},
    {.model_type = "ministral", .layers = layer_rule::sliding_if_window},
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
    {.model_type = "qwen3_moe", .max_position_embeddings = 32768, .layers = layer_rule::qwen2_window, .kv_heads = 4,
     .sliding_window = 4096, .max_window_layers = 28, .checked = true},
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

/// The entry a config is read with: its family's, or (with an explicit layout) the generic one.
inline family family_of(const std::string& model_type, const reader& top, std::optional<rope_layout> layout) {
    const family* known = find_family(model_type);
    if (!known && !layout)
        throw config_error(top.name("model_type"), echo_string(model_type),
                           "posenc does not know which lanes this family pairs; pass the layout explicitly "
                           "(parse_config(config, layout), posenc-inspect --layout)");
    family f = known ? *known : family{};
    if (f.layout == pairing::none || (!f.alibi_key.empty() && top.boolean(f.alibi_key, false)))
        throw config_error("model_type", echo_string(model_type),
                           "uses no RoPE (ALiBi or T5 buckets): read it with posenc/hf/encoding.hpp");
    return f;
}

/// The rotary layout of entry `f` in this config; `layout` overrides it.
inline rope_layout layout_of(const family& f, const reader& top, std::optional<rope_layout> layout) {
    if (layout) return *layout;
    switch (f.layout) {
        case pairing::interleaved: return rope_layout::interleaved;
        case pairing::rope_interleave:
            // HF's DeepSeek applies rope to interleaved pairs (rope_interleave, default true), as the
            // original code's q_pe permutation does.
            return top.boolean("rope_interleave", true) ? rope_layout::interleaved : rope_layout::half_split;
        default: return rope_layout::half_split;
    }
}

/// head_dim and the key it was read from (for errors about it).
struct head_size {
    std::int64_t value = 0;
    std::string key;
};

inline head_size head_dim_of(const reader& top, const family& fam) {
    if (!fam.rope_head_dim_key.empty())
        return {top.integer(fam.rope_head_dim_key, 1, limits::head_dim, fam.rope_head_dim), top.name(fam.rope_head_dim_key)};
    // GPT-J has no head_dim key (n_embd / n_head); every other family lets head_dim win.
    if (fam.rotary_dim_key.empty()) {
        if (top.has("head_dim")) return {top.integer("head_dim", 1, limits::head_dim), top.name("head_dim")};
        if (fam.head_dim) return {fam.head_dim, top.name("head_dim")};
    }
    const std::int64_t hidden = fam.hidden_size ? top.integer(fam.hidden_key, 1, limits::hidden_size, fam.hidden_size)
                                                : top.integer(fam.hidden_key, 1, limits::hidden_size);
    const std::int64_t heads = fam.heads ? top.integer(fam.heads_key, 1, limits::heads, fam.heads)
                                         : top.integer(fam.heads_key, 1, limits::heads);
    if (fam.heads_rule == head_rule::divides && hidden % heads != 0)
        throw config_error(top.name(fam.hidden_key), to_text(hidden),
                           "is not a multiple of " + std::string(fam.heads_key) + " = " + to_text(heads));
    // HF floors (hidden_size // num_attention_heads); a head count above hidden_size leaves no lanes.
    if (hidden / heads < 1)
        throw config_error(top.name(fam.hidden_key), to_text(hidden),
                           "gives head_dim 0 (" + std::string(fam.heads_key) + " = " + to_text(heads) + ")");
    if (hidden / heads > limits::head_dim)
        throw config_error(top.name(fam.hidden_key), to_text(hidden),
                           "gives head_dim " + to_text(hidden / heads) + " > " + to_text(limits::head_dim));
    return {hidden / heads, top.name(fam.hidden_key)};
}

/// The context the rope dict is read in: everything outside it that its schedule may need, and the
/// key each value was read from, so that an error names the key as written in the file.
struct rope_context {
    family fam;
    std::int64_t head_dim = 0;
    std::string head_dim_key = "head_dim";
    double rope_theta = 10000.0;                  ///< top-level (or family default)
    std::string rope_theta_key = "rope_theta";    ///< where rope_theta came from, for errors
    bool rope_theta_known = true;                 ///< false: absent and the family's default unchecked
    double partial_rotary_factor = 1.0;           ///< top-level (or family rule)
    std::string partial_key = "partial_rotary_factor";  ///< GPT-NeoX: rotary_pct
    std::int64_t max_position_embeddings = 0;     ///< 0 when absent and the family has no default
    std::string max_positions_key = "max_position_embeddings";
    std::optional<std::int64_t> top_level_original;  ///< top-level original_max_position_embeddings
    std::string top_level_original_key = "original_max_position_embeddings";
    rope_layout layout = rope_layout::half_split;
    std::int64_t gptj_rotary_dim = 0;             ///< GPT-J's rotary_dim, when set
    std::string rotary_dim_key = "rotary_dim";
};

inline std::int64_t require_max_positions(const rope_context& ctx, const std::string& for_key) {
    if (ctx.max_position_embeddings <= 0)
        throw config_error(for_key, "missing", "needed, and " + ctx.max_positions_key + " is absent too");
    return ctx.max_position_embeddings;
}

/// Qwen-VL's M-RoPE split (HF: the "default" inv_freq, with the pairs split into sections that take
/// their angle from the t, h and w position components): mrope_section [t, h, w] must be three
/// integers >= 0 summing to rotary_dim / 2; Qwen3-VL interleaves (cycles t, h, w across pairs).
inline void read_mrope(const reader& r, rope_spec& spec, const family& fam) {
    const auto pairs = static_cast<std::int64_t>(spec.dims.rotary() / 2);
    const std::string key = r.name("mrope_section");
    std::vector<std::int64_t> section;
    if (!r.has("mrope_section")) {
        if (!fam.mrope_interleaved) {
            if (r.has("mrope_interleaved"))
                throw config_error(r.name("mrope_interleaved"), describe(r.at("mrope_interleaved")), "needs mrope_section");
            return;
        }
        section = {24, 20, 20};  // Qwen3VLTextRotaryEmbedding's default
        if (pairs != 64)
            throw config_error(key, "missing", "HF's default [24, 20, 20] needs rotary_dim / 2 = 64, not " + to_text(pairs));
    } else {
        const json& v = r.at("mrope_section");
        if (!v.is_array() || v.size() != 3)
            throw config_error(key, describe(v), "must be a list of 3 integers (t, h, w pairs)");
        std::int64_t sum = 0;
        for (const json& x : v) {
            const bool integral = x.is_number_integer() || x.is_number_unsigned() ||
                                  (x.is_number_float() && std::trunc(x.get<double>()) == x.get<double>());
            if (!integral || !(x.get<double>() >= 0.0) || x.get<double>() > static_cast<double>(limits::head_dim))
                throw config_error(key, describe(v), "must hold integers in [0, " + to_text(limits::head_dim) + "]");
            section.push_back(static_cast<std::int64_t>(x.get<double>()));
            sum += section.back();
        }
        if (sum != pairs)
            throw config_error(key, describe(v),
                               "must sum to rotary_dim / 2 = " + to_text(pairs) + " (sums to " + to_text(sum) + ")");
    }
    // HF decides the interleave by model, not by this key: a value that disagrees would describe
    // another model than the one HF runs.
    if (r.boolean("mrope_interleaved", fam.mrope_interleaved) != fam.mrope_interleaved)
        throw config_error(r.name("mrope_interleaved"), describe(r.at("mrope_interleaved")),
                           fam.mrope_interleaved ? "HF's Qwen3-VL always interleaves the M-RoPE sections"
                                                 : "HF's Qwen2-VL / Qwen2.5-VL never interleave the M-RoPE sections");
    spec.mrope_section = std::move(section);
    spec.mrope_interleaved = fam.mrope_interleaved;
}

inline rope_spec read_rope(const json& dict, const std::string& prefix, const rope_context& ctx) {
    const reader r(dict, prefix);
    if (!dict.is_object()) throw config_error(prefix, describe(dict), "must be an object");
    // rope_type (v5, v4) or type (older v4); both may be present and then must agree.
    std::string type = r.string("rope_type", r.string("type", "default"));
    if (r.has("type") && r.has("rope_type") && r.string("type", "") != type)
        throw config_error(r.name("type"), describe(r.at("type")), "disagrees with rope_type " + echo_string(type));
    if (ctx.fam.legacy_longrope_names && (type == "su" || type == "yarn"))
        type = "longrope";  // HF's Phi3Config renames these legacy names
    if (ctx.fam.mrope && type == "mrope") type = "default";  // HF's Qwen2-VL configs rename it

    const double base = r.number("rope_theta", ctx.rope_theta);
    const double partial = r.number("partial_rotary_factor", ctx.partial_rotary_factor);
    const std::string partial_key = r.has("partial_rotary_factor") ? r.name("partial_rotary_factor") : ctx.partial_key;
    // The key a bad rotary width is reported under: GPT-J's rotary_dim, else what it was derived from.
    const std::string rotary_key = ctx.gptj_rotary_dim ? ctx.rotary_dim_key
                                   : partial != 1.0    ? partial_key
                                                       : ctx.head_dim_key;
    rope_spec spec;
    spec.layout = ctx.layout;
    try {
        spec.dims = ctx.gptj_rotary_dim
                        ? rope_dims{static_cast<std::size_t>(ctx.head_dim), static_cast<std::size_t>(ctx.gptj_rotary_dim)}
                        : rope_dims::partial(static_cast<std::size_t>(ctx.head_dim), partial);
        spec.dims.validate();
    } catch (const config_error& e) {
        if (e.key() == "partial_rotary_factor") throw config_error(partial_key, e.value(), e.why());
        if (e.key() == "head_dim") throw config_error(ctx.head_dim_key, e.value(), e.why());
        if (ctx.gptj_rotary_dim) throw config_error(rotary_key, e.value(), e.why());
        throw config_error(rotary_key, to_text(rotary_key == partial_key ? partial : static_cast<double>(ctx.head_dim)),
                           "gives rotary_dim = " + e.value() + ", which " + e.why());
    }

    if (!ctx.rope_theta_known && !r.has("rope_theta"))
        throw config_error(ctx.rope_theta_key, "missing",
                           "posenc has not checked " + std::string(ctx.fam.model_type) +
                               "'s HF default; give rope_theta");
    std::set<std::string, std::less<>> keys{"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    // Qwen-VL: HF's config classes ignore mrope_section / mrope_interleaved in the validation of every
    // rope_type (ignore_keys_at_rope_validation), so they may come with any schedule (Qwen3-VL: yarn).
    if (ctx.fam.mrope) keys.insert({"mrope_section", "mrope_interleaved"});
    auto allow = [&](std::initializer_list<const char*> more) {
        keys.insert(more.begin(), more.end());
        r.allow_only(keys, type);
    };
    // original_max_position_embeddings: Phi-3's top-level value wins (as in HF v5), then the dict's,
    // then max_position_embeddings. `original_key` remembers which, for errors.
    std::string original_key = ctx.max_positions_key;
    auto original = [&] {
        if (ctx.top_level_original) {
            original_key = ctx.top_level_original_key;
            return *ctx.top_level_original;
        }
        if (r.has("original_max_position_embeddings")) {
            original_key = r.name("original_max_position_embeddings");
            return r.integer("original_max_position_embeddings", 1, limits::positions);
        }
        return require_max_positions(ctx, r.name("original_max_position_embeddings"));
    };
    // A factor the config omits is derived as max_position_embeddings / original.
    auto derived_factor = [&](std::int64_t orig) {
        return static_cast<double>(require_max_positions(ctx, r.name("factor"))) / static_cast<double>(orig);
    };

    if (type == "default") {
        allow({"factor"});
        if (r.has("factor") && r.number("factor") != 1.0)
            throw config_error(r.name("factor"), describe(r.at("factor")), "a default rope applies no factor; did you mean linear?");
        spec.schedule = default_rope{.base = base};
    } else if (type == "linear") {
        allow({"factor"});
        spec.schedule = linear{.base = base, .factor = r.number("factor")};
    } else if (type == "dynamic") {
        // HF accepts original_max_position_embeddings here but computes with max_position_embeddings;
        // so does posenc.
        allow({"factor", "original_max_position_embeddings"});
        if (r.has("original_max_position_embeddings")) (void)r.integer("original_max_position_embeddings", 1, limits::positions);
        spec.schedule = dynamic_ntk{.base = base, .factor = r.number("factor"),
                                    .original_max_position = require_max_positions(ctx, ctx.max_positions_key)};
    } else if (type == "yarn") {
        allow({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
               "mscale_all_dim", "truncate"});
        yarn y{.base = base, .original_max_position = original()};
        y.factor = r.has("factor") ? r.number("factor") : derived_factor(y.original_max_position);
        // HF: `beta_fast or 32` — 0 and null mean the default.
        y.beta_fast = r.number("beta_fast", 0.0) != 0.0 ? r.number("beta_fast") : 32.0;
        y.beta_slow = r.number("beta_slow", 0.0) != 0.0 ? r.number("beta_slow") : 1.0;
        y.truncate = r.boolean("truncate", true);
        y.attention_factor = r.optional_number("attention_factor");
        y.mscale = r.optional_number("mscale");
        y.mscale_all_dim = r.optional_number("mscale_all_dim");
        spec.schedule = y;
    } else if (type == "longrope") {
        allow({"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"});
        const auto max_list = static_cast<std::size_t>(limits::head_dim / 2);
        longrope l{.base = base, .short_factor = r.numbers("short_factor", max_list),
                   .long_factor = r.numbers("long_factor", max_list), .original_max_position = original()};
        l.factor = r.has("factor") ? r.number("factor") : derived_factor(l.original_max_position);
        l.attention_factor = r.optional_number("attention_factor");
        spec.schedule = l;
    } else if (type == "llama3") {
        allow({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
        spec.schedule = llama3{.base = base, .factor = r.number("factor"),
                               .low_freq_factor = r.number("low_freq_factor"),
                               .high_freq_factor = r.number("high_freq_factor"),
                               .original_max_position = original()};
    } else {
        throw config_error(r.name(r.has("rope_type") ? "rope_type" : "type"), echo_string(type),
                           "unknown rope_type (supported: default, linear, dynamic, yarn, longrope, llama3)");
    }
    if (ctx.fam.mrope) read_mrope(r, spec, ctx.fam);
    // Validate now, so that a bad value is reported while reading the config, under its key in the
    // file. Every schedule checks its outputs (finite, usable inverse frequencies and amplitude), so
    // this also rejects values that are valid alone but overflow together.
    try {
        (void)posenc::frequencies(spec.schedule, spec.dims.rotary(), 0);
        (void)spec.softmax_scale_multiplier();
    } catch (const config_error& e) {
        const std::string& k = e.key();
        if (k == "base" && !r.has("rope_theta")) throw config_error(ctx.rope_theta_key, e.value(), e.why());
        // YaRN's amplitude mscale(s, mscale) / mscale(s, mscale_all_dim) fails under "mscale"; when the
        // denominator alone is unusable, mscale_all_dim is the key whose value is wrong.
        if (const auto* y = std::get_if<yarn>(&spec.schedule); y && k == "mscale" && y->mscale_all_dim) {
            const double den = posenc::detail::yarn_mscale(y->factor, *y->mscale_all_dim);
            if (!(den >= 0x1p-64 && den <= 0x1p64))
                throw config_error(r.name("mscale_all_dim"), to_text(*y->mscale_all_dim),
                                   "gives the YaRN amplitude denominator " + to_text(den) +
                                       " (0.1 * mscale_all_dim * ln factor + 1; must lie in [2^-64, 2^64])");
        }
        if (k == "original_max_position") throw config_error(original_key, e.value(), e.why());
        if (k == "rotary_dim") throw config_error(rotary_key, e.value(), e.why());
        throw config_error(r.name(k == "base" ? "rope_theta" : k), e.value(), e.why());
    }
    return spec;
}

/// vision_tokens of a Qwen-VL config: the token ids at the top level (else in text_config), the
/// vision settings in the top-level vision_config.
inline vision_tokens read_vision_tokens(const reader& outer, const reader& text, const family& fam) {
    vision_tokens v;
    auto id = [&](const char* k, std::int64_t fallback) {
        constexpr std::int64_t max_id = std::int64_t{1} << 31;
        if (outer.has(k)) return outer.integer(k, 0, max_id);
        return text.integer(k, 0, max_id, fallback);
    };
    v.image_token_id = id("image_token_id", v.image_token_id);
    v.video_token_id = id("video_token_id", v.video_token_id);
    v.vision_start_token_id = id("vision_start_token_id", v.vision_start_token_id);
    static const json empty = json::object();
    const json& vc = outer.has("vision_config") ? outer.at("vision_config") : empty;
    if (!vc.is_object()) throw config_error("vision_config", describe(vc), "must be an object");
    const reader vision(vc, "vision_config");
    v.spatial_merge_size = vision.integer("spatial_merge_size", 1, limits::head_dim, v.spatial_merge_size);
    if (fam.tokens_per_second > 0) {
        const double t = vision.number("tokens_per_second", fam.tokens_per_second);
        if (!(t > 0.0)) throw config_error(vision.name("tokens_per_second"), to_text(t), "must be > 0");
        v.tokens_per_second = t;
    }
    return v;
}

/// A rope dict per layer type (v5 Gemma-3: {"full_attention": {…}, "sliding_attention": {…}}). One
/// object value makes it so (a single rope dict holds no objects); read_rope then names any entry
/// that is not an object, rather than the single-dict reader calling the well-formed entries unknown.
inline bool is_per_layer_type(const json& dict) {
    if (!dict.is_object()) return false;
    for (const auto& [k, v] : dict.items())
        if (v.is_object()) return true;
    return false;
}

}  // namespace detail

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
    // A per-layer key the family's rule does not read would leave its layers on a silent default.
    const bool known_family = detail::find_family(out.model_type) != nullptr;
    for (const std::string_view k : detail::per_layer_keys)
        if (top.has(k) && !detail::reads_layer_key(fam.layers, known_family, k))
            throw config_error(top.name(k), detail::describe(top.at(k)),
                               "is a per-layer key posenc does not read for model_type " +
                                   detail::echo_string(out.model_type) +
                                   " (its rule there is not implemented; nothing is ignored)");
    if (fam.layers == detail::layer_rule::smollm3_nope && top.has("max_window_layers"))
        out.notes.push_back(top.name("max_window_layers") +
                            " ignored: HF's smollm3 derives its sliding layers from no_rope_layers");

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

    if (top.has("layer_types")) {
        const nlohmann::json& list = top.at("layer_types");
        if (!list.is_array()) throw config_error(top.name("layer_types"), detail::describe(list), "must be a list of strings");
        if (list.size() > static_cast<std::size_t>(limits::layers))
            throw config_error(top.name("layer_types"), detail::describe(list),
                               "has more than " + detail::to_text(limits::layers) + " entries");
        for (const auto& t : list) {
            if (!t.is_string()) throw config_error(top.name("layer_types"), detail::describe(t), "must be a list of strings");
            out.layer_types.push_back(t.get<std::string>());
        }
    } else if ((fam.layers == detail::layer_rule::gemma3_pattern || fam.layers == detail::layer_rule::cohere2_pattern) &&
               top.has("num_hidden_layers")) {
        // Gemma3TextConfig / Cohere2Config: layer i is full iff (i + 1) % sliding_window_pattern == 0.
        const std::int64_t pattern = top.integer("sliding_window_pattern", 1, limits::layers,
                                                 fam.layers == detail::layer_rule::gemma3_pattern ? 6 : 4);
        const std::int64_t layers = top.integer("num_hidden_layers", 1, limits::layers);
        for (std::int64_t i = 0; i < layers; ++i)
            out.layer_types.emplace_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
    }
    for (const auto& t : out.layer_types)
        if (!out.rope_by_layer_type.empty() && !out.rope_by_layer_type.contains(t))
            throw config_error(top.name("layer_types"), detail::echo_string(t), "has no entry in " + top.name(key));
    return out;
}

namespace detail {

/// Thrown by the parser callback when the nesting limit is reached (turned into a config_error).
struct too_deep {};

/// Parses config text with the nesting limit, turning every nlohmann exception into a config_error
/// that names `source` and, where known, the key being read.
inline json parse_json(std::string_view text, const std::string& source) {
    if (text.size() > limits::file_bytes)
        throw config_error("config", source, "is larger than the " + to_text(limits::file_bytes >> 20) + " MiB limit");
    std::vector<std::string> path;  // per open container, the key being read ("" inside an array)
    auto where = [&] {
        std::string k;
        for (const auto& p : path)
            if (!p.empty()) k += (k.empty() ? "" : ".") + p;
        return k;
    };
    const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
            if (depth >= limits::depth) throw too_deep{};
            path.resize(static_cast<std::size_t>(depth));
            path.emplace_back();
        } else if (event == json::parse_event_t::key && depth >= 1) {
            path.resize(static_cast<std::size_t>(depth));
            path.back() = parsed.get_ref<const std::string&>();
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), limit_depth);
    } catch (const too_deep&) {
        const std::string k = where();
        throw config_error("config", source,
                           "nests arrays/objects deeper than " + to_text(limits::depth) + " levels" +
                               (k.empty() ? "" : " (inside " + k + ")"));
    } catch (const json::out_of_range& e) {
        // 406: a number beyond double's range. nlohmann quotes the literal: "... parsing '1e400'".
        const std::string what = e.what();
        const auto open = what.find('\''), close = what.rfind('\'');
        const std::string literal = open < close ? what.substr(open + 1, close - open - 1) : "number";
        const std::string k = where();
        throw config_error(k.empty() ? "config" : k, literal, "is out of the range of a double (in " + source + ")");
    } catch (const json::exception& e) {
        const std::string k = where();
        throw config_error("config", source,
                           "is not valid JSON: " + std::string(e.what()) + (k.empty() ? "" : " (inside " + k + ")"));
    }
}

/// The bytes of a config file: a regular file (not a directory, device or FIFO, which could block or
/// never end) of at most limits::file_bytes.
inline std::string read_file(const std::filesystem::path& path) {
    const std::string name = path.string();
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st)) throw config_error("config", name, "cannot be opened: no such file");
    if (std::filesystem::is_directory(st)) throw config_error("config", name, "is a directory, not a config file");
    if (!std::filesystem::is_regular_file(st)) throw config_error("config", name, "is not a regular file");
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) throw config_error("config", name, "cannot be read: " + ec.message());
    if (size > limits::file_bytes)
        throw config_error("config", name, "is larger than the " + to_text(limits::file_bytes >> 20) + " MiB limit");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw config_error("config", name, "cannot be opened (permissions?)");
    std::string text(static_cast<std::size_t>(size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(size));
    if (in.bad() || in.gcount() != static_cast<std::streamsize>(size)) throw config_error("config", name, "cannot be read");
    return text;
}

inline json read_json(const std::filesystem::path& path) { return parse_json(read_file(path), path.string()); }

}  // namespace detail

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
