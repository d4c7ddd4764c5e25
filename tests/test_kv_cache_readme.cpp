// The README's "KV cache" snippet, compiled and run as it stands; the test also checks that the
// README's block is this text.
#include <posenc/attention/kv_cache.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "support/catch.hpp"
#include "support/readme.hpp"

TEST_CASE("README snippet: kv_cache", "[readme][kv_cache]") {
    // --- snippet begin ---
    // One layer's cache: 8 kv heads of 128, room for 4096 tokens, keys rotated by this layer's RoPE.
    const std::size_t D = 128, prompt = 100;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 10000});
    posenc::kv_cache cache(rope, {.kv_heads = 8, .head_dim = D, .capacity = 4096});
    cache.set_threads(2);  // large appends: K rotated and V copied on 2 threads

    // Prefill: append the prompt's K and V (K is rotated while it is written: one read, one write).
    std::vector<float> k(prompt * 8 * D, 0.2f), v(prompt * 8 * D, 0.3f);
    cache.append(posenc::heads_view<float>(std::span<float>(k), {prompt, 8, D}),
                 posenc::heads_view<float>(std::span<float>(v), {prompt, 8, D}),
                 posenc::position_ids::consecutive(0, prompt));

    // Decode: append the new token's K and V, then its 32 query heads attend to the whole cache.
    std::vector<float> q1(32 * D, 0.1f), k1(8 * D, 0.2f), v1(8 * D, 0.3f), out1(32 * D);
    const auto p = posenc::position_ids::consecutive(cache.next_position(), 1);
    cache.append(posenc::heads_view<float>(std::span<float>(k1), {1, 8, D}),
                 posenc::heads_view<float>(std::span<float>(v1), {1, 8, D}), p);
    posenc::attention(posenc::attention_encoding{rope}, posenc::heads_view<float>(std::span<float>(q1), {1, 32, D}),
                      cache, posenc::heads_view<float>(std::span<float>(out1), {1, 32, D}), p, posenc::causal_mask{});

    // Context shift when the cache fills up: keep 4 sink tokens and the last 64, re-rotated to follow them.
    cache.context_shift(4, 64);  // cache.size() == 68, positions 0..67; next_position() == 68
    // --- snippet end ---
    CHECK(cache.size() == 68);
    CHECK(cache.next_position() == 68);
    CHECK(std::all_of(out1.begin(), out1.end(), [](float x) { return std::abs(x - 0.3f) < 1e-5f; }));
}

TEST_CASE("README's kv_cache block is the compiled snippet", "[readme][kv_cache]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::readme_block("kv_cache") == snippet);
}
