// posenc-inspect, run as a program: its --json output against HF's golden values and closed forms,
// and its behaviour on bad input (non-zero exit, one line on stderr).
#ifdef POSENC_INSPECT_PATH
#include <cstdio>
#include <string>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

using nlohmann::json;

namespace {

struct result {
    int status = -1;
    std::string out;
};

// Runs posenc-inspect with `args`; stderr goes to `err_file` when given.
result inspect(const std::string& args, const std::string& err_file = "/dev/null") {
    const std::string cmd = std::string(POSENC_INSPECT_PATH) + " " + args + " 2>" + err_file;
    result r;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
    r.status = pclose(p);
    return r;
}

std::string config(const std::string& name) { return posenc_test::data_path("configs/" + name); }

}  // namespace

TEST_CASE("posenc-inspect --json: Llama 3.1 equals HF's llama3 table; cos/sin at the given positions", "[inspect]") {
    const auto r = inspect(config("llama-3.1-8b.json") + " --json --positions 0,1,8191,131071");
    REQUIRE(r.status == 0);
    const auto j = json::parse(r.out);  // exactly one JSON object
    CHECK(j.at("rope_type") == "llama3");
    CHECK(j.at("head_dim") == 128);
    CHECK(j.at("rotary_dim") == 128);
    CHECK(j.at("layout") == "half_split");
    CHECK(j.at("attention_factor") == 1.0);
    const auto inv = j.at("inv_freq").get<std::vector<double>>();
    const auto expected = posenc_test::golden_entry("rope_inv_freq", "llama3_d128_b5e5_f8_l1_h4_o8192_llama31")
                              .at("inv_freq_f64")
                              .get<std::vector<double>>();
    CHECK(posenc_test::max_rel_diff(inv, expected) <= 1e-12);
    CHECK(j.at("positions") == json::array({0, 1, 8191, 131071}));
    for (std::size_t k = 0; k < 4; ++k) {
        const double p = j.at("positions")[k];
        for (std::size_t i = 0; i < 64; ++i) {
            CHECK(std::abs(j.at("cos")[k][i].get<double>() - std::cos(p * expected[i])) <= 1e-7);
            CHECK(std::abs(j.at("sin")[k][i].get<double>() - std::sin(p * expected[i])) <= 1e-7);
        }
    }
}

TEST_CASE("posenc-inspect: --seq-len drives dynamic NTK and LongRoPE, --layout overrides", "[inspect]") {
    const auto short_ctx = json::parse(inspect(config("phi-3-mini-128k.json") + " --json --seq-len 4096").out);
    const auto long_ctx = json::parse(inspect(config("phi-3-mini-128k.json") + " --json --seq-len 4097").out);
    CHECK(short_ctx.at("rope_type") == "longrope");
    CHECK(short_ctx.at("inv_freq")[5] != long_ctx.at("inv_freq")[5]);
    CHECK(std::abs(short_ctx.at("attention_factor").get<double>() - std::sqrt(1 + std::log(32.0) / std::log(4096.0))) <= 1e-15);

    const auto j = json::parse(inspect(config("deepseek-v3.json") + " --json --layout half_split").out);
    CHECK(j.at("layout") == "half_split");
    CHECK(j.at("rotary_dim") == 64);

    const auto g = json::parse(inspect(config("gemma-3-4b.json") + " --json --layer-type sliding_attention").out);
    CHECK(g.at("rope_type") == "default");
    CHECK(std::abs(g.at("inv_freq")[1].get<double>() - std::pow(10000.0, -2.0 / 256.0)) <= 1e-16);
}

TEST_CASE("posenc-inspect human-readable output names the regime of each pair", "[inspect]") {
    const auto r = inspect(config("qwen2.5-7b-yarn.json"));
    REQUIRE(r.status == 0);
    CHECK(r.out.find("extrapolated") != std::string::npos);
    CHECK(r.out.find("interpolated") != std::string::npos);
    CHECK(r.out.find("blended") != std::string::npos);
    CHECK(r.out.find("1.1386294361119891") != std::string::npos);  // 0.1 ln 4 + 1
}

TEST_CASE("posenc-inspect rejects bad input with a non-zero exit and one line on stderr", "[inspect]") {
    const std::string err = "posenc_inspect_stderr.txt";
    for (const std::string& args : {std::string("does-not-exist.json"), config("llama-3.1-8b.json") + " --seq-len x",
                                    config("llama-3.1-8b.json") + " --layout neox", std::string(""),
                                    config("llama-3.1-8b.json") + " --bogus",
                                    posenc_test::data_path("README.md")}) {
        INFO(args);
        const auto r = inspect(args, err);
        CHECK(r.status != 0);
        CHECK(r.out.empty());
        std::FILE* f = std::fopen(err.c_str(), "r");
        REQUIRE(f != nullptr);
        std::string text;
        char buf[1024];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
        std::fclose(f);
        CHECK(!text.empty());
        CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    }
    std::remove(err.c_str());
}
#endif
