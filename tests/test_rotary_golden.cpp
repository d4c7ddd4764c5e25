// Rotated vectors against HF (tests/data/hf_golden_public.json, section rope_apply): within 2e-6
// absolute of the float64 run of HF's Llama / GPT-J code at every listed position (up to 131071),
// for the on-the-fly path, the table path and the runtime-layout wrapper.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"

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
void check_entry(const json& e, Apply apply) {
    const std::size_t head_dim = e.at("head_dim");
    const auto positions = e.at("positions").get<std::vector<std::int64_t>>();
    std::vector<float> q;
    for (const auto& row : e.at("q"))
        for (double v : row) q.push_back(static_cast<float>(v));
    posenc::heads_view<float> view(std::span<float>(q), {positions.size(), 1, head_dim});
    apply(view, positions);
    const auto& expected = e.at("out_f64");
    for (std::size_t t = 0; t < positions.size(); ++t) {
        INFO("position " << positions[t]);
        double worst = 0;
        for (std::size_t j = 0; j < head_dim; ++j)
            worst = std::max(worst, std::abs(q[t * head_dim + j] - expected[t][j].get<double>()));
        CHECK(worst <= 2e-6);
    }
}

}  // namespace

TEST_CASE("rotated outputs match HF float64 at every position", "[rope][golden][apply]") {
    for (const auto& e : posenc_test::golden().at("rope_apply")) {
        INFO(e.at("id").get<std::string>());
        const auto freq = frequencies_of(e);
        CHECK(std::abs(freq.attention_factor - e.at("attention_factor").get<double>()) <= 1e-12);
        const posenc::rope_dims dims{.head_dim = e.at("head_dim"), .rotary_dim = e.at("rotary_dim")};
        const auto layout = posenc::parse_layout(e.at("layout").get<std::string>());
        const posenc::any_rotary rope(layout, dims, freq);
        SECTION("angles on the fly") {
            check_entry(e, [&](auto v, const auto& pos) { rope.apply(v, pos); });
        }
        SECTION("cos/sin table") {
            const auto table = rope.table(131072);
            check_entry(e, [&](auto v, const auto& pos) { rope.apply(table, v, pos); });
        }
        SECTION("static layout type") {
            check_entry(e, [&](auto v, const auto& pos) {
                if (layout == posenc::rope_layout::half_split)
                    posenc::rotary<posenc::half_split>(dims, freq).apply(v, pos);
                else
                    posenc::rotary<posenc::interleaved>(dims, freq).apply(v, pos);
            });
        }
    }
}
