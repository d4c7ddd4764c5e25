// The load_layers snippet of docs/hf-config.md, compiled and run on a shipped config; the counts it
// checks are the file's own (Gemma-3 4B: 34 layers, every 6th full attention, the others sliding 1024).
#include <posenc/hf/layers.hpp>

#include <cstddef>
#include <filesystem>

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/readme.hpp"

TEST_CASE("README snippet: hf::load_layers", "[readme][hf][layer-rules]") {
    const std::filesystem::path path = posenc_test::config_path("gemma-3-4b.json");
    std::size_t nope = 0, sliding = 0;
    // --- snippet begin ---
    const posenc::hf::model_layers model = posenc::hf::load_layers(path);  // heads, kv_heads, head_dim, layers
    for (const posenc::hf::layer_encoding& layer : model.layers) {
        if (layer.rope) {
            const posenc::any_rotary rope = layer.rope->make_rotary(/*seq_len=*/4096);  // this layer's own RoPE
            (void)rope;
        } else {
            ++nope;  // NoPE layer (Llama 4, SmolLM3, Cohere2): no rotation; layer.temperature if set
        }
        if (layer.kind == posenc::hf::attention_kind::sliding) ++sliding;  // key j visible iff i - window < j <= i
        // layer.kind chunked: layer.chunk; layer.scale is the softmax scale, layer.softcap 0 = off
    }
    // --- snippet end ---
    CHECK(model.layers.size() == 34);
    CHECK(nope == 0);
    CHECK(sliding == 34 - 5);
}

TEST_CASE("docs/hf-config.md's load_layers block is the compiled snippet", "[readme][hf]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::doc_block("docs/hf-config.md", "load_layers") == snippet);
}
