// Attention for engines: 16-bit K/V (bf16, fp16) in attention and kv_cache, key segments and
// split-KV decode across threads, attention_partial + merge_attention_partials, the executor and the
// work threshold, the cache's transform check, the shape messages, and policies that throw inside.
//
// Expected values: (1) the float path on the same 16-bit-rounded inputs, bit for bit (the 16-bit
// path widens exactly, so any difference is a bug; the float path is held to the double reference in
// test_attention.cpp); (2) the double reference of support/attention_reference.hpp on those rounded
// inputs, within test_attention.cpp's bound (2e-6·max|v|; the segment fold adds one rounding per
// 1024 keys, far below it); (3) for partials, lse against log Σ exp(logit) computed in double here;
// (4) values stored in a 16-bit cache against round_to (support/storage16.hpp: the formats' rounding
// in double), and merge's edge rows written out by hand.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/attention/workspace.hpp>
#include <posenc/posenc.hpp>

#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/heads.hpp"
#include "support/storage16.hpp"

using namespace posenc_test;

namespace engine_kv_test {

template <class H>
std::vector<float> widened(const std::vector<H>& x) {
    std::vector<float> r(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) r[i] = static_cast<float>(x[i]);
    return r;
}
template <class T>
posenc::heads_view<T> view(std::vector<T>& x, std::size_t T_, std::size_t H, std::size_t D) {
    return {std::span<T>(x), {T_, H, D}};
}
bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
double kv_worst_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double e = 0;
    for (std::size_t i = 0; i < got.size(); ++i) e = worst_of(e, std::abs(static_cast<double>(got[i]) - ref[i]));
    return e;
}

/// One encoding of the matrix: the posenc encoding and its double model.
template <class Enc>
struct enc_case {
    std::string name;
    Enc enc;
    attn_model model;
    posenc::attention_options opt;
};

/// Runs the 16-bit call and the float call on the widened values through the given kernels; checks
/// bits, then the double reference.
template <class H, class Enc, class Mask>
void check_half_case(const posenc::simd::attn_kernels& ker, const std::string& name, attn_problem p, const Enc& enc,
                     attn_model model, posenc::attention_options opt, const Mask& mask, const visible_fn& visible,
                     std::size_t& compared) {
    const std::vector<H> kh = to_storage<H>(p.k), vh = to_storage<H>(p.v);
    p.k = widened(kh);
    p.v = widened(vh);
    std::vector<float> q = p.q, k = p.k, v = p.v, out_f(p.Tq * p.Hq * p.Dv, -5.0f), out_h(out_f.size(), -7.0f);
    std::vector<H> kh2 = kh, vh2 = vh;
    const posenc::position_ids qp(p.qpos), kp(p.kpos);
    posenc::detail::attention_on(ker, enc, hv(q, p.Tq, p.Hq, p.D), hv(k, p.Tk, p.Hkv, p.D), hv(v, p.Tk, p.Hkv, p.Dv),
                                 hv(out_f, p.Tq, p.Hq, p.Dv), qp, kp, mask, opt);
    posenc::detail::attention_on(ker, enc, hv(q, p.Tq, p.Hq, p.D),
                                 posenc::heads_view<const H>(view(kh2, p.Tk, p.Hkv, p.D)),
                                 posenc::heads_view<const H>(view(vh2, p.Tk, p.Hkv, p.Dv)), hv(out_h, p.Tq, p.Hq, p.Dv), qp,
                                 kp, mask, opt);
    INFO(name << " " << ker.arch << " Tq " << p.Tq << " Tk " << p.Tk << " heads " << p.Hq << "/" << p.Hkv);
    CHECK(bits_equal(out_h, out_f));
    CHECK(kh2 == kh);  // inputs untouched
    // The double reference of a case, computed for the first architecture and kept for the others
    // (every architecture runs the same cases, and the model is the slow part). The key: the name and
    // a fingerprint of every input the model reads.
    static std::map<std::string, std::vector<double>> references;
    std::uint64_t fingerprint = 1469598103934665603u;  // FNV-1a
    const auto mix = [&](const auto& xs) {
        const auto* b = reinterpret_cast<const unsigned char*>(xs.data());
        for (std::size_t i = 0; i < xs.size() * sizeof(xs[0]); ++i) fingerprint = (fingerprint ^ b[i]) * 1099511628211u;
        fingerprint = (fingerprint ^ xs.size()) * 1099511628211u;
    };
    mix(p.q), mix(p.k), mix(p.v), mix(p.qpos), mix(p.kpos), mix(p.qseq), mix(p.kseq), mix(model.sinks);
    const std::string key = name + " " + std::to_string(p.Hq) + "/" + std::to_string(p.Hkv) + " " + std::to_string(fingerprint);
    auto [it, fresh] = references.try_emplace(key);
    if (fresh) it->second = reference_attention(p, model, visible);
    REQUIRE(it->second.size() == out_h.size());
    CHECK(kv_worst_error(out_h, it->second) <= 2e-6 * max_abs(p.v));
    compared += out_h.size();
}

std::int64_t floor_div16(std::int64_t a) { return a / 16 - ((a % 16 != 0) && (a < 0)); }

template <class H, class Enc>
void check_half_masks(const posenc::simd::attn_kernels& ker, const enc_case<Enc>& c, std::size_t& compared,
                      bool with_none = true) {
    struct shape {
        std::size_t Tq, Tk, Hq, Hkv;
    };
    // 1100 keys: two segments; 1 query against 2100: three segments, split across threads (the work
    // threshold is off: min_fmas_per_thread = 0).
    const shape shapes[] = {{7, 63, 4, 4}, {5, 130, 8, 2}, {1, 2100, 4, 1}, {66, 1100, 2, 1}};
    std::uint32_t seed = 300;
    for (const shape& s : shapes) {
        const attn_problem p = make_attn_problem(s.Tq, s.Tk, s.Hq, s.Hkv, 16, 24, seed++, 40);
        posenc::attention_options opt = c.opt;
        attn_model model = c.model;
        if (!opt.sinks.empty()) {
            opt.sinks = opt.sinks.first(s.Hq);
            model.sinks.resize(s.Hq);
        }
        opt.threads = 1 + seed % 3;
        opt.min_fmas_per_thread = 0;
        if (with_none)
            check_half_case<H>(ker, c.name + " none", p, c.enc, model, opt, posenc::no_mask{},
                               [](std::int64_t, std::int64_t) { return true; }, compared);
        check_half_case<H>(ker, c.name + " causal", p, c.enc, model, opt, posenc::causal_mask{},
                           [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
        check_half_case<H>(ker, c.name + " window", p, c.enc, model, opt, posenc::sliding_window_mask{.window = 300},
                           [](std::int64_t i, std::int64_t j) { return i - 300 < j && j <= i; }, compared);
        check_half_case<H>(ker, c.name + " chunk", p, c.enc, model, opt, posenc::chunked_mask{.chunk = 16},
                           [](std::int64_t i, std::int64_t j) { return j <= i && floor_div16(i) == floor_div16(j); },
                           compared);
    }
}

template <class H>
std::size_t check_every_encoding(const posenc::simd::attn_kernels& ker) {
    std::size_t compared = 0;
    const std::size_t D = 16, Dv = 24;
    {
        posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(D, true, rope.frequencies().inv_freq, 1.0);
        m.softcap = 2.5;
        check_half_masks<H>(ker, enc_case<posenc::attention_encoding<decltype(rope)>>{"rope softcap", posenc::attention_encoding{rope}, m, {.softcap = 2.5f}}, compared);
    }
    {
        const std::vector<float> sinks = random_floats(8, 5, 1.0f);
        attn_model m;
        m.sinks.assign(sinks.begin(), sinks.end());
        check_half_masks<H>(ker, enc_case<posenc::attention_encoding<posenc::nope>>{"nope sinks", posenc::attention_encoding{posenc::nope{}}, m, {.sinks = sinks}}, compared);
    }
    {
        const posenc::t5_buckets buckets{.num_buckets = 32, .max_distance = 20, .bidirectional = true};
        // one table row per head for the largest head count; t5_bias needs the call's count, so 4 heads
        std::vector<float> table = random_floats(32 * 4, 11, 1.0f);
        posenc::t5_bias b(buckets, 4, table);
        attn_model m;
        m.scale = [](std::int64_t) { return 1.0; };
        m.bias = [=](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
            return static_cast<double>(table[static_cast<std::size_t>(t5_closed_bucket(j - i, true, 32, 20)) * 4 + h]);
        };
        const attn_problem p = make_attn_problem(3, 1100, 4, 2, D, Dv, 77, 5);
        check_half_case<H>(ker, "t5", p, posenc::attention_encoding{posenc::nope{}, b, posenc::fixed_scale{1.0}}, m, {},
                           posenc::no_mask{}, [](std::int64_t, std::int64_t) { return true; }, compared);
    }
    {
        const std::int64_t kmax = 3;
        const std::vector<float> ak = random_floats(7 * D, 21, 0.5f), av = random_floats(7 * Dv, 22, 1.0f);
        const posenc::shaw_rpr shaw({.max_distance = kmax}, ak, D, av, Dv);
        const attn_model m = shaw_model(ak, D, av, Dv, kmax);
        const attn_problem p = make_attn_problem(9, 1100, 4, 1, D, Dv, 78, 0);
        std::size_t before = compared;
        check_half_case<H>(ker, "shaw", p, posenc::attention_encoding{posenc::nope{}, shaw}, m, {}, posenc::causal_mask{},
                           [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
        CHECK(compared > before);
    }
    {
        posenc::alibi_bias b({.heads = 8, .max_bias = 8});
        attn_model m;
        m.bias = [](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
            return alibi_closed_slope(h, 8, 8.0) * static_cast<double>(j - i);
        };
        attn_problem p = make_attn_problem(6, 1300, 8, 2, D, Dv, 79, 0);
        check_half_case<H>(ker, "alibi", p, posenc::attention_encoding{posenc::nope{}, b}, m, {.threads = 2},
                           posenc::causal_mask{}, [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
        // Packed sequence ids (not contiguous, so that each query's own key, at distance 0, is in its
        // sequence: ALiBi's logits stay O(10), where the bound holds).
        p.qseq = {0, 0, 1, 1, 1, 2};
        p.kseq.assign(1300, 1);
        for (std::size_t j = 0; j < 600; ++j) p.kseq[j] = 0;
        for (std::size_t j = 1294; j < 1300; ++j) p.kseq[j] = p.qseq[j - 1294];
        posenc::attention_options opt;
        opt.query_sequence = p.qseq;
        opt.key_sequence = p.kseq;
        check_half_case<H>(ker, "alibi packed", p, posenc::attention_encoding{posenc::nope{}, b}, m, opt,
                           posenc::causal_mask{}, [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
    }
    {
        const posenc::xpos params{};
        posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, params);
        auto rot = [&](double sign) { return xpos_half_split_rot(D, sign); };
        attn_model m;
        m.rot_q = rot(1.0);
        m.rot_k = rot(-1.0);
        const attn_problem p = make_attn_problem(4, 1030, 4, 2, D, Dv, 80, 0);
        check_half_case<H>(ker, "xpos", p, posenc::attention_encoding{xp}, m, {}, posenc::causal_mask{},
                           [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
    }
    return compared;
}

template <class Arch>
void check_arch_half(Arch, std::size_t& compared) {
    const auto ker = posenc::simd::attention_kernels_for<Arch>();
    compared += check_every_encoding<posenc::bf16>(ker);
    compared += check_every_encoding<posenc::fp16>(ker);
}

/// A user's cacheable transform: adds `offset` to every lane (a stand-in with apply_into and shift).
struct shift_transform {
    float offset = 0.0f;
    void apply(posenc::heads_view<float> q, posenc::heads_view<float> k, const posenc::position_ids&) const {
        for (auto* x : {&q, &k})
            for (std::size_t t = 0; t < x->tokens(); ++t)
                for (std::size_t h = 0; h < x->heads(); ++h)
                    for (std::size_t d = 0; d < x->head_dim(); ++d) x->row(t, h)[d] += offset;
    }
    void apply_into(posenc::heads_view<const float> src, posenc::heads_view<float> dst, const posenc::position_ids&) const {
        for (std::size_t t = 0; t < src.tokens(); ++t)
            for (std::size_t h = 0; h < src.heads(); ++h)
                for (std::size_t d = 0; d < src.head_dim(); ++d) dst.row(t, h)[d] = src.row(t, h)[d] + offset;
    }
    void shift(posenc::heads_view<float>, std::int64_t) const {}
    friend bool operator==(const shift_transform&, const shift_transform&) = default;
};
}  // namespace engine_kv_test

using namespace engine_kv_test;

TEST_CASE("attention, bf16/fp16 K and V: the float path's bits on the same values, the double reference", "[attention][engine][16bit]") {
    std::size_t compared = 0;
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [&](auto arch) { check_arch_half(arch, compared); }) >= 1);
    CHECK(compared > 2 * 10000);
}

TEST_CASE("attention, bf16 decode with V rows of 64 and more (the word-pair PV step): the float path's bits", "[attention][engine][16bit]") {
    // On AVX-512, decode's PV step reads bf16 V rows as 32-bit word pairs in blocks of four vectors
    // (rows of 64 and more); the matrix above has rows of 24. Dv 152: pair blocks, then single
    // vectors, then a tail. Decode's rows (G·tokens ≤ 8: 1, 2, 4, 8) take blocks of 6, 4 and 1 rows;
    // 16 rows (G 8, 2 tokens) go through the widened tile instead, the float path's own step.
    std::size_t compared = 0;
    const auto run = [&](auto arch) {
        const auto ker = posenc::simd::attention_kernels_for<decltype(arch)>();
        std::uint32_t seed = 700;
        for (const std::size_t Dv : {64, 128, 152})
            for (const std::size_t G : {1, 4, 8})
                for (const std::size_t Tq : {1, 2}) {
                    const attn_problem p = make_attn_problem(Tq, 300, 2 * G, 2, 32, Dv, seed++);
                    const posenc::attention_encoding enc{posenc::nope{}};
                    check_half_case<posenc::bf16>(ker, "wide V causal", p, enc, attn_model{}, {}, posenc::causal_mask{},
                                                  [](std::int64_t i, std::int64_t j) { return j <= i; }, compared);
                    check_half_case<posenc::bf16>(ker, "wide V window", p, enc, attn_model{}, {}, posenc::sliding_window_mask{.window = 100},
                                                  [](std::int64_t i, std::int64_t j) { return i - 100 < j && j <= i; }, compared);
                }
    };
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, run) >= 1);
    CHECK(compared > 10000);
}

TEST_CASE("attention, 16-bit K/V: const and mutable views, the float call's bits", "[attention][engine][16bit]") {
    const attn_problem p = make_attn_problem(2, 300, 8, 2, 32, 32, 91);
    std::vector<posenc::bf16> k = to_storage<posenc::bf16>(p.k), v = to_storage<posenc::bf16>(p.v);
    std::vector<float> kf = widened(k), vf = widened(v), q = p.q, a(2 * 8 * 32), b(a.size()), c(a.size());
    posenc::rotary<posenc::half_split> rope({.head_dim = 32}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    const posenc::position_ids qp(p.qpos), kp(p.kpos);
    posenc::attention(enc, hv(q, 2, 8, 32), hv(kf, 300, 2, 32), hv(vf, 300, 2, 32), hv(a, 2, 8, 32), qp, kp, posenc::causal_mask{});
    posenc::attention(enc, hv(q, 2, 8, 32), view(k, 300, 2, 32), view(v, 300, 2, 32), hv(b, 2, 8, 32), qp, kp, posenc::causal_mask{});
    posenc::attention(enc, hv(q, 2, 8, 32), posenc::heads_view<const posenc::bf16>(view(k, 300, 2, 32)),
                      posenc::heads_view<const posenc::bf16>(view(v, 300, 2, 32)), hv(c, 2, 8, 32), qp, kp, posenc::causal_mask{});
    std::vector<float> d(a.size());  // K mutable, V const (a cache's values beside the caller's keys)
    posenc::attention(enc, hv(q, 2, 8, 32), view(k, 300, 2, 32), posenc::heads_view<const posenc::bf16>(view(v, 300, 2, 32)),
                      hv(d, 2, 8, 32), qp, kp, posenc::causal_mask{});
    CHECK(bits_equal(a, b));
    CHECK(bits_equal(a, c));
    CHECK(bits_equal(a, d));
}

TEST_CASE("kv_cache<bf16/fp16>: K rotated then rounded once, attention, context_shift", "[attention][engine][16bit][kv_cache]") {
    const std::size_t Hkv = 2, D = 32, T = 1500;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 256});
    const auto amp = rope.frequencies().attention_factor;
    const auto inv = rope.frequencies().inv_freq;
    const std::vector<float> k = random_floats(T * Hkv * D, 5, 0.5f), v = random_floats(T * Hkv * D, 6, 1.0f);
    std::vector<std::int64_t> pos(T);
    for (std::size_t i = 0; i < T; ++i) pos[i] = 10 + static_cast<std::int64_t>(i);
    auto run = [&]<class H>(H) {
        posenc::kv_cache<posenc::rotary<posenc::half_split>, H> cache(rope, {.kv_heads = Hkv, .head_dim = D, .capacity = T + 8});
        cache.set_threads(2);
        const std::vector<float> k_in = k, v_in = v;
        cache.append(posenc::heads_view<const float>(k_in.data(), {700, Hkv, D}),
                     posenc::heads_view<const float>(v_in.data(), {700, Hkv, D}), std::span<const std::int64_t>(pos.data(), 700));
        cache.append(posenc::heads_view<const float>(k_in.data() + 700 * Hkv * D, {T - 700, Hkv, D}),
                     posenc::heads_view<const float>(v_in.data() + 700 * Hkv * D, {T - 700, Hkv, D}),
                     std::span<const std::int64_t>(pos.data() + 700, T - 700));
        REQUIRE(cache.size() == T);
        // K: the float rotation of posenc (held to the double closed form elsewhere), rounded once.
        std::vector<float> krot(k.size());
        rope.apply_into(posenc::heads_view<const float>(k.data(), {T, Hkv, D}), posenc::heads_view<float>(krot.data(), {T, Hkv, D}),
                        posenc::position_ids(pos));
        std::size_t key_mismatch = 0, value_mismatch = 0;
        double worst_rot = 0;
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < Hkv; ++h) {
                const H* kr = cache.keys().row(t, h);
                const H* vr = cache.values().row(t, h);
                std::vector<double> x(D);
                for (std::size_t d = 0; d < D; ++d) x[d] = k[(t * Hkv + h) * D + d];
                const auto ref = reference_rotate(x, D, false, inv, pos[t], amp);
                for (std::size_t d = 0; d < D; ++d) {
                    key_mismatch += kr[d] == H(krot[(t * Hkv + h) * D + d]) ? 0 : 1;
                    value_mismatch += vr[d] == H(v[(t * Hkv + h) * D + d]) ? 0 : 1;
                    worst_rot = worst_of(worst_rot, std::abs(static_cast<double>(static_cast<float>(kr[d])) - ref[d]));
                }
            }
        CHECK(key_mismatch == 0);
        CHECK(value_mismatch == 0);
        CHECK(worst_rot <= (std::is_same_v<H, posenc::bf16> ? 1.0 / 128 : 1.0 / 1024) * 2.0);  // half an ulp of |x| ≤ 2.5·amp
        // Attention over the cache = the 16-bit views with keys_transformed.
        const attn_problem p = make_attn_problem(3, T, 4, Hkv, D, D, 93);
        std::vector<float> q = p.q, a(3 * 4 * D), b(a.size());
        const std::vector<std::int64_t> qpos{T + 10, T + 11, T + 12};
        const posenc::attention_encoding enc{rope};
        posenc::attention(enc, hv(q, 3, 4, D), cache, hv(a, 3, 4, D), posenc::position_ids(qpos), posenc::causal_mask{},
                          {.threads = 2});
        posenc::attention(enc, hv(q, 3, 4, D), cache.keys(), cache.values(), hv(b, 3, 4, D), posenc::position_ids(qpos),
                          cache.positions(), posenc::causal_mask{}, {.keys_transformed = true});
        CHECK(bits_equal(a, b));
        // context_shift: kept recent keys now carry positions shifted by delta, to 16-bit rounding (twice).
        const std::size_t n_sink = 4, n_recent = 500;
        REQUIRE(cache.context_shift(n_sink, n_recent) == T - n_sink - n_recent);
        double worst_shift = 0;
        for (std::size_t i = 0; i < n_recent; ++i) {
            const std::size_t t = T - n_recent + i;
            REQUIRE(cache.positions()[n_sink + i] == pos[n_sink - 1] + 1 + static_cast<std::int64_t>(i));
            for (std::size_t h = 0; h < Hkv; ++h) {
                std::vector<double> x(D);
                for (std::size_t d = 0; d < D; ++d) x[d] = k[(t * Hkv + h) * D + d];
                const auto ref = reference_rotate(x, D, false, inv, cache.positions()[n_sink + i], amp);
                const H* kr = cache.keys().row(n_sink + i, h);
                for (std::size_t d = 0; d < D; ++d)
                    worst_shift = worst_of(worst_shift, std::abs(static_cast<double>(static_cast<float>(kr[d])) - ref[d]));
            }
        }
        CHECK(worst_shift <= (std::is_same_v<H, posenc::bf16> ? 1.0 / 128 : 1.0 / 1024) * 4.0);
    };
    run(posenc::bf16{});
    run(posenc::fp16{});
}

TEST_CASE("kv_cache<fp16> of NoPE: K and V rounded once, 16-bit inputs copied", "[attention][engine][16bit][kv_cache]") {
    const std::size_t Hkv = 3, D = 20, T = 37;  // 20: a tail for every vector width
    const std::vector<float> k = random_floats(T * Hkv * D, 15, 3.0f), v = random_floats(T * Hkv * D, 16, 3.0f);
    posenc::kv_cache<posenc::nope, posenc::fp16> cache(posenc::nope{}, {.kv_heads = Hkv, .head_dim = D, .capacity = 2 * T});
    cache.append(posenc::heads_view<const float>(k.data(), {T, Hkv, D}), posenc::heads_view<const float>(v.data(), {T, Hkv, D}),
                 posenc::position_ids::consecutive(0, T));
    std::vector<posenc::fp16> kh = to_storage<posenc::fp16>(k), vh = to_storage<posenc::fp16>(v);
    cache.append(posenc::heads_view<const posenc::fp16>(kh.data(), {T, Hkv, D}),
                 posenc::heads_view<const posenc::fp16>(vh.data(), {T, Hkv, D}), posenc::position_ids::consecutive(T, T));
    std::size_t mismatch = 0;
    for (std::size_t t = 0; t < 2 * T; ++t)
        for (std::size_t h = 0; h < Hkv; ++h)
            for (std::size_t d = 0; d < D; ++d) {
                const std::size_t i = ((t % T) * Hkv + h) * D + d;
                mismatch += cache.keys().row(t, h)[d] == posenc::fp16(k[i]) ? 0 : 1;
                mismatch += cache.values().row(t, h)[d] == posenc::fp16(v[i]) ? 0 : 1;
            }
    CHECK(mismatch == 0);
}

TEST_CASE("kv_cache<bf16/fp16>: K and V from strided views (a fused projection) rounded once, each head its own row", "[attention][engine][16bit][kv_cache]") {
    // The projection often writes K and V of a token side by side ([T][Hkv][K | V]): each view's head
    // stride is 2·D, not D, so a narrowing step that took the heads as packed would read other heads' values.
    const std::size_t Hkv = 3, D = 20, T = 9;  // 20: a tail for every vector width
    const std::vector<float> kv = random_floats(T * Hkv * 2 * D, 17, 3.0f);
    const posenc::heads_view<const float> k(kv.data(), {T, Hkv, D}, {Hkv * 2 * D, 2 * D}), v(kv.data() + D, {T, Hkv, D}, {Hkv * 2 * D, 2 * D});
    auto run = [&]<class H>(H) {
        posenc::kv_cache<posenc::nope, H> nope_cache(posenc::nope{}, {.kv_heads = Hkv, .head_dim = D, .capacity = T});
        posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
        posenc::kv_cache<posenc::rotary<posenc::half_split>, H> rope_cache(rope, {.kv_heads = Hkv, .head_dim = D, .capacity = T});
        nope_cache.append(k, v, posenc::position_ids::consecutive(0, T));
        rope_cache.append(k, v, posenc::position_ids::consecutive(0, T));
        std::size_t mismatch = 0;
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < Hkv; ++h)
                for (std::size_t d = 0; d < D; ++d) {
                    // the double definition of the format's rounding (support/storage16.hpp), once
                    const double want_k = round_to<H>(kv[(t * Hkv + h) * 2 * D + d]), want_v = round_to<H>(kv[(t * Hkv + h) * 2 * D + D + d]);
                    mismatch += as_double(nope_cache.keys().row(t, h)[d]) == want_k ? 0 : 1;
                    mismatch += as_double(nope_cache.values().row(t, h)[d]) == want_v ? 0 : 1;
                    mismatch += as_double(rope_cache.values().row(t, h)[d]) == want_v ? 0 : 1;
                }
        INFO(type_name<H>());
        CHECK(mismatch == 0);
    };
    run(posenc::bf16{});
    run(posenc::fp16{});
}

namespace engine_kv_test {
/// An executor that runs its tasks on the calling thread, one after another, the last first.
inline void one_by_one_reversed(std::size_t n, const std::function<void(std::size_t)>& task) {
    for (std::size_t i = n; i-- > 0;) task(i);
}
}  // namespace engine_kv_test

TEST_CASE("attention: prefill items taken by any thread in any order give one thread's bits", "[attention][engine][threads]") {
    // 200 queries, 2 kv heads: query tiles of 64 tokens (keys rotated in the loop), 8 items whose
    // causal work grows with the tile.
    const attn_problem p = make_attn_problem(200, 200, 4, 2, 16, 16, 97);
    const posenc::rotary<posenc::half_split> rope({.head_dim = 16}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope, posenc::alibi_bias({.heads = 4})};
    std::vector<float> q = p.q, k = p.k, v = p.v, one(200 * 4 * 16);
    const posenc::position_ids qp(p.qpos), kp(p.kpos);
    posenc::attention(enc, hv(q, 200, 4, 16), hv(k, 200, 2, 16), hv(v, 200, 2, 16), hv(one, 200, 4, 16), qp, kp,
                      posenc::causal_mask{});
    for (const bool one_by_one : {false, true})
        for (unsigned threads : {2u, 3u}) {
            posenc::attention_options opt{.threads = threads, .min_fmas_per_thread = 0};
            if (one_by_one) opt.executor = engine_kv_test::one_by_one_reversed;
            std::vector<float> out(one.size(), -1.0f);
            posenc::attention(enc, hv(q, 200, 4, 16), hv(k, 200, 2, 16), hv(v, 200, 2, 16), hv(out, 200, 4, 16), qp, kp,
                              posenc::causal_mask{}, opt);
            INFO("threads " << threads << (one_by_one ? ", tasks one by one, the last first" : ""));
            CHECK(bits_equal(out, one));
        }
}

TEST_CASE("attention: split-KV decode gives one thread's bits, with an executor too", "[attention][engine][threads]") {
    for (const std::size_t Hkv : {1u, 2u}) {
        const std::size_t Hq = 16 * Hkv;  // enough work for 4 threads (about 2M multiply-adds each)
        const attn_problem p = make_attn_problem(1, 4500, Hq, Hkv, 64, 64, 95);
        posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = 64}, posenc::default_rope{});
        std::vector<float> q = p.q, k = p.k, v = p.v, one(Hq * 64);
        const posenc::attention_encoding enc{rope};
        const posenc::position_ids qp(p.qpos), kp(p.kpos);
        posenc::attention(enc, hv(q, 1, Hq, 64), hv(k, 4500, Hkv, 64), hv(v, 4500, Hkv, 64), hv(one, 1, Hq, 64), qp, kp,
                          posenc::causal_mask{});
        attn_model m;
        m.rot_q = m.rot_k = rope_rot(64, true, rope.frequencies().inv_freq, 1.0);
        CHECK(kv_worst_error(one, reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return j <= i; })) <=
              2e-6 * max_abs(p.v));
        for (unsigned threads : {2u, 3u, 5u, 16u}) {
            std::vector<float> out(one.size(), -1.0f);
            posenc::attention(enc, hv(q, 1, Hq, 64), hv(k, 4500, Hkv, 64), hv(v, 4500, Hkv, 64), hv(out, 1, Hq, 64), qp,
                              kp, posenc::causal_mask{}, {.threads = threads});
            INFO("kv heads " << Hkv << " threads " << threads);
            CHECK(bits_equal(out, one));
        }
        std::atomic<std::size_t> tasks{0};
        posenc::attention_options opt{.threads = 4};
        opt.executor = [&](std::size_t n, const std::function<void(std::size_t)>& task) {
            std::vector<std::thread> pool;
            for (std::size_t i = 0; i < n; ++i) pool.emplace_back([&, i] {
                    ++tasks;
                    task(i);
                });
            for (auto& t : pool) t.join();
        };
        std::vector<float> out(one.size(), -1.0f);
        posenc::attention(enc, hv(q, 1, Hq, 64), hv(k, 4500, Hkv, 64), hv(v, 4500, Hkv, 64), hv(out, 1, Hq, 64), qp,
                          kp, posenc::causal_mask{}, opt);
        CHECK(tasks.load() == 4);
        CHECK(bits_equal(out, one));
        // Tasks run one after another, the last first: the first takes every unit (largest first)
        // into one scratch, so a unit that read what an earlier one left there would show.
        opt.executor = engine_kv_test::one_by_one_reversed;
        std::fill(out.begin(), out.end(), -1.0f);
        posenc::attention(enc, hv(q, 1, Hq, 64), hv(k, 4500, Hkv, 64), hv(v, 4500, Hkv, 64), hv(out, 1, Hq, 64), qp,
                          kp, posenc::causal_mask{}, opt);
        CHECK(bits_equal(out, one));
    }
}

TEST_CASE("attention: split-KV decode in several waves of segments gives one thread's bits", "[attention][engine][threads]") {
    // 9300 keys are 10 segments of one kv head: on 2 threads a wave holds 8 (4 a thread), so the last
    // 2 segments run in a second wave whose states are folded after the first's; on 3 threads all 10
    // fit one wave. Both, with and without a workspace, give the one-thread bits.
    const std::size_t Tk = 9300, Hq = 4, D = 16;
    const attn_problem p = make_attn_problem(1, Tk, Hq, 1, D, D, 96);
    std::vector<float> q = p.q, k = p.k, v = p.v, one(Hq * D), lse_one(Hq);
    const posenc::position_ids qp(p.qpos), kp(p.kpos);
    const posenc::attention_encoding enc{posenc::nope{}};
    posenc::attention_partial(enc, hv(q, 1, Hq, D), hv(k, Tk, 1, D), hv(v, Tk, 1, D), hv(one, 1, Hq, D), lse_one, qp, kp,
                              posenc::causal_mask{});
    attn_model m;
    CHECK(kv_worst_error(one, reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return j <= i; })) <= 2e-6 * max_abs(p.v));
    posenc::attention_workspace ws;
    for (unsigned threads : {2u, 3u})
        for (posenc::attention_workspace* w : {static_cast<posenc::attention_workspace*>(nullptr), &ws}) {
            INFO("threads " << threads << (w ? " with a workspace" : ""));
            std::vector<float> out(one.size(), -1.0f), lse(Hq, -1.0f);
            posenc::attention_partial(enc, hv(q, 1, Hq, D), hv(k, Tk, 1, D), hv(v, Tk, 1, D), hv(out, 1, Hq, D), lse, qp, kp,
                                      posenc::causal_mask{}, {.threads = threads, .min_fmas_per_thread = 0, .workspace = w});
            CHECK(bits_equal(out, one));
            CHECK(bits_equal(lse, lse_one));
        }
}

TEST_CASE("attention: split-KV for every group size, 16-bit K/V, sinks, lse and a window: any thread count, the same bits", "[attention][engine][threads]") {
    // G = 1, 2, 4 leave rows_pad = 4 (a split state's alignment); the window hides whole segments.
    for (const std::size_t G : {1u, 2u, 4u, 3u})
        for (const std::size_t Hkv : {1u, 2u}) {
            const std::size_t Hq = G * Hkv, Tk = 3300, D = 32, Dv = 24;
            attn_problem p = make_attn_problem(1, Tk, Hq, Hkv, D, Dv, static_cast<std::uint32_t>(500 + G * 10 + Hkv));
            const std::vector<posenc::bf16> kh = to_storage<posenc::bf16>(p.k), vh = to_storage<posenc::bf16>(p.v);
            p.k = widened(kh);
            p.v = widened(vh);
            const std::vector<float> sinks = random_floats(Hq, 3, 1.0f);
            posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
            const posenc::attention_encoding enc{rope};
            const posenc::position_ids qp(p.qpos), kp(p.kpos);
            std::vector<float> q = p.q;
            const posenc::heads_view<const posenc::bf16> K(kh.data(), {Tk, Hkv, D}), V(vh.data(), {Tk, Hkv, Dv});
            for (const bool window : {false, true}) {
                std::vector<float> one(Hq * Dv), one_lse(Hq), part(Hq * Dv), part_lse(Hq);
                auto run = [&](unsigned threads, std::vector<float>& out, std::vector<float>& lse, std::vector<float>& pout,
                               std::vector<float>& plse) {
                    posenc::attention_options opt{.sinks = sinks, .threads = threads, .min_fmas_per_thread = 0};
                    posenc::attention_options popt{.threads = threads, .min_fmas_per_thread = 0};
                    if (window) {
                        posenc::attention(enc, hv(q, 1, Hq, D), K, V, hv(out, 1, Hq, Dv), qp, kp,
                                          posenc::sliding_window_mask{.window = 700}, opt);
                        posenc::attention_partial(enc, hv(q, 1, Hq, D), K, V, hv(pout, 1, Hq, Dv), plse, qp, kp,
                                                  posenc::sliding_window_mask{.window = 700}, popt);
                    } else {
                        posenc::attention(enc, hv(q, 1, Hq, D), K, V, hv(out, 1, Hq, Dv), qp, kp, posenc::causal_mask{}, opt);
                        posenc::attention_partial(enc, hv(q, 1, Hq, D), K, V, hv(pout, 1, Hq, Dv), plse, qp, kp,
                                                  posenc::causal_mask{}, popt);
                    }
                    (void)lse;
                };
                run(1, one, one_lse, part, part_lse);
                attn_model m;
                m.rot_q = m.rot_k = rope_rot(D, false, rope.frequencies().inv_freq, 1.0);
                m.sinks.assign(sinks.begin(), sinks.end());
                const visible_fn vis = window ? visible_fn([](std::int64_t i, std::int64_t j) { return i - 700 < j && j <= i; })
                                              : visible_fn([](std::int64_t i, std::int64_t j) { return j <= i; });
                INFO("G " << G << " kv heads " << Hkv << (window ? " window" : " causal"));
                CHECK(kv_worst_error(one, reference_attention(p, m, vis)) <= 2e-6 * max_abs(p.v));
                for (unsigned threads : {2u, 3u, 4u, 7u}) {
                    std::vector<float> out(one.size(), -1.0f), lse(Hq), pout(one.size(), -1.0f), plse(Hq, -1.0f);
                    run(threads, out, lse, pout, plse);
                    INFO("threads " << threads);
                    CHECK(bits_equal(out, one));
                    CHECK(bits_equal(pout, part));
                    CHECK(bits_equal(plse, part_lse));
                }
            }
        }
}

TEST_CASE("attention: a small call stays on the caller's thread", "[attention][engine][threads]") {
    const attn_problem p = make_attn_problem(1, 200, 32, 8, 128, 128, 96);
    std::vector<float> q = p.q, k = p.k, v = p.v, a(32 * 128), b(a.size());
    std::size_t calls = 0;
    posenc::attention_options opt{.threads = 2};
    opt.executor = [&](std::size_t n, const std::function<void(std::size_t)>& task) {
        ++calls;
        for (std::size_t i = 0; i < n; ++i) task(i);
    };
    const posenc::attention_encoding enc{posenc::nope{}};
    posenc::attention(enc, hv(q, 1, 32, 128), hv(k, 200, 8, 128), hv(v, 200, 8, 128), hv(a, 1, 32, 128),
                      posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{}, opt);
    CHECK(calls == 0);
    // A large one uses it: 64 queries against 4000 keys.
    const attn_problem big = make_attn_problem(64, 4000, 4, 2, 64, 64, 97);
    std::vector<float> bq = big.q, bk = big.k, bv = big.v, o1(64 * 4 * 64), o2(o1.size());
    posenc::attention(enc, hv(bq, 64, 4, 64), hv(bk, 4000, 2, 64), hv(bv, 4000, 2, 64), hv(o1, 64, 4, 64),
                      posenc::position_ids(big.qpos), posenc::position_ids(big.kpos), posenc::causal_mask{}, opt);
    CHECK(calls == 1);
    posenc::attention(enc, hv(bq, 64, 4, 64), hv(bk, 4000, 2, 64), hv(bv, 4000, 2, 64), hv(o2, 64, 4, 64),
                      posenc::position_ids(big.qpos), posenc::position_ids(big.kpos), posenc::causal_mask{});
    CHECK(bits_equal(o1, o2));
}

TEST_CASE("attention_partial + merge equal one call, lse = log-sum-exp of the logits", "[attention][engine][partial]") {
    const std::size_t Tq = 5, Tk = 2600, Hq = 4, Hkv = 2, D = 32, Dv = 16;
    const attn_problem p = make_attn_problem(Tq, Tk, Hq, Hkv, D, Dv, 98);
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    const std::vector<float> sinks = random_floats(Hq, 9, 2.0f);
    std::vector<float> q = p.q, k = p.k, v = p.v;
    const posenc::position_ids qp(p.qpos);
    // Shards [0, 1000), [1000, 1001), [1001, 2600): uneven, one of a single key, one past every causal row.
    const std::size_t cuts[] = {0, 1000, 1001, Tk};
    std::vector<std::vector<float>> outs(3, std::vector<float>(Tq * Hq * Dv)), lses(3, std::vector<float>(Tq * Hq));
    for (std::size_t s = 0; s < 3; ++s) {
        const std::size_t b = cuts[s], n = cuts[s + 1] - cuts[s];
        posenc::attention_partial(enc, hv(q, Tq, Hq, D), posenc::heads_view<const float>(k.data() + b * Hkv * D, {n, Hkv, D}),
                                  posenc::heads_view<const float>(v.data() + b * Hkv * Dv, {n, Hkv, Dv}),
                                  hv(outs[s], Tq, Hq, Dv), lses[s],
                                  qp, std::span<const std::int64_t>(p.kpos.data() + b, n), posenc::causal_mask{});
    }
    // lse against log Σ exp(logit) in double over each shard's visible keys.
    double worst_lse = 0;
    const auto inv = rope.frequencies().inv_freq;
    for (std::size_t s = 0; s < 3; ++s)
        for (std::size_t t = 0; t < Tq; ++t)
            for (std::size_t h = 0; h < Hq; ++h) {
                std::vector<double> qd(p.q.begin() + (t * Hq + h) * D, p.q.begin() + (t * Hq + h + 1) * D);
                qd = reference_rotate(qd, D, false, inv, p.qpos[t]);
                double mx = -std::numeric_limits<double>::infinity();
                std::vector<double> logits;
                for (std::size_t j = cuts[s]; j < cuts[s + 1]; ++j) {
                    if (p.kpos[j] > p.qpos[t]) continue;
                    std::vector<double> kd(p.k.begin() + (j * Hkv + h / 2) * D, p.k.begin() + (j * Hkv + h / 2 + 1) * D);
                    kd = reference_rotate(kd, D, false, inv, p.kpos[j]);
                    double dot = 0;
                    for (std::size_t d = 0; d < D; ++d) dot += qd[d] * kd[d];
                    logits.push_back(dot / std::sqrt(double(D)));
                    mx = std::max(mx, logits.back());
                }
                const float got = lses[s][t * Hq + h];
                if (logits.empty()) {
                    CHECK(got == -std::numeric_limits<float>::infinity());
                    continue;
                }
                double sum = 0;
                for (double x : logits) sum += std::exp(x - mx);
                worst_lse = worst_of(worst_lse, std::abs(static_cast<double>(got) - (mx + std::log(sum))));
            }
    CHECK(worst_lse <= 1e-5);
    // merge (with sinks) = one call with sinks.
    std::vector<float> merged(Tq * Hq * Dv, -3.0f), merged_lse(Tq * Hq), one(merged.size());
    std::vector<posenc::attention_part> parts;
    for (std::size_t s = 0; s < 3; ++s) parts.push_back({hv(outs[s], Tq, Hq, Dv), lses[s]});
    posenc::merge_attention_partials(parts, hv(merged, Tq, Hq, Dv), {.lse = merged_lse, .sinks = sinks});
    posenc::attention(enc, hv(q, Tq, Hq, D), hv(k, Tk, Hkv, D), hv(v, Tk, Hkv, Dv), hv(one, Tq, Hq, Dv), qp,
                      posenc::position_ids(p.kpos), posenc::causal_mask{}, {.sinks = sinks});
    double worst = 0;
    for (std::size_t i = 0; i < one.size(); ++i) worst = worst_of(worst, std::abs(double(one[i]) - merged[i]));
    CHECK(worst <= 1e-6 * max_abs(p.v));
    attn_model m;
    m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
    m.sinks.assign(sinks.begin(), sinks.end());
    CHECK(kv_worst_error(merged, reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return j <= i; })) <=
          2e-6 * max_abs(p.v));
    // In place: out is part 0's view, lse part 0's lse.
    std::vector<float> o0 = outs[0], l0 = lses[0];
    parts[0] = {hv(o0, Tq, Hq, Dv), l0};
    posenc::merge_attention_partials(parts, hv(o0, Tq, Hq, Dv), {.lse = l0, .sinks = sinks});
    CHECK(bits_equal(o0, merged));
    CHECK(bits_equal(l0, merged_lse));
}

TEST_CASE("merge with sinks: lse = log(e^sink + sum e^lse), a row no part saw keeps its sink, a far sink stays finite", "[attention][engine][partial]") {
    // One query token, four heads (rows), two parts; the expected values are written out by hand or
    // computed in long double here.
    const std::size_t Hq = 4, Dv = 3;
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> a = random_floats(Hq * Dv, 41), b = random_floats(Hq * Dv, 42);
    const std::vector<float> la{ninf, 1.0f, 800.0f, 0.25f}, lb{ninf, 2.0f, 1.0f, -0.5f};
    const std::vector<float> sinks{0.5f, 1000.0f, -800.0f, 0.75f};
    std::vector<float> out(Hq * Dv, 9.0f), lse(Hq, 9.0f);
    posenc::merge_attention_partials({{hv(a, 1, Hq, Dv), la}, {hv(b, 1, Hq, Dv), lb}}, hv(out, 1, Hq, Dv), {.lse = lse, .sinks = sinks});
    // Row 0: no part saw a key, so only the sink is in the denominator: out 0, lse = the sink.
    CHECK(lse[0] == 0.5f);
    // Row 1: the sink outweighs both parts by e^998 (beyond double's range): out 0, lse = the sink.
    CHECK(lse[1] == 1000.0f);
    // Row 2: part a outweighs part b and the sink by e^799 and more: out = a's row, lse = a's lse.
    CHECK(lse[2] == 800.0f);
    for (std::size_t d = 0; d < Dv; ++d) {
        CHECK(out[0 * Dv + d] == 0.0f);
        CHECK(out[1 * Dv + d] == 0.0f);
        CHECK(out[2 * Dv + d] == a[2 * Dv + d]);
    }
    // Row 3: ordinary weights.
    const long double wa = std::exp(0.25L), wb = std::exp(-0.5L), ws = std::exp(0.75L), z = wa + wb + ws;
    CHECK(std::abs(lse[3] - static_cast<double>(std::log(z))) <= 1e-6);
    for (std::size_t d = 0; d < Dv; ++d)
        CHECK(std::abs(out[3 * Dv + d] - static_cast<double>((wa * a[3 * Dv + d] + wb * b[3 * Dv + d]) / z)) <= 1e-6);
}

TEST_CASE("attention_partial and merge: bad input named, nothing written", "[attention][engine][partial][errors]") {
    const std::size_t T = 2, H = 2, D = 8;
    std::vector<float> q = random_floats(T * H * D, 1), k = random_floats(T * H * D, 2), v = random_floats(T * H * D, 3);
    std::vector<float> out(T * H * D, 9.0f), lse(T * H, 9.0f), lse_short(T * H - 1, 9.0f), sinks{0.5f, 0.5f};
    const posenc::attention_encoding enc{posenc::nope{}};
    const posenc::position_ids pos = posenc::position_ids::consecutive(0, T);
    auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const posenc::error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK_THAT(message([&] { posenc::attention_partial(enc, hv(q, T, H, D), hv(k, T, H, D), hv(v, T, H, D), hv(out, T, H, D), lse_short, pos, pos); }),
               Catch::Contains("lse") && Catch::Contains("of 3 values") && Catch::Contains("= 4"));
    CHECK_THAT(message([&] { posenc::attention_partial(enc, hv(q, T, H, D), hv(k, T, H, D), hv(v, T, H, D), hv(out, T, H, D), lse, pos, pos, posenc::no_mask{}, {.sinks = sinks}); }),
               Catch::Contains("sinks") && Catch::Contains("merge_attention_partials"));
    CHECK_THAT(message([&] { posenc::attention_partial(enc, hv(q, T, H, D), hv(k, T, H, D), hv(v, T, H, D), hv(out, T, H, D), std::span<float>(out.data(), T * H), pos, pos); }),
               Catch::Contains("lse") && Catch::Contains("overlaps out"));
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 9.0f; }));
    CHECK(std::all_of(lse.begin(), lse.end(), [](float x) { return x == 9.0f; }));
    std::vector<float> a(T * H * D, 1.0f), b(T * 3 * D, 1.0f), la(T * H, 0.0f), lb(T * 3, 0.0f);
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{hv(a, T, H, D), la}, {hv(b, T, 3, D), lb}}, hv(out, T, H, D)); }),
               Catch::Contains("parts[1].out shape") && Catch::Contains("2x3x8") && Catch::Contains("2x2x8"));
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{hv(a, T, H, D), lse_short}}, hv(out, T, H, D)); }),
               Catch::Contains("parts[0].lse") && Catch::Contains("of 3 values"));
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{hv(a, T, H, D), la}}, hv(out, T, H, D), {.sinks = std::vector<float>{1.0f}}); }),
               Catch::Contains("sinks") && Catch::Contains("of 1 values"));
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{posenc::heads_view<const float>(a.data() + 1, {T, H, D - 1}, {H * D, D}), la}}, posenc::heads_view<float>(a.data(), {T, H, D - 1}, {H * D, D})); }),
               Catch::Contains("overlaps out without being out itself"));
    CHECK_THAT(message([&] { posenc::merge_attention_partials(std::span<const posenc::attention_part>{}, hv(out, T, H, D)); }),
               Catch::Contains("parts"));
    // lse (or sinks) over out's own memory (a NaN or +inf lse is data: test_attention_nonfinite.cpp).
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{hv(a, T, H, D), la}}, hv(out, T, H, D), {.lse = std::span<float>(out.data(), T * H)}); }),
               Catch::Contains("lse") && Catch::Contains("overlaps out"));
    CHECK_THAT(message([&] { posenc::merge_attention_partials({{hv(a, T, H, D), la}}, hv(out, T, H, D), {.sinks = std::span<const float>(out.data(), H)}); }),
               Catch::Contains("sinks") && Catch::Contains("overlaps out"));
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 9.0f; }));
    CHECK(std::all_of(a.begin(), a.end(), [](float x) { return x == 1.0f; }));
}

TEST_CASE("attention_partial and merge: an overlap of one element, the views' last, is rejected", "[attention][engine][partial][errors]") {
    // A view's byte range ends after its last element: an lse placed over exactly that element must be
    // refused as any other overlap (an off-by-one range lets the call write lse over out's last value).
    const std::size_t T = 2, H = 2, D = 8, n = T * H * D;
    std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
    std::vector<float> buf(n + T * H - 1, 9.0f), a(n, 1.0f), la(T * H, 0.0f);
    const posenc::attention_encoding enc{posenc::nope{}};
    const posenc::position_ids pos = posenc::position_ids::consecutive(0, T);
    const posenc::heads_view<float> out(buf.data(), {T, H, D});
    const std::span<float> lse_on_last(buf.data() + n - 1, T * H);
    CHECK_THROWS_WITH(posenc::attention_partial(enc, hv(q, T, H, D), hv(k, T, H, D), hv(v, T, H, D), out, lse_on_last, pos, pos),
                      Catch::Contains("lse") && Catch::Contains("overlaps out"));
    CHECK_THROWS_WITH(posenc::merge_attention_partials({{hv(a, T, H, D), la}}, out, {.lse = lse_on_last}),
                      Catch::Contains("lse") && Catch::Contains("overlaps out"));
    // a part's out whose last element is out's first
    std::vector<float> shared(2 * n - 1, 1.0f);
    CHECK_THROWS_WITH(posenc::merge_attention_partials({{posenc::heads_view<const float>(shared.data(), {T, H, D}), la}},
                                                       posenc::heads_view<float>(shared.data() + n - 1, {T, H, D})),
                      Catch::Contains("overlaps out without being out itself"));
    CHECK(std::all_of(buf.begin(), buf.end(), [](float x) { return x == 9.0f; }));
    CHECK(std::all_of(shared.begin(), shared.end(), [](float x) { return x == 1.0f; }));
}

TEST_CASE("merge: a part at out's address but laid out otherwise is not out itself", "[attention][engine][partial][errors]") {
    // In-place merge is safe only when the part is out's very view: the same memory read head-major while
    // out is written token-major overwrites rows before they are read, so it must be rejected.
    const std::size_t T = 3, H = 2, D = 8, n = T * H * D;
    std::vector<float> buf = random_floats(n, 21), la(T * H, 0.0f), lb(T * H, 0.0f), b = random_floats(n, 22);
    const std::vector<float> before = buf;
    const posenc::heads_view<float> out(buf.data(), {T, H, D});  // token-major: strides {H·D, D}
    const posenc::heads_view<const float> head_major(buf.data(), {T, H, D}, {D, T * D});
    CHECK_THROWS_WITH(posenc::merge_attention_partials({{head_major, la}, {hv(b, T, H, D), lb}}, out),
                      Catch::Contains("parts[0].out") && Catch::Contains("overlaps out without being out itself"));
    CHECK(bits_equal(buf, before));
    // out's own view is accepted (the in-place reduction the header documents)
    CHECK_NOTHROW(posenc::merge_attention_partials({{out, la}, {hv(b, T, H, D), lb}}, out));
}

TEST_CASE("attention over a kv_cache: another query transform is rejected", "[attention][engine][kv_cache][errors]") {
    const std::size_t D = 16;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 10000});
    posenc::kv_cache cache(rope, {.kv_heads = 1, .head_dim = D, .capacity = 8});
    std::vector<float> k = random_floats(4 * D, 3), q = random_floats(2 * D, 4), out(2 * D, 5.0f);
    cache.append(hv(k, 4, 1, D), hv(k, 4, 1, D), posenc::position_ids::consecutive(0, 4));
    const posenc::position_ids qp = posenc::position_ids::consecutive(4, 2);
    auto message = [&](const auto& enc) -> std::string {
        try {
            posenc::attention(enc, hv(q, 2, 1, D), cache, hv(out, 2, 1, D), qp, posenc::causal_mask{});
        } catch (const posenc::config_error& e) {
            return e.what();
        }
        return "(no error)";
    };
    posenc::rotary<posenc::half_split> other_base({.head_dim = D}, posenc::default_rope{.base = 1e6});
    posenc::rotary<posenc::interleaved> other_layout({.head_dim = D}, posenc::default_rope{.base = 10000});
    posenc::rotary<posenc::half_split> other_dims({.head_dim = D, .rotary_dim = 8}, posenc::default_rope{.base = 10000});
    posenc::rotary<posenc::half_split> other_amp({.head_dim = D}, posenc::rope_frequencies{rope.frequencies().inv_freq, 1.25});
    CHECK_THAT(message(posenc::attention_encoding{other_base}), Catch::Contains("enc.transform") && Catch::Contains("inv_freq[1]"));
    CHECK_THAT(message(posenc::attention_encoding{other_layout}), Catch::Contains("interleaved RoPE") && Catch::Contains("half_split RoPE"));
    CHECK_THAT(message(posenc::attention_encoding{other_dims}), Catch::Contains("rotary_dim 8"));
    CHECK_THAT(message(posenc::attention_encoding{other_amp}), Catch::Contains("attention_factor) 1.25"));
    CHECK_THAT(message(posenc::attention_encoding{posenc::nope{}}), Catch::Contains("NoPE") && Catch::Contains("half_split RoPE"));
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 5.0f; }));
    // The cache's own transform, an equal rotary, an any_rotary of the same, a table of it: accepted.
    const auto table = rope.table(16);
    posenc::any_rotary same_any(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{.base = 10000});
    CHECK(message(posenc::attention_encoding{cache.transform()}) == "(no error)");
    CHECK(message(posenc::attention_encoding{same_any}) == "(no error)");
    CHECK(message(posenc::attention_encoding{posenc::table_transform{rope, table}}) == "(no error)");
    // A cacheable transform of the user's own type: the cache's own is accepted (compared with == when
    // the type has it), another value of it rejected.
    posenc::kv_cache<engine_kv_test::shift_transform> custom(engine_kv_test::shift_transform{1.0f}, {.kv_heads = 1, .head_dim = D, .capacity = 8});
    custom.append(hv(k, 4, 1, D), hv(k, 4, 1, D), posenc::position_ids::consecutive(0, 4));
    auto custom_message = [&](const engine_kv_test::shift_transform& t) -> std::string {
        try {
            posenc::attention(posenc::attention_encoding{t}, hv(q, 2, 1, D), custom, hv(out, 2, 1, D), qp, posenc::causal_mask{});
        } catch (const posenc::config_error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK(custom_message(custom.transform()) == "(no error)");
    CHECK_THAT(custom_message(engine_kv_test::shift_transform{2.0f}), Catch::Contains("compares unequal"));
    posenc::kv_cache nope_cache(posenc::nope{}, {.kv_heads = 1, .head_dim = D, .capacity = 8});
    std::vector<float> q_wide(2 * 2 * D);  // queries wider than the cache's keys (NoPE: no transform width): q is named
    CHECK_THROWS_WITH(posenc::attention(posenc::attention_encoding{posenc::nope{}}, hv(q_wide, 2, 1, 2 * D), nope_cache, hv(out, 2, 1, D), qp),
                      Catch::Contains("q.head_dim = 32") && Catch::Contains("cache's head_dim = 16"));
    CHECK_THROWS_WITH(posenc::attention(posenc::attention_encoding{rope}, hv(q, 2, 1, D), nope_cache, hv(out, 2, 1, D), qp),
                      Catch::Contains("half_split RoPE, but the cache's keys were transformed by NoPE"));
}

TEST_CASE("attention: shape errors name the odd view and both numbers", "[attention][engine][errors]") {
    const std::size_t D = 16;
    std::vector<float> buf(4096, 0.5f), out(8 * 8 * D, 2.0f);
    auto v3 = [&](std::size_t T, std::size_t H, std::size_t d) { return posenc::heads_view<float>(buf.data(), {T, H, d}); };
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    const auto p2 = posenc::position_ids::consecutive(0, 2), p1 = posenc::position_ids::consecutive(0, 1);
    auto message = [&](auto&& f) -> std::string {
        try {
            f();
        } catch (const posenc::config_error& e) {
            return e.what();
        }
        return "(no error)";
    };
    const posenc::heads_view<float> o8(out.data(), {2, 8, D});
    // K viewed with 3 heads (V has 2; Q 8): K is the odd one.
    CHECK_THAT(message([&] { posenc::attention(enc, v3(2, 8, D), v3(2, 3, D), v3(2, 2, D), o8, p2, p2); }),
               Catch::Contains("k.heads = 3") && Catch::Contains("q.heads = 8") && Catch::Contains("v.heads = 2"));
    // Q viewed with 2 heads of 4·D: Q is the odd one (the transform is D wide, as K).
    CHECK_THAT(message([&] { posenc::attention(enc, v3(2, 2, 4 * D), v3(2, 2, D), v3(2, 2, D), o8, p2, p2); }),
               Catch::Contains("q.head_dim = 64") && Catch::Contains("k.head_dim = 16"));
    // Q with 2 heads while out and K/V say 8 and 8.
    CHECK_THAT(message([&] { posenc::attention(enc, v3(2, 2, D), v3(2, 8, D), v3(2, 8, D), o8, p2, p2); }),
               Catch::Contains("q.heads = 2") && Catch::Contains("out.heads = 8"));
    // 2 positions for 1 query token: both numbers.
    CHECK_THAT(message([&] { posenc::attention(enc, v3(1, 8, D), v3(2, 2, D), v3(2, 2, D), posenc::heads_view<float>(out.data(), {1, 8, D}), p2, p2); }),
               Catch::Contains("q.tokens = 1") && Catch::Contains("query positions = 2"));
    CHECK_THAT(message([&] { posenc::attention(enc, v3(1, 8, D), v3(2, 2, D), v3(1, 2, D), posenc::heads_view<float>(out.data(), {1, 8, D}), p1, p2); }),
               Catch::Contains("v.tokens = 1") && Catch::Contains("key positions = 2"));
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 2.0f; }));
}

namespace engine_kv_test {
/// A transform of the user's that rejects one interior position (say, a table with a hole).
struct picky_transform {
    std::int64_t bad = 0;
    void apply(posenc::heads_view<float> q, posenc::heads_view<float> k, const posenc::position_ids& pos) const {
        for (std::size_t i = 0; i < pos.size(); ++i)
            if (pos[i] == bad) throw posenc::config_error("position", std::to_string(bad), "is not supported");
        (void)q, (void)k;
    }
};
}  // namespace engine_kv_test

TEST_CASE("attention: with several failing items, threads rethrow the error one thread would", "[attention][engine][errors]") {
    // Position 30 fails in query tile 0 (and in every later tile, through its keys); 195 fails first
    // in the last tile, which threads take first. One thread stops at tile 0: "30".
    const attn_problem p = make_attn_problem(200, 200, 2, 1, 8, 8, 98);
    std::vector<float> q = p.q, k = p.k, v = p.v, out(200 * 2 * 8, 4.0f);
    struct two_holes {
        void apply(posenc::heads_view<float>, posenc::heads_view<float>, const posenc::position_ids& pos) const {
            for (std::size_t i = 0; i < pos.size(); ++i)
                if (pos[i] == 30 || pos[i] == 195)
                    throw posenc::config_error("position", std::to_string(pos[i]), "is not supported");
        }
    };
    const posenc::attention_encoding enc{two_holes{}};
    for (const bool one_by_one : {false, true})
        for (unsigned threads : {1u, 3u}) {
            posenc::attention_options opt{.threads = threads, .min_fmas_per_thread = 0};
            if (one_by_one) opt.executor = engine_kv_test::one_by_one_reversed;
            INFO("threads " << threads << (one_by_one ? ", tasks one by one, the last first" : ""));
            CHECK_THROWS_WITH(posenc::attention(enc, hv(q, 200, 2, 8), hv(k, 200, 1, 8), hv(v, 200, 1, 8), hv(out, 200, 2, 8),
                                                posenc::position_ids(p.qpos), posenc::position_ids(p.kpos),
                                                posenc::causal_mask{}, opt),
                              Catch::Contains("position = 30"));
        }
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 4.0f; }));
}

TEST_CASE("attention: a custom transform throwing inside writes nothing", "[attention][engine][errors]") {
    const attn_problem p = make_attn_problem(200, 200, 2, 1, 8, 8, 99);
    std::vector<float> q = p.q, k = p.k, v = p.v;
    for (const std::int64_t bad : {150, 7}) {  // a query position of a later tile; a key position only seen with rotate
        for (unsigned threads : {1u, 3u}) {
            std::vector<float> out(200 * 2 * 8, 4.0f), lse(400, 4.0f);
            const posenc::attention_encoding enc{picky_transform{bad}};
            CHECK_THROWS_AS(posenc::attention(enc, hv(q, 200, 2, 8), hv(k, 200, 1, 8), hv(v, 200, 1, 8), hv(out, 200, 2, 8),
                                              posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{},
                                              {.threads = threads}),
                            posenc::config_error);
            CHECK_THROWS_AS(posenc::attention_partial(enc, hv(q, 200, 2, 8), hv(k, 200, 1, 8), hv(v, 200, 1, 8),
                                                      hv(out, 200, 2, 8), lse, posenc::position_ids(p.qpos),
                                                      posenc::position_ids(p.kpos), posenc::causal_mask{}, {.threads = threads}),
                            posenc::config_error);
            CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 4.0f; }));
            CHECK(std::all_of(lse.begin(), lse.end(), [](float x) { return x == 4.0f; }));
        }
    }
}

TEST_CASE("attention_partial with a custom transform (staged, then committed): out and lse of the built-in path", "[attention][engine][partial]") {
    // A transform that may throw is computed into scratch and copied out at the end; the copy must
    // carry lse too. picky_transform that never throws is the identity: NoPE's bits.
    const attn_problem p = make_attn_problem(200, 200, 2, 1, 8, 8, 97);
    std::vector<float> q = p.q, k = p.k, v = p.v;
    for (unsigned threads : {1u, 3u}) {
        INFO("threads " << threads);
        std::vector<float> out(200 * 2 * 8, 4.0f), lse(400, 4.0f), want(out.size()), want_lse(lse.size());
        const posenc::position_ids qp(p.qpos), kp(p.kpos);
        posenc::attention_partial(posenc::attention_encoding{picky_transform{-1}}, hv(q, 200, 2, 8), hv(k, 200, 1, 8),
                                  hv(v, 200, 1, 8), hv(out, 200, 2, 8), lse, qp, kp, posenc::causal_mask{}, {.threads = threads});
        posenc::attention_partial(posenc::attention_encoding{posenc::nope{}}, hv(q, 200, 2, 8), hv(k, 200, 1, 8), hv(v, 200, 1, 8),
                                  hv(want, 200, 2, 8), want_lse, qp, kp, posenc::causal_mask{}, {.threads = threads});
        CHECK(bits_equal(out, want));
        CHECK(bits_equal(lse, want_lse));
    }
}
