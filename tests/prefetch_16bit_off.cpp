// Built with -DPOSENC_PREFETCH_16BIT=0 (tests/CMakeLists.txt), as its own program: the switch that
// leaves bf16/fp16 sources to the hardware prefetcher must turn the prefetch off, and a bf16 rotation
// must still be the closed form in double within one bf16 ulp (plus float32's error on the pair), and
// bit for bit the float rotation rounded once (the prefetch never changes a result).
// (Its own program: the macro changes an inline function, which the main test binary defines
// without it.)
#include <posenc/posenc.hpp>

#include <cmath>
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
    const std::vector<float> in = x;  // for the closed form
    const posenc::rotary<posenc::half_split> rope({.head_dim = dim}, posenc::default_rope{});
    const auto pos = posenc::position_ids::consecutive(5, tokens);
    rope.apply(posenc::heads_view<float>(std::span<float>(x), {tokens, heads, dim}), pos);
    rope.apply(posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(y), {tokens, heads, dim}), pos);
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t i = 0; i < dim / 2; ++i) {  // half-split: lanes i and i + dim/2
                const std::size_t a = (t * heads + h) * dim + i, b = a + dim / 2;
                const double theta = static_cast<double>(5 + t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / dim);
                const double ref[2] = {in[a] * std::cos(theta) - in[b] * std::sin(theta),
                                       in[b] * std::cos(theta) + in[a] * std::sin(theta)};
                const std::size_t lane[2] = {a, b};
                for (int k = 0; k < 2; ++k) {
                    const double tol = std::ldexp(1.0, std::ilogb(std::fmax(std::fabs(ref[k]), 0x1p-100)) - 7) +
                                       4 * 0x1p-24 * std::hypot(in[a], in[b]);
                    if (!(std::fabs(static_cast<double>(static_cast<float>(y[lane[k]])) - ref[k]) <= tol)) {  // NaN fails
                        std::fprintf(stderr, "lane %zu: %g, the closed form %g\n", lane[k], static_cast<double>(static_cast<float>(y[lane[k]])), ref[k]);
                        return 1;
                    }
                }
            }
    for (std::size_t i = 0; i < x.size(); ++i)
        if (posenc::bf16(x[i]).bits != y[i].bits) {
            std::fprintf(stderr, "lane %zu: bf16 rotation differs from the float one rounded once\n", i);
            return 1;
        }
    return 0;
}
