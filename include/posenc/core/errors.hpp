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

namespace posenc {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// An invalid parameter or configuration entry. `key()` is the field name as the user spelled it
/// (HF's key where there is one, e.g. "rope_scaling.factor"); `value()` the offending value as text.
class config_error : public error {
public:
    config_error(std::string key, std::string value, std::string_view why)
        : error("posenc: invalid " + key + " = " + value + ": " + std::string(why)),
          key_(std::move(key)), value_(std::move(value)), why_(why) {}

    [[nodiscard]] const std::string& key() const noexcept { return key_; }
    [[nodiscard]] const std::string& value() const noexcept { return value_; }
    [[nodiscard]] const std::string& why() const noexcept { return why_; }

private:
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
void require(bool ok, std::string_view key, const T& value, std::string_view why) {
    if (!ok) throw config_error(std::string(key), to_text(value), why);
}

}  // namespace detail
}  // namespace posenc
