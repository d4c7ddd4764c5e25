// The encodings snippet of docs/README.md, compiled and run as it stands (and the page's block checked
// to be its text), plus the role concepts each policy satisfies.
#include <posenc/posenc.hpp>

#include "support/catch.hpp"
#include "support/readme.hpp"

TEST_CASE("README snippet: ALiBi, T5, sinusoidal, xPos, NoPE", "[readme][encodings]") {
    // --- snippet begin ---
    // ALiBi: slopes for any head count, and a row segment of biases for one query.
    std::vector<double> slopes = posenc::alibi_slopes(12);  // the ALiBi authors' get_slopes
    posenc::alibi_bias alibi({.heads = 12, .order = posenc::bias_order::scale_then_add});
    std::vector<float> scores(128, 0.0f);  // qᵀk/√d of query 127 against keys 0..127
    alibi.add_to_scores(/*head*/ 3, /*query_pos*/ 127, posenc::position_ids::consecutive(0, 128), scores);

    // T5: HF's buckets (relative position = key − query) and the learned table [num_buckets, heads].
    posenc::t5_buckets buckets{.num_buckets = 32, .max_distance = 128, .bidirectional = true};
    std::int64_t bucket = buckets.bucket(-7);
    std::vector<float> table(32 * 12, 0.5f);  // relative_attention_bias.weight
    posenc::t5_bias t5(buckets, 12, table);
    t5.add_to_scores(3, 127, posenc::position_ids::consecutive(0, 128), scores);

    // Sinusoidal absolute embeddings: any row on the fly, or added in place to [tokens, d_model].
    posenc::sinusoidal pe{.d_model = 512, .form = posenc::sinusoidal_form::interleaved};
    std::vector<float> row = pe.row(100000);
    std::vector<float> embeddings(16 * 512, 0.0f);
    pe.add_to(embeddings, posenc::position_ids::consecutive(0, 16));

    // xPos on Q and K ([tokens, heads, head_dim] views over your buffers), NoPE, Llama 4's temperature.
    std::vector<float> q(16 * 12 * 64, 1.0f), k(16 * 12 * 64, 1.0f);
    posenc::heads_view<float> qv(std::span<float>(q), {16, 12, 64}), kv(std::span<float>(k), {16, 12, 64});
    auto positions = posenc::position_ids::consecutive(0, 16);
    posenc::xpos_rotary<posenc::half_split> xpos({.head_dim = 64}, posenc::xpos{});  // γ 0.4, scale_base 512
    xpos.apply(qv, kv, positions);
    posenc::nope{}.apply(qv, kv, positions);                         // the identity
    posenc::llama4_attn_temperature{}.apply(qv, positions);          // q ← q·s(pos) in NoPE layers
    // --- snippet end ---

    CHECK(slopes.size() == 12);
    CHECK(scores[127] == 0.5f);                                  // ALiBi 0 at i = j, plus table[0, 3]
    CHECK(scores[126] == static_cast<float>(-slopes[3] + 0.5));  // −m·1 + table[bucket(−1), 3]
    CHECK(bucket == 7);
    CHECK(row.size() == 512);
    CHECK(embeddings[1] == 1.0f);  // cos(0)
    CHECK(q[0] == 1.0f);           // position 0: no rotation, scale ζ⁰ = 1, s(0) = 1

    // Values where the encodings' formulas matter (closed forms in double): far keys, a late
    // position, pairs other than 0.
    CHECK(std::abs(scores[0] - (-slopes[3] * 127.0 + 0.5)) <= 1e-5);  // ALiBi −m·127, T5 bucket(−127): 0.5
    for (std::size_t i : {std::size_t{7}, std::size_t{200}}) {
        const double ang = 100000.0 * std::pow(10000.0, -2.0 * static_cast<double>(i) / 512.0);
        CHECK(std::abs(row[2 * i] - std::sin(ang)) <= 1e-6);
        CHECK(std::abs(row[2 * i + 1] - std::cos(ang)) <= 1e-6);
        const double ang3 = 3.0 * std::pow(10000.0, -2.0 * static_cast<double>(i) / 512.0);
        CHECK(std::abs(embeddings[3 * 512 + 2 * i] - std::sin(ang3)) <= 1e-6);
        CHECK(std::abs(embeddings[3 * 512 + 2 * i + 1] - std::cos(ang3)) <= 1e-6);
    }
    // xPos, token 5 (head 2), pair 10 = lanes (10, 42): rotated by 5·θ₁₀ and scaled by ζ₁₀^(±5/512) with
    // ζᵢ = (2i/64 + 0.4)/1.4; inputs are all 1, and s(5) = 1 (Llama 4's floor scale is 8192).
    const double theta = std::pow(10000.0, -20.0 / 64.0), zeta = (20.0 / 64.0 + 0.4) / 1.4;
    const double c5 = std::cos(5 * theta), s5 = std::sin(5 * theta);
    const std::size_t at = (5 * 12 + 2) * 64;
    CHECK(std::abs(q[at + 10] - std::pow(zeta, 5.0 / 512) * (c5 - s5)) <= 1e-6);
    CHECK(std::abs(q[at + 42] - std::pow(zeta, 5.0 / 512) * (c5 + s5)) <= 1e-6);
    CHECK(std::abs(k[at + 10] - std::pow(zeta, -5.0 / 512) * (c5 - s5)) <= 1e-6);
    CHECK(std::abs(k[at + 42] - std::pow(zeta, -5.0 / 512) * (c5 + s5)) <= 1e-6);
}

TEST_CASE("each policy plays its role", "[concepts]") {
    static_assert(posenc::score_bias<posenc::no_bias>);
    static_assert(posenc::score_bias<posenc::alibi_bias>);
    static_assert(posenc::score_bias<posenc::t5_bias>);
    static_assert(posenc::qk_transform<posenc::nope>);
    static_assert(posenc::qk_transform<posenc::xpos_rotary<posenc::interleaved>>);
    static_assert(posenc::qk_transform<posenc::rotary<posenc::interleaved>>);
    static_assert(!posenc::score_bias<posenc::alibi>);  // the parameters are not the policy
    std::vector<float> scores{1.0f, 2.0f};
    posenc::no_bias{}.add_to_scores(0, 5, posenc::position_ids::consecutive(0, 2), scores);
    CHECK(scores == std::vector<float>{1.0f, 2.0f});
    CHECK(posenc::no_bias{}.order() == posenc::bias_order::scale_then_add);

    // position_ids reports runs, so policies can take a straight loop.
    CHECK(posenc::position_ids::consecutive(5, 10).is_consecutive());
    CHECK(posenc::position_ids::consecutive(5, 10).front() == 5);
    const std::vector<std::int64_t> ids{5, 6, 7};
    CHECK(!posenc::position_ids(ids).is_consecutive());
    CHECK(!posenc::position_ids::constant(3, 4).is_consecutive());
    CHECK(posenc::position_ids::constant(3, 1).is_consecutive());
}

TEST_CASE("docs/README.md's encodings block is the compiled snippet", "[readme][encodings]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::doc_block("docs/README.md", "encodings") == snippet);
}
