#pragma once
// Reading README.md blocks for the tests that compile a README snippet and check the block is its text.
#include <fstream>
#include <sstream>
#include <string>

namespace posenc_test {

/// The text between `begin` and the next `end` after it; empty if either is missing.
inline std::string between(const std::string& text, const std::string& begin, const std::string& end) {
    const auto b = text.find(begin);
    const auto e = b == std::string::npos ? b : text.find(end, b + begin.size());
    if (b == std::string::npos || e == std::string::npos) return {};
    return text.substr(b + begin.size(), e - b - begin.size());
}

/// A whole file as a string (empty if it cannot be read).
inline std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

}  // namespace posenc_test
