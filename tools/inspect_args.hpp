#pragma once
// posenc-inspect's command line: the work limits, the usage text, the options and their parser.

#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <posenc/posenc.hpp>

namespace posenc_inspect {

/// Work limits of the tool (docs/hf-config.md, "posenc-inspect"): what one invocation may print.
struct tool_limits {
    static constexpr std::int64_t alibi_heads = 65536;              ///< --alibi N
    static constexpr std::int64_t d_model = 65536;                  ///< --sinusoidal D
    static constexpr std::size_t values = std::size_t{1} << 20;     ///< cos/sin or sinusoidal values printed
    static constexpr std::size_t relative_positions = std::size_t{1} << 20;  ///< T5 relative positions listed
};


inline constexpr const char* usage =
    "usage: posenc-inspect CONFIG.json [--seq-len N] [--positions p1,p2,...]\n"
    "                      [--layout interleaved|half_split] [--layer-type T] [--json]\n"
    "       posenc-inspect --alibi N [--max-bias B] [--json]\n"
    "       posenc-inspect --t5 --num-buckets NB --max-distance MD (--bidirectional|--unidirectional)\n"
    "                      [--relative-range A:B] [--json]\n"
    "       posenc-inspect --sinusoidal D --variant interleaved|concat --positions p1,... [--json]\n"
    "       posenc-inspect --family-table\n"
    "  --seq-len N     current sequence length: picks dynamic NTK's base and LongRoPE's factors\n"
    "                  (without it: the default table and the short factors)\n"
    "  --positions     positions whose cos/sin (or sinusoidal rows) to print\n"
    "                  (RoPE default: 0,1 and max_position_embeddings-1); M-RoPE configs also take\n"
    "                  t:h:w components per position (one integer p means t = h = w = p)\n"
    "  --layout        override the model family's layout\n"
    "  --layer-type    for configs with per-layer-type RoPE (Gemma-3): full_attention, sliding_attention\n"
    "  --relative-range A:B   T5 relative positions (key - query) to list (default -max_distance:max_distance)\n"
    "  --json          one JSON object on stdout\n"
    "  --family-table  the model families the config reader knows, as README.md's markdown table\n";

struct options {
    std::string config;
    std::optional<std::size_t> alibi_heads;
    double max_bias = 8.0;
    bool t5 = false;
    std::optional<std::int64_t> num_buckets, max_distance;
    std::optional<bool> bidirectional;
    std::optional<std::pair<std::int64_t, std::int64_t>> relative_range;
    std::optional<std::size_t> sinusoidal_d;
    std::optional<posenc::sinusoidal_form> variant;
    std::int64_t seq_len = 0;
    std::vector<std::int64_t> positions;
    /// M-RoPE components (t, h, w) of each position: {p, p, p} for a plain p; `split[i]` says whether
    /// position i was written t:h:w.
    std::vector<std::array<std::int64_t, 3>> components;
    std::vector<bool> split;
    std::optional<posenc::rope_layout> layout;
    std::string layer_type;
    bool json = false;
    bool family_table = false;
};

inline std::int64_t parse_int(std::string_view text, std::string_view what) {
    std::int64_t v = 0;
    const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size())
        throw posenc::config_error(std::string(what), std::string(text), "must be an integer in int64's range");
    return v;
}

/// An integer argument in [lo, hi].
inline std::int64_t parse_int(std::string_view text, std::string_view what, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = parse_int(text, what);
    if (v < lo || v > hi)
        throw posenc::config_error(std::string(what), std::string(text),
                                   "must be in [" + posenc::detail::to_text(lo) + ", " + posenc::detail::to_text(hi) + "]");
    return v;
}

/// Parses the arguments (without the program name). `help` is set for --help; nothing else is done then.
inline options parse_args(const std::vector<std::string>& args, bool& help) {
    options o;
    help = false;
    const std::size_t argc = args.size();
    for (std::size_t i = 0; i < argc; ++i) {
        const std::string_view a = args[i];
        auto value = [&]() -> std::string_view {
            if (i + 1 >= argc) throw posenc::config_error(std::string(a), "missing", "needs a value");
            return args[++i];
        };
        if (a == "--json") {
            o.json = true;
        } else if (a == "--seq-len") {
            o.seq_len = parse_int(value(), "--seq-len");
            posenc::detail::require(o.seq_len >= 0, "--seq-len", o.seq_len, "must be >= 0");
        } else if (a == "--positions") {
            std::string_view list = value();
            o.positions.clear();  // the last --positions wins
            o.components.clear();
            o.split.clear();
            while (!list.empty()) {
                const auto comma = list.find(',');
                const std::string_view item = list.substr(0, comma);
                if (item.find(':') == std::string_view::npos) {
                    const std::int64_t p = parse_int(item, "--positions");
                    o.positions.push_back(p);
                    o.components.push_back({p, p, p});
                    o.split.push_back(false);
                } else {  // t:h:w
                    std::array<std::int64_t, 3> c{};
                    std::string_view rest = item;
                    for (std::size_t k = 0; k < 3; ++k) {
                        const auto colon = rest.find(':');
                        if ((k < 2) == (colon == std::string_view::npos))
                            throw posenc::config_error("--positions", std::string(item), "must be p or t:h:w (three integers)");
                        c[k] = parse_int(rest.substr(0, colon), "--positions");
                        rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
                    }
                    o.positions.push_back(c[0]);
                    o.components.push_back(c);
                    o.split.push_back(true);
                }
                list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            }
        } else if (a == "--layout") {
            o.layout = posenc::parse_layout(value());
        } else if (a == "--layer-type") {
            o.layer_type = value();
        } else if (a == "--alibi") {
            const auto n = parse_int(value(), "--alibi", 1, tool_limits::alibi_heads);
            o.alibi_heads = static_cast<std::size_t>(n);
        } else if (a == "--max-bias") {
            const std::string v(value());
            char* end = nullptr;
            o.max_bias = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0') throw posenc::config_error("--max-bias", v, "must be a number");
        } else if (a == "--family-table") {
            o.family_table = true;
        } else if (a == "--t5") {
            o.t5 = true;
        } else if (a == "--num-buckets") {
            o.num_buckets = parse_int(value(), "--num-buckets");
        } else if (a == "--max-distance") {
            o.max_distance = parse_int(value(), "--max-distance");
        } else if (a == "--bidirectional" || a == "--unidirectional") {
            o.bidirectional = a == "--bidirectional";
        } else if (a == "--relative-range") {
            const std::string_view v = value();
            const auto colon = v.find(':', 1);
            if (colon == std::string_view::npos) throw posenc::config_error("--relative-range", std::string(v), "must be A:B");
            o.relative_range = {parse_int(v.substr(0, colon), "--relative-range"), parse_int(v.substr(colon + 1), "--relative-range")};
            posenc::detail::require(o.relative_range->first <= o.relative_range->second, "--relative-range", std::string(v),
                                    "needs A <= B");
        } else if (a == "--sinusoidal") {
            const auto d = parse_int(value(), "--sinusoidal", 1, tool_limits::d_model);
            o.sinusoidal_d = static_cast<std::size_t>(d);
        } else if (a == "--variant") {
            const std::string_view v = value();
            if (v == "interleaved") o.variant = posenc::sinusoidal_form::interleaved;
            else if (v == "concat") o.variant = posenc::sinusoidal_form::concatenated;
            else throw posenc::config_error("--variant", std::string(v), "must be interleaved or concat");
        } else if (a == "--help" || a == "-h") {
            help = true;
            return o;
        } else if (!a.empty() && a[0] == '-') {
            throw posenc::config_error("option", std::string(a), "unknown option");
        } else if (o.config.empty()) {
            o.config = a;
        } else {
            throw posenc::config_error("argument", std::string(a), "only one CONFIG.json is accepted");
        }
    }
    const int modes = !o.config.empty() + o.alibi_heads.has_value() + o.t5 + o.sinusoidal_d.has_value() + o.family_table;
    if (modes == 0)
        throw posenc::config_error("CONFIG.json", "missing", "give a config.json, --alibi, --t5, --sinusoidal or --family-table");
    if (modes > 1)
        throw posenc::config_error("arguments", "several modes",
                                   "give one of CONFIG.json, --alibi, --t5, --sinusoidal, --family-table");
    if (o.family_table && o.json) throw posenc::config_error("--json", "with --family-table", "the family table is markdown only");
    if (o.t5 && (!o.num_buckets || !o.max_distance || !o.bidirectional))
        throw posenc::config_error("--t5", "incomplete", "needs --num-buckets, --max-distance and --bidirectional or --unidirectional");
    if (o.sinusoidal_d && (!o.variant || o.positions.empty()))
        throw posenc::config_error("--sinusoidal", "incomplete", "needs --variant and --positions");
    for (std::size_t i = 0; i < o.split.size(); ++i)
        if (o.split[i] && o.config.empty())
            throw posenc::config_error("--positions", posenc::detail::to_text(o.components[i][0]) + ":" +
                                                          posenc::detail::to_text(o.components[i][1]) + ":" +
                                                          posenc::detail::to_text(o.components[i][2]),
                                       "t:h:w components need an M-RoPE config.json");
    return o;
}

}  // namespace posenc_inspect
