// posenc::attention: invariants (NoPE permutation equivariance, RoPE shift invariance), rows with no
// visible key, empty inputs, decode against pre-rotated keys, argument checks that leave `out`
// untouched, bit-identical threads, and every SIMD architecture this CPU has.
#include <posenc/attention/attention.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/errors.hpp"
#include "support/heads.hpp"
#include "support/storage16.hpp"

using namespace posenc_test;

namespace {

template <class Enc, class Mask>
std::vector<float> run(const attn_problem& p, const Enc& enc, const Mask& mask, posenc::attention_options opt = {}) {
    std::vector<float> q = p.q, k = p.k, v = p.v, out(p.Tq * p.Hq * p.Dv, -7.0f);
    posenc::attention(enc, hv(q, p.Tq, p.Hq, p.D), hv(k, p.Tk, p.Hkv, p.D), hv(v, p.Tk, p.Hkv, p.Dv),
                      hv(out, p.Tq, p.Hq, p.Dv), p.qpos, p.kpos, mask, opt);
    return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = posenc_test::worst_of(m, std::abs(static_cast<double>(a[i]) - b[i]));
    return m;
}

}  // namespace

TEST_CASE("attention: NoPE without a mask is permutation-equivariant", "[attention][invariants]") {
    const attn_problem p = make_attn_problem(70, 90, 8, 2, 16, 16, 3);
    const posenc::attention_encoding enc{posenc::nope{}};
    const auto base = run(p, enc, posenc::no_mask{});
    std::mt19937 gen(9);
    {  // permute keys and values together: the same output (to float rounding: the sums are reordered)
        std::vector<std::size_t> perm(p.Tk);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), gen);
        attn_problem pk = p;
        for (std::size_t j = 0; j < p.Tk; ++j) {
            std::copy_n(p.k.begin() + static_cast<std::ptrdiff_t>(perm[j] * 2 * 16), 2 * 16, pk.k.begin() + static_cast<std::ptrdiff_t>(j * 2 * 16));
            std::copy_n(p.v.begin() + static_cast<std::ptrdiff_t>(perm[j] * 2 * 16), 2 * 16, pk.v.begin() + static_cast<std::ptrdiff_t>(j * 2 * 16));
        }
        CHECK(max_abs_diff(run(pk, enc, posenc::no_mask{}), base) <= 1e-6);
        // ... and a causal mask is positional: it breaks the symmetry
        CHECK(max_abs_diff(run(pk, enc, posenc::causal_mask{}), run(p, enc, posenc::causal_mask{})) > 1e-3);
    }
    {  // permute queries: the outputs permute, bit for bit (each row is computed alone)
        std::vector<std::size_t> perm(p.Tq);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), gen);
        attn_problem pq = p;
        for (std::size_t t = 0; t < p.Tq; ++t)
            std::copy_n(p.q.begin() + static_cast<std::ptrdiff_t>(perm[t] * 8 * 16), 8 * 16, pq.q.begin() + static_cast<std::ptrdiff_t>(t * 8 * 16));
        const auto got = run(pq, enc, posenc::no_mask{});
        std::size_t equal = 0;
        for (std::size_t t = 0; t < p.Tq; ++t)
            for (std::size_t i = 0; i < 8 * 16; ++i) equal += got[t * 128 + i] == base[perm[t] * 128 + i] ? 1 : 0;
        CHECK(equal == p.Tq * 128);
    }
}

TEST_CASE("attention: with RoPE, shifting every position by a constant leaves the output unchanged", "[attention][invariants]") {
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = 32}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    std::size_t compared = 0;
    for (std::int64_t shift : {1, 37, 1000, -500}) {
        attn_problem p = make_attn_problem(65, 130, 4, 1, 32, 16, 4, 600);
        const auto base = run(p, enc, posenc::causal_mask{});
        for (auto& x : p.qpos) x += shift;
        for (auto& x : p.kpos) x += shift;
        const auto shifted = run(p, enc, posenc::causal_mask{});
        INFO("shift " << shift);
        CHECK(max_abs_diff(shifted, base) <= 2e-6 * 4);  // max|v| ≈ 4 (N(0, 1) values)
        compared += base.size();
    }
    REQUIRE(compared == 4 * 65 * 4 * 16);
}

TEST_CASE("attention: rows with no visible key are zeros (never NaN), and empty inputs", "[attention][edges]") {
    const posenc::attention_encoding enc{posenc::nope{}};
    {  // queries before every key (causal), and keys too old for the window
        attn_problem p = make_attn_problem(5, 70, 2, 1, 16, 8, 1);
        for (std::size_t t = 0; t < 5; ++t) p.qpos[t] = static_cast<std::int64_t>(t) - 10;  // all < key 0
        auto out = run(p, enc, posenc::causal_mask{});
        CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
        for (std::size_t t = 0; t < 5; ++t) p.qpos[t] = 500 + static_cast<std::int64_t>(t);  // keys 0..69 all too old
        out = run(p, enc, posenc::sliding_window_mask{.window = 100});
        CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
        // with sinks too (the sink joins only the denominator)
        const std::vector<float> sinks{3.0f, -1.0f};
        out = run(p, enc, posenc::chunked_mask{.chunk = 8}, {.sinks = sinks});
        CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
    }
    {  // Tk = 0: every row sees nothing
        attn_problem p = make_attn_problem(3, 0, 4, 2, 16, 8, 2);
        const auto out = run(p, enc, posenc::no_mask{});
        REQUIRE(out.size() == 3 * 4 * 8);
        CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
    }
    {  // Tq = 0: nothing to do
        attn_problem p = make_attn_problem(0, 10, 4, 2, 16, 8, 2);
        CHECK(run(p, enc, posenc::causal_mask{}).empty());
    }
    {  // a partly masked tile with softcap: masked keys stay masked (softcap would map −∞ to −c)
        attn_problem p = make_attn_problem(1, 3, 1, 1, 16, 4, 8);
        p.qpos = {1};
        const auto out = run(p, enc, posenc::causal_mask{}, {.softcap = 2.0f});
        attn_model m;
        m.softcap = 2.0;
        const auto ref = reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return j <= i; });
        double err = 0;
        for (std::size_t i = 0; i < out.size(); ++i) err = posenc_test::worst_of(err, std::abs(out[i] - ref[i]));
        CHECK(err <= 1e-6);
    }
}

TEST_CASE("attention: decode against pre-rotated keys equals the last rows of prefill", "[attention][decode]") {
    const std::size_t T = 200, D = 32;
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = D}, posenc::yarn{.factor = 4, .original_max_position = 64});
    const attn_problem p = make_attn_problem(T, T, 8, 2, D, D, 12);
    const auto prefill = run(p, posenc::attention_encoding{rope}, posenc::causal_mask{});
    // the cache: K rotated once at its positions
    std::vector<float> kc = p.k, q = p.q, v = p.v;
    rope.apply(hv(kc, T, 2, D), posenc::position_ids(p.kpos));
    std::size_t compared = 0;
    for (std::size_t n : {1u, 3u}) {  // the last n queries at their positions
        std::vector<float> qn(q.end() - static_cast<std::ptrdiff_t>(n * 8 * D), q.end()), out(n * 8 * D);
        const std::vector<std::int64_t> qpos(p.qpos.end() - static_cast<std::ptrdiff_t>(n), p.qpos.end());
        posenc::attention(posenc::attention_encoding{rope}, hv(qn, n, 8, D), hv(kc, T, 2, D), hv(v, T, 2, D),
                          hv(out, n, 8, D), qpos, p.kpos, posenc::causal_mask{}, {.keys_transformed = true});
        const std::vector<float> last(prefill.end() - static_cast<std::ptrdiff_t>(n * 8 * D), prefill.end());
        CHECK(max_abs_diff(out, last) <= 2e-6 * 4);
        compared += out.size();
    }
    REQUIRE(compared == 4 * 8 * D);
}

TEST_CASE("attention: 1, 2 and 3 threads give bit-identical output", "[attention][threads]") {
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = 32}, posenc::default_rope{});
    const attn_problem p = make_attn_problem(300, 300, 8, 2, 32, 24, 13);
    const posenc::alibi_bias alibi({.heads = 8});
    const auto one = run(p, posenc::attention_encoding{rope, alibi}, posenc::causal_mask{}, {.threads = 1});
    for (unsigned n : {2u, 3u}) {
        const auto many = run(p, posenc::attention_encoding{rope, alibi}, posenc::causal_mask{}, {.threads = n});
        CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
    }
}

namespace {
template <class Arch>
void check_arch(Arch) {
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = 24}, posenc::default_rope{});
    // D and Dv not multiples of 16; Dv 1, 6 and 15 under every vector width but SSE's (P·V all tail)
    for (const std::size_t Dv : {20, 1, 6, 15}) {
        const attn_problem p = make_attn_problem(70, 135, 4, 1, 24, Dv, 14, 50);
        std::vector<float> q = p.q, k = p.k, v = p.v, out(p.Tq * p.Hq * p.Dv);
        const posenc::sliding_window_mask mask{.window = 90};
        posenc::detail::attention_on(posenc::simd::attention_kernels_for<Arch>(), posenc::attention_encoding{rope},
                                     hv(q, p.Tq, p.Hq, p.D), hv(k, p.Tk, p.Hkv, p.D), hv(v, p.Tk, p.Hkv, p.Dv),
                                     hv(out, p.Tq, p.Hq, p.Dv), p.qpos, p.kpos, mask, {.softcap = 3.0f});
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(24, true, rope.frequencies().inv_freq, 1.0);
        m.softcap = 3.0;
        const auto ref = reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return i - 90 < j && j <= i; });
        double err = 0, vmax = 0;
        for (std::size_t i = 0; i < out.size(); ++i) err = posenc_test::worst_of(err, std::abs(out[i] - ref[i]));
        for (float x : p.v) vmax = std::max(vmax, static_cast<double>(std::abs(x)));
        INFO(Arch::name() << " Dv " << Dv);
        CHECK(err <= 2e-6 * vmax);
    }
}
}  // namespace

namespace {
/// A chunk of queries (rows > 2·attn_row_block, so the tiled QKᵀ path, as in prefill) gives the same
/// bits as the same rows of the whole call, with V in another layout (head-major, as in kv_cache, and
/// misaligned by one float): with a Dv that leaves a tail for every vector width, and chunks that
/// start at different row blocks, against only the keys up to the chunk's last query (as a cache holds).
/// The P·V tail columns were a scalar loop whose rounding depended on the number of keys in the tile
/// (with FMA: 6 of 8 chunk checks failed on AVX2 and AVX-512).
template <class Arch>
void check_chunk_equals_prefill(Arch) {
    const std::size_t T = 150, Hq = 8, Hkv = 2, D = 32, Dv = 22;  // 22 = 16 + 6 = 2·8 + 6 = 5·4 + 2
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    const attn_problem p = make_attn_problem(T, T, Hq, Hkv, D, Dv, 31);
    const auto kernels = posenc::simd::attention_kernels_for<Arch>();
    const posenc::attention_encoding enc{rope};
    const posenc::causal_mask mask;
    std::vector<float> q = p.q, k = p.k, v = p.v, full(T * Hq * Dv);
    posenc::detail::attention_on(kernels, enc, hv(q, T, Hq, D), hv(k, T, Hkv, D), hv(v, T, Hkv, Dv),
                                 hv(full, T, Hq, Dv), p.qpos, p.kpos, mask, {});
    std::vector<float> vh(1 + T * Hkv * Dv);  // V head-major, one float past the buffer's alignment
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < Hkv; ++h)
            std::copy_n(p.v.begin() + (t * Hkv + h) * Dv, Dv, vh.begin() + 1 + (h * T + t) * Dv);
    auto v_heads = [&](std::size_t tokens) {
        return posenc::heads_view<const float>(vh.data() + 1, {tokens, Hkv, Dv}, {.token = Dv, .head = T * Dv});
    };
    std::size_t chunks = 0;
    for (const auto& [t0, n] : {std::pair<std::size_t, std::size_t>{127, 3}, {61, 5}, {0, 7}, {140, 10}}) {
        std::vector<float> qc(p.q.begin() + t0 * Hq * D, p.q.begin() + (t0 + n) * Hq * D), out(n * Hq * Dv);
        const std::vector<std::int64_t> pos(p.qpos.begin() + t0, p.qpos.begin() + t0 + n);
        // the keys up to the chunk's last query (a cache holds no more; causal rows see no more)
        const std::size_t tk = t0 + n;
        const std::vector<std::int64_t> kpos(p.kpos.begin(), p.kpos.begin() + tk);
        posenc::detail::attention_on(kernels, enc, hv(qc, n, Hq, D), posenc::heads_view<const float>(k.data(), {tk, Hkv, D}),
                                     v_heads(tk), hv(out, n, Hq, Dv), pos, kpos, mask, {});
        INFO(Arch::name() << ": tokens " << t0 << " .. " << t0 + n - 1);
        CHECK(std::memcmp(out.data(), full.data() + t0 * Hq * Dv, out.size() * sizeof(float)) == 0);
        ++chunks;
    }
    CHECK(chunks == 4);
}

/// A call whose last query tile holds at most 8 rows (MHA, keys not transformed: tiles of 128 tokens,
/// then 1-8 left): those rows equal the same rows of a chunk of 10 tokens, bit for bit.
template <class Arch>
void check_short_last_tile(Arch) {
    const auto kernels = posenc::simd::attention_kernels_for<Arch>();
    const posenc::attention_encoding enc{posenc::nope{}};
    for (const std::size_t T : {129, 133, 136}) {
        const std::size_t H = 2, D = 32, Dv = 22, n = 10, t0 = T - n;
        attn_problem p = make_attn_problem(T, T, H, H, D, Dv, 37);
        std::vector<float> full(T * H * Dv), out(n * H * Dv);
        posenc::detail::attention_on(kernels, enc, hv(p.q, T, H, D), hv(p.k, T, H, D), hv(p.v, T, H, Dv), hv(full, T, H, Dv),
                                     p.qpos, p.kpos, posenc::causal_mask{}, {});
        std::vector<float> qc(p.q.begin() + t0 * H * D, p.q.end());
        const std::vector<std::int64_t> pos(p.qpos.begin() + t0, p.qpos.end());
        posenc::detail::attention_on(kernels, enc, hv(qc, n, H, D), hv(p.k, T, H, D), hv(p.v, T, H, Dv), hv(out, n, H, Dv), pos,
                                     p.kpos, posenc::causal_mask{}, {});
        INFO(Arch::name() << ": " << T << " tokens, the last " << n);
        CHECK(std::memcmp(out.data(), full.data() + t0 * H * Dv, out.size() * sizeof(float)) == 0);
    }
}

/// Decode (1 and 2 tokens of 4 query heads per kv head: the steps' dot-product path) over a head-major
/// cache of 300 keys, float and bf16, under several decode prefetch tunings: the same bits as the
/// default's, as attn_decode_prefetch promises (prefetch distances past the cache's end included).
template <class Arch>
void check_decode_prefetch_changes_no_bit(Arch) {
    const std::size_t T = 300, Hq = 8, Hkv = 2, D = 64;
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    const attn_problem p = make_attn_problem(T, T, Hq, Hkv, D, D, 41);
    std::vector<float> kh(T * Hkv * D), vh(T * Hkv * D);  // head-major, as kv_cache stores them
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < Hkv; ++h) {
            std::copy_n(p.k.begin() + (t * Hkv + h) * D, D, kh.begin() + (h * T + t) * D);
            std::copy_n(p.v.begin() + (t * Hkv + h) * D, D, vh.begin() + (h * T + t) * D);
        }
    const auto kb = to_storage<posenc::bf16>(kh), vb = to_storage<posenc::bf16>(vh);
    const posenc::heads_strides head_major{.token = D, .head = T * D};
    const posenc::attention_encoding enc{rope};
    auto decode = [&]<class E>(posenc::simd::attn_decode_prefetch tuning, std::size_t tokens, const std::vector<E>& k,
                               const std::vector<E>& v) {
        auto kernels = posenc::simd::attention_kernels_for<Arch>();
        kernels.decode_prefetch = tuning;
        const std::size_t t0 = T - tokens;
        std::vector<float> q(p.q.begin() + t0 * Hq * D, p.q.end()), out(tokens * Hq * D);
        const std::vector<std::int64_t> qpos(p.qpos.begin() + t0, p.qpos.end());
        posenc::detail::attention_on(kernels, enc, hv(q, tokens, Hq, D), posenc::heads_view<const E>(k.data(), {T, Hkv, D}, head_major),
                                     posenc::heads_view<const E>(v.data(), {T, Hkv, D}, head_major), hv(out, tokens, Hq, D), qpos,
                                     p.kpos, posenc::causal_mask{}, {.keys_transformed = true});
        return out;
    };
    auto run = [&](posenc::simd::attn_decode_prefetch tuning, std::size_t tokens, bool in_bf16) {
        return in_bf16 ? decode(tuning, tokens, kb, vb) : decode(tuning, tokens, kh, vh);
    };
    for (const bool in_bf16 : {false, true})
        for (const std::size_t tokens : {1, 2}) {
            const auto by_default = run({}, tokens, in_bf16);
            for (const posenc::simd::attn_decode_prefetch tuning :
                 {posenc::simd::attn_decode_prefetch{6, false}, posenc::simd::attn_decode_prefetch{0, false},
                  posenc::simd::attn_decode_prefetch{1, true}, posenc::simd::attn_decode_prefetch{1000, false}}) {
                const auto out = run(tuning, tokens, in_bf16);
                INFO(Arch::name() << (in_bf16 ? " bf16" : " float") << ", " << tokens << " tokens, " << tuning.stream_rows
                                  << " rows ahead, other stream " << tuning.other_stream);
                CHECK(std::memcmp(out.data(), by_default.data(), out.size() * sizeof(float)) == 0);
            }
        }
}
}  // namespace

TEST_CASE("attention: a chunk of queries gives the bits of the same rows of the whole call, on every SIMD architecture", "[attention][simd][decode]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { check_chunk_equals_prefill(arch); }) >= 1);
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { check_short_last_tile(arch); }) >= 1);
}

TEST_CASE("attention: decode's prefetch tuning changes no bit, on every SIMD architecture", "[attention][simd][decode]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { check_decode_prefetch_changes_no_bit(arch); }) >= 1);
    // The tuning the dispatch picks differs by vendor (dispatch.hpp), the bits above do not.
    const posenc::simd::cpu_signature intel{.intel = true}, other{};
    CHECK_FALSE(posenc::simd::decode_prefetch_for(intel).other_stream);
    CHECK(posenc::simd::decode_prefetch_for(other).other_stream);
    const auto chosen = posenc::simd::attention_kernels().decode_prefetch;
    CHECK(chosen.other_stream == !posenc::simd::this_cpu().intel);
    CHECK(chosen.stream_rows == posenc::simd::decode_prefetch_for(posenc::simd::this_cpu()).stream_rows);
}

TEST_CASE("attention: every SIMD architecture this CPU has equals the reference", "[attention][simd]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { check_arch(arch); }) >= 1);
    INFO("dispatch picks " << posenc::simd::attention_kernels().arch);
    CHECK(std::string(posenc::simd::attention_kernels().arch) == posenc::simd::active_arch_name());
}

TEST_CASE("attention: every invalid argument throws before out is written", "[attention][errors]") {
    const std::size_t T = 6, Hq = 4, Hkv = 2, D = 16, Dv = 8;
    std::vector<float> q = random_floats(T * Hq * D, 1), k = random_floats(T * Hkv * D, 2), v = random_floats(T * Hkv * Dv, 3);
    std::vector<float> out(T * Hq * Dv, 1.25f);
    const std::vector<float> pristine = out;
    const std::vector<std::int64_t> pos{0, 1, 2, 3, 4, 5}, short_pos{0, 1, 2};
    auto Q = hv(q, T, Hq, D), K = hv(k, T, Hkv, D), V = hv(v, T, Hkv, Dv), O = hv(out, T, Hq, Dv);
    const posenc::attention_encoding nope{posenc::nope{}};
    std::size_t checked = 0;
    auto untouched = [&] {
        ++checked;
        CHECK(std::memcmp(out.data(), pristine.data(), out.size() * sizeof(float)) == 0);
    };
    auto cfg = [&](auto&& f, const std::string& key) {
        expect_config_error(f, key);
        untouched();
    };
    cfg([&] { posenc::attention(nope, Q, K, V, O, short_pos, pos); }, "q.tokens");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, short_pos); }, "k.tokens");
    std::vector<float> v5(5 * Hkv * Dv);
    cfg([&] { posenc::attention(nope, Q, K, hv(v5, 5, Hkv, Dv), O, pos, pos); }, "v.tokens");
    std::vector<float> o5(5 * Hq * Dv);
    cfg([&] { posenc::attention(nope, Q, K, V, hv(o5, 5, Hq, Dv), pos, pos); }, "out.tokens");
    cfg([&] { posenc::attention(nope, Q, K, V, hv(out, T, 2, 2 * Dv), pos, pos); }, "out.heads");
    std::vector<float> v1(T * 1 * Dv);
    cfg([&] { posenc::attention(nope, Q, K, hv(v1, T, 1, Dv), O, pos, pos); }, "v.heads");
    std::vector<float> k3(T * 3 * D), v3(T * 3 * Dv);
    cfg([&] { posenc::attention(nope, Q, hv(k3, T, 3, D), hv(v3, T, 3, Dv), O, pos, pos); }, "q.heads");
    std::vector<float> k8(T * Hkv * 8);
    cfg([&] { posenc::attention(nope, Q, hv(k8, T, Hkv, 8), V, O, pos, pos); }, "k.head_dim");
    cfg([&] { posenc::attention(nope, Q, K, V, hv(out, T, Hq / 2, 2 * Dv), pos, pos); }, "out.heads");
    std::vector<float> o16(T * Hq * 16);
    cfg([&] { posenc::attention(nope, Q, K, V, hv(o16, T, Hq, 16), pos, pos); }, "out.head_dim");
    // out overlapping an input
    std::vector<float> big(T * Hq * D + T * Hq * Dv);
    auto Qb = posenc::heads_view<float>(std::span<float>(big), {T, Hq, D});
    auto Ob = posenc::heads_view<float>(std::span<float>(big).subspan(T * Hq * D - 1), {T, Hq, Dv});
    const std::vector<float> big0 = big;
    expect_config_error([&] { posenc::attention(nope, Qb, K, V, Ob, pos, pos); }, "out");
    CHECK(big == big0);
    std::vector<float> kv(T * Hkv * D + T * Hq * Dv);
    auto Kb = posenc::heads_view<float>(std::span<float>(kv), {T, Hkv, D});
    auto Ok = posenc::heads_view<float>(std::span<float>(kv).subspan(T * Hkv * D / 2), {T, Hq, Dv});
    expect_config_error([&] { posenc::attention(nope, Q, Kb, V, Ok, pos, pos); }, "out");
    std::vector<float> vb(T * Hkv * Dv + T * Hq * Dv);
    auto Vb = posenc::heads_view<float>(std::span<float>(vb), {T, Hkv, Dv});
    auto Ov = posenc::heads_view<float>(std::span<float>(vb).subspan(T * Hkv * Dv - 1), {T, Hq, Dv});
    expect_config_error([&] { posenc::attention(nope, Q, K, Vb, Ov, pos, pos); }, "out");
    // masks, options
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::sliding_window_mask{.window = 0}); }, "sliding_window");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::sliding_window_mask{.window = -3}); }, "sliding_window");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::chunked_mask{.chunk = 0}); }, "attention_chunk_size");
    const std::vector<float> sinks3{0, 0, 0}, sinks_nan{0, 0, NAN, 0};
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.sinks = sinks3}); }, "sinks");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.sinks = sinks_nan}); }, "sinks");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.softcap = -1.0f}); }, "softcap");
    const std::vector<std::int32_t> seq6(6, 0), seq5(5, 0);
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.query_sequence = seq6}); }, "query_sequence");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.query_sequence = seq5, .key_sequence = seq6}); },
        "query_sequence");
    cfg([&] { posenc::attention(nope, Q, K, V, O, pos, pos, posenc::no_mask{}, {.query_sequence = seq6, .key_sequence = seq5}); },
        "key_sequence");
    // the encoding: a rotary of another head_dim, a scale, a table too short, ALiBi with too few heads
    posenc::rotary<posenc::half_split> rope8({.head_dim = 8}, posenc::default_rope{});
    cfg([&] { posenc::attention(posenc::attention_encoding{rope8}, Q, K, V, O, pos, pos); }, "q.head_dim");
    const std::vector<std::int64_t> no_pos;  // no queries: the encoding still checks q's head_dim
    cfg([&] { posenc::attention(posenc::attention_encoding{rope8}, hv(q, 0, Hq, D), K, V, hv(out, 0, Hq, Dv), no_pos, pos); },
        "q.head_dim");
    cfg([&] { posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, posenc::fixed_scale{-1}}, Q, K, V, O, pos, pos); },
        "lambda");
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const auto table = rope.table(4);
    CHECK_THROWS_AS(posenc::attention(posenc::attention_encoding{posenc::table_transform{rope, table}}, Q, K, V, O, pos, pos),
                    posenc::range_error);
    untouched();
    CHECK_THROWS_AS(posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = 2})}, Q, K, V, O, pos, pos),
                    posenc::range_error);
    untouched();
    const std::vector<std::int64_t> negative{-1, 0, 1, 2, 3, 4};
    CHECK_THROWS_AS(posenc::attention(posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, posenc::temperature_scale{}}, Q, K, V,
                                      O, negative, pos),
                    posenc::range_error);
    untouched();
    REQUIRE(checked == 25);
    // and the valid call does write
    posenc::attention(nope, Q, K, V, O, pos, pos);
    CHECK(out != pristine);
}
