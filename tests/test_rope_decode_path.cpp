// A one-token call with a computed row (decode) has a path of its own: float heads in place, in
// either layout, are rotated a column or two of the row at a time while the next are computed
// (simd/kernels.hpp, rotate_while_computing_row). On every SIMD architecture this CPU runs, a
// one-token call must equal the general path bit for bit — the same token at the same position
// first in a two-token call — and the closed form in double; so must every case the column path
// leaves to the general one (out of place, too many heads for L1, Q and K sharing memory, far
// positions, angles beyond the vector reduction).
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/kernel_jobs.hpp"
#include "support/reference.hpp"

namespace {

enum class k_placement {
    in_place,      // its own buffer
    into_cache,    // out of place into a head-major cache of 4 tokens (head stride 4·D)
    overlapping_q  // in place, 3 floats into Q's first head (Q and K share memory)
};

struct decode_case {
    const char* what;
    posenc::rope_frequencies freq;
    std::size_t head_dim, q_heads, k_heads;
    bool inverse = false;
    k_placement k = k_placement::in_place;
    std::size_t head_pad = 0;  // floats between a source's heads (head stride D + head_pad)
};

/// The memory of a call of n tokens: Q's buffer (K inside it when overlapping) and K's.
struct call_memory {
    std::vector<float> q, k, cache;
};

/// One call at positions `pos` (n = pos.size() tokens) on Arch, over inputs made from q0 and k0;
/// returns the memory after it.
template <class Layout, class Arch>
call_memory rotated(const decode_case& c, const posenc::position_ids& pos, std::size_t n, const std::vector<float>& q0,
                    const std::vector<float>& k0) {
    const std::size_t D = c.head_dim, hs = D + c.head_pad, qt = c.q_heads * hs, kt = c.k_heads * hs;
    call_memory m{std::vector<float>(q0.begin(), q0.begin() + static_cast<std::ptrdiff_t>(n * qt)),
                  std::vector<float>(k0.begin(), k0.begin() + static_cast<std::ptrdiff_t>(n * kt)),
                  std::vector<float>(c.k_heads * 4 * D, -7.0f)};
    auto job = posenc_test::make_job<Layout>(c.freq, pos, 2 * c.freq.inv_freq.size(), nullptr);
    job.inverse = c.inverse;
    if (c.inverse) job.amplitude = 1.0 / c.freq.attention_factor;
    if (c.q_heads) job.views[0] = posenc::detail::job_view::in_place(posenc::heads_view<float>(m.q.data(), {n, c.q_heads, D}, {qt, hs}));
    if (c.k_heads) {
        if (c.k == k_placement::in_place)
            job.views[1] = posenc::detail::job_view::in_place(posenc::heads_view<float>(m.k.data(), {n, c.k_heads, D}, {kt, hs}));
        else if (c.k == k_placement::overlapping_q)
            job.views[1] = posenc::detail::job_view::in_place(posenc::heads_view<float>(m.q.data() + 3, {n, c.k_heads, D}, {qt, hs}));
        else
            job.views[1] = posenc::detail::job_view::out_of_place(posenc::heads_view<const float>(m.k.data(), {n, c.k_heads, D}, {kt, hs}),
                                                                  posenc::heads_view<float>(m.cache.data(), {n, c.k_heads, D}, {D, 4 * D}));
    }
    posenc_test::run_on<Layout, Arch>(job);
    return m;
}

/// The first token's memory: Q's buffer, then K's result (its buffer, or its cache rows).
std::vector<float> first_token(const decode_case& c, const call_memory& m) {
    const std::size_t D = c.head_dim, hs = D + c.head_pad;
    std::vector<float> r(m.q.begin(), m.q.begin() + static_cast<std::ptrdiff_t>(c.q_heads * hs));
    if (c.k == k_placement::in_place) r.insert(r.end(), m.k.begin(), m.k.begin() + static_cast<std::ptrdiff_t>(c.k_heads * hs));
    if (c.k == k_placement::into_cache)
        for (std::size_t h = 0; h < c.k_heads; ++h)
            r.insert(r.end(), m.cache.begin() + static_cast<std::ptrdiff_t>(h * 4 * D),
                     m.cache.begin() + static_cast<std::ptrdiff_t>(h * 4 * D + D));
    return r;
}

/// Every head of the first token without its padding, Q's then K's: the inputs (K's heads padded as
/// Q's) or a call's outputs (K's rows unpadded when they went into the cache).
std::vector<float> dense_heads(const decode_case& c, const std::vector<float>& token, bool k_in_cache) {
    const std::size_t D = c.head_dim, hs = D + c.head_pad;
    std::vector<float> r;
    for (std::size_t h = 0; h < c.q_heads + c.k_heads; ++h) {
        const std::size_t at = h < c.q_heads || !k_in_cache ? h * hs : c.q_heads * hs + (h - c.q_heads) * D;
        r.insert(r.end(), token.begin() + static_cast<std::ptrdiff_t>(at), token.begin() + static_cast<std::ptrdiff_t>(at + D));
    }
    return r;
}

template <class Layout, class Arch>
void check_case(const decode_case& c, std::int64_t p) {
    constexpr bool interleaved = std::is_same_v<Layout, posenc::interleaved>;
    const std::size_t D = c.head_dim, r = 2 * c.freq.inv_freq.size(), hs = D + c.head_pad;
    const auto q0 = posenc_test::random_floats(2 * c.q_heads * hs, 71), k0 = posenc_test::random_floats(2 * c.k_heads * hs, 72);
    // The general path: the same token first in a two-token call (its row computed directly).
    const std::vector<std::int64_t> pair_pos{p, p + 3};
    const auto general = first_token(c, rotated<Layout, Arch>(c, pair_pos, 2, q0, k0));
    // The one-token call with its position as a list of int64, as consecutive(p, 1) and as int32.
    const std::vector<std::int64_t> one{p};
    const auto alone = first_token(c, rotated<Layout, Arch>(c, one, 1, q0, k0));
    INFO(c.what << ", " << Arch::name() << ", " << Layout::name << ", position " << p);
    CHECK(posenc_test::same_bits(alone, general));
    CHECK(posenc_test::same_bits(first_token(c, rotated<Layout, Arch>(c, posenc::position_ids::consecutive(p, 1), 1, q0, k0)), general));
    if (p >= INT32_MIN && p <= INT32_MAX) {
        const std::vector<std::int32_t> one32{static_cast<std::int32_t>(p)};
        CHECK(posenc_test::same_bits(first_token(c, rotated<Layout, Arch>(c, one32, 1, q0, k0)), general));
    }
    if (c.k == k_placement::overlapping_q) return;  // (its lanes are rotated twice: no closed form here)
    // The closed form in double, head by head.
    std::vector<float> x(q0.begin(), q0.begin() + static_cast<std::ptrdiff_t>(c.q_heads * hs));
    x.insert(x.end(), k0.begin(), k0.begin() + static_cast<std::ptrdiff_t>(c.k_heads * hs));
    x = dense_heads(c, x, false);
    const double a = c.inverse ? 1.0 / c.freq.attention_factor : c.freq.attention_factor;
    std::vector<double> ref;
    for (std::size_t h = 0; h < c.q_heads + c.k_heads; ++h) {
        const std::vector<double> head(x.begin() + static_cast<std::ptrdiff_t>(h * D), x.begin() + static_cast<std::ptrdiff_t>((h + 1) * D));
        const auto y = posenc_test::reference_rotate(head, r, interleaved, c.freq.inv_freq, c.inverse ? -p : p, a);
        ref.insert(ref.end(), y.begin(), y.end());
    }
    CHECK(posenc_test::worst_pair_ulps(x, dense_heads(c, alone, c.k == k_placement::into_cache), ref, D, r, interleaved, a) <= 2.0);
}

std::vector<decode_case> cases() {
    const posenc::rope_frequencies rope = posenc::default_rope{}.frequencies(128);
    const posenc::rope_frequencies yarn = posenc::yarn{.base = 500000, .factor = 8, .original_max_position = 8192}.frequencies(128);
    // Angles beyond the vector reduction's reach (~2^50 quadrants) from position 2^20: the scalar route.
    posenc::rope_frequencies steep = rope;
    steep.inv_freq[5] = 1e12;
    const auto d64 = posenc::default_rope{}.frequencies(64);
    using enum k_placement;
    return {
        {"S2's shape (32 + 8 heads, D 128)", rope, 128, 32, 8},
        {"a few heads", rope, 128, 3, 2},
        {"Q only", rope, 128, 5, 0},
        {"K only", rope, 128, 0, 3},
        {"YaRN's amplitude", yarn, 128, 4, 2},
        {"inverse, amplitude 1", rope, 128, 4, 2, true},
        {"inverse, YaRN's amplitude", yarn, 128, 4, 2, true},
        {"padded heads (head stride D + 16)", rope, 128, 4, 2, false, in_place, 16},
        {"K out of place into a head-major cache", rope, 128, 4, 2, false, into_cache},
        {"K overlapping Q", rope, 128, 4, 2, false, overlapping_q},
        {"D 64", d64, 64, 6, 2},
        {"D 96 (pairs not a multiple of the widest vector)", posenc::default_rope{}.frequencies(96), 96, 4, 2},
        {"partial rotary, in place", d64, 128, 4, 2},
        {"partial rotary, K out of place", d64, 128, 4, 2, false, into_cache},
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
