// The one-token call with a computed row (decode) has a path of its own: half-split float heads are
// rotated a column at a time while the row is being computed (simd/kernels.hpp,
// rotate_while_computing_row). Here, on every SIMD architecture this CPU runs, it must equal the
// general path bit for bit — the same token at the same position inside a two-token call — and the
// closed form in double; and every case the path leaves to the general one (interleaved, partial
// rotary out of place, too many heads for L1, far positions, angles beyond the vector reduction)
// must give the same answers too.
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/kernel_jobs.hpp"
#include "support/reference.hpp"

using posenc_test::random_floats;

namespace {

struct decode_case {
    const char* what;
    posenc::rope_frequencies freq;
    std::size_t head_dim, q_heads, k_heads;
    bool inverse = false, k_out_of_place = false;
};

/// Q and K (K into a separate buffer when out of place) after one call at positions `pos`, on Arch:
/// Q's heads then K's, each call's tokens in order.
template <class Layout, class Arch>
std::vector<float> rotated(const decode_case& c, const std::vector<std::int64_t>& pos, const std::vector<float>& q0,
                           const std::vector<float>& k0) {
    const std::size_t n = pos.size(), D = c.head_dim;
    std::vector<float> q(q0.begin(), q0.begin() + static_cast<std::ptrdiff_t>(n * c.q_heads * D));
    std::vector<float> k(k0.begin(), k0.begin() + static_cast<std::ptrdiff_t>(n * c.k_heads * D)), k_dst(k.size(), -7.0f);
    auto job = posenc_test::make_job<Layout>(c.freq, pos, 2 * c.freq.inv_freq.size(), nullptr);
    job.inverse = c.inverse;
    if (c.inverse) job.amplitude = 1.0 / c.freq.attention_factor;
    if (c.q_heads) job.views[0] = posenc::detail::job_view::in_place(posenc::heads_view<float>(std::span<float>(q), {n, c.q_heads, D}));
    if (c.k_out_of_place)
        job.views[1] = posenc::detail::job_view::out_of_place(posenc::heads_view<const float>(k.data(), {n, c.k_heads, D}),
                                                              posenc::heads_view<float>(std::span<float>(k_dst), {n, c.k_heads, D}));
    else
        job.views[1] = posenc::detail::job_view::in_place(posenc::heads_view<float>(std::span<float>(k), {n, c.k_heads, D}));
    posenc_test::run_on<Layout, Arch>(job);
    const std::vector<float>& k_out = c.k_out_of_place ? k_dst : k;
    q.insert(q.end(), k_out.begin(), k_out.end());
    return q;
}

/// Every head of the first token of `out` (a call of n tokens): Q's, then K's.
std::vector<float> first_token(const decode_case& c, const std::vector<float>& out, std::size_t n) {
    const std::size_t qn = c.q_heads * c.head_dim, kn = c.k_heads * c.head_dim;
    std::vector<float> r(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(qn));
    const auto k = out.begin() + static_cast<std::ptrdiff_t>(n * qn);
    r.insert(r.end(), k, k + static_cast<std::ptrdiff_t>(kn));
    return r;
}

template <class Layout, class Arch>
void check_case(const decode_case& c, std::int64_t p) {
    const std::size_t D = c.head_dim, r = 2 * c.freq.inv_freq.size();
    const auto q0 = random_floats(2 * c.q_heads * D, 71), k0 = random_floats(2 * c.k_heads * D, 72);
    const auto alone = rotated<Layout, Arch>(c, {p}, q0, k0);
    // The general path: the same token first in a two-token call (rows computed directly).
    const auto pair = first_token(c, rotated<Layout, Arch>(c, {p, p + 3}, q0, k0), 2);
    INFO(c.what << ", " << Arch::name() << ", " << Layout::name << ", position " << p);
    CHECK(posenc_test::same_bits(alone, pair));
    // The closed form in double, head by head (Q's inputs, then K's).
    std::vector<float> x(q0.begin(), q0.begin() + static_cast<std::ptrdiff_t>(c.q_heads * D));
    x.insert(x.end(), k0.begin(), k0.begin() + static_cast<std::ptrdiff_t>(c.k_heads * D));
    const double a = c.inverse ? 1.0 / c.freq.attention_factor : c.freq.attention_factor;
    std::vector<double> ref;
    for (std::size_t h = 0; h < c.q_heads + c.k_heads; ++h) {
        const std::vector<double> head(x.begin() + static_cast<std::ptrdiff_t>(h * D), x.begin() + static_cast<std::ptrdiff_t>((h + 1) * D));
        const auto y = posenc_test::reference_rotate(head, r, std::is_same_v<Layout, posenc::interleaved>, c.freq.inv_freq,
                                                     c.inverse ? -p : p, a);
        ref.insert(ref.end(), y.begin(), y.end());
    }
    CHECK(posenc_test::worst_pair_ulps(x, alone, ref, D, r, std::is_same_v<Layout, posenc::interleaved>, a) <= 2.0);
}

std::vector<decode_case> cases() {
    const posenc::rope_frequencies rope = posenc::default_rope{}.frequencies(128);
    const posenc::rope_frequencies yarn = posenc::yarn{.base = 500000, .factor = 8, .original_max_position = 8192}.frequencies(128);
    // Angles beyond the vector reduction's reach (~2^50 quadrants) at positions from 2^20: the
    // scalar route.
    posenc::rope_frequencies steep = rope;
    steep.inv_freq[5] = 1e12;
    return {
        {"S2's shape (32 + 8 heads, D 128)", rope, 128, 32, 8},
        {"a few heads", rope, 128, 3, 2},
        {"YaRN's amplitude", yarn, 128, 4, 2},
        {"inverse", yarn, 128, 4, 2, true},
        {"K out of place", rope, 128, 4, 2, false, true},
        {"K only, out of place", rope, 128, 0, 3, false, true},
        {"D 64", posenc::default_rope{}.frequencies(64), 64, 6, 2},
        {"D 96 (pairs not a multiple of the widest vector)", posenc::default_rope{}.frequencies(96), 96, 4, 2},
        {"partial rotary, in place", posenc::default_rope{}.frequencies(64), 128, 4, 2},
        {"partial rotary, K out of place", posenc::default_rope{}.frequencies(64), 128, 4, 2, false, true},
        {"too many heads for L1 (64 + 8 heads)", rope, 128, 64, 8},
        {"angles beyond the reduction", steep, 128, 4, 2},
    };
}

}  // namespace

TEST_CASE("a one-token call equals the same token in a larger call, bit for bit, and the closed form", "[rope][simd][decode]") {
    std::size_t ran = 0;
    for (const decode_case& c : cases())
        for (std::int64_t p : {0LL, 1LL, -37LL, 100000LL, 1LL << 20, (1LL << 26) - 3, (1LL << 26) + 5, 5'000'000'000LL}) {
            ran += posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [&]<class Arch>(Arch) {
                check_case<posenc::half_split, Arch>(c, p);
                check_case<posenc::interleaved, Arch>(c, p);
            });
        }
    CHECK(ran > 0);
}
