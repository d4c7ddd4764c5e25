#pragma once
// posenc's exception types. Every invalid parameter throws config_error naming the field and the
// offending value; every index outside a table or buffer throws range_error. Both derive from
// posenc::error, so `catch (const posenc::error&)` catches everything posenc throws on purpose.

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "posenc/core/detail/lifetimebound.hpp"

namespace posenc {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace detail {

/// `text` made safe for a one-line message: control characters (NUL, newline, …) become \xNN, and
/// text longer than `max_bytes` is cut at a UTF-8 boundary and marked "... (N bytes)". Short text that is
/// already escaped passes through unchanged.
inline std::string one_line(std::string_view text, std::size_t max_bytes = 200) {
    std::size_t cut = text.size();
    if (cut > max_bytes) {
        cut = max_bytes;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    }
    std::string out;
    out.reserve(cut + 24);
    static constexpr char hex[] = "0123456789abcdef";
    for (std::size_t i = 0; i < cut; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (cut < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
    return out;
}

}  // namespace detail

/// An invalid parameter or configuration entry. `key()` is the field name as the user spelled it
/// (HF's key where there is one, e.g. "rope_scaling.factor"); `value()` the offending value as text.
class config_error : public error {
public:
    /// Every part is passed through detail::one_line: whatever a config holds, the message is one
    /// bounded line (a NUL or newline in a key cannot cut or split it).
    config_error(std::string_view key, std::string_view value, std::string_view why)
        : config_error(parts{detail::one_line(key), detail::one_line(value), detail::one_line(why, 400)}) {}

    [[nodiscard]] const std::string& key() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return key_; }
    [[nodiscard]] const std::string& value() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return value_; }
    [[nodiscard]] const std::string& why() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return why_; }

private:
    struct parts {
        std::string key, value, why;
    };
    explicit config_error(parts p)
        : error("posenc: invalid " + p.key + " = " + p.value + ": " + p.why),
          key_(std::move(p.key)), value_(std::move(p.value)), why_(std::move(p.why)) {}

    std::string key_;
    std::string value_;
    std::string why_;
};

/// An index (usually a position) outside the table or buffer it addresses.
class range_error : public error {
public:
    using error::error;
};

namespace detail {

/// Shortest round-trip text of a number, for error messages.
template <class T>
std::string to_text(T value) {
    if constexpr (std::is_same_v<T, bool>) {
        return value ? "true" : "false";
    } else if constexpr (std::is_convertible_v<T, std::string_view>) {
        return std::string(value);
    } else {
        char buf[64];
        auto res = std::to_chars(buf, buf + sizeof buf, value);
        return std::string(buf, res.ptr);
    }
}

template <class T>
    requires(!std::is_invocable_v<const T&>)
void require(bool ok, std::string_view key, const T& value, std::string_view why) {
    if (!ok) throw config_error(std::string(key), to_text(value), why);
}

/// A part of the message as text: a callable's result, or the part itself.
template <class S>
decltype(auto) message_part(const S& s) {
    if constexpr (std::is_invocable_v<const S&>)
        return s();
    else if constexpr (std::is_convertible_v<const S&, std::string_view>)
        return std::string_view(s);
    else
        return to_text(s);
}

/// The same check with parts built by concatenation passed as callables: they are built only when the
/// check fails, so that checks made per call or per tile allocate nothing.
template <class Key, class T, class Why>
    requires(std::is_invocable_v<const Key&> || std::is_invocable_v<const T&> || std::is_invocable_v<const Why&>)
void require(bool ok, const Key& key, const T& value, const Why& why) {
    if (!ok) throw config_error(message_part(key), message_part(value), message_part(why));
}

}  // namespace detail
}  // namespace posenc
