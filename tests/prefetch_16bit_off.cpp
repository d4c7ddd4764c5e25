// Built with -DPOSENC_PREFETCH_16BIT=0 (tests/CMakeLists.txt), as its own program: the switch that
// leaves bf16/fp16 sources to the hardware prefetcher must turn the prefetch off, and a bf16 rotation
// must still give the bits of a float rotation rounded once (the prefetch never changes a result).
// (Its own program: the macro changes an inline function, which the main test binary defines
// without it.)
#include <posenc/posenc.hpp>

#include <cstdio>
#include <vector>

int main() {
    if (posenc::simd::prefetch_16bit()) {
        std::fprintf(stderr, "POSENC_PREFETCH_16BIT=0 left the 16-bit prefetch on\n");
        return 1;
    }
    constexpr std::size_t tokens = 3, heads = 2, dim = 64;
    std::vector<float> x(tokens * heads * dim);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    std::vector<posenc::bf16> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = posenc::bf16(x[i]);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(y[i]);  // the same inputs
    const posenc::rotary<posenc::half_split> rope({.head_dim = dim}, posenc::default_rope{});
    const auto pos = posenc::position_ids::consecutive(5, tokens);
    rope.apply(posenc::heads_view<float>(std::span<float>(x), {tokens, heads, dim}), pos);
    rope.apply(posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(y), {tokens, heads, dim}), pos);
    for (std::size_t i = 0; i < x.size(); ++i)
        if (posenc::bf16(x[i]).bits != y[i].bits) {
            std::fprintf(stderr, "lane %zu: bf16 rotation differs from the float one rounded once\n", i);
            return 1;
        }
    return 0;
}
