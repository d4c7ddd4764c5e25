#pragma once
// Reading the RoPE a model uses from its HuggingFace config.json (needs nlohmann-json; link
// posenc::hf). Families: Llama, Mistral/Mixtral, Qwen2/Qwen3, Phi-3, DeepSeek-V2/V3, GPT-NeoX, GPT-J,
// Gemma-3, and any config that follows HF's generic keys.
//
//   auto cfg = posenc::hf::load_config("config.json");
//   posenc::any_rotary rope = cfg.rope.make_rotary(/*seq_len=*/prompt_length);
//   rope.apply(q, k, positions);
//
// Keys read: rope_theta (GPT-NeoX: rotary_emb_base), head_dim (else hidden_size/num_attention_heads;
// DeepSeek: qk_rope_head_dim; GPT-J: n_embd/n_head), partial_rotary_factor (GPT-NeoX: rotary_pct,
// GPT-J: rotary_dim), max_position_embeddings (GPT-J: n_positions), top-level
// original_max_position_embeddings (Phi-3), rope_scaling (transformers v4) or rope_parameters (v5,
// also as one dict per layer type), with rope_type (legacy: type) and every key of each type.
// Multimodal configs are read from their text_config. A key that is absent takes the default of the
// family's HF config class.
//
// Strictness: an unknown rope_type, an unknown key inside the rope dict, a missing required key or a
// value of the wrong type throws config_error naming the key (e.g. "rope_scaling.factor") — nothing
// is silently ignored.
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
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/core/errors.hpp"
#include "posenc/rope/any_rotary.hpp"
#include "posenc/rope/any_schedule.hpp"
#include "posenc/rope/layout.hpp"

namespace posenc::hf {

/// The RoPE of one kind of layer: dimensions, schedule and layout.
struct rope_spec {
    rope_dims dims{};
    any_schedule schedule = default_rope{};
    rope_layout layout = rope_layout::half_split;

    [[nodiscard]] std::string_view rope_type() const { return posenc::rope_type(schedule); }

    /// A ready rotary; `seq_len` selects dynamic_ntk's base and longrope's factors (0 = not known).
    [[nodiscard]] any_rotary make_rotary(std::int64_t seq_len = 0) const { return {layout, dims, schedule, seq_len}; }

    /// Multiplier of the softmax scale 1/√d that DeepSeek applies outside the rope code (YaRN's
    /// mscale(s, mscale_all_dim)²); 1 for every other schedule.
    [[nodiscard]] double softmax_scale_multiplier() const {
        if (const auto* y = std::get_if<yarn>(&schedule)) return y->softmax_scale_multiplier();
        return 1.0;
    }
};

struct model_config {
    std::string model_type;                    ///< "" when the config names none
    std::int64_t max_position_embeddings = 0;  ///< 0 when the config has none
    rope_spec rope;                            ///< full-attention layers (all layers of most models)
    std::map<std::string, rope_spec, std::less<>> rope_by_layer_type;  ///< Gemma-3: full/sliding_attention
    std::vector<std::string> layer_types;      ///< per layer, when the config says

    /// The RoPE of layers of `layer_type` ("full_attention", "sliding_attention", …).
    [[nodiscard]] const rope_spec& rope_for(std::string_view layer_type) const {
        if (const auto it = rope_by_layer_type.find(layer_type); it != rope_by_layer_type.end()) return it->second;
        const bool listed = std::find(layer_types.begin(), layer_types.end(), layer_type) != layer_types.end();
        if (rope_by_layer_type.empty() && (listed || (layer_types.empty() && layer_type == "full_attention")))
            return rope;
        throw config_error("layer_type", std::string(layer_type), "this config has no layers of that type");
    }
};

namespace detail {

using nlohmann::json;

/// Reads typed values out of one JSON object, naming keys as "prefix.key" in errors.
class reader {
public:
    reader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

    [[nodiscard]] std::string name(std::string_view key) const {
        return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
    }
    /// Present and not null (HF treats null as "not set").
    [[nodiscard]] bool has(std::string_view key) const {
        const auto it = obj_.find(key);
        return it != obj_.end() && !it->is_null();
    }
    [[nodiscard]] const json& at(std::string_view key) const {
        if (!has(key)) throw config_error(name(key), "missing", "this key is required here");
        return *obj_.find(key);
    }

    [[nodiscard]] double number(std::string_view key) const {
        const json& v = at(key);
        if (!v.is_number()) throw config_error(name(key), v.dump(), "must be a number");
        return v.get<double>();
    }
    [[nodiscard]] double number(std::string_view key, double fallback) const { return has(key) ? number(key) : fallback; }
    [[nodiscard]] std::optional<double> optional_number(std::string_view key) const {
        return has(key) ? std::optional<double>(number(key)) : std::nullopt;
    }

    [[nodiscard]] std::int64_t integer(std::string_view key) const {
        const json& v = at(key);
        if (v.is_number_integer()) return v.get<std::int64_t>();
        if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e15)
            return static_cast<std::int64_t>(v.get<double>());
        throw config_error(name(key), v.dump(), "must be an integer");
    }
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t fallback) const {
        return has(key) ? integer(key) : fallback;
    }

    /// A count or size (head_dim, heads, …): an integer > 0.
    [[nodiscard]] std::int64_t positive(std::string_view key, std::int64_t fallback) const {
        const std::int64_t v = integer(key, fallback);
        if (v <= 0) throw config_error(name(key), std::to_string(v), "must be > 0");
        return v;
    }
    [[nodiscard]] std::int64_t positive(std::string_view key) const {
        if (!has(key)) throw config_error(name(key), "missing", "this key is required here");
        return positive(key, 0);
    }

    [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
        if (!has(key)) return fallback;
        const json& v = at(key);
        if (!v.is_boolean()) throw config_error(name(key), v.dump(), "must be true or false");
        return v.get<bool>();
    }

    [[nodiscard]] std::string string(std::string_view key, std::string fallback) const {
        if (!has(key)) return fallback;
        const json& v = at(key);
        if (!v.is_string()) throw config_error(name(key), v.dump(), "must be a string");
        return v.get<std::string>();
    }

    [[nodiscard]] std::vector<double> numbers(std::string_view key) const {
        const json& v = at(key);
        if (!v.is_array()) throw config_error(name(key), v.dump(), "must be a list of numbers");
        std::vector<double> out;
        for (const json& x : v) {
            if (!x.is_number()) throw config_error(name(key), x.dump(), "must contain only numbers");
            out.push_back(x.get<double>());
        }
        return out;
    }

    void allow_only(const std::set<std::string, std::less<>>& keys, std::string_view rope_type) const {
        for (const auto& [k, v] : obj_.items())
            if (!keys.contains(k))
                throw config_error(name(k), v.dump(),
                                   "unknown key for rope_type \"" + std::string(rope_type) + "\" (posenc ignores nothing)");
    }

    [[nodiscard]] const json& object() const noexcept { return obj_; }

private:
    const json& obj_;
    std::string prefix_;
};

/// What a family's HF config class assumes when a key is absent.
struct family {
    double rope_theta = 10000.0;        ///< HF's default_theta
    rope_layout layout = rope_layout::half_split;
    std::int64_t default_head_dim = 0;  ///< 0: hidden_size / num_attention_heads
};

/// Families whose HF modeling code rotates half-split pairs (rotate_half) or interleaved pairs.
inline const std::set<std::string, std::less<>>& half_split_families() {
    static const std::set<std::string, std::less<>> f{
        "llama",   "mistral",   "mixtral", "ministral", "qwen2",  "qwen2_moe", "qwen3",     "qwen3_moe", "phi",
        "phi3",    "phimoe",    "gemma",   "gemma2",    "gemma3", "gemma3_text", "gpt_neox", "falcon",   "starcoder2",
        "olmo",    "olmo2",     "stablelm", "granite",  "granitemoe", "gpt_oss", "nemotron", "smollm3"};
    return f;
}
inline const std::set<std::string, std::less<>>& interleaved_families() {
    // GPT-J rotate_every_two; Llama-4 view_as_complex; Cohere and GLM rotate x[..., ::2] against x[..., 1::2].
    static const std::set<std::string, std::less<>> f{"gptj", "llama4", "llama4_text", "cohere", "cohere2", "glm", "glm4"};
    return f;
}

inline family family_of(const std::string& model_type, const reader& top, std::optional<rope_layout> layout) {
    family f;
    if (model_type == "deepseek_v2" || model_type == "deepseek_v3") {
        // HF's DeepSeek applies rope to interleaved pairs (rope_interleave, default true), as the
        // original code's q_pe permutation does.
        f.layout = top.boolean("rope_interleave", true) ? rope_layout::interleaved : rope_layout::half_split;
    } else if (interleaved_families().contains(model_type)) {
        f.layout = rope_layout::interleaved;
    } else if (!half_split_families().contains(model_type) && !layout) {
        throw config_error("model_type", "\"" + model_type + "\"",
                           "posenc does not know which lanes this family pairs; pass the layout explicitly "
                           "(parse_config(config, layout), posenc-inspect --layout)");
    }
    if (layout) f.layout = *layout;
    if (model_type == "gemma3_text" || model_type == "gemma3") {
        f.rope_theta = 1'000'000.0;
        f.default_head_dim = 256;
    }
    return f;
}

inline std::int64_t head_dim_of(const std::string& model_type, const reader& top, const family& fam) {
    if (model_type == "deepseek_v2" || model_type == "deepseek_v3") return top.positive("qk_rope_head_dim", 64);
    if (model_type == "gptj") {
        const std::int64_t heads = top.positive("n_head", 16);
        const std::int64_t embd = top.positive("n_embd", 4096);
        if (embd % heads != 0)
            throw config_error(top.name("n_embd"), std::to_string(embd), "is not a multiple of n_head = " + std::to_string(heads));
        return embd / heads;
    }
    if (top.has("head_dim")) return top.positive("head_dim");
    if (fam.default_head_dim) return fam.default_head_dim;
    const std::int64_t hidden = top.positive("hidden_size");
    const std::int64_t heads = top.positive("num_attention_heads");
    if (hidden % heads != 0)
        throw config_error(top.name("hidden_size"), std::to_string(hidden),
                           "is not a multiple of num_attention_heads = " + std::to_string(heads));
    return hidden / heads;
}

/// The context the rope dict is read in: everything outside it that its schedule may need.
struct rope_context {
    std::string model_type;
    std::int64_t head_dim = 0;
    double rope_theta = 10000.0;                  ///< top-level (or family default)
    std::string rope_theta_key = "rope_theta";    ///< where rope_theta came from, for errors
    double partial_rotary_factor = 1.0;           ///< top-level (or family rule)
    std::int64_t max_position_embeddings = 0;     ///< 0 when absent
    std::optional<std::int64_t> top_level_original;  ///< Phi-3's top-level original_max_position_embeddings
    rope_layout layout = rope_layout::half_split;
    std::int64_t gptj_rotary_dim = 0;             ///< GPT-J's rotary_dim, when set
};

inline std::int64_t require_max_positions(const rope_context& ctx, const std::string& for_key) {
    if (ctx.max_position_embeddings <= 0)
        throw config_error(for_key, "missing", "needed, and max_position_embeddings is absent too");
    return ctx.max_position_embeddings;
}

inline rope_spec read_rope(const json& dict, const std::string& prefix, const rope_context& ctx) {
    const reader r(dict, prefix);
    if (!dict.is_object()) throw config_error(prefix, dict.dump(), "must be an object");
    // rope_type (v5, v4) or type (older v4); both may be present and then must agree.
    std::string type = r.string("rope_type", r.string("type", "default"));
    if (r.has("type") && r.has("rope_type") && r.string("type", "") != type)
        throw config_error(r.name("type"), r.at("type").dump(), "disagrees with rope_type \"" + type + "\"");
    if ((ctx.model_type == "phi3" || ctx.model_type == "phimoe") && (type == "su" || type == "yarn"))
        type = "longrope";  // HF's Phi3Config renames these legacy names

    const double base = r.number("rope_theta", ctx.rope_theta);
    const double partial = r.number("partial_rotary_factor", ctx.partial_rotary_factor);
    rope_spec spec;
    spec.layout = ctx.layout;
    spec.dims = ctx.gptj_rotary_dim
                    ? rope_dims{static_cast<std::size_t>(ctx.head_dim), static_cast<std::size_t>(ctx.gptj_rotary_dim)}
                    : rope_dims::partial(static_cast<std::size_t>(ctx.head_dim), partial);
    spec.dims.validate();

    std::set<std::string, std::less<>> keys{"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    auto allow = [&](std::initializer_list<const char*> more) {
        keys.insert(more.begin(), more.end());
        r.allow_only(keys, type);
    };
    // original_max_position_embeddings: Phi-3's top-level value wins (as in HF v5), then the dict's,
    // then max_position_embeddings.
    auto original = [&] {
        if (ctx.top_level_original) return *ctx.top_level_original;
        if (r.has("original_max_position_embeddings")) return r.integer("original_max_position_embeddings");
        return require_max_positions(ctx, r.name("original_max_position_embeddings"));
    };

    if (type == "default") {
        allow({"factor"});
        if (r.has("factor") && r.number("factor") != 1.0)
            throw config_error(r.name("factor"), r.at("factor").dump(), "a default rope applies no factor; did you mean linear?");
        spec.schedule = default_rope{.base = base};
    } else if (type == "linear") {
        allow({"factor"});
        spec.schedule = linear{.base = base, .factor = r.number("factor")};
    } else if (type == "dynamic") {
        // HF accepts original_max_position_embeddings here but computes with max_position_embeddings;
        // so does posenc.
        allow({"factor", "original_max_position_embeddings"});
        spec.schedule = dynamic_ntk{.base = base, .factor = r.number("factor"),
                                    .original_max_position = require_max_positions(ctx, "max_position_embeddings")};
    } else if (type == "yarn") {
        allow({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
               "mscale_all_dim", "truncate"});
        yarn y{.base = base, .original_max_position = original()};
        y.factor = r.has("factor") ? r.number("factor")
                                   : static_cast<double>(require_max_positions(ctx, r.name("factor"))) /
                                         static_cast<double>(y.original_max_position);
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
        longrope l{.base = base, .short_factor = r.numbers("short_factor"), .long_factor = r.numbers("long_factor"),
                   .original_max_position = original()};
        l.factor = r.has("factor") ? r.number("factor")
                                   : static_cast<double>(require_max_positions(ctx, r.name("factor"))) /
                                         static_cast<double>(l.original_max_position);
        l.attention_factor = r.optional_number("attention_factor");
        spec.schedule = l;
    } else if (type == "llama3") {
        allow({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
        spec.schedule = llama3{.base = base, .factor = r.number("factor"),
                               .low_freq_factor = r.number("low_freq_factor"),
                               .high_freq_factor = r.number("high_freq_factor"),
                               .original_max_position = original()};
    } else {
        throw config_error(r.name(r.has("rope_type") ? "rope_type" : "type"), "\"" + type + "\"",
                           "unknown rope_type (supported: default, linear, dynamic, yarn, longrope, llama3)");
    }
    // Validate now, so that a bad value is reported while reading the config, under its HF key.
    try {
        (void)posenc::frequencies(spec.schedule, spec.dims.rotary(), 0);
    } catch (const config_error& e) {
        const std::string& k = e.key();
        if (k == "base" && !r.has("rope_theta")) throw config_error(ctx.rope_theta_key, e.value(), e.why());
        const std::string hf_key = k == "base"                    ? "rope_theta"
                                   : k == "original_max_position" ? "original_max_position_embeddings"
                                                                  : k;
        throw config_error(r.name(hf_key), e.value(), e.why());
    }
    return spec;
}

inline bool is_per_layer_type(const json& dict) {
    if (!dict.is_object() || dict.empty()) return false;
    for (const auto& [k, v] : dict.items())
        if (!v.is_object()) return false;
    return true;
}

}  // namespace detail

/// Reads a parsed config.json. The rotary layout comes from the model family; `layout` overrides it,
/// and is required for a family posenc does not know.
[[nodiscard]] inline model_config parse_config(const nlohmann::json& config,
                                               std::optional<rope_layout> layout = std::nullopt) {
    using detail::reader;
    if (!config.is_object()) throw config_error("config", config.dump().substr(0, 40), "must be a JSON object");
    const nlohmann::json& text = config.contains("text_config") && config["text_config"].is_object()
                                     ? config["text_config"]
                                     : config;
    const reader top(text, &text == &config ? "" : "text_config");
    model_config out;
    out.model_type = top.string("model_type", reader(config, "").string("model_type", ""));
    const bool falcon_alibi = out.model_type == "falcon" && top.boolean("alibi", false);
    if (out.model_type == "bloom" || out.model_type == "mpt" || out.model_type == "t5" || out.model_type == "mt5" ||
        out.model_type == "umt5" || falcon_alibi)
        throw config_error("model_type", out.model_type,
                           "uses no RoPE (ALiBi or T5 buckets): read it with posenc/hf/encoding.hpp");
    const auto fam = detail::family_of(out.model_type, top, layout);

    detail::rope_context ctx;
    ctx.model_type = out.model_type;
    ctx.layout = fam.layout;
    ctx.head_dim = detail::head_dim_of(out.model_type, top, fam);
    const bool neox_base = out.model_type == "gpt_neox" && !top.has("rope_theta");
    ctx.rope_theta_key = top.name(neox_base ? "rotary_emb_base" : "rope_theta");
    ctx.rope_theta = top.number(neox_base ? "rotary_emb_base" : "rope_theta", fam.rope_theta);
    if (out.model_type == "gpt_neox")
        ctx.partial_rotary_factor = top.number("rotary_pct", 0.25);
    else
        ctx.partial_rotary_factor = top.number("partial_rotary_factor", 1.0);
    if (out.model_type == "gptj") ctx.gptj_rotary_dim = top.positive("rotary_dim", 64);
    ctx.max_position_embeddings = top.integer("max_position_embeddings", out.model_type == "gptj" ? top.integer("n_positions", 2048) : 0);
    if (top.has("original_max_position_embeddings"))
        ctx.top_level_original = top.integer("original_max_position_embeddings");
    out.max_position_embeddings = ctx.max_position_embeddings;

    // rope_parameters (v5) wins over rope_scaling (v4); both may be null.
    const char* key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json& dict = top.has(key) ? top.at(key) : empty;

    if (detail::is_per_layer_type(dict)) {
        for (const auto& [layer_type, sub] : dict.items())
            out.rope_by_layer_type.emplace(layer_type, detail::read_rope(sub, top.name(key) + "." + layer_type, ctx));
        const auto full = out.rope_by_layer_type.find("full_attention");
        out.rope = full != out.rope_by_layer_type.end() ? full->second : out.rope_by_layer_type.begin()->second;
    } else {
        out.rope = detail::read_rope(dict, top.name(key), ctx);
        if (out.model_type == "gemma3_text" || out.model_type == "gemma3") {
            // Gemma-3 (transformers v4): rope_scaling applies to global layers only; sliding-window
            // layers use the default schedule with rope_local_base_freq.
            detail::rope_context local = ctx;
            local.rope_theta = top.number("rope_local_base_freq", 10000.0);
            local.rope_theta_key = top.name("rope_local_base_freq");
            out.rope_by_layer_type.emplace("full_attention", out.rope);
            out.rope_by_layer_type.emplace("sliding_attention",
                                           detail::read_rope(nlohmann::json::object(), top.name("rope_local_base_freq"), local));
        }
    }

    if (top.has("layer_types")) {
        for (const auto& t : top.at("layer_types")) {
            if (!t.is_string()) throw config_error(top.name("layer_types"), t.dump(), "must be a list of strings");
            out.layer_types.push_back(t.get<std::string>());
        }
    } else if ((out.model_type == "gemma3_text" || out.model_type == "gemma3") && top.has("num_hidden_layers")) {
        const std::int64_t pattern = top.integer("sliding_window_pattern", 6);
        if (pattern <= 0) throw config_error(top.name("sliding_window_pattern"), std::to_string(pattern), "must be > 0");
        for (std::int64_t i = 0; i < top.integer("num_hidden_layers"); ++i)
            out.layer_types.emplace_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
    }
    for (const auto& t : out.layer_types)
        if (!out.rope_by_layer_type.empty() && !out.rope_by_layer_type.contains(t))
            throw config_error(top.name("layer_types"), "\"" + t + "\"", "has no entry in " + top.name(key));
    return out;
}

namespace detail {
inline nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) throw config_error("config", path.string(), "cannot be opened");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
        throw config_error("config", path.string(), std::string("is not valid JSON: ") + e.what());
    }
}
}  // namespace detail

/// Reads a config.json file. Unreadable or malformed JSON throws config_error naming the file.
[[nodiscard]] inline model_config load_config(const std::filesystem::path& path,
                                              std::optional<rope_layout> layout = std::nullopt) {
    return parse_config(detail::read_json(path), layout);
}

}  // namespace posenc::hf
