// A user's translation unit compiled for the build machine (-march=native: AVX-512 where the CPU has
// it) with -Wall -Wextra -Wpedantic -Werror, no run-time dispatch: posenc's kernels are instantiated
// here, so g++ 12's -Wmaybe-uninitialized in its AVX-512 headers would fail the build unless posenc
// silences it (simd/xsimd_compat.hpp). Built and run by the native_consumer_warnings test.
// xsimd (and with it <immintrin.h>) comes first, as it may in a user's code: the order where a pragma
// around posenc's own #include of xsimd covers nothing.
#include <xsimd/xsimd.hpp>

#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    const std::size_t T = 24, D = 64;
    std::vector<float> q(T * 4 * D, 0.1f), k(T * 2 * D, 0.2f), v(T * 2 * D, 0.3f), out(T * 4 * D);
    posenc::heads_view<float> Q(std::span<float>(q), {T, 4, D}), K(std::span<float>(k), {T, 2, D}),
        V(std::span<float>(v), {T, 2, D}), O(std::span<float>(out), {T, 4, D});
    const auto pos = posenc::position_ids::consecutive(0, T);

    // Rotary in both storage widths, on the fly and from a table.
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 10000});
    const auto table = rope.table(64);
    std::vector<posenc::bf16> q16(T * 4 * D, posenc::bf16(0.5f));
    rope.apply(table, posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(q16), {T, 4, D}), pos);

    // Attention with RoPE inside, and decode against a KV cache.
    posenc::attention(posenc::attention_encoding{rope}, Q, K, V, O, pos, pos, posenc::causal_mask{});
    posenc::kv_cache cache(rope, {.kv_heads = 2, .head_dim = D, .capacity = 64});
    cache.append(K, V, pos);
    std::vector<float> q1(4 * D, 0.1f), out1(4 * D);
    const auto p = posenc::position_ids::consecutive(T - 1, 1);
    posenc::attention(posenc::attention_encoding{rope}, posenc::heads_view<float>(std::span<float>(q1), {1, 4, D}),
                      cache, posenc::heads_view<float>(std::span<float>(out1), {1, 4, D}), p, posenc::causal_mask{});

    // Every value is 0.3, so every weighted average of V is 0.3.
    const bool ok = std::abs(out[0] - 0.3f) < 1e-6f && std::abs(out1[0] - 0.3f) < 1e-6f &&
                    std::abs(static_cast<float>(q16[0]) - 0.5f) < 1e-2f;
    std::printf("native consumer (kernels: %s): %s\n", posenc::simd::active_arch_name(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
