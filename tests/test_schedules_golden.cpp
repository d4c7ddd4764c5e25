// Every frequency schedule against HF transformers' values (tests/data/hf_golden_public.json,
// section rope_inv_freq): inverse frequencies within 1e-12 relative of the float64 run of HF's own
// code, attention factor within 1e-12.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using nlohmann::json;
using posenc_test::golden;

namespace {

std::int64_t seq_len_of(const json& e) { return e.at("seq_len").is_null() ? 0 : e.at("seq_len").get<std::int64_t>(); }

template <class T>
std::optional<T> opt(const json& p, const char* key) {
    if (!p.contains(key) || p.at(key).is_null()) return std::nullopt;
    return p.at(key).get<T>();
}

// The golden params use HF's key names; this maps them to posenc's schedule fields by hand.
posenc::any_schedule schedule_of(const std::string& type, const json& p) {
    const double base = p.at("base");
    if (type == "default") return posenc::default_rope{.base = base};
    if (type == "linear") return posenc::linear{.base = base, .factor = p.at("factor")};
    if (type == "dynamic")
        return posenc::dynamic_ntk{.base = base, .factor = p.at("factor"),
                                   .original_max_position = p.at("max_position_embeddings")};
    if (type == "yarn") {
        posenc::yarn y{.base = base, .factor = p.at("factor"),
                       .original_max_position = p.at("original_max_position_embeddings")};
        y.beta_fast = opt<double>(p, "beta_fast").value_or(32.0);
        y.beta_slow = opt<double>(p, "beta_slow").value_or(1.0);
        y.truncate = opt<bool>(p, "truncate").value_or(true);
        y.attention_factor = opt<double>(p, "attention_factor");
        y.mscale = opt<double>(p, "mscale");
        y.mscale_all_dim = opt<double>(p, "mscale_all_dim");
        return y;
    }
    if (type == "longrope") {
        const std::int64_t original = p.at("config_original_max_position_embeddings");
        return posenc::longrope{.base = base,
                                .short_factor = p.at("short_factor").get<std::vector<double>>(),
                                .long_factor = p.at("long_factor").get<std::vector<double>>(),
                                .original_max_position = original,
                                .factor = p.at("max_position_embeddings").get<double>() / static_cast<double>(original)};
    }
    if (type == "llama3")
        return posenc::llama3{.base = base, .factor = p.at("factor"), .low_freq_factor = p.at("low_freq_factor"),
                              .high_freq_factor = p.at("high_freq_factor"),
                              .original_max_position = p.at("original_max_position_embeddings")};
    throw std::runtime_error("unknown golden rope_type " + type);
}

}  // namespace

TEST_CASE("every schedule matches HF's float64 inv_freq and attention factor", "[rope][golden]") {
    const auto& entries = golden().at("rope_inv_freq");
    REQUIRE(entries.size() == 28);
    std::size_t compared = 0;
    for (const auto& e : entries) {
        const std::string id = e.at("id");
        INFO(id);
        const auto sched = schedule_of(e.at("rope_type"), e.at("params"));
        const std::size_t rotary_dim = e.at("params").at("rotary_dim");
        const auto f = posenc::frequencies(sched, rotary_dim, seq_len_of(e));
        const auto expected = e.at("inv_freq_f64").get<std::vector<double>>();
        REQUIRE(f.inv_freq.size() == expected.size());
        CHECK(posenc_test::max_rel_diff(f.inv_freq, expected) <= 1e-12);
        const double af = e.at("attention_factor");
        CHECK(std::abs(f.attention_factor - af) <= 1e-12 * af);
        ++compared;
    }
    REQUIRE(compared == 28);
}

TEST_CASE("dynamic NTK matches HF at every listed length, and its effective base", "[rope][golden][dynamic]") {
    int checked = 0;
    for (const auto& e : golden().at("rope_inv_freq")) {
        if (e.at("rope_type") != "dynamic") continue;
        INFO(e.at("id").get<std::string>());
        const auto& p = e.at("params");
        const posenc::dynamic_ntk d{.base = p.at("base"), .factor = p.at("factor"),
                                    .original_max_position = p.at("max_position_embeddings")};
        const double eb = e.at("effective_base_f64");
        CHECK(std::abs(d.effective_base(p.at("rotary_dim"), seq_len_of(e)) - eb) <= 1e-12 * eb);
        ++checked;
    }
    REQUIRE(checked == 10);
}

TEST_CASE("dynamic NTK has no hidden state: HF's cache demo replayed call by call", "[rope][golden][dynamic]") {
    // HF's module answers each call from the largest length cached so far; posenc answers from the
    // length it is given. Passing HF's cached length reproduces HF; passing the call's own length
    // gives the same answer whatever came before.
    const auto& demo = golden().at("rope_dynamic_cache_behavior").at(0);
    const auto& p = demo.at("params");
    const posenc::dynamic_ntk d{.base = p.at("base"), .factor = p.at("factor"),
                                .original_max_position = p.at("max_position_embeddings")};
    const std::size_t dim = p.at("head_dim");
    const double base = p.at("base"), s = p.at("factor"), L0 = p.at("max_position_embeddings");
    int stale = 0;
    std::size_t calls = 0;
    for (const auto& call : demo.at("calls")) {
        ++calls;
        const std::int64_t cached = call.at("max_seq_len_cached_after");
        const double eb = call.at("effective_base_f64_after");
        CHECK(std::abs(d.effective_base(dim, cached) - eb) <= 1e-12 * eb);  // HF, given HF's cached length
        // posenc, given the call's own length: the closed form at max(L, L0), whatever came before.
        const std::int64_t len = call.at("max_position_id_plus_1");
        const double L = std::max(double(len), L0);
        const double expected = base * std::pow(s * L / L0 - (s - 1), double(dim) / double(dim - 2));
        CHECK(std::abs(d.effective_base(dim, len) - expected) <= 1e-12 * expected);
        if (cached > std::max<std::int64_t>(len, std::int64_t(L0))) {  // HF answers from a stale, longer length
            ++stale;
            CHECK(d.effective_base(dim, len) < eb);
        }
    }
    REQUIRE(calls >= 3);
    CHECK(stale >= 1);  // the demo does contain the case where HF's state changes the answer
}

TEST_CASE("longrope switches to long factors strictly above the original length", "[rope][golden][longrope]") {
    int checked = 0;
    for (const auto& e : golden().at("rope_inv_freq")) {
        if (e.at("rope_type") != "longrope") continue;
        const auto l = std::get<posenc::longrope>(schedule_of("longrope", e.at("params")));
        CHECK(l.uses_long_factor(seq_len_of(e)) == e.at("uses_long_factor").get<bool>());
        ++checked;
    }
    REQUIRE(checked == 3);  // seq_len unknown, L0, L0 + 1
}

TEST_CASE("yarn: factor is authoritative when max_position_embeddings equals the original", "[rope][golden][yarn]") {
    // HF before PR #40320 replaced factor by max/original (= 1 here), silently giving plain RoPE.
    const auto& e = golden().at("rope_yarn_version_divergence").at(0);
    const auto& p = e.at("params");
    const posenc::yarn y{.base = p.at("base"), .factor = p.at("factor"),
                         .original_max_position = p.at("original_max_position_embeddings")};
    const auto f = y.frequencies(p.at("head_dim"));
    const auto& a = e.at("newer_A_effective");
    CHECK(posenc_test::max_rel_diff(f.inv_freq, a.at("inv_freq_f64").get<std::vector<double>>()) <= 1e-12);
    CHECK(std::abs(f.attention_factor - a.at("attention_factor").get<double>()) <= 1e-12);
}
