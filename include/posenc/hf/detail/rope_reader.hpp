#pragma once
// Reading the RoPE and the layer types of a config: the family entry and layout it is read with,
// head_dim, the rope dict of each rope_type (one table entry per type: the keys it may hold and how
// its schedule is built), Qwen-VL's M-RoPE section and vision tokens, and layer_types.

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/core/errors.hpp"
#include "posenc/hf/detail/json_reader.hpp"
#include "posenc/hf/families.hpp"
#include "posenc/hf/types.hpp"

namespace posenc::hf::detail {

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

/// A rope dict being read: its reader, base, context, and the key original_max_position_embeddings
/// was last taken from (for errors).
struct rope_dict {
    const reader& r;
    double base;
    const rope_context& ctx;
    std::string original_key;

    /// original_max_position_embeddings: Phi-3's top-level value wins (as in HF v5), then the dict's,
    /// then max_position_embeddings.
    std::int64_t original() {
        if (ctx.top_level_original) {
            original_key = ctx.top_level_original_key;
            return *ctx.top_level_original;
        }
        if (r.has("original_max_position_embeddings")) {
            original_key = r.name("original_max_position_embeddings");
            return r.integer("original_max_position_embeddings", 1, limits::positions);
        }
        return require_max_positions(ctx, r.name("original_max_position_embeddings"));
    }
    /// A factor the config omits is derived as max_position_embeddings / original.
    [[nodiscard]] double factor_or_derived(std::int64_t orig) const {
        if (r.has("factor")) return r.number("factor");
        return static_cast<double>(require_max_positions(ctx, r.name("factor"))) / static_cast<double>(orig);
    }
};

inline any_schedule build_default(rope_dict& d) {
    if (d.r.has("factor") && d.r.number("factor") != 1.0)
        throw config_error(d.r.name("factor"), describe(d.r.at("factor")), "a default rope applies no factor; did you mean linear?");
    return default_rope{.base = d.base};
}

inline any_schedule build_linear(rope_dict& d) { return linear{.base = d.base, .factor = d.r.number("factor")}; }

// HF accepts original_max_position_embeddings here but computes with max_position_embeddings; so does posenc.
inline any_schedule build_dynamic(rope_dict& d) {
    if (d.r.has("original_max_position_embeddings")) (void)d.r.integer("original_max_position_embeddings", 1, limits::positions);
    return dynamic_ntk{.base = d.base, .factor = d.r.number("factor"),
                       .original_max_position = require_max_positions(d.ctx, d.ctx.max_positions_key)};
}

inline any_schedule build_yarn(rope_dict& d) {
    yarn y{.base = d.base, .original_max_position = d.original()};
    y.factor = d.factor_or_derived(y.original_max_position);
    // HF: `beta_fast or 32` — 0 and null mean the default.
    y.beta_fast = d.r.number("beta_fast", 0.0) != 0.0 ? d.r.number("beta_fast") : 32.0;
    y.beta_slow = d.r.number("beta_slow", 0.0) != 0.0 ? d.r.number("beta_slow") : 1.0;
    y.truncate = d.r.boolean("truncate", true);
    y.attention_factor = d.r.optional_number("attention_factor");
    y.mscale = d.r.optional_number("mscale");
    y.mscale_all_dim = d.r.optional_number("mscale_all_dim");
    return y;
}

inline any_schedule build_longrope(rope_dict& d) {
    const auto max_list = static_cast<std::size_t>(limits::head_dim / 2);
    longrope l{.base = d.base, .short_factor = d.r.numbers("short_factor", max_list),
               .long_factor = d.r.numbers("long_factor", max_list), .original_max_position = d.original()};
    l.factor = d.factor_or_derived(l.original_max_position);
    l.attention_factor = d.r.optional_number("attention_factor");
    return l;
}

inline any_schedule build_llama3(rope_dict& d) {
    return llama3{.base = d.base, .factor = d.r.number("factor"), .low_freq_factor = d.r.number("low_freq_factor"),
                  .high_freq_factor = d.r.number("high_freq_factor"), .original_max_position = d.original()};
}

/// One rope_type: the keys its dict may hold besides rope_type, type, rope_theta and
/// partial_rotary_factor (empty slots unused), and how its schedule is built from them.
struct rope_type_entry {
    std::string_view name;
    std::array<std::string_view, 8> keys;
    any_schedule (*build)(rope_dict&);
};

/// The rope_types posenc reads, as HF's ROPE_INIT_FUNCTIONS and their validation define them.
inline constexpr rope_type_entry rope_types[] = {
    {"default", {"factor"}, build_default},
    {"linear", {"factor"}, build_linear},
    {"dynamic", {"factor", "original_max_position_embeddings"}, build_dynamic},
    {"yarn", {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
              "mscale_all_dim", "truncate"}, build_yarn},
    {"longrope", {"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"},
     build_longrope},
    {"llama3", {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}, build_llama3},
};

inline const rope_type_entry* find_rope_type(std::string_view name) {
    for (const rope_type_entry& e : rope_types)
        if (e.name == name) return &e;
    return nullptr;
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
    const rope_type_entry* entry = find_rope_type(type);
    if (!entry) {
        std::string supported;
        for (const rope_type_entry& e : rope_types) supported += (supported.empty() ? "" : ", ") + std::string(e.name);
        throw config_error(r.name(r.has("rope_type") ? "rope_type" : "type"), echo_string(type),
                           "unknown rope_type (supported: " + supported + ")");
    }
    for (const std::string_view k : entry->keys)
        if (!k.empty()) keys.emplace(k);
    r.allow_only(keys, type);
    rope_dict d{.r = r, .base = base, .ctx = ctx, .original_key = ctx.max_positions_key};
    spec.schedule = entry->build(d);
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
        if (k == "original_max_position") throw config_error(d.original_key, e.value(), e.why());
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


/// Rejects a per-layer key the family's rule does not read (it would leave its layers on a silent
/// default) and notes what HF stores but does not use.
inline void check_layer_keys(const reader& top, const family& fam, const std::string& model_type,
                             std::vector<std::string>& notes) {
    const bool known_family = find_family(model_type) != nullptr;
    for (const std::string_view k : per_layer_keys) {
        if (!top.has(k) || reads_layer_key(fam.layers, known_family, k)) continue;
        const json& v = top.at(k);
        if (v.is_boolean() && !v.get<bool>()) continue;  // false (use_sliding_window) changes no layer
        // A family whose HF attention reads no per-layer key (LlamaAttention, …) ignores it as HF does.
        if (known_family && fam.layers == layer_rule::full) {
            notes.push_back(top.name(k) + " ignored: HF's " + echo_string(model_type) + " attention does not read it");
            continue;
        }
        throw config_error(top.name(k), describe(v),
                           "is a per-layer key posenc does not read for model_type " + echo_string(model_type) +
                               ": which layers it applies to is not known here (give layer_types, or leave it out)");
    }
    if (!known_family && top.has("sliding_window") && !top.at("sliding_window").is_null() && !top.has("layer_types"))
        throw config_error(top.name("sliding_window"), describe(top.at("sliding_window")),
                           "needs layer_types for model_type " + echo_string(model_type) +
                               ": posenc does not know which of its layers slide");
    if ((fam.layers == layer_rule::smollm3_nope || fam.layers == layer_rule::window_all_layers) && top.has("max_window_layers"))
        notes.push_back(top.name("max_window_layers") + " ignored: HF's " + echo_string(model_type) +
                        " does not use it for its sliding layers");
}

/// The config's layer_types, else the family's pattern (Gemma-3, Cohere2) over num_hidden_layers;
/// empty when neither applies.
inline std::vector<std::string> read_layer_types(const reader& top, const family& fam) {
    std::vector<std::string> types;
    // A family whose rule does not read layer_types (its HF attention ignores it: noted) keeps its own.
    const bool read_types = fam.model_type.empty() || reads_layer_key(fam.layers, true, "layer_types");
    if (read_types && top.has("layer_types")) {
        const json& list = top.at("layer_types");
        if (!list.is_array()) throw config_error(top.name("layer_types"), describe(list), "must be a list of strings");
        if (list.size() > static_cast<std::size_t>(limits::layers))
            throw config_error(top.name("layer_types"), describe(list),
                               "has more than " + to_text(limits::layers) + " entries");
        for (const auto& t : list) {
            if (!t.is_string()) throw config_error(top.name("layer_types"), describe(t), "must be a list of strings");
            types.push_back(t.get<std::string>());
        }
    } else if ((fam.layers == layer_rule::gemma3_pattern || fam.layers == layer_rule::cohere2_pattern) &&
               top.has("num_hidden_layers")) {
        // Gemma3TextConfig / Cohere2Config: layer i is full iff (i + 1) % sliding_window_pattern == 0.
        const std::int64_t pattern =
            top.integer("sliding_window_pattern", 1, limits::layers, fam.layers == layer_rule::gemma3_pattern ? 6 : 4);
        const std::int64_t layers = top.integer("num_hidden_layers", 1, limits::layers);
        for (std::int64_t i = 0; i < layers; ++i)
            types.emplace_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
    }
    return types;
}

}  // namespace posenc::hf::detail
