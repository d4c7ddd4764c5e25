#pragma once
// Asserting posenc's errors: the right type, the offending key, the offending value in the message.
#include <string>

#include <posenc/core/errors.hpp>

#include "support/catch.hpp"

namespace posenc_test {

/// Runs f and requires a posenc::config_error whose key() is `key` and whose message names the key
/// and contains `value_text` (the offending value).
template <class F>
void expect_config_error(F&& f, const std::string& key, const std::string& value_text = "") {
    try {
        f();
        FAIL("no exception; expected config_error for " << key);
    } catch (const posenc::config_error& e) {
        CHECK(e.key() == key);
        CHECK(std::string(e.what()).find(key) != std::string::npos);
        CHECK(std::string(e.what()).find(value_text) != std::string::npos);
    }
}

}  // namespace posenc_test
