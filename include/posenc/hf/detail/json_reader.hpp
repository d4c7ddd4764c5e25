#pragma once
// The JSON side of the HF config reader: reading a config file or string with posenc's limits
// (size, nesting, numbers beyond double), typed reads of one object's keys that name the key on
// error (reader), and the one way a config value is echoed into a message (describe).

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/core/errors.hpp"
#include "posenc/hf/types.hpp"

namespace posenc::hf::detail {

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


}  // namespace posenc::hf::detail
