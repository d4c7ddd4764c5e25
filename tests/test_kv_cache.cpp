// posenc::kv_cache: keys rotated once on append (head-major storage), decode against the cache equal
// to the matching rows of a full prefill, context shift equal to a fresh prefill at the shifted
// positions, and errors that leave the cache byte-identical. References: the naive double attention
// of support/attention_reference.hpp with RoPE written here in double (inverse frequencies from the
// closed form base^(−2i/D), amplitude given explicitly), never posenc's own frequencies.
//
// Bounds: decode and prefill run the same float kernel on the same rotated keys (prefill's in-place
// rotation of each key tile and the cache's out-of-place apply_into compute each lane by the same
// formula, and the cos/sin rows are bit-identical whatever the call's first position). So where the
// decode call has more than 8 query rows (G·tokens > 8: a chunk of 3 tokens at G = 4), it takes the
// same QKᵀ path as prefill and equals it bit-exactly (masked keys contribute exact zeros). With 8 rows
// or fewer (one token at G ≤ 8) the kernel forms QKᵀ as dot products along D instead of through the
// transposed tile (attention/kernels.hpp, qk_dot): the same terms summed in another order, so decode
// equals prefill to float rounding only; both are held to the attention tests' bound 2e-6·max|v|
// against the double reference. After a context shift the moved keys are rotated twice (at p, then by
// delta): one more rounding of each key lane, so decode after a shift equals a fresh prefill to float
// rounding (bound 1e-5·max|v|), not bit-exactly.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/heads.hpp"

using namespace posenc_test;

namespace {

// Rows [t0, t0 + n) of a dense [T][H][D] buffer.
std::vector<float> rows(const std::vector<float>& x, std::size_t t0, std::size_t n, std::size_t H, std::size_t D) {
    return {x.begin() + static_cast<std::ptrdiff_t>(t0 * H * D), x.begin() + static_cast<std::ptrdiff_t>((t0 + n) * H * D)};
}

template <class Cache>
concept has_set_threads = requires(Cache& c) { c.set_threads(2u); };

constexpr double rope_amplitude = 1.25;  // a non-unit cos/sin amplitude: shift must not apply it twice
constexpr double base = 10000.0;

}  // namespace

TEST_CASE("kv_cache: append stores K rotated once, head-major, V copied, positions recorded", "[kv_cache]") {
    const std::size_t T = 70, H = 3, D = 16, Dv = 8, cap = 100;
    const auto inv = closed_form_inv_freq(base, D);
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::rope_frequencies{inv, rope_amplitude});
    posenc::kv_cache cache(rope, {.kv_heads = H, .head_dim = D, .value_dim = Dv, .capacity = cap});
    const auto k = random_floats(T * H * D, 5, 0.5f), v = random_floats(T * H * Dv, 6, 1.0f);
    std::vector<std::int64_t> pos(T);
    for (std::size_t t = 0; t < T; ++t) pos[t] = 3 + 2 * static_cast<std::int64_t>(t);  // gaps are allowed
    const std::vector<std::int64_t> first(pos.begin(), pos.begin() + 50), rest(pos.begin() + 50, pos.end());
    auto kk = k, vv = v;
    cache.append(posenc::heads_view<const float>{}, posenc::heads_view<const float>{}, std::vector<std::int64_t>{});  // nothing
    cache.append(posenc::heads_view<const float>(kk.data(), {50, H, D}), posenc::heads_view<const float>(vv.data(), {50, H, Dv}), first);
    cache.append(posenc::heads_view<const float>(kk.data() + 50 * H * D, {20, H, D}),
                 posenc::heads_view<const float>(vv.data() + 50 * H * Dv, {20, H, Dv}), rest);
    REQUIRE(cache.size() == T);
    REQUIRE(cache.next_position() == pos.back() + 1);
    const auto K = cache.keys();
    const auto V = cache.values();
    REQUIRE(K.token_stride() == D);
    REQUIRE(K.head_stride() == cap * D);
    REQUIRE(V.head_stride() == cap * Dv);
    std::size_t compared = 0;
    double err = 0;
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            // head-major storage: head h's token t at h·cap·D + t·D
            REQUIRE(K.row(t, h) == cache.key_storage().data() + h * cap * D + t * D);
            const std::vector<double> x(k.begin() + static_cast<std::ptrdiff_t>((t * H + h) * D),
                                        k.begin() + static_cast<std::ptrdiff_t>((t * H + h + 1) * D));
            const auto ref = reference_rotate(x, D, false, inv, pos[t], rope_amplitude);
            for (std::size_t d = 0; d < D; ++d) err = posenc_test::worst_of(err, std::abs(K.row(t, h)[d] - ref[d]));
            CHECK(std::memcmp(V.row(t, h), v.data() + (t * H + h) * Dv, Dv * sizeof(float)) == 0);
            CHECK(cache.positions()[t] == pos[t]);
            ++compared;
        }
    REQUIRE(compared == T * H);
    CHECK(err <= 4e-6 * rope_amplitude * max_abs(k));  // float cos/sin and one rounding of each lane
    CHECK(kk == k);  // the source is only read
}

TEST_CASE("kv_cache: storage of 2 MiB and more starts on a 2 MiB boundary (huge pages), smaller on 64 bytes", "[kv_cache]") {
    // Decode reads the whole cache per token: a 2 MiB-aligned buffer can be backed by transparent huge
    // pages (advised on Linux), 4 KiB pages cost a page walk every 4 KiB.
    const std::size_t H = 2, D = 64, cap = 4096, T = 3;  // K: H·cap·D floats = 2 MiB exactly
    constexpr std::uintptr_t huge = std::uintptr_t{1} << 21;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    posenc::kv_cache big(rope, {.kv_heads = H, .head_dim = D, .capacity = cap});
    posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> half(rope, {.kv_heads = H, .head_dim = D, .capacity = cap});
    REQUIRE(big.key_storage().size_bytes() == huge);
    CHECK(reinterpret_cast<std::uintptr_t>(big.key_storage().data()) % huge == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(big.value_storage().data()) % huge == 0);
    const auto copy = big;  // (a copy allocates its own storage, aligned the same way)
    CHECK(reinterpret_cast<std::uintptr_t>(copy.key_storage().data()) % huge == 0);
    static_assert(posenc::detail::huge_page_allocator<char>::alignment(huge - 1) == 64);
    REQUIRE(half.key_storage().size_bytes() == huge / 2);  // 1 MiB: 64-byte aligned, as every other buffer
    CHECK(reinterpret_cast<std::uintptr_t>(half.key_storage().data()) % 64 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(half.value_storage().data()) % 64 == 0);
    // Both work as caches (under ASan: allocated and freed with matching alignments).
    const auto k = random_floats(T * H * D, 7, 0.5f), v = random_floats(T * H * D, 8, 1.0f);
    const std::vector<std::int64_t> pos{0, 1, 2};
    big.append(posenc::heads_view<const float>(k.data(), {T, H, D}), posenc::heads_view<const float>(v.data(), {T, H, D}), pos);
    half.append(posenc::heads_view<const float>(k.data(), {T, H, D}), posenc::heads_view<const float>(v.data(), {T, H, D}), pos);
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            CHECK(std::memcmp(big.values().row(t, h), v.data() + (t * H + h) * D, D * sizeof(float)) == 0);
            for (std::size_t d = 0; d < D; ++d) CHECK(half.values().row(t, h)[d] == posenc::bf16(v[(t * H + h) * D + d]));
        }
}

TEST_CASE("kv_cache: append runs K and V on the transform's threads, with the one-thread bits", "[kv_cache][threads]") {
    // Large enough that 3 slices pay (over 64K floats each): K and V each reach the executor once.
    const std::size_t T = 1024, H = 8, D = 128, Dv = 64;
    using cache_t = posenc::kv_cache<posenc::rotary<posenc::interleaved>>;
    posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
    const auto k = random_floats(T * H * D, 7, 1.0f), v = random_floats(T * H * Dv, 8, 1.0f);  // normal: no exact zeros
    const posenc::heads_view<const float> K(k.data(), {T, H, D}), V(v.data(), {T, H, Dv});
    const auto pos = posenc::position_ids::consecutive(40, T);
    const posenc::kv_cache_shape shape{.kv_heads = H, .head_dim = D, .value_dim = Dv, .capacity = T + 5};
    cache_t one(rope, shape);
    one.append(K, V, pos);
    const auto bits_equal = [](std::span<const float> a, std::span<const float> b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
    };
    const auto values_written = [&](const cache_t& c) {  // V rows that are no longer zero
        std::size_t n = 0;
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t t = 0; t < T; ++t) n += c.value_storage()[(h * shape.capacity + t) * Dv] != 0.0f;
        return n;
    };

    SECTION("on an executor: each slice writes its own tokens, in any order") {
        std::vector<std::size_t> calls;
        const cache_t* watched = nullptr;
        std::size_t slice_rows_wrong = 0;
        rope.set_threads(3);  // set before the cache copies the rotary
        rope.set_executor([&](std::size_t n, const std::function<void(std::size_t)>& task) {
            calls.push_back(n);
            for (std::size_t i = n; i-- > 0;) {  // the slices in reverse: order must not matter
                const std::size_t before = watched ? values_written(*watched) : 0;
                task(i);
                const std::size_t slice = T * (i + 1) / n - T * i / n;
                if (watched && calls.size() == 2) slice_rows_wrong += values_written(*watched) - before != slice * H;
            }
        });
        cache_t three(rope, shape);
        watched = &three;
        three.append(K, V, pos);
        CHECK(calls == std::vector<std::size_t>{3, 3});
        CHECK(slice_rows_wrong == 0);
        CHECK(bits_equal(one.key_storage(), three.key_storage()));
        CHECK(bits_equal(one.value_storage(), three.value_storage()));
        std::size_t copied = 0;
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < H; ++h)
                copied += std::memcmp(three.values().row(t, h), v.data() + (t * H + h) * Dv, Dv * sizeof(float)) == 0;
        CHECK(copied == T * H);

        calls.clear();
        three.append(posenc::heads_view<const float>(k.data(), {1, H, D}), posenc::heads_view<const float>(v.data(), {1, H, Dv}),
                     posenc::position_ids::consecutive(40 + static_cast<std::int64_t>(T), 1));  // decode: too small to split
        CHECK(calls.empty());
    }
    SECTION("on posenc's own threads, set on the cache after it was made") {
        cache_t three(rope, shape);
        three.set_threads(3);
        three.append(K, V, pos);
        CHECK(bits_equal(one.key_storage(), three.key_storage()));
        CHECK(bits_equal(one.value_storage(), three.value_storage()));
        CHECK(values_written(three) == T * H);
        std::size_t reached = 0;
        three.set_executor([&](std::size_t n, const std::function<void(std::size_t)>& task) {
            ++reached;
            for (std::size_t i = 0; i < n; ++i) task(i);
        });
        three.clear();
        three.append(K, V, pos);
        CHECK(reached == 2);  // K and V
        CHECK(bits_equal(one.value_storage(), three.value_storage()));
    }
    // An identity transform has no threads to set: its cache copies on the caller's thread.
    STATIC_REQUIRE_FALSE(has_set_threads<posenc::kv_cache<posenc::nope>>);
    STATIC_REQUIRE(has_set_threads<cache_t>);
}

TEST_CASE("kv_cache: decode against the cache equals the matching rows of prefill", "[kv_cache][decode]") {
    const std::size_t T = 150, Hq = 8, Hkv = 2, D = 32, Dv = 24, prompt = 131;
    const auto inv = closed_form_inv_freq(base, D);
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::rope_frequencies{inv, rope_amplitude});
    attn_problem p = make_attn_problem(T, T, Hq, Hkv, D, Dv, 21, 5);
    attn_model m;
    m.rot_q = m.rot_k = rope_rot(D, false, inv, rope_amplitude);
    std::size_t compared = 0;
    auto check_mask = [&](const auto& mask, const visible_fn& visible) {
        // prefill: RoPE inside the kernel, K and V untouched
        std::vector<float> q = p.q, k = p.k, v = p.v, prefill(T * Hq * Dv);
        const posenc::attention_encoding enc{rope};
        posenc::attention(enc, hv(q, T, Hq, D), hv(k, T, Hkv, D), hv(v, T, Hkv, Dv), hv(prefill, T, Hq, Dv), p.qpos,
                          p.kpos, mask);
        const auto ref = reference_attention(p, m, visible);
        double ref_err = 0;
        for (std::size_t i = 0; i < prefill.size(); ++i) ref_err = posenc_test::worst_of(ref_err, std::abs(prefill[i] - ref[i]));
        CHECK(ref_err <= 2e-6 * max_abs(p.v));

        // the cache: the prompt in one append (queries of the prompt's last 3 tokens decoded as a chunk),
        // then one token at a time, each decoded right after its append
        posenc::kv_cache cache(rope, {.kv_heads = Hkv, .head_dim = D, .value_dim = Dv, .capacity = T});
        cache.append(posenc::heads_view<const float>(k.data(), {prompt, Hkv, D}),
                     posenc::heads_view<const float>(v.data(), {prompt, Hkv, Dv}),
                     std::vector<std::int64_t>(p.kpos.begin(), p.kpos.begin() + prompt));
        {
            auto qn = rows(q, prompt - 3, 3, Hq, D);
            std::vector<float> out(3 * Hq * Dv);
            posenc::attention(enc, hv(qn, 3, Hq, D), cache, hv(out, 3, Hq, Dv),
                              std::vector<std::int64_t>(p.qpos.begin() + prompt - 3, p.qpos.begin() + prompt), mask);
            CHECK(out == rows(prefill, prompt - 3, 3, Hq, Dv));  // 12 rows: prefill's QKᵀ path, bit-exact
            compared += out.size();
        }
        for (std::size_t t = prompt; t < T; ++t) {
            cache.append(posenc::heads_view<const float>(k.data() + t * Hkv * D, {1, Hkv, D}),
                         posenc::heads_view<const float>(v.data() + t * Hkv * Dv, {1, Hkv, Dv}),
                         posenc::position_ids::consecutive(p.kpos[t], 1));
            auto q1 = rows(q, t, 1, Hq, D);
            std::vector<float> out(Hq * Dv);
            posenc::attention(enc, hv(q1, 1, Hq, D), cache, hv(out, 1, Hq, Dv),
                              posenc::position_ids::consecutive(p.qpos[t], 1), mask);
            const auto pre = rows(prefill, t, 1, Hq, Dv);
            double diff = 0, err = 0;
            for (std::size_t i = 0; i < out.size(); ++i) {
                diff = posenc_test::worst_of(diff, static_cast<double>(std::abs(out[i] - pre[i])));
                err = posenc_test::worst_of(err, std::abs(out[i] - ref[t * Hq * Dv + i]));
            }
            CHECK(diff <= 2e-6 * max_abs(p.v));  // 4 rows: the dot-product QKᵀ path, float rounding
            CHECK(err <= 2e-6 * max_abs(p.v));
            compared += out.size();
        }
    };
    check_mask(posenc::causal_mask{}, [](std::int64_t i, std::int64_t j) { return j <= i; });
    check_mask(posenc::sliding_window_mask{.window = 40}, [](std::int64_t i, std::int64_t j) { return j <= i && i - 40 < j; });
    REQUIRE(compared == 2 * (3 + (T - prompt)) * Hq * Dv);
}

TEST_CASE("kv_cache: decode after a context shift equals a fresh prefill at the shifted positions", "[kv_cache][shift]") {
    const std::size_t T = 120, Hq = 4, Hkv = 2, D = 32, Dv = 16, n_sink = 4, n_recent = 70;
    const auto inv = closed_form_inv_freq(base, D);
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = D}, posenc::rope_frequencies{inv, rope_amplitude});
    const attn_problem full = make_attn_problem(T, T, Hq, Hkv, D, Dv, 33, 0);
    posenc::kv_cache cache(rope, {.kv_heads = Hkv, .head_dim = D, .value_dim = Dv, .capacity = T});
    auto k = full.k, v = full.v;
    cache.append(hv(k, T, Hkv, D), hv(v, T, Hkv, Dv), full.kpos);
    REQUIRE(cache.context_shift(n_sink, n_recent) == T - n_sink - n_recent);
    const std::size_t n = n_sink + n_recent;
    REQUIRE(cache.size() == n);
    std::size_t checked_pos = 0;
    for (std::size_t t = 0; t < n; ++t, ++checked_pos) REQUIRE(cache.positions()[t] == static_cast<std::int64_t>(t));
    REQUIRE(checked_pos == n);

    // The fresh problem: the kept tokens' raw K and V at positions 0..n-1, plus 3 new tokens at n..n+2.
    attn_problem fresh;
    fresh.Hq = Hq, fresh.Hkv = Hkv, fresh.D = D, fresh.Dv = Dv;
    const auto keep = [&](std::size_t t) { return t < n_sink ? t : T - n_recent + (t - n_sink); };
    const auto extra_k = random_floats(3 * Hkv * D, 77, 0.5f), extra_v = random_floats(3 * Hkv * Dv, 78, 1.0f);
    for (std::size_t t = 0; t < n; ++t) {
        const auto kr = rows(full.k, keep(t), 1, Hkv, D), vr = rows(full.v, keep(t), 1, Hkv, Dv);
        fresh.k.insert(fresh.k.end(), kr.begin(), kr.end());
        fresh.v.insert(fresh.v.end(), vr.begin(), vr.end());
    }
    fresh.k.insert(fresh.k.end(), extra_k.begin(), extra_k.end());
    fresh.v.insert(fresh.v.end(), extra_v.begin(), extra_v.end());
    fresh.Tk = n + 3;
    for (std::size_t t = 0; t < n + 3; ++t) fresh.kpos.push_back(static_cast<std::int64_t>(t));
    fresh.Tq = 3;
    fresh.q = random_floats(3 * Hq * D, 79, 0.5f);
    fresh.qpos = {static_cast<std::int64_t>(n), static_cast<std::int64_t>(n + 1), static_cast<std::int64_t>(n + 2)};
    attn_model m;
    m.rot_q = m.rot_k = rope_rot(D, true, inv, rope_amplitude);
    const auto ref = reference_attention(fresh, m, [](std::int64_t i, std::int64_t j) { return j <= i; });

    // Decode the 3 new tokens one at a time after the shift.
    std::size_t compared = 0;
    double err = 0;
    auto q = fresh.q, ek = extra_k, ev = extra_v;
    for (std::size_t t = 0; t < 3; ++t) {
        REQUIRE(cache.next_position() == static_cast<std::int64_t>(n + t));
        cache.append(posenc::heads_view<const float>(ek.data() + t * Hkv * D, {1, Hkv, D}),
                     posenc::heads_view<const float>(ev.data() + t * Hkv * Dv, {1, Hkv, Dv}),
                     posenc::position_ids::consecutive(cache.next_position(), 1));
        auto q1 = rows(q, t, 1, Hq, D);
        std::vector<float> out(Hq * Dv);
        posenc::attention(posenc::attention_encoding{rope}, hv(q1, 1, Hq, D), cache, hv(out, 1, Hq, Dv),
                          posenc::position_ids::consecutive(static_cast<std::int64_t>(n + t), 1), posenc::causal_mask{});
        for (std::size_t i = 0; i < out.size(); ++i, ++compared)
            err = posenc_test::worst_of(err, std::abs(out[i] - ref[t * Hq * Dv + i]));
    }
    REQUIRE(compared == 3 * Hq * Dv);
    CHECK(err <= 1e-5 * max_abs(fresh.v));
}

TEST_CASE("kv_cache: a shift over positions with gaps keeps the gaps and re-rotates to them", "[kv_cache][shift]") {
    // Positions 0, 3, 6, ...: the kept recent tokens follow the last sink (at 3) from 4 on, 3 apart as
    // before; each key then equals the raw key rotated at its new position, by the closed form in double.
    const std::size_t T = 12, H = 2, D = 8, n_sink = 2, n_recent = 4;
    const posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 100});
    posenc::kv_cache cache(rope, {.kv_heads = H, .head_dim = D, .capacity = T});
    auto k = random_floats(T * H * D, 5, 1.0f), v = random_floats(T * H * D, 6, 1.0f);
    std::vector<std::int64_t> pos(T);
    for (std::size_t t = 0; t < T; ++t) pos[t] = 3 * static_cast<std::int64_t>(t);
    cache.append(hv(k, T, H, D), hv(v, T, H, D), posenc::position_ids(pos));
    REQUIRE(cache.context_shift(n_sink, n_recent) == T - n_sink - n_recent);
    const std::vector<std::int64_t> want_pos{0, 3, 4, 7, 10, 13};
    REQUIRE(cache.size() == want_pos.size());
    std::size_t compared = 0;
    for (std::size_t t = 0; t < want_pos.size(); ++t) {
        CHECK(cache.positions()[t] == want_pos[t]);
        const std::size_t src = t < n_sink ? t : T - n_recent + (t - n_sink);
        for (std::size_t h = 0; h < H; ++h) {
            const float* raw = k.data() + (src * H + h) * D;
            const float* got = cache.keys().row(t, h);
            for (std::size_t i = 0; i < D / 2; ++i, ++compared) {
                const double a = static_cast<double>(want_pos[t]) * std::pow(100.0, -2.0 * static_cast<double>(i) / D);
                const double x = raw[i], y = raw[i + D / 2];
                CHECK(std::abs(got[i] - (x * std::cos(a) - y * std::sin(a))) <= 2e-6);
                CHECK(std::abs(got[i + D / 2] - (y * std::cos(a) + x * std::sin(a))) <= 2e-6);
            }
        }
    }
    CHECK(compared == want_pos.size() * H * D / 2);
}

TEST_CASE("kv_cache: NoPE keys are copied, a shift only moves and renumbers", "[kv_cache][shift]") {
    const std::size_t T = 20, H = 2, D = 8;
    posenc::kv_cache cache(posenc::nope{}, {.kv_heads = H, .head_dim = D, .capacity = T});
    auto k = random_floats(T * H * D, 1, 1.0f), v = random_floats(T * H * D, 2, 1.0f);
    cache.append(hv(k, T, H, D), hv(v, T, H, D), posenc::position_ids::consecutive(100, T));
    REQUIRE(cache.context_shift(2, 5) == 13);
    std::size_t compared = 0;
    for (std::size_t t = 0; t < 7; ++t)
        for (std::size_t h = 0; h < H; ++h, ++compared) {
            const std::size_t src = t < 2 ? t : T - 5 + (t - 2);
            CHECK(std::memcmp(cache.keys().row(t, h), k.data() + (src * H + h) * D, D * sizeof(float)) == 0);
            CHECK(std::memcmp(cache.values().row(t, h), v.data() + (src * H + h) * D, D * sizeof(float)) == 0);
            CHECK(cache.positions()[t] == 100 + static_cast<std::int64_t>(t));
        }
    REQUIRE(compared == 7 * H);
    CHECK(cache.context_shift(7, 0) == 0);  // nothing to drop
    CHECK(cache.context_shift(0, 3) == 4);  // no sinks: the window moves to the front, positions from 100
    CHECK(cache.positions()[0] == 100);
    CHECK(cache.positions()[2] == 102);
}

TEST_CASE("kv_cache: a NoPE cache takes any int64 position but the last one", "[kv_cache][errors]") {
    // NoPE checks no position, so the cache itself must keep next_position() = last + 1 defined.
    const std::size_t H = 1, D = 4;
    posenc::kv_cache cache(posenc::nope{}, {.kv_heads = H, .head_dim = D, .capacity = 4});
    auto k = random_floats(2 * H * D, 5, 1.0f), v = random_floats(2 * H * D, 6, 1.0f);
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    const std::vector<std::int64_t> ok{top - 2, top - 1}, bad{top};
    cache.append(hv(k, 2, H, D), hv(v, 2, H, D), ok);
    CHECK(cache.next_position() == top);
    expect_config_error([&] { cache.append(hv(k, 1, H, D), hv(v, 1, H, D), bad); }, "positions[0]", "9223372036854775807");
    CHECK(cache.size() == 2);
    CHECK(cache.positions()[1] == top - 1);
}

TEST_CASE("kv_cache: every invalid argument throws and leaves the cache byte-identical", "[kv_cache][errors]") {
    const std::size_t H = 2, D = 16, cap = 10;
    posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
    posenc::kv_cache cache(rope, {.kv_heads = H, .head_dim = D, .capacity = cap});
    auto k = random_floats(cap * H * D, 3, 1.0f), v = random_floats(cap * H * D, 4, 1.0f);
    cache.append(posenc::heads_view<const float>(k.data(), {6, H, D}), posenc::heads_view<const float>(v.data(), {6, H, D}),
                 posenc::position_ids::consecutive(0, 6));
    const std::vector<float> k0(cache.key_storage().begin(), cache.key_storage().end());
    const std::vector<float> v0(cache.value_storage().begin(), cache.value_storage().end());
    const std::vector<std::int64_t> p0(cache.position_storage().begin(), cache.position_storage().end());
    auto unchanged = [&] {
        return cache.size() == 6 && std::memcmp(cache.key_storage().data(), k0.data(), k0.size() * sizeof(float)) == 0 &&
               std::memcmp(cache.value_storage().data(), v0.data(), v0.size() * sizeof(float)) == 0 &&
               std::equal(p0.begin(), p0.end(), cache.position_storage().begin());
    };
    auto kv = [&](std::size_t n, std::size_t heads, std::size_t dk, std::size_t dv) {
        return std::pair{posenc::heads_view<const float>(k.data(), {n, heads, dk}),
                         posenc::heads_view<const float>(v.data(), {n, heads, dv})};
    };
    std::size_t cases = 0;
    {  // capacity: 6 + 5 > 10
        const auto b_kk = kv(5, H, D, D);
        CHECK_THROWS_AS(cache.append(b_kk.first, b_kk.second, posenc::position_ids::consecutive(6, 5)), posenc::range_error);
        CHECK(unchanged());
        ++cases;
    }
    {  // heads, head_dim, value_dim, token counts
        const auto b_k1 = kv(2, 1, D, D);
        expect_config_error([&] { cache.append(b_k1.first, b_k1.second, posenc::position_ids::consecutive(6, 2)); }, "k shape", "2x1x16");
        const auto b_k2 = kv(2, H, 8, D);
        expect_config_error([&] { cache.append(b_k2.first, b_k2.second, posenc::position_ids::consecutive(6, 2)); }, "k shape", "2x2x8");
        const auto b_k3 = kv(2, H, D, 8);
        expect_config_error([&] { cache.append(b_k3.first, b_k3.second, posenc::position_ids::consecutive(6, 2)); }, "v shape", "2x2x8");
        const auto b_k4 = kv(2, H, D, D);
        expect_config_error([&] { cache.append(b_k4.first, b_k4.second, posenc::position_ids::consecutive(6, 3)); }, "k shape", "2x2x16");
        // Empty views are checked too: 0 positions with a view of 5 tokens and no heads.
        const auto b_e = kv(5, 0, D, D);
        expect_config_error([&] { cache.append(b_e.first, b_e.second, posenc::position_ids::consecutive(6, 0)); }, "k shape", "5x0x16");
        const auto b5 = kv(3, H, D, D);
        const posenc::heads_view<const float> v2(v.data(), {2, H, D});
        expect_config_error([&] { cache.append(b5.first, v2, posenc::position_ids::consecutive(6, 3)); }, "v shape", "2x2x16");
        CHECK(unchanged());
        cases += 6;
    }
    {  // positions: not past the cache (5 ≤ 5), not increasing inside the call
        const auto b_kk = kv(2, H, D, D);
        expect_config_error([&] { cache.append(b_kk.first, b_kk.second, posenc::position_ids::consecutive(5, 2)); }, "positions[0]", "5");
        const std::vector<std::int64_t> dup{7, 7};
        expect_config_error([&] { cache.append(b_kk.first, b_kk.second, dup); }, "positions[1]", "7");
        CHECK(unchanged());
        cases += 2;
    }
    {  // context shift keeping more than there is
        CHECK_THROWS_AS(cache.context_shift(4, 3), posenc::range_error);
        CHECK_THROWS_AS(cache.context_shift(7, 0), posenc::range_error);
        CHECK(unchanged());
        cases += 2;
    }
    {  // construction
        expect_config_error([&] { posenc::kv_cache c(rope, {.kv_heads = H, .head_dim = 8, .capacity = 4}); }, "head_dim", "8");
        expect_config_error([&] { posenc::kv_cache c(rope, {.kv_heads = 0, .head_dim = D, .capacity = 4}); }, "kv_heads", "0");
        expect_config_error([&] { posenc::kv_cache c(rope, {.kv_heads = H, .head_dim = D, .capacity = 0}); }, "capacity", "0");
        cases += 3;
    }
    REQUIRE(cases == 14);
    // and a valid append after all of that still works
    const auto b_kk = kv(4, H, D, D);
    cache.append(b_kk.first, b_kk.second, posenc::position_ids::consecutive(6, 4));
    CHECK(cache.size() == cap);
}
