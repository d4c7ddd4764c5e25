// attention_partial over a kv_cache (float, bf16 and fp16 storage): the bits of attention_partial over
// the cache's own views; split-KV over two caches, merged, against one attention() call over a cache of
// all the tokens and against a closed form in double; bad input rejected with out and lse untouched.
//
// Closed form: per query row softmax(q·k/√D)·v and lse = log Σ exp(q·k/√D), with q and k rotated in
// double (half-split pairs, angle position·base^(−2i/D) from the closed form). A 16-bit cache rotates K
// in float and rounds it once to nearest even, and rounds V once (kv_cache.hpp, docs/attention.md). The
// float rotation is within 3 float ulps of each pair's length of the double one (docs/guarantees.md),
// so a cached 16-bit key must be the rounding of a value in [r − e, r + e] around the double rotation r,
// hence (rounding is monotone) within [round_to<H>(r − e), round_to<H>(r + e)]. That range is a single
// value except where r lies within e of a rounding midpoint, or where a lane is tiny against its pair's
// length (16-bit ulps there are finer than e); the closed form takes the cached key once it passed that
// check, and V = round_to<H>(v) (support/storage16.hpp).
//
// Bounds: the float kernel against a double reference on the same K and V is within test_attention.cpp's
// 2e-6·max|v| (a float cache's keys are rotated in float, inside that bound as in test_attention.cpp);
// lse within 1e-5, as test_attention_engine_kv.cpp holds it.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/heads.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

namespace partial_cache_test {

using posenc_test::hv;

constexpr std::size_t D = 32, Hkv = 2;
constexpr double base = 10000.0;
constexpr double out_bound = 2e-6, lse_bound = 1e-5;
constexpr double ninf = -std::numeric_limits<double>::infinity();

using rope_t = posenc::rotary<posenc::half_split>;
template <class S>
using cache_t = posenc::kv_cache<rope_t, S>;

rope_t make_rope(double b = base) { return rope_t({.head_dim = D}, posenc::default_rope{.base = b}); }

/// One token sequence, token-major K and V [T][Hkv][D], positions from 7 on.
struct sequence {
    std::vector<float> k, v;
    std::vector<std::int64_t> pos;
};
sequence make_sequence(std::size_t T, std::uint32_t seed) {
    sequence s{posenc_test::random_floats(T * Hkv * D, seed, 0.5f), posenc_test::random_floats(T * Hkv * D, seed + 1), {}};
    for (std::size_t t = 0; t < T; ++t) s.pos.push_back(7 + static_cast<std::int64_t>(t));
    return s;
}

/// Appends tokens [t0, t0 + n) of s (float K and V, as a layer's projection writes them).
template <class S>
void append_tokens(cache_t<S>& cache, const sequence& s, std::size_t t0, std::size_t n) {
    cache.append(posenc::heads_view<const float>(s.k.data() + t0 * Hkv * D, {n, Hkv, D}),
                 posenc::heads_view<const float>(s.v.data() + t0 * Hkv * D, {n, Hkv, D}),
                 std::span<const std::int64_t>(s.pos.data() + t0, n));
}

/// The closed form's K and V for a cache holding tokens [t0, t0 + size) of s, token-major (see the top);
/// counts the cached keys that are not the documented rounding in `bad`.
struct reference_kv {
    std::vector<double> k, v;
    std::vector<std::int64_t> pos;
};
template <class S>
reference_kv reference_for(const cache_t<S>& cache, const sequence& s, std::size_t t0, std::size_t& bad) {
    const auto inv = posenc_test::closed_form_inv_freq(base, D);
    reference_kv r;
    for (std::size_t t = 0; t < cache.size(); ++t) {
        bad += cache.positions()[t] == s.pos[t0 + t] ? 0 : 1;
        r.pos.push_back(s.pos[t0 + t]);
        for (std::size_t h = 0; h < Hkv; ++h) {
            const float* x = s.k.data() + ((t0 + t) * Hkv + h) * D;
            const std::vector<double> xd(x, x + D);
            const std::vector<double> rot = posenc_test::reference_rotate(xd, D, false, inv, s.pos[t0 + t]);
            for (std::size_t d = 0; d < D; ++d) {
                const double v = s.v[((t0 + t) * Hkv + h) * D + d];
                r.v.push_back(posenc_test::round_to<S>(v));
                if constexpr (std::is_same_v<S, float>) {
                    r.k.push_back(rot[d]);
                } else {
                    const std::size_t i = d % (D / 2);
                    const double e = 3 * posenc_test::ulp_of<float>(std::hypot(xd[i], xd[i + D / 2]));
                    const double cached = posenc_test::as_double(cache.keys().row(t, h)[d]);
                    const bool documented =
                        cached >= posenc_test::round_to<S>(rot[d] - e) && cached <= posenc_test::round_to<S>(rot[d] + e);
                    bad += documented ? 0 : 1;
                    r.k.push_back(cached);
                }
            }
        }
    }
    return r;
}

/// Joins two references over consecutive token ranges.
reference_kv joined(reference_kv a, const reference_kv& b) {
    a.k.insert(a.k.end(), b.k.begin(), b.k.end());
    a.v.insert(a.v.end(), b.v.begin(), b.v.end());
    a.pos.insert(a.pos.end(), b.pos.begin(), b.pos.end());
    return a;
}

/// out [Tq][Hq][D] and lse [Tq·Hq] in double: q rotated here, keys already rotated; a causal row sees
/// keys at positions ≤ its own (lse −∞ and out 0 where it sees none).
struct closed_result {
    std::vector<double> out, lse;
};
closed_result closed_form(const std::vector<float>& q, std::size_t Hq, const std::vector<std::int64_t>& qpos,
                          const reference_kv& kv, bool causal) {
    const auto inv = posenc_test::closed_form_inv_freq(base, D);
    const std::size_t Tq = qpos.size(), G = Hq / Hkv;
    closed_result r{std::vector<double>(Tq * Hq * D, 0.0), std::vector<double>(Tq * Hq, ninf)};
    for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t h = 0; h < Hq; ++h) {
            const std::vector<double> qd = posenc_test::reference_rotate(
                std::vector<double>(q.begin() + static_cast<std::ptrdiff_t>((t * Hq + h) * D),
                                    q.begin() + static_cast<std::ptrdiff_t>((t * Hq + h + 1) * D)),
                D, false, inv, qpos[t]);
            std::vector<double> logit(kv.pos.size(), ninf);
            double mx = ninf;
            for (std::size_t j = 0; j < kv.pos.size(); ++j) {
                if (causal && kv.pos[j] > qpos[t]) continue;
                double dot = 0;
                for (std::size_t d = 0; d < D; ++d) dot += qd[d] * kv.k[(j * Hkv + h / G) * D + d];
                logit[j] = dot / std::sqrt(static_cast<double>(D));
                mx = std::max(mx, logit[j]);
            }
            if (mx == ninf) continue;
            double sum = 0;
            std::vector<double> acc(D, 0.0);
            for (std::size_t j = 0; j < kv.pos.size(); ++j) {
                if (logit[j] == ninf) continue;
                const double w = std::exp(logit[j] - mx);
                sum += w;
                for (std::size_t d = 0; d < D; ++d) acc[d] += w * kv.v[(j * Hkv + h / G) * D + d];
            }
            for (std::size_t d = 0; d < D; ++d) r.out[(t * Hq + h) * D + d] = acc[d] / sum;
            r.lse[t * Hq + h] = mx + std::log(sum);
        }
    return r;
}

double worst_out_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double e = 0;
    for (std::size_t i = 0; i < got.size(); ++i) e = posenc_test::worst_of(e, std::abs(static_cast<double>(got[i]) - ref[i]));
    return e;
}

/// Largest lse error; a row the reference gives −∞ must be exactly −∞ (any other value counts as +∞).
double worst_lse_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double e = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        e = posenc_test::worst_of(e, ref[i] == ninf ? (static_cast<double>(got[i]) == ninf ? 0.0 : -ninf)
                                                    : std::abs(static_cast<double>(got[i]) - ref[i]));
    return e;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The cache overload against the views overload (keys_transformed), out and lse, bit for bit.
template <class S, class Mask>
void check_cache_equals_views(const cache_t<S>& cache, std::size_t Hq, const std::vector<std::int64_t>& qpos, const Mask& mask,
                              std::uint32_t seed) {
    const std::size_t Tq = qpos.size();
    std::vector<float> q = posenc_test::random_floats(Tq * Hq * D, seed, 0.5f);
    std::vector<float> out_cache(Tq * Hq * D, -5.0f), out_views(out_cache.size(), -7.0f);
    std::vector<float> lse_cache(Tq * Hq, -5.0f), lse_views(lse_cache.size(), -7.0f);
    const posenc::attention_encoding enc{make_rope()};
    posenc::attention_partial(enc, hv(q, Tq, Hq, D), cache, hv(out_cache, Tq, Hq, D), lse_cache, posenc::position_ids(qpos), mask);
    posenc::attention_partial(enc, hv(q, Tq, Hq, D), cache.keys(), cache.values(), hv(out_views, Tq, Hq, D), lse_views,
                              posenc::position_ids(qpos), cache.positions(), mask, {.keys_transformed = true});
    CHECK(same_bytes(out_cache, out_views));
    CHECK(same_bytes(lse_cache, lse_views));
}

template <class S>
void check_bits_of_views() {
    INFO(posenc_test::type_name<S>());
    const std::size_t T = 120;
    const sequence s = make_sequence(T, 31);
    cache_t<S> cache(make_rope(), {.kv_heads = Hkv, .head_dim = D, .capacity = T + 4});
    append_tokens(cache, s, 0, 70);  // two appends, as prefill then chunks fill a cache
    append_tokens(cache, s, 70, T - 70);
    // A causal chunk of 4 queries inside the cached range (GQA 2), and a decode step (GQA 4, no mask).
    check_cache_equals_views(cache, 4, {7 + 30, 7 + 69, 7 + 70, 7 + 119}, posenc::causal_mask{}, 41);
    check_cache_equals_views(cache, 8, {cache.next_position()}, posenc::no_mask{}, 42);
}

}  // namespace partial_cache_test

TEST_CASE("attention_partial over a kv_cache gives the bits of attention_partial over its views (f32 bf16 fp16)", "[attention][partial][kv_cache]") {
    partial_cache_test::check_bits_of_views<float>();
    partial_cache_test::check_bits_of_views<posenc::bf16>();
    partial_cache_test::check_bits_of_views<posenc::fp16>();
}

namespace partial_cache_test {

/// Split-KV: tokens [0, cut) in one cache and [cut, T) in another, a partial over each, merged; against
/// one attention() over a cache of all T tokens and the closed form.
template <class S, class Mask>
void check_split_kv(const sequence& s, std::size_t cut, std::size_t Hq, const std::vector<std::int64_t>& qpos,
                    const Mask& mask, bool causal) {
    const std::size_t T = s.pos.size(), Tq = qpos.size(), rows = Tq * Hq;
    cache_t<S> first(make_rope(), {.kv_heads = Hkv, .head_dim = D, .capacity = cut});
    cache_t<S> second(make_rope(), {.kv_heads = Hkv, .head_dim = D, .capacity = T - cut});
    cache_t<S> whole(make_rope(), {.kv_heads = Hkv, .head_dim = D, .capacity = T});
    append_tokens(first, s, 0, cut);
    append_tokens(second, s, cut, T - cut);
    append_tokens(whole, s, 0, T);
    REQUIRE(second.positions()[0] == first.next_position());  // positions continue across the shards

    std::vector<float> q = posenc_test::random_floats(rows * D, 51, 0.5f);
    const posenc::attention_encoding enc{make_rope()};
    const posenc::position_ids qp(qpos);
    std::vector<float> out_a(rows * D, -5.0f), out_b(rows * D, -5.0f), lse_a(rows, -5.0f), lse_b(rows, -5.0f);
    posenc::attention_partial(enc, hv(q, Tq, Hq, D), first, hv(out_a, Tq, Hq, D), lse_a, qp, mask);
    posenc::attention_partial(enc, hv(q, Tq, Hq, D), second, hv(out_b, Tq, Hq, D), lse_b, qp, mask);
    std::vector<float> merged(rows * D, -3.0f), merged_lse(rows, -3.0f), one(rows * D, -4.0f);
    posenc::merge_attention_partials({{hv(out_a, Tq, Hq, D), lse_a}, {hv(out_b, Tq, Hq, D), lse_b}}, hv(merged, Tq, Hq, D),
                                     {.lse = merged_lse});
    posenc::attention(enc, hv(q, Tq, Hq, D), whole, hv(one, Tq, Hq, D), qp, mask);

    std::size_t bad = 0;
    const reference_kv ref_a = reference_for(first, s, 0, bad), ref_b = reference_for(second, s, cut, bad);
    CHECK(bad == 0);
    const closed_result cf_a = closed_form(q, Hq, qpos, ref_a, causal), cf_b = closed_form(q, Hq, qpos, ref_b, causal);
    const closed_result cf = closed_form(q, Hq, qpos, joined(ref_a, ref_b), causal);
    const double vmax = posenc_test::max_abs(s.v);
    // Each part against the closed form over its shard (out 0 and lse −∞ where the shard shows no key).
    CHECK(worst_out_error(out_a, cf_a.out) <= out_bound * vmax);
    CHECK(worst_out_error(out_b, cf_b.out) <= out_bound * vmax);
    CHECK(worst_lse_error(lse_a, cf_a.lse) <= lse_bound);
    CHECK(worst_lse_error(lse_b, cf_b.lse) <= lse_bound);
    // The merge against the closed form over all keys.
    CHECK(worst_out_error(merged, cf.out) <= out_bound * vmax);
    CHECK(worst_lse_error(merged_lse, cf.lse) <= lse_bound);
    // Merge and one call differ only in how the softmax sums are grouped and in the merge's one rounding
    // of each part's float rows (a few roundings of 2^-24 each of |out| ≤ max|v|), well inside 1e-6·max|v|.
    double worst_vs_one = 0;
    for (std::size_t i = 0; i < one.size(); ++i)
        worst_vs_one = posenc_test::worst_of(worst_vs_one, std::abs(static_cast<double>(one[i]) - merged[i]));
    CHECK(worst_vs_one <= 1e-6 * vmax);
}

template <class S>
void check_split_kv_cases() {
    INFO(posenc_test::type_name<S>());
    const std::size_t T = 150, cut = 90;
    const sequence s = make_sequence(T, 61);
    {
        INFO("causal chunk: the first query sees no key of the second shard, the third only its first key");
        check_split_kv<S>(s, cut, 4, {7 + 40, 7 + 89, 7 + 90, 7 + 120, 7 + 149}, posenc::causal_mask{}, true);
    }
    {
        INFO("decode: one query after the last key, GQA 4");
        check_split_kv<S>(s, cut, 8, {7 + static_cast<std::int64_t>(T)}, posenc::no_mask{}, false);
    }
}

template <class S>
void check_rejections() {
    INFO(posenc_test::type_name<S>());
    const std::size_t T = 20, Tq = 2, Hq = 4;
    const sequence s = make_sequence(T, 71);
    cache_t<S> cache(make_rope(), {.kv_heads = Hkv, .head_dim = D, .capacity = T});
    append_tokens(cache, s, 0, T);
    std::vector<float> q = posenc_test::random_floats(Tq * Hq * 2 * D, 72, 0.5f);  // room for the wide q
    std::vector<float> out(Tq * Hq * D), lse(Tq * Hq + 1);  // lse one longer: the wrong size below
    std::memset(out.data(), 0xA5, out.size() * sizeof(float));  // sentinel byte patterns
    std::memset(lse.data(), 0x5A, lse.size() * sizeof(float));
    const std::vector<float> out0 = out, lse0 = lse;
    // A rejected call must throw config_error naming `key` and leave out and lse as they were (restored
    // after each case, so that one failure does not show in the next).
    auto rejected = [&](auto&& call, const char* key, const char* value) {
        INFO(key);
        posenc_test::expect_config_error(call, key, value);
        CHECK(same_bytes(out, out0));
        CHECK(same_bytes(lse, lse0));
        out = out0;
        lse = lse0;
    };
    const std::span<float> lse_ok(lse.data(), Tq * Hq);
    const posenc::position_ids qp = posenc::position_ids::consecutive(T + 7, Tq);
    const posenc::causal_mask causal{};
    const posenc::attention_encoding other_base{make_rope(1e6)}, enc{make_rope()};
    rejected([&] { posenc::attention_partial(other_base, hv(q, Tq, Hq, D), cache, hv(out, Tq, Hq, D), lse_ok, qp, causal); },
             "enc.transform", "inv_freq[1]");
    rejected([&] { posenc::attention_partial(enc, hv(q, Tq, Hq, 2 * D), cache, hv(out, Tq, Hq, D), lse_ok, qp, causal); },
             "q.head_dim", "64");
    rejected([&] { posenc::attention_partial(enc, hv(q, Tq, Hq, D), cache, hv(out, Tq, Hq, D), lse, qp, causal); }, "lse",
             "of 9 values");
    // The same call with the cache's own transform writes both (the comparisons above can fail).
    posenc::attention_partial(enc, hv(q, Tq, Hq, D), cache, hv(out, Tq, Hq, D), lse_ok, qp, causal);
    CHECK_FALSE(same_bytes(out, out0));
    CHECK_FALSE(same_bytes(lse, lse0));
    CHECK(std::memcmp(lse.data() + Tq * Hq, lse0.data() + Tq * Hq, sizeof(float)) == 0);  // past lse_ok: untouched
}

}  // namespace partial_cache_test

TEST_CASE("attention_partial over two kv_caches merged equals one call and the closed form (f32 bf16 fp16)", "[attention][partial][kv_cache]") {
    partial_cache_test::check_split_kv_cases<float>();
    partial_cache_test::check_split_kv_cases<posenc::bf16>();
    partial_cache_test::check_split_kv_cases<posenc::fp16>();
}

TEST_CASE("attention_partial over a kv_cache rejects another transform or q head_dim or lse size and writes nothing", "[attention][partial][kv_cache][errors]") {
    partial_cache_test::check_rejections<float>();
    partial_cache_test::check_rejections<posenc::bf16>();
    partial_cache_test::check_rejections<posenc::fp16>();
}
