// The snippets of docs/engine-integration.md and of README's 16-bit KV cache section, compiled and run
// here (the ctest engine_readme_snippets checks that every ```cpp block there appears in this file).
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "support/catch.hpp"

namespace {
/// Stands in for an engine's thread pool.
struct thread_pool {
    void parallel_for(std::size_t n, const std::function<void(std::size_t)>& f) {
        std::vector<std::thread> ts;
        for (std::size_t i = 1; i < n; ++i) ts.emplace_back(f, i);
        f(0);
        for (auto& t : ts) t.join();
        tasks += n;
    }
    [[nodiscard]] std::size_t tasks_run() const { return tasks; }
    std::size_t tasks = 0;
};
}  // namespace

TEST_CASE("README snippets: using posenc inside an engine", "[readme][engine]") {
    const std::size_t tokens = 300, q_heads = 16, kv_heads = 4, head_dim = 128, max_tokens = 4096, cache_len = 100;
    std::vector<float> q(tokens * q_heads * head_dim, 0.5f), k(tokens * kv_heads * head_dim, 0.25f);
    std::vector<float> q_norm_weight(head_dim, 1.0f), k_norm_weight(head_dim, 1.0f), gemma_weight(head_dim, 0.0f);
    thread_pool pool;
    posenc::rotary<posenc::half_split> rope({.head_dim = head_dim}, posenc::default_rope{.base = 1000000});
    const auto table = rope.table(max_tokens);
    const auto pos = posenc::position_ids::consecutive(cache_len, tokens);
    posenc::heads_view<float> qv(std::span<float>(q), {tokens, q_heads, head_dim});
    posenc::heads_view<float> kv(std::span<float>(k), {tokens, kv_heads, head_dim});

    // --- dtypes ---
    std::vector<posenc::bf16> q16(tokens * q_heads * head_dim, posenc::bf16(0.5f));
    posenc::heads_view<posenc::bf16> q16v(std::span<posenc::bf16>(q16), {tokens, q_heads, head_dim});
    rope.apply(table, q16v, pos);  // in place: computed in float32, rounded once (nearest even)
    // --- end ---
    const float c0 = table.cos(cache_len)[0], s0 = table.sin(cache_len)[0];
    CHECK(q16[0] == posenc::bf16(std::fma(-0.5f, s0, 0.5f * c0)));  // x₁c − x₂s, the product x₂s fused

    // --- cache ---
    std::vector<posenc::bf16> k_cache(max_tokens * kv_heads * head_dim);  // [max_tokens, kv_heads, head_dim]
    posenc::heads_view<const float> k_proj(std::span<const float>(k), {tokens, kv_heads, head_dim});
    posenc::heads_view<posenc::bf16> slot(std::span<posenc::bf16>(k_cache).subspan(cache_len * kv_heads * head_dim),
                                          {tokens, kv_heads, head_dim});  // a slot past the end throws (cache_len ≤ max_tokens)
    rope.apply_into(table, k_proj, slot, pos);  // float → rotated → bf16, one read, one write
    // or, with Q rotated in place in the same call:
    rope.apply_into(table, posenc::heads_view<const float>(qv), qv, k_proj, slot, pos);
    // --- end ---
    const std::span<posenc::bf16> last_slot = std::span<posenc::bf16>(k_cache).subspan((max_tokens - 1) * kv_heads * head_dim);
    CHECK_THROWS_AS(posenc::heads_view<posenc::bf16>(last_slot, {tokens, kv_heads, head_dim}), posenc::range_error);

    // --- determinism ---
    std::vector<float> k_decode(k.begin() + 7 * kv_heads * head_dim, k.begin() + 8 * kv_heads * head_dim);
    rope.apply(posenc::heads_view<float>(std::span<float>(k_decode), {1, kv_heads, head_dim}),
               posenc::position_ids::consecutive(cache_len + 7, 1));  // token 7 alone, cos/sin on the fly
    rope.apply(kv, pos);                                              // all 300 tokens in one call
    const bool same = std::memcmp(k_decode.data(), k.data() + 7 * kv_heads * head_dim, k_decode.size() * sizeof(float)) == 0;  // true
    // --- end ---
    CHECK(same);

    auto q_single = q, k_single = k;  // the single-threaded result, for the check below
    rope.apply(table, posenc::heads_view<float>(std::span<float>(q_single), {tokens, q_heads, head_dim}),
               posenc::heads_view<float>(std::span<float>(k_single), {tokens, kv_heads, head_dim}), pos);

    // --- threads ---
    rope.set_threads(8);  // large calls are split into up to 8 slices of tokens
    rope.set_executor([&pool](std::size_t n, const std::function<void(std::size_t)>& task) {
        pool.parallel_for(n, task);  // run task(0) … task(n − 1) anywhere; return when all are done
    });
    rope.apply(table, qv, kv, pos);  // bit-identical to the single-threaded result
    // --- end ---
    CHECK(std::memcmp(q.data(), q_single.data(), q.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(k.data(), k_single.data(), k.size() * sizeof(float)) == 0);
    CHECK(pool.tasks_run() > 1);  // the call was split onto the pool
    rope.set_executor({});
    rope.set_threads(1);

    // --- norm ---
    const posenc::head_rms_norm q_norm(q_norm_weight, 1e-6), k_norm(k_norm_weight, 1e-6);  // Qwen3
    const posenc::head_rms_norm gemma_norm(gemma_weight, 1e-6, posenc::rms_weight::offset_one);  // Gemma-3: 1 + w
    rope.apply_normed(table, q_norm, qv, k_norm, kv, pos);  // read, normalise, rotate, write: one pass
    // --- end ---
    rope.apply_normed(table, gemma_norm, qv, gemma_norm, kv, pos);
    // After a norm with weight 1 (or 1 + 0), every head has RMS 1 (rotation keeps the norm).
    double sq = 0;
    for (std::size_t i = 0; i < head_dim; ++i) sq += double(q[i]) * q[i];
    CHECK(std::abs(sq / head_dim - 1.0) < 1e-5);
}

TEST_CASE("README snippets: 16-bit KV caches, partial results and merge", "[readme][engine][attention]") {
    const std::size_t tokens = 700, new_tokens = 2, q_heads = 8, kv_heads = 2, head_dim = 64, max_tokens = 4096;
    std::vector<float> k(tokens * kv_heads * head_dim), v(k.size()), q(new_tokens * q_heads * head_dim);
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.37f * static_cast<float>(i)), v[i] = std::cos(0.11f * static_cast<float>(i));
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.53f * static_cast<float>(i));
    std::vector<float> out(new_tokens * q_heads * head_dim);
    const posenc::heads_view<const float> kv(k.data(), {tokens, kv_heads, head_dim}), vv(v.data(), {tokens, kv_heads, head_dim});
    const posenc::heads_view<const float> qv(q.data(), {new_tokens, q_heads, head_dim});
    const posenc::heads_view<float> outv(out.data(), {new_tokens, q_heads, head_dim});
    const auto pos = posenc::position_ids::consecutive(0, tokens);
    const auto q_pos = posenc::position_ids::consecutive(tokens, new_tokens);
    posenc::rotary<posenc::half_split> rope({.head_dim = head_dim}, posenc::default_rope{.base = 1000000});
    thread_pool pool;

    // --- cache16 ---
    posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> cache(
        rope, {.kv_heads = kv_heads, .head_dim = head_dim, .capacity = max_tokens});
    cache.append(kv, vv, pos);  // K rotated in float, then K and V rounded once to bf16
    posenc::attention_options opt{.threads = 4};
    opt.executor = [&pool](std::size_t n, const std::function<void(std::size_t)>& task) { pool.parallel_for(n, task); };
    posenc::attention(posenc::attention_encoding{rope}, qv, cache, outv, q_pos, posenc::causal_mask{}, opt);
    // --- end ---
    // The same bits as the float path on the cache's 16-bit values.
    std::vector<float> kf(cache.key_storage().size()), vf(kf.size()), ref(out.size());
    for (std::size_t i = 0; i < kf.size(); ++i)
        kf[i] = static_cast<float>(cache.key_storage()[i]), vf[i] = static_cast<float>(cache.value_storage()[i]);
    const posenc::heads_strides head_major{head_dim, max_tokens * head_dim};
    posenc::attention(posenc::attention_encoding{rope}, qv, posenc::heads_view<const float>(kf.data(), {tokens, kv_heads, head_dim}, head_major),
                      posenc::heads_view<const float>(vf.data(), {tokens, kv_heads, head_dim}, head_major),
                      posenc::heads_view<float>(ref.data(), {new_tokens, q_heads, head_dim}), q_pos, pos,
                      posenc::causal_mask{}, {.keys_transformed = true});
    CHECK(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0);

    // --- partials ---
    // Two shards of kv and vv (positions 0..tokens-1 split at half; two threads, two machines): each attends to its own...
    const std::size_t half = tokens / 2, rows = new_tokens * q_heads;
    std::vector<float> out_a(out.size()), out_b(out.size()), lse_a(rows), lse_b(rows);
    const posenc::heads_view<float> a(out_a.data(), {new_tokens, q_heads, head_dim}), b(out_b.data(), {new_tokens, q_heads, head_dim});
    const posenc::attention_encoding enc{rope};
    posenc::attention_partial(enc, qv, kv.tokens_slice(0, half), vv.tokens_slice(0, half), a, lse_a, q_pos,
                              posenc::position_ids::consecutive(0, half), posenc::causal_mask{});
    posenc::attention_partial(enc, qv, kv.tokens_slice(half, tokens - half), vv.tokens_slice(half, tokens - half), b, lse_b,
                              q_pos, posenc::position_ids::consecutive(half, tokens - half), posenc::causal_mask{});
    // ...and the parts merge, each weighed by its log-sum-exp (lse), to float rounding:
    posenc::merge_attention_partials({{a, lse_a}, {b, lse_b}}, outv);
    // --- end ---
    std::vector<float> one(out.size());
    posenc::attention(enc, qv, kv, vv, posenc::heads_view<float>(one.data(), {new_tokens, q_heads, head_dim}), q_pos, pos,
                      posenc::causal_mask{});
    float worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - one[i]));
    CHECK(worst <= 2e-6f);  // to float rounding (|v| ≤ 1)
}

TEST_CASE("engine docs snippet: a workspace per calling thread", "[readme][engine][attention][workspace]") {
    const std::size_t tokens = 200, q_heads = 8, kv_heads = 2, head_dim = 64;
    std::vector<float> k(tokens * kv_heads * head_dim), v(k.size()), qs(q_heads * head_dim), outs(qs.size()), plain(qs.size());
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.29f * static_cast<float>(i)), v[i] = std::cos(0.13f * static_cast<float>(i));
    for (std::size_t i = 0; i < qs.size(); ++i) qs[i] = std::sin(0.41f * static_cast<float>(i));
    posenc::rotary<posenc::half_split> rope({.head_dim = head_dim}, posenc::default_rope{});
    posenc::kv_cache cache(rope, {.kv_heads = kv_heads, .head_dim = head_dim, .capacity = tokens});
    cache.append(posenc::heads_view<const float>(k.data(), {tokens - 1, kv_heads, head_dim}),
                 posenc::heads_view<const float>(v.data(), {tokens - 1, kv_heads, head_dim}),
                 posenc::position_ids::consecutive(0, tokens - 1));
    const posenc::heads_view<const float> q(qs.data(), {1, q_heads, head_dim});
    const posenc::heads_view<float> out(outs.data(), {1, q_heads, head_dim});
    const auto q_pos = posenc::position_ids::consecutive(static_cast<std::int64_t>(tokens - 2), 1);

    // --- workspace ---
    posenc::attention_workspace ws;  // per calling thread, kept across layers and tokens
    posenc::attention_options opt{.workspace = &ws};
    posenc::attention(posenc::attention_encoding{rope}, q, cache, out, q_pos, posenc::causal_mask{}, opt);
    // --- end ---
    posenc::attention(posenc::attention_encoding{rope}, q, cache, posenc::heads_view<float>(plain.data(), {1, q_heads, head_dim}), q_pos,
                      posenc::causal_mask{});
    CHECK(std::memcmp(outs.data(), plain.data(), outs.size() * sizeof(float)) == 0);
    CHECK(ws.bytes() > 0);
}
