// Malformed config input: the classes a ~3000-input trial found (issue 9), one regression test per
// listed input, and a compact corpus generated at test time (every key of several configs × every
// value class), run through the reader in-process and through posenc-inspect as a program. The
// larger corpus and its runner: tests/fuzz/malformed_corpus.py.
#include <posenc/hf/encoding.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/golden.hpp"
#include "support/inspect.hpp"

using nlohmann::json;
using posenc_test::data_path;
using posenc_test::expect_config_error;

namespace {

constexpr std::size_t deep = 70000;  // the trial's crash

std::string deep_list(std::size_t n) { return std::string(n, '[') + std::string(n, ']'); }

/// A JSON value nested `n` levels deep, built without recursion (as a caller's own code could).
json deep_json(std::size_t n) {
    json root = json::array();
    json* cur = &root;
    for (std::size_t i = 1; i < n; ++i) {
        cur->push_back(json::array());
        cur = &cur->back();
    }
    return root;
}

const json llama{{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                 {"max_position_embeddings", 8192}};

json with(json c, const json& patch) {
    c.merge_patch(patch);
    return c;
}

/// Replaces the value at "key" or "dict.key" of `cfg` by raw JSON text (which may be invalid JSON).
std::string with_raw(json cfg, const std::string& path, const std::string& raw) {
    const std::string marker = "@@VALUE@@";
    const auto dot = path.find('.');
    if (dot == std::string::npos) {
        cfg[path] = marker;
    } else {
        json& d = cfg[path.substr(0, dot)];
        if (!d.is_object()) d = json::object();
        d[path.substr(dot + 1)] = marker;
    }
    std::string text = cfg.dump();
    text.replace(text.find("\"" + marker + "\""), marker.size() + 2, raw);
    return text;
}

/// What a rejected config must look like: one bounded line, no NUL.
void check_message(const std::string& what) {
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find('\r') == std::string::npos);
    CHECK(what.find('\0') == std::string::npos);
    CHECK(what.size() < 1200);
}

/// Reads `text`; returns the error message ("" when accepted). Anything but posenc::error fails.
std::string read_text(const std::string& text) {
    try {
        const auto enc = posenc::hf::position_encoding_from_string(text);
        if (const auto* cfg = std::get_if<posenc::hf::model_config>(&enc)) {
            const auto f = posenc::frequencies(cfg->rope.schedule, cfg->rope.dims.rotary(), 0);
            for (const double v : f.inv_freq) CHECK((std::isnormal(v) && v <= posenc::detail::max_inv_freq));
            CHECK(std::isfinite(f.attention_factor));
            CHECK(std::isfinite(cfg->rope.softmax_scale_multiplier()));
        }
        return "";
    } catch (const posenc::error& e) {
        check_message(e.what());
        return e.what();
    } catch (const std::exception& e) {
        FAIL("not a posenc::error: " << e.what());
    }
    return "";
}

posenc::config_error config_error_of(const std::string& text) {
    try {
        (void)posenc::hf::position_encoding_from_string(text);
    } catch (const posenc::config_error& e) {
        check_message(e.what());
        return e;
    }
    FAIL("no config_error");
    throw;
}

struct temp_dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("posenc_hardening_" + std::to_string(::getpid()));
    temp_dir() { std::filesystem::create_directories(path); }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string write(const std::string& name, const std::string& text) const {
        const auto p = path / name;
        std::ofstream(p, std::ios::binary) << text;
        return p.string();
    }
};

}  // namespace

// ---- One regression test per input the trial listed ------------------------------------------

TEST_CASE("hardening: a config nested 70000 levels deep is rejected at depth 64, from a file and from a string",
          "[hf][hardening]") {
    const temp_dir dir;
    const std::string file = dir.write("deep.json", deep_list(deep));
    expect_config_error([&] { (void)posenc::hf::load_config(file); }, "config", "deeper than 64");
    expect_config_error([&] { (void)posenc::hf::load_position_encoding(file); }, "config", "deeper than 64");
    // Inside a key: the message says where.
    const auto e = config_error_of(with_raw(llama, "rope_scaling.factor", deep_list(deep)));
    CHECK(e.key() == "config");
    CHECK(std::string(e.what()).find("rope_scaling.factor") != std::string::npos);
    // 64 levels are fine for the parser (the value is then rejected as a value).
    CHECK(config_error_of(with_raw(llama, "rope_scaling.factor", deep_list(62))).key() == "rope_scaling.factor");
}

TEST_CASE("hardening: a deep value built in code is echoed shortly, never dumped recursively", "[hf][hardening]") {
    // (Moved into place, never copied: nlohmann's copy is itself recursive.)
    const json d = deep_json(deep);
    expect_config_error([&] { (void)posenc::hf::parse_config(d); }, "config", "[[[[");
    json c = llama;
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    c["rope_scaling"]["bogus"] = deep_json(deep);
    expect_config_error([&] { (void)posenc::hf::parse_config(c); }, "rope_scaling.bogus", "...");
    c = llama;
    c["model_type"] = "qwen2";  // a family that reads layer_types (Llama's attention ignores it)
    c["layer_types"] = json::array();
    c["layer_types"].push_back(deep_json(deep));
    expect_config_error([&] { (void)posenc::hf::parse_config(c); }, "layer_types", "[[[");
    c = {{"model_type", "mpt"}};
    c["attn_config"] = deep_json(deep);
    expect_config_error([&] { (void)posenc::hf::parse_position_encoding(c); }, "attn_config");
}

TEST_CASE("hardening: factors that overflow a division are rejected by key (linear 4.9e-324, yarn 1e-310, LongRoPE lists)",
          "[hf][hardening]") {
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "rope_scaling", R"({"rope_type": "linear", "factor": 4.9e-324})")); },
                        "rope_scaling.factor", "5e-324");
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "rope_scaling", R"({"rope_type": "yarn", "factor": 1e-310})")); },
                        "rope_scaling.factor", "1e-310");
    // Normal but tiny: inv_freq = 1/factor would make angles overflow.
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 1e-300}}}})); },
                        "rope_scaling.factor", "1e-300");
    // Huge: inv_freq underflows to 0.
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"rope_theta", 1e300}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 1e300}}}})); },
                        "rope_scaling.factor", "1e+300");
    json phi = with(llama, {{"model_type", "phi3"}, {"original_max_position_embeddings", 4096}});
    phi["rope_scaling"] = {{"type", "longrope"}, {"short_factor", std::vector<double>(64, 4.9e-324)},
                           {"long_factor", std::vector<double>(64, 1.0)}};
    expect_config_error([&] { (void)posenc::hf::parse_config(phi); }, "rope_scaling.short_factor");
    phi["rope_scaling"]["short_factor"] = std::vector<double>(64, 1e-300);
    expect_config_error([&] { (void)posenc::hf::parse_config(phi); }, "rope_scaling.short_factor", "1e-300");
    phi["rope_scaling"]["short_factor"] = std::vector<double>(64, 1.0);
    phi["rope_scaling"]["long_factor"] = std::vector<double>(64, 1e-310);
    expect_config_error([&] { (void)posenc::hf::parse_config(phi); }, "rope_scaling.long_factor");
    // The long list is checked when it is used, too: the schedule's own check, named by the list.
    phi["rope_scaling"]["long_factor"] = std::vector<double>(64, 1.0);
    const auto spec = posenc::hf::parse_config(phi).rope;
    auto l = std::get<posenc::longrope>(spec.schedule);
    l.long_factor.assign(64, 1e-300);
    expect_config_error([&] { (void)l.frequencies(128, 1 << 20); }, "long_factor", "1e-300");
    // YaRN's amplitude: mscale/mscale_all_dim that divide by zero or give an absurd amplitude.
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 1.0}, {"mscale_all_dim", 1e300}}}})); },
                        "rope_scaling.mscale_all_dim", "1e+300");  // its denominator alone overflows the range
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1e30}}}})); },
                        "rope_scaling.attention_factor");
}

TEST_CASE("hardening: numbers beyond double's range and file errors are posenc errors naming the file and key",
          "[hf][hardening]") {
    const temp_dir dir;
    const std::string big = dir.write("big.json", with_raw(llama, "rope_theta", "1e400"));
    expect_config_error([&] { (void)posenc::hf::load_config(big); }, "rope_theta", "big.json");
    expect_config_error([&] { (void)posenc::hf::load_config(big); }, "rope_theta", "1e400");
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "rope_scaling.factor", "-1e400")); },
                        "rope_scaling.factor", "-1e400");
    expect_config_error([&] { (void)posenc::hf::load_config(dir.path); }, "config", "is a directory");
    const std::string fifo = (dir.path / "fifo.json").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    expect_config_error([&] { (void)posenc::hf::load_config(fifo); }, "config", "not a regular file");
    expect_config_error([&] { (void)posenc::hf::load_config(dir.path / "absent.json"); }, "config", "no such file");
    expect_config_error([&] { (void)posenc::hf::load_config(dir.write("empty.json", "")); }, "config", "not valid JSON");
    expect_config_error([&] { (void)posenc::hf::load_config(dir.write("bad-utf8.json", "{\"model_type\": \"\xff\"}")); },
                        "config", "not valid JSON");
}

TEST_CASE("hardening: integers beyond the key's range are errors naming the key, never wrapped or absent",
          "[hf][hardening]") {
    expect_config_error([] { (void)posenc::hf::config_from_string(R"({"model_type": "llama", "head_dim": 9223372036854775808})"); },
                        "head_dim", "9223372036854775808");
    expect_config_error(
        [] { (void)posenc::hf::config_from_string(with_raw(llama, "max_position_embeddings", "9223372036854775808")); },
        "max_position_embeddings", "9223372036854775808");
    expect_config_error(
        [] { (void)posenc::hf::config_from_string(with_raw(llama, "max_position_embeddings", "18446744073709551615")); },
        "max_position_embeddings", "18446744073709551615");
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "head_dim", "-9223372036854775808")); },
                        "head_dim", "-9223372036854775808");
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "head_dim", "128.5")); }, "head_dim", "128.5");
    expect_config_error([] { (void)posenc::hf::config_from_string(with_raw(llama, "head_dim", "1e300")); }, "head_dim", "1e+300");
    CHECK(posenc::hf::config_from_string(with_raw(llama, "head_dim", "128.0")).rope.dims.head_dim == 128);
}

TEST_CASE("hardening: sizes that drive work or allocation have limits, named by key", "[hf][hardening]") {
    namespace L = posenc::hf;
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"head_dim", std::int64_t{1} << 31}})); }, "head_dim");
    CHECK(posenc::hf::parse_config(with(llama, {{"head_dim", L::limits::head_dim}})).rope.dims.head_dim == 65536);
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"head_dim", L::limits::head_dim + 2}})); }, "head_dim");
    expect_config_error([] { (void)posenc::hf::parse_config(json{{"model_type", "gemma3_text"}, {"num_hidden_layers", 100000000}}); },
                        "num_hidden_layers", "100000000");
    expect_config_error([] { (void)posenc::hf::parse_position_encoding(json{{"model_type", "bloom"}, {"n_head", std::int64_t{1} << 32}}); },
                        "n_head", "4294967296");
    expect_config_error([] { (void)posenc::hf::parse_position_encoding(json{{"model_type", "t5"}, {"num_heads", 1 << 20}}); },
                        "num_heads");
    expect_config_error([] { (void)posenc::hf::parse_position_encoding(json{{"model_type", "mpt"}, {"n_heads", 1 << 20}, {"attn_config", {{"alibi", true}}}}); },
                        "n_heads");
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"hidden_size", 1 << 30}})); }, "hidden_size");
    expect_config_error([] { (void)posenc::hf::parse_config(with(llama, {{"hidden_size", 1 << 24}, {"num_attention_heads", 1}})); },
                        "hidden_size");  // head_dim 2^24 > 65536
    expect_config_error([] { (void)posenc::hf::parse_position_encoding(json{{"model_type", "t5"}, {"relative_attention_max_distance", std::int64_t{1} << 40}}); },
                        "relative_attention_max_distance");
    json lt = llama;
    lt["model_type"] = "qwen2";  // a family that reads layer_types
    lt["layer_types"] = std::vector<std::string>(L::limits::layers + 1, "full_attention");
    expect_config_error([&] { (void)posenc::hf::parse_config(lt); }, "layer_types");
    json lr = with(llama, {{"model_type", "phi3"}, {"original_max_position_embeddings", 4096}});
    lr["rope_scaling"] = {{"type", "longrope"}, {"short_factor", std::vector<double>(40000, 1.0)}, {"long_factor", std::vector<double>(64, 1.0)}};
    expect_config_error([&] { (void)posenc::hf::parse_config(lr); }, "rope_scaling.short_factor", "more than 32768");
    const temp_dir dir;
    const std::string huge = dir.write("huge.json", std::string((64 << 20) + 1, ' '));
    expect_config_error([&] { (void)posenc::hf::load_config(huge); }, "config", "64 MiB");
}

TEST_CASE("hardening: messages name the key as written in the file, shortened, one line", "[hf][hardening]") {
    // A 50 MB string is echoed as its first ~80 characters.
    const std::string fifty_mb(50'000'000, 'x');
    const auto e = config_error_of(with(llama, {{"rope_scaling", {{"rope_type", fifty_mb}}}}).dump());
    CHECK(e.key() == "rope_scaling.rope_type");
    CHECK(std::string(e.what()).size() < 400);
    CHECK(std::string(e.what()).find("string of 50000000 bytes") != std::string::npos);
    // GPT-NeoX: rotary_pct, not partial_rotary_factor.
    const json neox{{"model_type", "gpt_neox"}, {"hidden_size", 6144}, {"num_attention_heads", 64}, {"rotary_pct", 1e-9}};
    expect_config_error([&] { (void)posenc::hf::parse_config(neox); }, "rotary_pct", "rotary_dim = 0");  // not "0 = all lanes"
    expect_config_error([&] { (void)posenc::hf::parse_config(with(neox, {{"rotary_pct", 2.0}})); }, "rotary_pct", "2");
    expect_config_error([&] { (void)posenc::hf::parse_config(with(neox, {{"rotary_pct", 0.0313}})); }, "rotary_pct",
                        "rotary_dim = 3");  // int(96 × 0.0313) = 3 is odd
    expect_config_error([&] { (void)posenc::hf::parse_config(with(neox, {{"rotary_pct", "a"}})); }, "rotary_pct");
}

TEST_CASE("hardening: a long non-ASCII value is echoed shortened at a character boundary (valid UTF-8)", "[hf][hardening]") {
    // errors.hpp: messages are cut at a UTF-8 boundary. Values of 2-, 3- and 4-byte characters, ~80 bytes of which
    // are echoed: the echo must not end in part of a character.
    auto valid_utf8 = [](const std::string& s) {
        for (std::size_t i = 0; i < s.size();) {
            const auto c = static_cast<unsigned char>(s[i]);
            const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
            if (n == 0 || i + n > s.size()) return false;
            for (std::size_t k = 1; k < n; ++k)
                if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
            i += n;
        }
        return true;
    };
    for (const std::string& ch : {std::string("\xc3\xa9"), std::string("\xe2\x82\xac"), std::string("\xf0\x9d\x84\x9e")}) {
        std::string value;
        for (int i = 0; i < 100; ++i) value += ch;
        const auto e = config_error_of(with(llama, {{"rope_scaling", {{"rope_type", value}}}}).dump());
        INFO("character of " << ch.size() << " bytes");
        CHECK(e.key() == "rope_scaling.rope_type");
        CHECK(e.value().find("...") != std::string::npos);
        CHECK(valid_utf8(e.value()));
        CHECK(valid_utf8(e.what()));
    }
}

TEST_CASE("hardening: Phi-3's top-level original length, MPT's alibi_bias_max, NUL in a key", "[hf][hardening]") {
    json phi = json::parse(std::ifstream(data_path("configs/phi-3-mini-128k.json")));
    phi["original_max_position_embeddings"] = 0;
    expect_config_error([&] { (void)posenc::hf::parse_config(phi); }, "original_max_position_embeddings", "0");
    const json mpt{{"model_type", "mpt"}, {"n_heads", 32}, {"attn_config", {{"alibi", true}, {"alibi_bias_max", -1}}}};
    expect_config_error([&] { (void)posenc::hf::parse_position_encoding(mpt); }, "attn_config.alibi_bias_max", "-1");
    const json mpt_big{{"model_type", "mpt"}, {"n_heads", 32}, {"attn_config", {{"alibi", true}, {"alibi_bias_max", 5000}}}};
    expect_config_error([&] { (void)posenc::hf::parse_position_encoding(mpt_big); }, "attn_config.alibi_bias_max", "5000");
    const std::string nul_key = with_raw(llama, "rope_scaling", R"({"rope_type": "linear", "factor": 2, "a\u0000b\nc": 1})");
    const auto e = config_error_of(nul_key);
    CHECK(e.key() == "rope_scaling.a\\x00b\\x0ac");
    CHECK(std::string(e.what()).find("a\\x00b\\x0ac") != std::string::npos);
}

// ---- A compact corpus, generated here --------------------------------------------------------

namespace {

std::string repeat(const std::string& s, std::size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    for (std::size_t i = 0; i < n; ++i) out += s;
    return out;
}

// Raw JSON text for every value class (the large corpus has more).
const std::vector<std::string>& value_classes() {
    static const std::vector<std::string> v{
        "0", "-1", "0.5", "1.5", "9223372036854775807", "9223372036854775808", "18446744073709551615",
        "-9223372036854775809", "2147483648", "4294967296", "100000000", "1e20", "1e308", "1e400", "-1e400",
        "4.9e-324", "1e-310", "1e-300", "-0.0", "NaN", "Infinity", "\"4\"", "true", "null", "[]", "{}", "[1, 2]",
        "{\"a\": 1}", "\"a\\u0000b\"", "\"a\\nb\"", "\"" + std::string(100000, 'x') + "\"", deep_list(deep),
        repeat("{\"a\":", deep) + "1" + repeat("}", deep), "[1, \"a\", null]", "[" + repeat("4.9e-324, ", 63) + "4.9e-324]",
        "[" + repeat("1e308, ", 63) + "1e308]"};
    return v;
}

struct base_config {
    const char* name;
    json cfg;
    std::vector<std::string> keys;
};

std::vector<base_config> bases() {
    auto file = [](const char* n) { return json::parse(std::ifstream(data_path(std::string("configs/") + n))); };
    const std::vector<std::string> rope_keys{"rope_scaling.factor", "rope_scaling.rope_type", "rope_scaling.type",
                                             "rope_scaling.original_max_position_embeddings", "rope_scaling.beta_fast",
                                             "rope_scaling.beta_slow", "rope_scaling.mscale", "rope_scaling.mscale_all_dim",
                                             "rope_scaling.attention_factor", "rope_scaling.low_freq_factor",
                                             "rope_scaling.high_freq_factor", "rope_scaling.short_factor",
                                             "rope_scaling.long_factor", "rope_scaling.truncate"};
    const std::vector<std::string> top_keys{"model_type", "head_dim", "hidden_size", "num_attention_heads",
                                            "max_position_embeddings", "original_max_position_embeddings", "rope_theta",
                                            "partial_rotary_factor", "rope_scaling", "rope_parameters", "layer_types",
                                            "num_hidden_layers", "text_config"};
    auto all = [&](std::vector<std::string> extra) {
        extra.insert(extra.end(), top_keys.begin(), top_keys.end());
        extra.insert(extra.end(), rope_keys.begin(), rope_keys.end());
        return extra;
    };
    return {
        {"llama-3.1", file("llama-3.1-8b.json"), all({})},
        {"qwen-yarn", file("qwen2.5-7b-yarn.json"), all({})},
        {"phi-3", file("phi-3-mini-128k.json"), all({})},
        {"deepseek-v3", file("deepseek-v3.json"), all({"qk_rope_head_dim", "rope_interleave"})},
        {"gpt-neox", file("gpt-neox-20b.json"), all({"rotary_pct", "rotary_emb_base"})},
        {"gpt-j", file("gpt-j-6b.json"), all({"rotary_dim", "n_embd", "n_head", "n_positions"})},
        {"gemma-3", file("gemma-3-4b.json"), all({"text_config.num_hidden_layers", "text_config.sliding_window_pattern",
                                                   "text_config.head_dim", "text_config.rope_local_base_freq"})},
        {"bloom", file("bloom-560m.json"), {"n_head", "num_attention_heads", "model_type"}},
        {"mpt", file("mpt-7b.json"), {"n_heads", "attn_config", "attn_config.alibi", "attn_config.alibi_bias_max"}},
        {"falcon-alibi", file("falcon-rw-1b.json"), {"alibi", "num_attention_heads"}},
        {"t5", file("t5-small.json"), {"num_heads", "relative_attention_num_buckets", "relative_attention_max_distance"}},
    };
}

}  // namespace

TEST_CASE("hardening corpus: every value class in every key of 11 configs ends in a posenc::error or a usable encoding",
          "[hf][hardening]") {
    std::size_t inputs = 0, rejected = 0;
    for (const auto& b : bases())
        for (const auto& key : b.keys)
            for (const auto& raw : value_classes()) {
                INFO(b.name << ": " << key << " = " << raw.substr(0, 60));
                if (!read_text(with_raw(b.cfg, key, raw)).empty()) ++rejected;
                ++inputs;
            }
    // File-level damage: truncations of every config, top-level non-objects.
    for (const auto& b : bases()) {
        const std::string text = b.cfg.dump(2);
        for (const std::size_t cut : {std::size_t{0}, std::size_t{1}, text.size() / 2, text.size() - 1}) {
            INFO(b.name << " cut at " << cut);
            CHECK(!read_text(text.substr(0, cut)).empty());
            ++inputs;
            ++rejected;
        }
    }
    for (const auto& raw : value_classes()) {
        CHECK(!read_text(raw).empty());
        ++inputs;
        ++rejected;
    }
    std::size_t keys = 0;
    for (const auto& b : bases()) keys += b.keys.size();
    REQUIRE(inputs == keys * value_classes().size() + bases().size() * 4 + value_classes().size());
    CHECK(rejected > inputs / 2);  // most mutations are errors; the rest were checked usable
}

#ifdef POSENC_INSPECT_PATH
TEST_CASE("hardening corpus through posenc-inspect: exit 0 with valid JSON, or exit 1 with one line on stderr",
          "[inspect][hardening]") {
    const temp_dir dir;
    std::vector<std::string> files;
    std::size_t n = 0;
    for (const auto& b : bases())
        for (const std::string& key : {b.keys[0], b.keys[1], b.keys.back()})
            for (const std::string raw : {"1e400", "9223372036854775808", "4.9e-324", "\"a\\u0000\\nb\"", "null", "{}"}) {
                std::string name = std::to_string(n++);  // (not "f" + …: g++ 12 -Wrestrict false positive)
                name += ".json";
                files.push_back(dir.write(name, with_raw(b.cfg, key, raw)));
            }
    files.push_back(dir.write("deep.json", deep_list(deep)));
    files.push_back(dir.write("deep-key.json", with_raw(llama, "rope_scaling", deep_list(deep))));
    files.push_back(dir.write("empty.json", ""));
    files.push_back(dir.write("truncated.json", llama.dump().substr(0, 20)));
    files.push_back(dir.write("nul.json", std::string(16, '\0')));
    files.push_back(dir.write("linear-denormal.json", with_raw(llama, "rope_scaling", R"({"rope_type": "linear", "factor": 4.9e-324})")));
    files.push_back(dir.write("huge-string.json", with(llama, {{"model_type", std::string(1 << 20, 'y')}}).dump()));
    files.push_back(dir.path.string());  // a directory
    files.push_back(data_path("configs/llama-3.1-8b.json"));  // and good ones
    files.push_back(data_path("configs/t5-small.json"));
    std::size_t ok = 0, failed = 0;
    for (const auto& f : files)
        for (const bool as_json : {true, false}) {
            INFO(f << (as_json ? " --json" : ""));
            const auto r = posenc_test::run_inspect("'" + f + "'" + (as_json ? " --json" : ""));
            REQUIRE(r.exit_code >= 0);
            if (r.exit_code == 0) {
                ++ok;
                CHECK(r.err.empty());
                if (as_json) CHECK(json::accept(r.out));
            } else {
                ++failed;
                CHECK(r.exit_code == 1);
                CHECK(r.out.empty());
                CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
                CHECK((!r.err.empty() && r.err.back() == '\n'));
                CHECK(r.err.size() < 1200);
            }
        }
    REQUIRE(ok + failed == 2 * files.size());
    CHECK(ok >= 4);  // the good configs (and mutations of unread keys) still work
}

TEST_CASE("hardening: posenc-inspect's T5 range loop, --alibi, --sinusoidal and --positions limits", "[inspect][hardening]") {
    auto run = [](const std::string& args, std::string* err_text = nullptr) {
        const auto r = posenc_test::run_inspect(args);
        if (err_text) *err_text = r.err;
        REQUIRE(r.exit_code >= 0);
        if (r.exit_code != 0) {
            CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
            CHECK(r.out.empty());
        }
        return std::pair{r.exit_code, r.out};
    };
    const std::string t5 = "--t5 --num-buckets 32 --max-distance 128 --bidirectional --json --relative-range ";
    const auto [rc, out] = run(t5 + "9223372036854775807:9223372036854775807");
    REQUIRE(rc == 0);
    CHECK(json::parse(out).at("relative_positions") == json::array({std::numeric_limits<std::int64_t>::max()}));
    const auto [rc2, out2] = run(t5 + "9223372036854775806:9223372036854775807");
    REQUIRE(rc2 == 0);
    CHECK(json::parse(out2).at("buckets") == json::array({31, 31}));
    std::string err;
    CHECK(run(t5 + "-9223372036854775808:9223372036854775807", &err).first == 1);
    CHECK(err.find("--relative-range") != std::string::npos);
    CHECK(run("--t5 --num-buckets 32 --max-distance 9223372036854775807 --bidirectional", &err).first == 1);
    CHECK(err.find("max_distance") != std::string::npos);
    CHECK(run("--alibi 100000000", &err).first == 1);
    CHECK(err.find("--alibi") != std::string::npos);
    CHECK(run("--alibi 65536 --json").first == 0);
    CHECK(run("--alibi 8 --max-bias 1e400", &err).first == 1);
    CHECK(err.find("max_bias") != std::string::npos);
    CHECK(run("--sinusoidal 1000000000 --variant concat --positions 1", &err).first == 1);
    CHECK(err.find("--sinusoidal") != std::string::npos);
    std::string many = "0";
    for (int i = 0; i < 20; ++i) many += ",1";
    CHECK(run("--sinusoidal 65536 --variant concat --positions " + many, &err).first == 1);
    CHECK(err.find("--positions") != std::string::npos);
    CHECK(run(data_path("configs/llama-3.1-8b.json") + " --json --seq-len 9223372036854775807").first == 0);
    const auto [rc3, out3] = run(data_path("configs/llama-3.1-8b.json") + " --json --positions 9223372036854775807");
    REQUIRE(rc3 == 0);
    CHECK(json::accept(out3));
}
#endif
