// Out-of-place rotation through the public API: apply_into into cache slots and fused QKV buffers,
// a destination that is its source, conversion on the way, and the overlap checks (posenc's own
// in-place call is the reference where the kernels are held to double elsewhere).
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cstring>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

using posenc_test::random_floats;
using posenc_test::to_storage;

TEST_CASE("apply_into writes exactly what the in-place call computes, into a cache slot", "[out_of_place]") {
    const std::size_t T = 40, HQ = 4, HK = 2, D = 128, cache_tokens = 100, slot = 37;
    posenc::rotary<posenc::half_split> rope({.head_dim = D, .rotary_dim = 96}, posenc::default_rope{.base = 10000});
    const auto table = rope.table(4096);
    const auto q0 = random_floats(T * HQ * D, 3), k0 = random_floats(T * HK * D, 4);
    const auto pos = posenc::position_ids::consecutive(1000, T);
    for (bool use_table : {false, true}) {
        auto q_ref = q0, k_ref = k0;
        posenc::heads_view<float> qv(std::span<float>(q_ref), {T, HQ, D}), kv(std::span<float>(k_ref), {T, HK, D});
        if (use_table) rope.apply(table, qv, kv, pos);
        else rope.apply(qv, kv, pos);
        // The cache holds [cache_tokens, HK, D]; the new keys go to tokens slot..slot+T−1; Q goes to another buffer.
        std::vector<float> cache(cache_tokens * HK * D, -5.0f), q_out(T * HQ * D, -5.0f);
        const posenc::heads_view<const float> q_src(std::span<const float>(q0), {T, HQ, D});
        const posenc::heads_view<const float> k_src(std::span<const float>(k0), {T, HK, D});
        posenc::heads_view<float> q_dst(std::span<float>(q_out), {T, HQ, D});
        posenc::heads_view<float> k_dst(cache.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply_into(table, q_src, q_dst, k_src, k_dst, pos);
        else rope.apply_into(q_src, q_dst, k_src, k_dst, pos);
        INFO("table " << use_table);
        CHECK(std::memcmp(q_out.data(), q_ref.data(), q_ref.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(cache.data() + slot * HK * D, k_ref.data(), k_ref.size() * sizeof(float)) == 0);
        std::size_t untouched = 0;
        for (std::size_t i = 0; i < cache.size(); ++i)
            if (i < slot * HK * D || i >= (slot + T) * HK * D) untouched += cache[i] == -5.0f;
        CHECK(untouched == cache.size() - T * HK * D);
    }
}

TEST_CASE("apply_into with a destination that is its source rotates that view in place: Q in place, K into a cache", "[out_of_place]") {
    const std::size_t T = 33, HQ = 4, HK = 2, D = 64, cache_tokens = 80, slot = 21;
    posenc::rotary<posenc::interleaved> rope({.head_dim = D, .rotary_dim = 48}, posenc::default_rope{.base = 10000});
    const auto table = rope.table(2048);
    const auto pos = posenc::position_ids::consecutive(900, T);
    const auto q0 = to_storage<posenc::bf16>(random_floats(T * HQ * D, 5));
    const auto k0 = random_floats(T * HK * D, 6);
    for (bool use_table : {false, true}) {
        // Reference: Q in place, then K into the cache, as two calls.
        auto q_ref = q0;
        std::vector<posenc::bf16> cache_ref(cache_tokens * HK * D, posenc::bf16(-5.0f));
        posenc::heads_view<posenc::bf16> q_ref_v(std::span<posenc::bf16>(q_ref), {T, HQ, D});
        const posenc::heads_view<const float> k_src(std::span<const float>(k0), {T, HK, D});
        posenc::heads_view<posenc::bf16> slot_ref(cache_ref.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply(table, q_ref_v, pos), rope.apply_into(table, k_src, slot_ref, pos);
        else rope.apply(q_ref_v, pos), rope.apply_into(k_src, slot_ref, pos);
        // One call: q_dst is q_src itself.
        auto q = q0;
        std::vector<posenc::bf16> cache(cache_tokens * HK * D, posenc::bf16(-5.0f));
        posenc::heads_view<posenc::bf16> qv(std::span<posenc::bf16>(q), {T, HQ, D});
        posenc::heads_view<posenc::bf16> slot_v(cache.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply_into(table, posenc::heads_view<const posenc::bf16>(qv), qv, k_src, slot_v, pos);
        else rope.apply_into(posenc::heads_view<const posenc::bf16>(qv), qv, k_src, slot_v, pos);
        INFO("table " << use_table);
        CHECK(q == q_ref);
        CHECK(cache == cache_ref);
        CHECK(q != q0);  // it did rotate Q
    }
    // The source's memory under another stride or element type is not the source: rejected, naming
    // what differs, nothing written.
    std::vector<float> buf(2 * T * HK * D, 0.25f);
    const auto before = buf;
    posenc::heads_view<float> a(buf.data(), {T, HK, D}, {4 * D, D}), b(buf.data(), {T, HK, D}, {D, T * D}),
        c(buf.data(), {T, HK, D}, {4 * D, 2 * D});
    posenc_test::expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(a), b, pos); }, "dst.token_stride",
                                     "64");
    posenc_test::expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(a), c, pos); }, "dst.head_stride",
                                     "128");
    CHECK(buf == before);
    std::vector<posenc::bf16> b16(T * HK * D, posenc::bf16(0.5f));
    const auto b16_before = b16;
    const posenc::heads_view<const posenc::bf16> s16(std::span<const posenc::bf16>(b16), {T, HK, D});
    const posenc::heads_view<posenc::fp16> as_fp16(reinterpret_cast<posenc::fp16*>(b16.data()), {T, HK, D});  // never read
    posenc_test::expect_config_error([&] { rope.apply_into(s16, as_fp16, pos); }, "dst", "another element type");
    CHECK(b16 == b16_before);
    // One token: the strides do not matter, a dense view over a strided row is that row (decode).
    auto row = random_floats(3 * HK * D, 8);  // one token of a wider row: heads at a stride of 3·D
    auto row_ref = row;
    const posenc::heads_view<float> strided(row.data(), {1, HK, D}, {3 * HK * D, 3 * D});
    const posenc::heads_view<float> same_row(row.data(), {1, HK, D}, {100 * D, 3 * D});
    const auto at = posenc::position_ids::consecutive(4321, 1);
    rope.apply_into(posenc::heads_view<const float>(strided), same_row, at);
    rope.apply(posenc::heads_view<float>(row_ref.data(), {1, HK, D}, {3 * HK * D, 3 * D}), at);
    CHECK(row == row_ref);
    // A single view whose destination is itself equals the in-place call.
    auto x = random_floats(T * HK * D, 7), x_ref = x;
    posenc::heads_view<float> xv(std::span<float>(x), {T, HK, D});
    rope.apply_into(posenc::heads_view<const float>(xv), xv, pos);
    rope.apply(posenc::heads_view<float>(std::span<float>(x_ref), {T, HK, D}), pos);
    CHECK(std::memcmp(x.data(), x_ref.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("Q and K of one fused QKV buffer: Q in place and K into a cache in one call, token rows checked exactly", "[out_of_place]") {
    const std::size_t T = 17, HQ = 4, HK = 2, D = 64, row = (HQ + 2 * HK) * D, cache_tokens = 40, slot = 9;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 500000});
    const auto pos = posenc::position_ids::consecutive(250, T);
    const auto qkv0 = random_floats(T * row, 9);
    auto q_of = [&](std::vector<float>& qkv) { return posenc::heads_view<float>(qkv.data(), {T, HQ, D}, {row, D}); };
    auto k_of = [&](std::vector<float>& qkv) { return posenc::heads_view<float>(qkv.data() + HQ * D, {T, HK, D}, {row, D}); };
    // Reference: Q in place, then K into the cache, two calls.
    auto qkv_ref = qkv0;
    std::vector<float> cache_ref(cache_tokens * HK * D, -3.0f);
    rope.apply(q_of(qkv_ref), pos);
    rope.apply_into(posenc::heads_view<const float>(k_of(qkv_ref)),
                    posenc::heads_view<float>(cache_ref.data() + slot * HK * D, {T, HK, D}), pos);
    for (unsigned threads : {1u, 3u}) {
        CAPTURE(threads);
        rope.set_threads(threads);
        auto qkv = qkv0;
        std::vector<float> cache(cache_tokens * HK * D, -3.0f);
        const auto qv = q_of(qkv);
        rope.apply_into(posenc::heads_view<const float>(qv), qv, posenc::heads_view<const float>(k_of(qkv)),
                        posenc::heads_view<float>(cache.data() + slot * HK * D, {T, HK, D}), pos);
        CHECK(qkv == qkv_ref);  // Q rotated in place, K and V untouched
        CHECK(cache == cache_ref);
    }
    rope.set_threads(1);
    // A K view that reaches one lane into Q's last head of each row does share bytes: rejected.
    auto qkv = qkv0;
    const auto qv = q_of(qkv);
    const posenc::heads_view<const float> k_shifted(qkv.data() + HQ * D - 1, {T, HK, D}, {row, D});
    std::vector<float> cache(T * HK * D);
    posenc_test::expect_config_error(
        [&] {
            rope.apply_into(posenc::heads_view<const float>(qv), qv, k_shifted,
                            posenc::heads_view<float>(std::span<float>(cache), {T, HK, D}), pos);
        },
        "q_dst", "k_src");
    // So does a K source that is Q's memory, with Q in place.
    posenc_test::expect_config_error(
        [&] {
            rope.apply_into(posenc::heads_view<const float>(qv), qv, posenc::heads_view<const float>(qkv.data(), {T, HK, D}, {row, D}),
                            posenc::heads_view<float>(std::span<float>(cache), {T, HK, D}), pos);
        },
        "q_dst", "k_src");
    CHECK(qkv == qkv0);
}

TEST_CASE("a destination that is its source, with the fused norm, threads and xPos", "[out_of_place][norm][xpos]") {
    const std::size_t T = 600, H = 4, D = 128;  // 300K floats: split into slices with set_threads(3)
    posenc::rotary<posenc::interleaved> rope({.head_dim = D, .rotary_dim = 96}, posenc::default_rope{});
    rope.set_threads(3);
    const posenc::head_rms_norm norm(random_floats(D, 81, 0.3f), 1e-6);
    const auto pos = posenc::position_ids::consecutive(3, T);
    auto x = to_storage<posenc::bf16>(random_floats(T * H * D, 82)), x_ref = x;
    const posenc::heads_view<posenc::bf16> xv(std::span<posenc::bf16>(x), {T, H, D});
    rope.apply_normed_into(norm, posenc::heads_view<const posenc::bf16>(xv), xv, pos);
    rope.apply_normed(norm, posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(x_ref), {T, H, D}), pos);
    CHECK(x == x_ref);
    // An empty view that is given still has its norm checked.
    const posenc::head_rms_norm narrow(std::vector<float>(32, 1.0f), 1e-6);
    posenc_test::expect_config_error(
        [&] { rope.apply_normed(narrow, posenc::heads_view<posenc::bf16>(x.data(), {T, 0, D}), pos); }, "norm.weight", "32");

    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
    auto y = random_floats(5 * H * D, 83), y_ref = y;
    const posenc::heads_view<float> yv(std::span<float>(y), {5, H, D});
    const auto p5 = posenc::position_ids::consecutive(10, 5);
    xp.apply_keys_into(posenc::heads_view<const float>(yv), yv, p5);
    xp.apply_keys(posenc::heads_view<float>(std::span<float>(y_ref), {5, H, D}), p5);
    CHECK(y == y_ref);
}

TEST_CASE("apply_into converts float to bf16 on the way, and rejects overlapping or mismatched views", "[out_of_place]") {
    const std::size_t T = 9, H = 2, D = 64;
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = D}, posenc::default_rope{});
    const auto x = random_floats(T * H * D, 8);
    std::vector<float> ref = x;
    rope.apply(posenc::heads_view<float>(std::span<float>(ref), {T, H, D}), posenc::position_ids::consecutive(5, T));
    std::vector<posenc::bf16> out(T * H * D);
    rope.apply_into(posenc::heads_view<const float>(std::span<const float>(x), {T, H, D}),
                    posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(out), {T, H, D}),
                    posenc::position_ids::consecutive(5, T));
    std::size_t equal = 0;
    for (std::size_t i = 0; i < out.size(); ++i) equal += out[i] == posenc::bf16(ref[i]);  // one rounding of the float result
    CHECK(equal == out.size());

    std::vector<float> buf(2 * T * H * D, 1.0f), before = buf;
    posenc::heads_view<float> a(buf.data(), {T, H, D}), b(buf.data() + D, {T, H, D}, {2 * H * D, D});
    posenc_test::expect_config_error([&] { rope.apply_into(a, b, posenc::position_ids::consecutive(0, T)); }, "dst",
                                     "overlapping");
    posenc::heads_view<float> small(buf.data() + T * H * D, {T, 1, D});
    posenc_test::expect_config_error([&] { rope.apply_into(a, small, posenc::position_ids::consecutive(0, T)); },
                                     "dst shape", "9x1x64");
    CHECK(buf == before);
}

TEST_CASE("apply_into with Q and K rejects a destination that overlaps the other view's source or destination", "[out_of_place]") {
    const std::size_t T = 4, H = 2, D = 32, n = T * H * D;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    // Four disjoint regions of one buffer; each bad case points one destination at another view's bytes.
    std::vector<float> buf(4 * n);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 97) * 0.01f;
    const std::vector<float> before = buf;
    auto view = [&](std::size_t region) { return posenc::heads_view<float>(buf.data() + region * n, {T, H, D}); };
    auto src = [&](std::size_t region) { return posenc::heads_view<const float>(view(region)); };
    const auto pos = posenc::position_ids::consecutive(7, T);
    std::size_t cases = 0;
    // q_dst on k_src, q_dst on k_dst, k_dst on q_src.
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(2), src(2), view(3), pos); }, "q_dst", "k_src");
    ++cases;
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(3), src(2), view(3), pos); }, "q_dst", "k_dst");
    ++cases;
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(1), src(2), view(0), pos); }, "k_dst", "q_src");
    ++cases;
    REQUIRE(cases == 3);
    CHECK(buf == before);
    rope.apply_into(src(0), view(1), src(2), view(3), pos);  // all four disjoint: accepted, and it writes
    CHECK(buf != before);
}
