// Rotated vectors against HF (tests/data/hf_golden_public.json, section rope_apply): within 2e-6
// absolute of the float64 run of HF's Llama / GPT-J code at every listed position (up to 131071),
// for the on-the-fly path, the table path and the runtime-layout wrapper.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using nlohmann::json;

namespace {

posenc::rope_frequencies frequencies_of(const json& e) {
    const auto& p = e.at("params");
    const std::string type = e.at("rope_type");
    const std::size_t dim = e.at("rotary_dim");
    if (type == "default") return posenc::default_rope{.base = p.at("base")}.frequencies(dim);
    REQUIRE(type == "yarn");
    const auto& cfg = posenc_test::golden_entry("rope_inv_freq", e.at("rope_config_id"));
    const auto& cp = cfg.at("params");
    return posenc::yarn{.base = cp.at("base"), .factor = cp.at("factor"),
                        .original_max_position = cp.at("original_max_position_embeddings")}
        .frequencies(dim);
}

template <class Apply>
std::size_t check_entry(const json& e, Apply apply) {
    const std::size_t head_dim = e.at("head_dim");
    const auto positions = e.at("positions").get<std::vector<std::int64_t>>();
    std::vector<float> q;
    for (const auto& row : e.at("q"))
        for (double v : row) q.push_back(static_cast<float>(v));
    REQUIRE(q.size() == positions.size() * head_dim);
    posenc::heads_view<float> view(std::span<float>(q), {positions.size(), 1, head_dim});
    apply(view, positions);
    const auto& expected = e.at("out_f64");
    REQUIRE(expected.size() == positions.size());
    std::size_t compared = 0;
    for (std::size_t t = 0; t < positions.size(); ++t) {
        INFO("position " << positions[t]);
        REQUIRE(expected[t].size() == head_dim);
        double worst = 0;
        for (std::size_t j = 0; j < head_dim; ++j)
            worst = posenc_test::worst_of(worst, std::abs(q[t * head_dim + j] - expected[t][j].get<double>()));
        CHECK(worst <= 2e-6);
        ++compared;
    }
    return compared;
}

}  // namespace

// No SECTIONs here: Catch2 runs a SECTION inside a loop on one pass only, so every path runs
// explicitly for every entry, and the compared rows are counted.
TEST_CASE("rotated outputs match HF float64 at every position", "[rope][golden][apply]") {
    const auto& entries = posenc_test::golden().at("rope_apply");
    std::size_t entries_checked = 0, rows_compared = 0;
    bool saw_interleaved = false, saw_amplitude = false;
    for (const auto& e : entries) {
        INFO(e.at("id").get<std::string>());
        const auto freq = frequencies_of(e);
        CHECK(std::abs(freq.attention_factor - e.at("attention_factor").get<double>()) <= 1e-12);
        const posenc::rope_dims dims{.head_dim = e.at("head_dim"), .rotary_dim = e.at("rotary_dim")};
        const auto layout = posenc::parse_layout(e.at("layout").get<std::string>());
        saw_interleaved = saw_interleaved || layout == posenc::rope_layout::interleaved;
        saw_amplitude = saw_amplitude || freq.attention_factor != 1.0;
        const posenc::any_rotary rope(layout, dims, freq);
        const std::size_t n = e.at("positions").size();
        {
            INFO("angles on the fly");
            rows_compared += check_entry(e, [&](auto v, const auto& pos) { rope.apply(v, pos); });
        }
        {
            INFO("cos/sin table");
            const auto table = rope.table(131072);
            rows_compared += check_entry(e, [&](auto v, const auto& pos) { rope.apply(table, v, pos); });
        }
        {
            INFO("static layout type");
            rows_compared += check_entry(e, [&](auto v, const auto& pos) {
                if (layout == posenc::rope_layout::half_split)
                    posenc::rotary<posenc::half_split>(dims, freq).apply(v, pos);
                else
                    posenc::rotary<posenc::interleaved>(dims, freq).apply(v, pos);
            });
        }
        {
            INFO("consecutive positions (the prefill recurrence) where the listed positions are a run");
            // Positions 0, 1, 2 are consecutive: rotated as a prefill from 0.
            const auto pos = e.at("positions").get<std::vector<std::int64_t>>();
            REQUIRE(pos.size() >= 3);
            REQUIRE((pos[0] == 0 && pos[1] == 1 && pos[2] == 2));
            json prefix = e;
            prefix["positions"] = json(std::vector<std::int64_t>(pos.begin(), pos.begin() + 3));
            prefix["q"] = json(std::vector<json>(e.at("q").begin(), e.at("q").begin() + 3));
            prefix["out_f64"] = json(std::vector<json>(e.at("out_f64").begin(), e.at("out_f64").begin() + 3));
            rows_compared += check_entry(prefix, [&](auto v, const auto&) {
                rope.apply(v, posenc::position_ids::consecutive(0, 3));
            });
        }
        ++entries_checked;
        CHECK(n == 9);
    }
    REQUIRE(entries_checked == 4);
    REQUIRE(rows_compared == 4 * (3 * 9 + 3));
    CHECK(saw_interleaved);
    CHECK(saw_amplitude);
}
