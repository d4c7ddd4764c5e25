// Attention with non-finite logits and values: IEEE semantics, as a direct softmax computes them.
//
// Expected values: (1) a NaN logit (from Q, K, a bias or soft-capping) makes the output and the
// log-sum-exp of exactly the rows that see it NaN; every other row has the bits of the clean run
// (a key in another tile cannot reach it); (2) a NaN in V reaches only the column that holds it;
// (3) a merge of partials with a NaN part gives NaN on that row and the clean merge's bits elsewhere;
// (4) +∞ logits share the weight equally (the softmax's limit): the mean of their V rows computed in
// double here, split across threads or not; (5) the backward accepts a NaN lse, and the keys a NaN
// row does not see (in a tile it partly sees) get the clean run's gradients bit for bit.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/grad/attention.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/heads.hpp"
#include "support/storage16.hpp"

using namespace posenc_test;

namespace nonfinite_test {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
bool all_nan(const float* a, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (!std::isnan(a[i])) return false;
    return true;
}

constexpr std::size_t T = 150, Hq = 4, Hkv = 2, G = Hq / Hkv, D = 16, Dv = 16;

/// attention_partial over all keys, float or bf16 K/V, out and lse.
struct result {
    std::vector<float> out, lse;
};
template <class KV>
result run(const attn_problem& p, std::size_t Tq, const posenc::attention_options& opt) {
    const posenc::attention_encoding enc{posenc::nope{}};
    std::vector<float> q(p.q.end() - static_cast<std::ptrdiff_t>(Tq * Hq * D), p.q.end());
    const std::vector<std::int64_t> qpos(p.kpos.end() - static_cast<std::ptrdiff_t>(Tq), p.kpos.end());
    result r{std::vector<float>(Tq * Hq * Dv, -7.0f), std::vector<float>(Tq * Hq, -7.0f)};
    const posenc::heads_view<const float> Q(q.data(), {Tq, Hq, D});
    if constexpr (std::is_same_v<KV, float>) {
        posenc::attention_partial(enc, Q, posenc::heads_view<const float>(p.k.data(), {T, Hkv, D}),
                                  posenc::heads_view<const float>(p.v.data(), {T, Hkv, Dv}), hv(r.out, Tq, Hq, Dv), r.lse,
                                  posenc::position_ids(qpos), posenc::position_ids(p.kpos), posenc::causal_mask{}, opt);
    } else {
        const std::vector<KV> k = to_storage<KV>(p.k), v = to_storage<KV>(p.v);
        posenc::attention_partial(enc, Q, posenc::heads_view<const KV>(k.data(), {T, Hkv, D}),
                                  posenc::heads_view<const KV>(v.data(), {T, Hkv, Dv}), hv(r.out, Tq, Hq, Dv), r.lse,
                                  posenc::position_ids(qpos), posenc::position_ids(p.kpos), posenc::causal_mask{}, opt);
    }
    return r;
}

/// Rows (t, h) of `dirty` against `clean`: NaN (all of out's row and lse) where sees(t, h), the clean
/// bits elsewhere.
template <class Sees>
void check_rows(const result& clean, const result& dirty, std::size_t Tq, Sees sees) {
    std::size_t nan_rows = 0;
    for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t h = 0; h < Hq; ++h) {
            const std::size_t r = t * Hq + h;
            INFO("query " << t << " head " << h);
            if (sees(t, h)) {
                REQUIRE(all_nan(dirty.out.data() + r * Dv, Dv));
                REQUIRE(std::isnan(dirty.lse[r]));
                ++nan_rows;
            } else {
                REQUIRE(same_bits(dirty.out.data() + r * Dv, clean.out.data() + r * Dv, Dv));
                REQUIRE(same_bits(&dirty.lse[r], &clean.lse[r], 1));
            }
        }
    CHECK(nan_rows > 0);
}

template <class KV>
void nan_logit_case() {
    const attn_problem clean_p = make_attn_problem(T, T, Hq, Hkv, D, Dv, 801);
    for (const float softcap : {0.0f, 20.0f})
        for (const std::size_t Tq : {T, std::size_t{1}})  // prefill (many rows) and decode (few, split across threads)
            for (const unsigned threads : {1u, 3u}) {
                INFO("softcap " << softcap << " queries " << Tq << " threads " << threads);
                const posenc::attention_options opt{.softcap = softcap, .threads = threads, .min_fmas_per_thread = 0};
                const result clean = run<KV>(clean_p, Tq, opt);
                const std::size_t q0 = T - Tq;  // the first query's position
                {  // a NaN in key 40 of kv head 1: the rows at positions ≥ 40 of heads 2, 3 see it
                    attn_problem p = clean_p;
                    p.k[(40 * Hkv + 1) * D + 3] = nan_f;
                    check_rows(clean, run<KV>(p, Tq, opt), Tq,
                               [&](std::size_t t, std::size_t h) { return q0 + t >= 40 && h / G == 1; });
                }
                {  // key 0 of kv head 0 NaN: position 0 sees nothing else (a row of NaN logits only)
                    attn_problem p = clean_p;
                    p.k[(0 * Hkv + 0) * D + 0] = nan_f;
                    check_rows(clean, run<KV>(p, Tq, opt), Tq, [&](std::size_t, std::size_t h) { return h / G == 0; });
                }
                if (Tq > 1) {  // a NaN query: its own row only
                    attn_problem p = clean_p;
                    p.q[(7 * Hq + 1) * D + 5] = nan_f;
                    check_rows(clean, run<KV>(p, Tq, opt), Tq, [&](std::size_t t, std::size_t h) { return t == 7 && h == 1; });
                }
            }
}

TEST_CASE("attention: a NaN logit makes exactly the rows that see it NaN, out and lse, prefill and split decode", "[attention][nonfinite]") {
    nan_logit_case<float>();
    nan_logit_case<posenc::bf16>();
}

TEST_CASE("attention: a NaN in V reaches only its column of the rows that weigh it", "[attention][nonfinite]") {
    const attn_problem clean_p = make_attn_problem(T, T, Hq, Hkv, D, Dv, 802);
    for (const unsigned threads : {1u, 3u}) {
        const posenc::attention_options opt{.threads = threads};
        const result clean = run<float>(clean_p, T, opt);
        attn_problem p = clean_p;
        p.v[(90 * Hkv + 0) * Dv + 5] = nan_f;
        const result dirty = run<float>(p, T, opt);
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < Hq; ++h) {
                const std::size_t r = t * Hq + h;
                INFO("query " << t << " head " << h << " threads " << threads);
                REQUIRE(same_bits(&dirty.lse[r], &clean.lse[r], 1));
                if (h / G == 1) {
                    REQUIRE(same_bits(dirty.out.data() + r * Dv, clean.out.data() + r * Dv, Dv));
                } else if (t >= 90) {
                    for (std::size_t d = 0; d < Dv; ++d)
                        REQUIRE((d == 5 ? std::isnan(dirty.out[r * Dv + d]) : same_bits(&dirty.out[r * Dv + d], &clean.out[r * Dv + d], 1)));
                }
                // (rows before 90 of kv head 0 in key 90's tile multiply its V by p = 0: 0·NaN, docs/attention.md)
            }
    }
}

TEST_CASE("merge_attention_partials: a NaN part makes its row NaN, the other rows merge as before", "[attention][nonfinite]") {
    const std::size_t Tq = 3, half = 75;
    const attn_problem p = make_attn_problem(Tq, T, Hq, Hkv, D, Dv, 803);
    const posenc::attention_encoding enc{posenc::nope{}};
    const posenc::position_ids qpos(p.qpos);
    auto shard = [&](const std::vector<float>& k, std::size_t j0, std::size_t n, std::vector<float>& out, std::vector<float>& lse) {
        const std::vector<std::int64_t> kpos(p.kpos.begin() + static_cast<std::ptrdiff_t>(j0),
                                             p.kpos.begin() + static_cast<std::ptrdiff_t>(j0 + n));
        posenc::attention_partial(enc, posenc::heads_view<const float>(p.q.data(), {Tq, Hq, D}),
                                  posenc::heads_view<const float>(k.data() + j0 * Hkv * D, {n, Hkv, D}),
                                  posenc::heads_view<const float>(p.v.data() + j0 * Hkv * Dv, {n, Hkv, Dv}), hv(out, Tq, Hq, Dv),
                                  lse, qpos, posenc::position_ids(kpos));
    };
    auto merged = [&](const std::vector<float>& k, const std::vector<float>& sinks) {
        std::vector<float> a(Tq * Hq * Dv), la(Tq * Hq), b(a.size()), lb(la.size());
        shard(k, 0, half, a, la);
        shard(k, half, T - half, b, lb);
        result r{std::vector<float>(a.size(), -7.0f), std::vector<float>(la.size(), -7.0f)};
        posenc::merge_attention_partials({{hv(a, Tq, Hq, Dv), la}, {hv(b, Tq, Hq, Dv), lb}}, hv(r.out, Tq, Hq, Dv), {.lse = r.lse, .sinks = sinks});
        return r;
    };
    for (const std::vector<float>& sinks : {std::vector<float>{}, std::vector<float>{0.5f, -1.0f, 2.0f, 0.0f}}) {
        INFO("sinks " << sinks.size());
        std::vector<float> k = p.k;
        const result clean = merged(k, sinks);
        k[(100 * Hkv + 1) * D + 2] = nan_f;  // the second shard's rows of kv head 1 (no mask: every query sees it)
        check_rows(clean, merged(k, sinks), Tq, [](std::size_t, std::size_t h) { return h / G == 1; });
    }
    {  // a +∞ part (its +∞ logits' count unknown): NaN for that row, the other rows as merged before
        std::vector<float> a(Tq * Hq * Dv), la(Tq * Hq), b(a.size()), lb(la.size()), out(a.size()), lse(la.size());
        shard(p.k, 0, half, a, la);
        shard(p.k, half, T - half, b, lb);
        result clean{std::vector<float>(a.size()), std::vector<float>(la.size())};
        posenc::merge_attention_partials({{hv(a, Tq, Hq, Dv), la}, {hv(b, Tq, Hq, Dv), lb}}, hv(clean.out, Tq, Hq, Dv), {.lse = clean.lse});
        lb[1 * Hq + 2] = inf_f;
        result r{std::vector<float>(a.size()), std::vector<float>(la.size())};
        posenc::merge_attention_partials({{hv(a, Tq, Hq, Dv), la}, {hv(b, Tq, Hq, Dv), lb}}, hv(r.out, Tq, Hq, Dv), {.lse = r.lse});
        check_rows(clean, r, Tq, [](std::size_t t, std::size_t h) { return t == 1 && h == 2; });
    }
    {  // a NaN part beside one that saw nothing (lse −∞): NaN, not "no key seen"
        std::vector<float> a(Tq * Hq * Dv), la(Tq * Hq), none(a.size(), 0.0f), out(a.size()), lse(la.size());
        std::vector<float> k = p.k;
        k[(10 * Hkv + 0) * D + 2] = nan_f;
        shard(k, 0, half, a, la);
        const std::vector<float> none_lse(la.size(), -inf_f);
        posenc::merge_attention_partials({{hv(none, Tq, Hq, Dv), none_lse}, {hv(a, Tq, Hq, Dv), la}}, hv(out, Tq, Hq, Dv), {.lse = lse});
        for (std::size_t r = 0; r < Tq * Hq; ++r) {
            INFO("row " << r);
            CHECK(std::isnan(lse[r]) == (r % Hq / G == 0));
            CHECK(all_nan(out.data() + r * Dv, Dv) == (r % Hq / G == 0));
        }
    }
}

TEST_CASE("attention: +inf logits share the weight equally, split across threads or not", "[attention][nonfinite]") {
    const std::size_t Tk = 3000, H = 2, d = 16;  // keys 10 and 2500 lie in different segments of a split decode
    attn_problem p = make_attn_problem(1, Tk, H, 1, d, d, 804);
    std::fill_n(p.q.begin(), d, 0.0f);
    p.q[0] = 1e30f;  // head 0: q·k = 1e30·k₀, +∞ where k₀ = 1e30, finite (|k₀| ≤ 0.5) elsewhere
    p.k[10 * d] = p.k[2500 * d] = 1e30f;
    const posenc::attention_encoding enc{posenc::nope{}};
    std::vector<float> one;
    for (const unsigned threads : {1u, 4u}) {
        INFO("threads " << threads);
        std::vector<float> out(H * d, -7.0f), lse(H, -7.0f);
        posenc::attention_partial(enc, posenc::heads_view<const float>(p.q.data(), {1, H, d}),
                                  posenc::heads_view<const float>(p.k.data(), {Tk, 1, d}),
                                  posenc::heads_view<const float>(p.v.data(), {Tk, 1, d}), hv(out, 1, H, d), lse,
                                  posenc::position_ids(p.qpos), posenc::position_ids(p.kpos), posenc::causal_mask{},
                                  {.threads = threads, .min_fmas_per_thread = 0});
        for (std::size_t c = 0; c < d; ++c) {
            const double expected = (static_cast<double>(p.v[10 * d + c]) + p.v[2500 * d + c]) / 2.0;
            REQUIRE(std::abs(out[c] - expected) <= 1e-6 * (1.0 + std::abs(expected)));
        }
        CHECK(lse[0] == inf_f);
        CHECK(std::isfinite(lse[1]));
        for (std::size_t c = d; c < 2 * d; ++c) REQUIRE(std::isfinite(out[c]));
        if (one.empty()) one = out;
        CHECK(same_bits(out.data(), one.data(), out.size()));
        // With a sink, whose weight e^{sink − ∞} is 0: the same row.
        std::vector<float> with_sink(H * d, -7.0f);
        const std::vector<float> sinks{1.0f, 1.0f};
        posenc::attention(enc, posenc::heads_view<const float>(p.q.data(), {1, H, d}), posenc::heads_view<const float>(p.k.data(), {Tk, 1, d}),
                          posenc::heads_view<const float>(p.v.data(), {Tk, 1, d}), hv(with_sink, 1, H, d), posenc::position_ids(p.qpos),
                          posenc::position_ids(p.kpos), posenc::causal_mask{}, {.sinks = sinks, .threads = threads, .min_fmas_per_thread = 0});
        CHECK(same_bits(with_sink.data(), out.data(), d));
    }
}

TEST_CASE("attention_backward: a NaN lse is data, and the keys its row does not see keep the clean gradients", "[attention][nonfinite][grad]") {
    // A window of 8: key 140 is seen by positions 140-147, whose rows turn NaN. Key tile 128-191 is
    // partly visible to them; keys 128-132 in it are not, and get the clean run's gradients (their
    // masked p is 0 under a NaN lse, and dS = p·(dP − Δ) is 0 with Δ NaN).
    const std::size_t N = 150, d = 8;
    const attn_problem clean_p = make_attn_problem(N, N, 1, 1, d, d, 805);
    const posenc::attention_encoding enc{posenc::nope{}};
    const posenc::position_ids pos(clean_p.kpos);
    const posenc::sliding_window_mask mask{8};
    const std::vector<float> dout = random_floats(N * d, 806, 1.0f);
    struct grads {
        std::vector<float> dq, dk, dv;
    };
    auto backward = [&](const attn_problem& p, unsigned threads) {
        std::vector<float> out(N * d), lse(N);
        const posenc::heads_view<const float> q(p.q.data(), {N, 1, d}), k(p.k.data(), {N, 1, d}), v(p.v.data(), {N, 1, d});
        posenc::attention_partial(enc, q, k, v, hv(out, N, 1, d), lse, pos, pos, mask);
        grads g{std::vector<float>(N * d), std::vector<float>(N * d), std::vector<float>(N * d)};
        posenc::attention_backward(enc, q, k, v, posenc::heads_view<const float>(out.data(), {N, 1, d}), lse,
                                   posenc::heads_view<const float>(dout.data(), {N, 1, d}), hv(g.dq, N, 1, d), hv(g.dk, N, 1, d),
                                   hv(g.dv, N, 1, d), pos, pos, mask, {.threads = threads});
        for (std::size_t t = 140; t < 148; ++t) CHECK(std::isnan(lse[t]) == (&p != &clean_p));
        return g;
    };
    attn_problem dirty_p = clean_p;
    dirty_p.k[140 * d + 1] = nan_f;
    for (const unsigned threads : {1u, 2u}) {
        INFO("threads " << threads);
        const grads clean = backward(clean_p, threads), dirty = backward(dirty_p, threads);
        for (std::size_t j = 0; j < N; ++j) {
            INFO("key " << j);
            if (j <= 132 || j >= 148) {
                REQUIRE(same_bits(dirty.dk.data() + j * d, clean.dk.data() + j * d, d));
                REQUIRE(same_bits(dirty.dv.data() + j * d, clean.dv.data() + j * d, d));
            }
        }
        for (std::size_t t = 0; t < N; ++t) {
            INFO("query " << t);
            if (t < 128) REQUIRE(same_bits(dirty.dq.data() + t * d, clean.dq.data() + t * d, d));
            if (t >= 140 && t < 148) REQUIRE(all_nan(dirty.dq.data() + t * d, d));
        }
        CHECK(all_nan(dirty.dv.data() + 140 * d, d));
    }
    {  // a +∞ lse (the forward met +∞ logits): no gradient is defined, NaN along the row's keys, no throw
        std::vector<float> out(N * d), lse(N);
        const posenc::heads_view<const float> q(clean_p.q.data(), {N, 1, d}), k(clean_p.k.data(), {N, 1, d}),
            v(clean_p.v.data(), {N, 1, d});
        posenc::attention_partial(enc, q, k, v, hv(out, N, 1, d), lse, pos, pos, mask);
        lse[20] = inf_f;
        std::vector<float> dq(N * d), dk(N * d), dv(N * d);
        posenc::attention_backward(enc, q, k, v, posenc::heads_view<const float>(out.data(), {N, 1, d}), lse,
                                   posenc::heads_view<const float>(dout.data(), {N, 1, d}), hv(dq, N, 1, d), hv(dk, N, 1, d),
                                   hv(dv, N, 1, d), pos, pos, mask);
        CHECK(all_nan(dq.data() + 20 * d, d));
        CHECK(all_nan(dv.data() + 20 * d, d));
        CHECK(std::isfinite(dq[19 * d]));
    }
}

}  // namespace nonfinite_test
