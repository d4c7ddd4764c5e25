// libFuzzer target: posenc-inspect's argument parsing and everything it runs, called as a function
// (posenc_inspect::inspect). The input is a list of arguments separated by NUL bytes; its first byte
// may put one of tests/data/configs/ in front, so that the config modes are reached too.
// Invariants: exit 0 with output (valid JSON when --json was parsed) or exit 1 with exactly one line
// on err and nothing on out; no other exception, no exit().
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_inspect_args.cpp
//   ./a.out -max_total_time=60 corpus/        (run from the repository root, or define POSENC_FUZZ_CONFIG_DIR)
#include "../../tools/posenc_inspect.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#ifndef POSENC_FUZZ_CONFIG_DIR
#define POSENC_FUZZ_CONFIG_DIR "tests/data/configs"
#endif

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

constexpr const char* configs[] = {
    "bloom-560m.json", "deepseek-v2-lite.json", "deepseek-v3.json", "falcon-rw-1b.json", "gemma-3-1b-v5.json",
    "gemma-3-4b.json", "gpt-j-6b.json", "gpt-neox-20b.json", "gpt-oss-20b.json", "llama-3.1-8b.json",
    "mistral-nemo.json", "mpt-7b.json", "phi-3-mini-128k.json", "phi-4-mini-partial.json", "qwen2.5-7b-yarn.json",
    "t5-small.json"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::vector<std::string> args;
    const std::size_t pick = data[0] % 32;  // 0..15: a config first; 16..31: none
    if (pick < std::size(configs)) args.emplace_back(std::string(POSENC_FUZZ_CONFIG_DIR) + "/" + configs[pick]);
    std::string cur;
    for (std::size_t i = 1; i < size; ++i) {
        if (data[i] == 0) {
            args.push_back(cur);
            cur.clear();
        } else {
            cur.push_back(static_cast<char>(data[i]));
        }
    }
    if (!cur.empty()) args.push_back(cur);
    if (args.size() > 64) return 0;

    std::ostringstream out, err;
    const int rc = posenc_inspect::inspect(args, out, err);
    if (rc == 0) {
        require(err.str().empty() && !out.str().empty());
        bool help = false;
        const auto o = posenc_inspect::parse_args(args, help);  // succeeded inside inspect() too
        if (o.json && !help) require(nlohmann::json::accept(out.str()));
    } else {
        require(rc == 1 && out.str().empty());
        const std::string e = err.str();
        require(!e.empty() && e.back() == '\n' && e.find('\n') == e.size() - 1);
    }
    return 0;
}
