#pragma once
// Which positional encoding a HuggingFace config.json implies, RoPE or not (needs nlohmann-json):
//   - RoPE models: the model_config of posenc/hf/config.hpp;
//   - ALiBi: BLOOM (n_head), MPT (attn_config.alibi, attn_config.alibi_bias_max), Falcon with
//     "alibi": true (which adds the bias before the 1/√d scale);
//   - T5 relative buckets: T5 / mT5 / UMT5 (relative_attention_num_buckets,
//     relative_attention_max_distance, num_heads; encoder bidirectional, decoder unidirectional).

#include <variant>

#include "posenc/bias/alibi.hpp"
#include "posenc/bias/t5.hpp"
#include "posenc/hf/config.hpp"

namespace posenc::hf {

struct alibi_model {
    std::string model_type;
    alibi params;
};

struct t5_model {
    std::string model_type;
    t5_buckets encoder{};   ///< bidirectional
    t5_buckets decoder{};   ///< unidirectional (decoder self-attention)
    std::size_t heads = 0;  ///< the learned table is [num_buckets, heads] per stack
};

using position_encoding = std::variant<model_config, alibi_model, t5_model>;

namespace detail {

/// A head count: an integer in [1, limits::heads].
inline std::size_t head_count(const reader& r, std::string_view key, std::int64_t fallback) {
    return static_cast<std::size_t>(r.integer(key, 1, limits::heads, fallback));
}

/// alibi::validate under the config's keys (`heads_key`, `max_bias_key`).
inline alibi validated(alibi a, const std::string& heads_key, const std::string& max_bias_key) {
    try {
        a.validate();
    } catch (const config_error& e) {
        throw config_error(e.key() == "max_bias" ? max_bias_key : e.key() == "heads" ? heads_key : e.key(), e.value(),
                           e.why());
    }
    return a;
}

}  // namespace detail

[[nodiscard]] inline position_encoding parse_position_encoding(const nlohmann::json& config,
                                                             std::optional<rope_layout> layout = std::nullopt) {
    if (!config.is_object()) return parse_config(config);  // reports the error
    const detail::reader top(config, "");
    const std::string type = top.string("model_type", "");
    if (type == "bloom") {
        const char* heads_key = top.has("n_head") ? "n_head" : "num_attention_heads";
        alibi a{.heads = detail::head_count(top, heads_key, 8)};
        a.order = bias_order::scale_then_add;  // HF Bloom: baddbmm(alibi, q, k, alpha = 1/√d)
        return alibi_model{type, detail::validated(a, heads_key, "max_bias")};
    }
    if (type == "mpt") {
        static const nlohmann::json empty = nlohmann::json::object();
        const nlohmann::json& attn_config = top.has("attn_config") ? top.at("attn_config") : empty;
        if (!attn_config.is_object())
            throw config_error("attn_config", detail::describe(attn_config), "must be an object");
        const detail::reader attn(attn_config, "attn_config");
        if (!attn.boolean("alibi", false))
            throw config_error("attn_config.alibi", "false", "this MPT uses learned absolute positions, not an encoding posenc computes");
        alibi a{.heads = detail::head_count(top, "n_heads", 16), .max_bias = attn.number("alibi_bias_max", 8.0)};
        a.order = bias_order::scale_then_add;  // MPT: scores·softmax_scale + attn_bias
        return alibi_model{type, detail::validated(a, "n_heads", "attn_config.alibi_bias_max")};
    }
    if (type == "falcon" && top.boolean("alibi", false)) {
        alibi a{.heads = detail::head_count(top, "num_attention_heads", 71)};
        a.order = bias_order::add_then_scale;  // HF Falcon: (q·k + alibi) · 1/√d
        return alibi_model{type, detail::validated(a, "num_attention_heads", "max_bias")};
    }
    if (type == "t5" || type == "mt5" || type == "umt5") {
        t5_model m;
        m.model_type = type;
        m.encoder.num_buckets = top.integer("relative_attention_num_buckets", 1, limits::buckets, 32);
        m.encoder.max_distance = top.integer("relative_attention_max_distance", 1, limits::positions, 128);
        m.decoder = m.encoder;
        m.decoder.bidirectional = false;
        m.heads = detail::head_count(top, "num_heads", 8);
        try {
            m.encoder.validate();
            m.decoder.validate();
        } catch (const config_error& e) {
            throw config_error("relative_attention_" + e.key(), e.value(), e.why());
        }
        return m;
    }
    return parse_config(config, layout);
}

/// parse_position_encoding of config.json text, with the checks of config_from_string.
[[nodiscard]] inline position_encoding position_encoding_from_string(std::string_view json_text,
                                                                    std::optional<rope_layout> layout = std::nullopt) {
    return parse_position_encoding(detail::parse_json(json_text, "<string>"), layout);
}

[[nodiscard]] inline position_encoding load_position_encoding(const std::filesystem::path& path,
                                                            std::optional<rope_layout> layout = std::nullopt) {
    return parse_position_encoding(detail::read_json(path), layout);
}

}  // namespace posenc::hf
