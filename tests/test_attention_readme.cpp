// The "Attention" snippet of docs/attention.md, compiled and run as it stands; the test also checks that
// the page's block is this text.
#include <posenc/attention/attention.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "support/catch.hpp"
#include "support/readme.hpp"

TEST_CASE("README snippet: attention", "[readme][attention]") {
    // --- snippet begin ---
    // Q [T, 32, 128]; K and V [T, 8, 128] (GQA 4:1); out [T, 32, 128]: heads_views over your buffers.
    const std::size_t T = 100, D = 128;
    std::vector<float> q(T * 32 * D, 0.1f), k(T * 8 * D, 0.2f), v(T * 8 * D, 0.3f), out(T * 32 * D);
    posenc::heads_view<float> Q(std::span<float>(q), {T, 32, D}), K(std::span<float>(k), {T, 8, D}),
        V(std::span<float>(v), {T, 8, D}), O(std::span<float>(out), {T, 32, D});
    const auto pos = posenc::position_ids::consecutive(0, T);

    // Prefill with RoPE applied inside (in scratch: q and k are left as they are), causal, 2 threads.
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::llama3{.base = 500000, .factor = 8,
                                                                            .original_max_position = 8192});
    posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, pos, pos, posenc::causal_mask{}, {.threads = 2});

    // Other encodings and options: ALiBi with a sliding window; Gemma-2 soft-capping and gpt-oss sinks.
    posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = 32})}, Q, K, V, O, pos,
                      pos, posenc::sliding_window_mask{.window = 64});
    std::vector<float> sinks(32, 0.5f);  // one learned logit per query head
    posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, pos, pos, posenc::causal_mask{},
                      {.softcap = 50.0f, .sinks = sinks});

    // Decode: one new query at position T against keys that a KV cache rotated once when storing them.
    rope.apply(K, pos);
    std::vector<float> q1(32 * D, 0.1f), out1(32 * D);
    posenc::heads_view<float> Q1(std::span<float>(q1), {1, 32, D}), O1(std::span<float>(out1), {1, 32, D});
    posenc::attention(posenc::attention_encoding{rope}, Q1, K, V, O1, posenc::position_ids::consecutive(T, 1), pos,
                      posenc::causal_mask{}, {.keys_transformed = true});
    // --- snippet end ---
    // Every output row is a convex combination of V's rows (all 0.3) — scaled down by the sinks' share
    // of the denominator in the last prefill call.
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x > 0.0f && x < 0.3f; }));
    CHECK(std::all_of(out1.begin(), out1.end(), [](float x) { return std::abs(x - 0.3f) < 1e-5f; }));
}

TEST_CASE("docs/attention.md's attention block is the compiled snippet", "[readme][attention]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::doc_block("docs/attention.md", "attention") == snippet);
}
