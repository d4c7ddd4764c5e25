#pragma once
// Access to tests/data: hf_golden_public.json (values produced by the upstream reference code) and
// the bundled HF config.json files.
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <posenc/hf/config.hpp>

namespace posenc_test {

inline std::string data_path(const std::string& name) { return std::string(POSENC_TEST_DATA_DIR) + "/" + name; }

inline std::string config_path(const std::string& name) { return data_path("configs/" + name); }
inline posenc::hf::model_config load_bundled_config(const std::string& name) { return posenc::hf::load_config(config_path(name)); }

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

/// HF's float64 inverse frequencies for one entry of the rope_inv_freq section.
inline std::vector<double> golden_inv_freq(const std::string& id) {
    return golden_entry("rope_inv_freq", id).at("inv_freq_f64").get<std::vector<double>>();
}

}  // namespace posenc_test
