#pragma once
// Access to tests/data/hf_golden_public.json (values produced by the upstream reference code).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace posenc_test {

inline std::string data_path(const std::string& name) { return std::string(POSENC_TEST_DATA_DIR) + "/" + name; }

inline const nlohmann::json& golden() {
    static const nlohmann::json j = [] {
        std::ifstream in(data_path("hf_golden_public.json"));
        return nlohmann::json::parse(in);
    }();
    return j;
}

inline const nlohmann::json& golden_entry(const std::string& section, const std::string& id) {
    for (const auto& e : golden().at(section))
        if (e.at("id") == id) return e;
    throw std::runtime_error("no golden entry " + section + "/" + id);
}

}  // namespace posenc_test
