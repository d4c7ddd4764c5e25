// The snippets of the README's "Using posenc inside an engine" section, compiled and run here (the
// ctest engine_readme_snippets checks that every ```cpp block of that section appears in this file).
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
