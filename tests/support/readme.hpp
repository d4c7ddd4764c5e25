#pragma once
// Reading README.md's and docs/'s blocks for the tests that compile a snippet and check the block is its text.
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

/// The snippet a test file carries between its "    // --- snippet begin ---" and "    // --- snippet
/// end ---" lines, without the test's 4-space indent.
inline std::string snippet_of(const std::string& test_file) {
    const std::string snippet =
        between(read_file(test_file), "    // --- snippet begin ---\n", "    // --- snippet end ---");
    std::string unindented;
    std::istringstream lines(snippet);
    for (std::string line; std::getline(lines, line);) unindented += (line.rfind("    ", 0) == 0 ? line.substr(4) : line) + "\n";
    return unindented;
}

/// The C++ block after the marker `<!-- name snippet -->` in `page`, a markdown file named from the
/// repository root such as "docs/attention.md" (needs POSENC_TEST_DATA_DIR).
inline std::string doc_block(const std::string& page, const std::string& name) {
    const std::string text = read_file(std::string(POSENC_TEST_DATA_DIR) + "/../../" + page);
    return between(text, "<!-- " + name + " snippet -->\n```cpp\n", "```");
}

/// README.md's C++ block after the marker `<!-- name snippet -->`.
inline std::string readme_block(const std::string& name) { return doc_block("README.md", name); }

}  // namespace posenc_test
