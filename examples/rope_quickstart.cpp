// The README's usage snippet, compiled and run in CI.
#include <posenc/posenc.hpp>

#include <cstdio>
#include <vector>

int main() {
    // Llama-3-style model: 32 query heads, 8 key/value heads, head_dim 128, YaRN ×4 over 8192 tokens.
    const std::size_t tokens = 16, q_heads = 32, kv_heads = 8, head_dim = 128;
    std::vector<float> q(tokens * q_heads * head_dim, 0.5f), k(tokens * kv_heads * head_dim, 0.25f);

    posenc::rotary<posenc::half_split> rope({.head_dim = head_dim},
                                            posenc::yarn{.base = 500000, .factor = 4, .original_max_position = 8192});
    posenc::heads_view<float> qv(std::span<float>(q), {tokens, q_heads, head_dim});
    posenc::heads_view<float> kv(std::span<float>(k), {tokens, kv_heads, head_dim});

    // Prefill: positions 100..115, cos/sin computed on the fly (shared by all heads of Q and K).
    rope.apply(qv, kv, posenc::position_ids::consecutive(100, tokens));

    // Or from a cached table; a position outside it throws posenc::range_error.
    const auto table = rope.table(32768);
    std::vector<std::int64_t> positions(tokens, 200);
    rope.apply(table, qv, kv, positions);

    std::printf("q[0..3] = %.6f %.6f %.6f %.6f, amplitude %.6f\n", q[0], q[1], q[2], q[3],
                rope.frequencies().attention_factor);
}
