// posenc::attention with ALiBi: the kernel adds a tile's bias terms computed once per key-query
// distance (in double, then one rounding per score; in float where every term is exactly a float,
// which gives the same bits); the per-row add_to_scores path computes every
// score's sum in double and rounds it once. Both must give the same bits, on every architecture, for
// every form, order, GQA group, query order and mask (and the kernel falls back to the per-row path
// where the distance terms would not be exact).
#include <posenc/attention/attention.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"

namespace distance_bias_test {

/// A class derived from alibi_bias is never asked for distance terms (it could hide add_to_scores),
/// so the kernel calls its add_to_scores per row: the reference path.
struct per_row_alibi : posenc::alibi_bias {
    using posenc::alibi_bias::alibi_bias;
};

std::vector<float> normals(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

struct problem {
    std::size_t Tq, Tk, Hq, Hkv, D;
    std::vector<float> q, k, v;
};

template <class Arch, class Bias, class Mask>
std::vector<float> attend(const problem& p, const Bias& bias, const posenc::position_ids& qpos,
                          const posenc::position_ids& kpos, const Mask& mask) {
    std::vector<float> out(p.Tq * p.Hq * p.D, -1.0f);
    const posenc::heads_view<const float> q(p.q.data(), {p.Tq, p.Hq, p.D}), k(p.k.data(), {p.Tk, p.Hkv, p.D}),
        v(p.v.data(), {p.Tk, p.Hkv, p.D});
    posenc::detail::attention_on(posenc::simd::attention_kernels_for<Arch>(), posenc::attention_encoding{posenc::nope{}, bias},
                                 q, k, v, posenc::heads_view<float>(out.data(), {p.Tq, p.Hq, p.D}), qpos, kpos, mask, {});
    return out;
}

template <class Arch, class Mask>
void compare(const problem& p, const posenc::alibi& params, const posenc::position_ids& qpos,
             const posenc::position_ids& kpos, const Mask& mask, const std::string& what) {
    const auto by_distance = attend<Arch>(p, posenc::alibi_bias(params), qpos, kpos, mask);
    const auto per_row = attend<Arch>(p, per_row_alibi(params), qpos, kpos, mask);
    INFO(Arch::name() << " " << what << " G " << p.Hq / p.Hkv << " max_bias " << params.max_bias
                      << (params.form == posenc::alibi_form::causal ? " causal" : " symmetric")
                      << (params.order == posenc::bias_order::add_then_scale ? " add_then_scale" : " scale_then_add"));
    CHECK(std::memcmp(by_distance.data(), per_row.data(), by_distance.size() * sizeof(float)) == 0);
}

template <class Arch>
void check_arch(Arch) {
    for (const std::size_t G : {1, 4}) {
        const std::size_t T = 150, Hkv = 2, Hq = Hkv * G, D = 24;
        const problem p{T, T, Hq, Hkv, D, normals(T * Hq * D, 3), normals(T * Hkv * D, 4), normals(T * Hkv * D, 5)};
        // Queries out of order but within one tile's span (the terms' start differs per row), and
        // positions past 2^50 (the per-row path: a distance there may not be exact in double).
        std::vector<std::int64_t> shuffled(T), huge(T);
        for (std::size_t i = 0; i < T; ++i) shuffled[i] = 1000 + static_cast<std::int64_t>((i * 37) % T);
        for (std::size_t i = 0; i < T; ++i) huge[i] = (std::int64_t{1} << 60) + static_cast<std::int64_t>(i);
        const auto keys = posenc::position_ids::consecutive(1000, T);
        // max_bias 5.3: slopes that are not powers of two, so that m·d is not exact in float (the terms
        // are added in double); with 8 and these head counts it is (the terms are added in float, and
        // must give the same bits).
        for (const double max_bias : {5.3, 8.0})
            for (const auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric})
                for (const auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale}) {
                    const posenc::alibi params{.heads = Hq, .max_bias = max_bias, .form = form, .order = order};
                    compare<Arch>(p, params, keys, keys, posenc::causal_mask{}, "consecutive, causal mask");
                    compare<Arch>(p, params, keys, keys, posenc::no_mask{}, "consecutive, no mask");
                    compare<Arch>(p, params, shuffled, keys, posenc::no_mask{}, "shuffled queries");
                    compare<Arch>(p, params, huge, posenc::position_ids(huge), posenc::causal_mask{}, "positions past 2^60");
                    const problem one{1, T, Hq, Hkv, D, normals(Hq * D, 6), p.k, p.v};  // decode: one query
                    compare<Arch>(one, params, posenc::position_ids::consecutive(1000 + T - 1, 1), keys, posenc::causal_mask{},
                                  "decode");
                }
    }
}

/// Tiles whose terms are exact for some heads or distances only: the float path must not be taken
/// on a check of part of the tile.
template <class Arch>
void check_mixed_tiles(Arch) {
    const std::size_t T = 150, D = 24;
    for (const auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale}) {
        // 12 heads at max_bias 8: heads 0-7 have power-of-two slopes, heads 8-11 have 2^-0.5 times
        // one; with 2 kv heads, group 1 (heads 6-11) mixes both.
        const problem mixed_heads{T, T, 12, 2, D, normals(T * 12 * D, 7), normals(T * 2 * D, 8), normals(T * 2 * D, 9)};
        const auto keys = posenc::position_ids::consecutive(1000, T);
        compare<Arch>(mixed_heads, posenc::alibi{.heads = 12, .max_bias = 8.0, .order = order}, keys, keys,
                      posenc::causal_mask{}, "heads of exact and inexact slopes in one group");
        // Distances near 2^25: a power-of-two slope times d is exact only where d's odd part is below
        // 2^24, so a tile mixes exact and inexact terms (and the scores lie ~25 binades below them).
        const problem far{T, T, 8, 2, D, normals(T * 8 * D, 10), normals(T * 2 * D, 11), normals(T * 2 * D, 12)};
        compare<Arch>(far, posenc::alibi{.heads = 8, .max_bias = 8.0, .order = order},
                      posenc::position_ids::consecutive(1000 + (std::int64_t{1} << 25), T), keys, posenc::no_mask{},
                      "distances near 2^25");
    }
}

}  // namespace distance_bias_test

TEST_CASE("attention with ALiBi: terms_as_floats is true only when every term of every head is a float",
          "[attention][alibi]") {
    constexpr std::size_t G = 3, stride = 40, len = 37;
    std::vector<double> terms(G * stride, 0.0);
    const auto fill = [&](double slope, std::int64_t first_distance) {
        for (std::size_t g = 0; g < G; ++g)
            for (std::size_t x = 0; x < len; ++x)
                terms[g * stride + x] = -slope * static_cast<double>(first_distance + static_cast<std::int64_t>(x));
    };
    std::vector<float> out(G * stride, 0.0f);
    fill(0.125, -18);  // 2^-3 times small integers: all exact
    REQUIRE(posenc::detail::terms_as_floats(terms.data(), G, stride, len, out.data()));
    for (std::size_t g = 0; g < G; ++g)
        for (std::size_t x = 0; x < len; ++x) CHECK(static_cast<double>(out[g * stride + x]) == terms[g * stride + x]);
    // One inexact term anywhere (last head, last distance; first head, first distance) makes it false.
    for (const std::size_t at : {(G - 1) * stride + len - 1, std::size_t{0}, stride + len / 2}) {
        fill(0.125, -18);
        terms[at] = 0.1;
        INFO("inexact term at " << at);
        CHECK_FALSE(posenc::detail::terms_as_floats(terms.data(), G, stride, len, out.data()));
    }
    fill(std::exp2(-0.5), 1);  // a slope that is not a power of two
    CHECK_FALSE(posenc::detail::terms_as_floats(terms.data(), G, stride, len, out.data()));
    fill(0.125, (std::int64_t{1} << 25) + 1);  // odd distances past 2^24
    CHECK_FALSE(posenc::detail::terms_as_floats(terms.data(), G, stride, len, out.data()));
    // Entries between len and stride are not terms: an inexact value there changes nothing.
    fill(0.125, -18);
    terms[stride - 1] = 0.1;
    CHECK(posenc::detail::terms_as_floats(terms.data(), G, stride, len, out.data()));
}

TEST_CASE("attention with ALiBi: the per-distance bias terms give the per-row bias's bits on every architecture",
          "[attention][alibi]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) {
                distance_bias_test::check_arch(arch);
                distance_bias_test::check_mixed_tiles(arch);
            }) >= 1);
}
