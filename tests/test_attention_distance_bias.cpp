// posenc::attention with ALiBi: the kernel adds a tile's bias terms computed once per key-query
// distance (in double, then one rounding per score; in float where every term is exactly a float,
// which gives the same bits); the per-row add_to_scores path computes every
// score's sum in double and rounds it once. Both must give the same bits, on every architecture, for
// every form, order, GQA group, query order and mask (and the kernel falls back to the per-row path
// where the distance terms would not be exact).
#include <posenc/attention/attention.hpp>
#include <posenc/posenc.hpp>

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

}  // namespace distance_bias_test

TEST_CASE("attention with ALiBi: the per-distance bias terms give the per-row bias's bits on every architecture",
          "[attention][alibi]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { distance_bias_test::check_arch(arch); }) >= 1);
}
