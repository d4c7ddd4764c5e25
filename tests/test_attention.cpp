// posenc::attention against a naive double-precision reference (support/attention_reference.hpp) for
// every encoding × mask × head grouping × sizes that are not multiples of the tiles, plus the
// invariants, the edge rows and the thread/architecture determinism.
//
// The bound. With inputs of O(1) (q, k ~ N(0, 0.5²), v ~ N(0, 1)) the float kernel differs from the
// exact result through (1) each logit's rounding — the transform's cos/sin rounded to float, the
// D-term float dot product, scale and bias each rounded once: |δ| ≲ (D/4 + 4)·ε·(|s|·Σ|q_d k_d| + |b|),
// about 1e-7·|logit| at these sizes — and (2) the float sums of the softmax numerators and of Σ p·v
// over n visible keys in blocks of 64 keys, each block summed in order (relative error ≲ (64 + n/64)·ε
// in the worst case, ~√(64 + n/64)·ε typically). An output is a convex combination of value rows, so a
// logit error δ moves it by at most 2|δ|·max|v| and the sums add ~(64 + n/64)·ε·max|v|. For the logits
// these tests produce (|logit| ≲ 10 where the weight is not negligible; n ≤ 1000) that is below
// 1e-6·max|v|; the tests require max|out − ref| ≤ 2e-6·scale, with scale = max|v| (+ max|a^V| for Shaw),
// the size outputs live on.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/layer.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"
#include "support/heads.hpp"

using namespace posenc_test;

namespace {

constexpr double bound = 2e-6;

/// How a test hands its positions to attention: int64 or int32 arrays, or position_ids::consecutive
/// (where they are consecutive: the kernel then masks a cut row by two fills instead of per key).
enum class positions_as { int64, int32, consecutive };

bool is_consecutive(const std::vector<std::int64_t>& p) {
    for (std::size_t i = 1; i < p.size(); ++i)
        if (p[i] != p[i - 1] + 1) return false;
    return true;
}

posenc::position_ids positions_of(const std::vector<std::int64_t>& p, const std::vector<std::int32_t>& p32, positions_as as) {
    if (as == positions_as::int32) return posenc::position_ids(p32);
    if (as == positions_as::consecutive && !p.empty() && is_consecutive(p)) return posenc::position_ids::consecutive(p[0], p.size());
    return posenc::position_ids(p);
}

template <class Enc, class Mask>
std::vector<float> run_posenc(const attn_problem& p, const Enc& enc, const Mask& mask, posenc::attention_options opt = {},
                              positions_as as = positions_as::int64) {
    std::vector<float> q = p.q, k = p.k, v = p.v, out(p.Tq * p.Hq * p.Dv, -7.0f);
    std::vector<std::int32_t> q32(p.qpos.begin(), p.qpos.end()), k32(p.kpos.begin(), p.kpos.end());
    opt.query_sequence = p.qseq;
    opt.key_sequence = p.kseq;
    const posenc::position_ids qp = positions_of(p.qpos, q32, as), kp = positions_of(p.kpos, k32, as);
    posenc::attention(enc, hv(q, p.Tq, p.Hq, p.D), hv(k, p.Tk, p.Hkv, p.D), hv(v, p.Tk, p.Hkv, p.Dv),
                      hv(out, p.Tq, p.Hq, p.Dv), qp, kp, mask, opt);
    REQUIRE(q == p.q);  // inputs untouched (Q is transformed in scratch)
    REQUIRE(k == p.k);
    return out;
}

double error_of(const std::vector<float>& got, const std::vector<double>& ref) {
    REQUIRE(got.size() == ref.size());
    double e = 0;
    std::size_t not_finite = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        not_finite += std::isfinite(got[i]) ? 0 : 1;
        e = posenc_test::worst_of(e, std::abs(static_cast<double>(got[i]) - ref[i]));
    }
    REQUIRE(not_finite == 0);
    return e;
}

struct mask_case {
    std::string name;
    visible_fn visible;
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }

// Calls f(mask, visible) for each mask policy.
template <class F>
void for_each_mask(F&& f, bool with_none = true) {
    if (with_none) f(posenc::no_mask{}, mask_case{"none", [](std::int64_t, std::int64_t) { return true; }});
    f(posenc::causal_mask{}, mask_case{"causal", [](std::int64_t i, std::int64_t j) { return j <= i; }});
    f(posenc::sliding_window_mask{.window = 5},
      mask_case{"window5", [](std::int64_t i, std::int64_t j) { return i - 5 < j && j <= i; }});
    f(posenc::chunked_mask{.chunk = 16}, mask_case{"chunk16", [](std::int64_t i, std::int64_t j) {
          return j <= i && floor_div(i, 16) == floor_div(j, 16);
      }});
}

struct heads_case {
    std::size_t Hq, Hkv;
};
const heads_case head_cases[] = {{4, 4}, {8, 2}, {4, 1}};  // MHA, GQA 4:1, MQA
struct size_case {
    std::size_t Tq, Tk;
};
const size_case size_cases[] = {{1, 1}, {7, 63}, {63, 129}, {129, 7}, {2, 130}};

// Every mask × heads × size for one encoding; returns the number of outputs compared.
template <class MakeEnc>
std::size_t check_matrix(const std::string& name, MakeEnc&& make, std::size_t D, std::size_t Dv, std::int64_t offset,
                         bool with_none = true, posenc::attention_options opt = {}, double extra_scale = 0) {
    std::size_t compared = 0;
    std::uint32_t seed = 100;
    for_each_mask(
        [&](const auto& mask, const mask_case& mc) {
            for (const auto& hc : head_cases)
                for (const auto& sc : size_cases) {
                    const attn_problem p = make_attn_problem(sc.Tq, sc.Tk, hc.Hq, hc.Hkv, D, Dv, seed++, offset);
                    const auto [enc, model] = make(hc.Hq, p);
                    posenc::attention_options o = opt;  // sinks: the first Hq of those given
                    if (!o.sinks.empty()) o.sinks = o.sinks.first(hc.Hq);
                    const auto got = run_posenc(p, enc, mask, o, static_cast<positions_as>(seed % 3));
                    const auto ref = reference_attention(p, model, mc.visible);
                    const double err = error_of(got, ref) / (max_abs(p.v) + extra_scale);
                    INFO(name << " mask " << mc.name << " heads " << hc.Hq << "/" << hc.Hkv << " Tq " << sc.Tq
                              << " Tk " << sc.Tk);
                    CHECK(err <= bound);
                    compared += got.size();
                }
        },
        with_none);
    return compared;
}

// The RoPE schedules, each through any_rotary (layouts alternating).
std::vector<std::pair<std::string, posenc::any_schedule>> schedules() {
    std::vector<double> shortf(8, 1.0), longf(8);
    for (std::size_t i = 0; i < 8; ++i) longf[i] = 1.0 + 0.5 * static_cast<double>(i);
    return {{"default", posenc::default_rope{.base = 10000}},
            {"linear", posenc::linear{.base = 10000, .factor = 4}},
            {"ntk_aware", posenc::ntk_aware{.base = 10000, .factor = 4}},
            {"ntk_by_parts", posenc::ntk_by_parts{.base = 10000, .factor = 4, .original_max_position = 64}},
            {"dynamic_ntk", posenc::dynamic_ntk{.base = 10000, .factor = 2, .original_max_position = 64}},
            {"yarn", posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 64}},
            {"llama3", posenc::llama3{.base = 500000, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                      .original_max_position = 64}},
            {"longrope", posenc::longrope{.base = 10000, .short_factor = shortf, .long_factor = longf,
                                          .original_max_position = 64, .factor = 4}}};
}

}  // namespace

TEST_CASE("attention equals the double reference: every RoPE schedule through any_rotary", "[attention]") {
    std::size_t compared = 0, index = 0;
    for (const auto& [name, schedule] : schedules()) {
        const bool inter = index++ % 2 == 0;
        const std::size_t D = 16, Dv = 24;
        const posenc::rope_dims dims{.head_dim = D};
        posenc::any_rotary rope(inter ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split, dims, schedule, 200);
        const auto freq = rope.frequencies();
        compared += check_matrix(
            name,
            [&](std::size_t, const attn_problem&) {
                attn_model m;
                m.rot_q = m.rot_k = rope_rot(D, inter, freq.inv_freq, freq.attention_factor);
                return std::pair{posenc::attention_encoding{rope}, m};
            },
            D, Dv, 1000);
    }
    REQUIRE(compared > 8 * 4 * 3 * 100);
}

TEST_CASE("attention equals the double reference: partial rotary, softcap, sinks, xPos", "[attention]") {
    std::size_t compared = 0;
    {  // partial rotary (rotary_dim 16 of head_dim 32) with Gemma-2 soft-capping
        const std::size_t D = 32, Dv = 16;
        posenc::rotary<posenc::half_split> rope({.head_dim = D, .rotary_dim = 16}, posenc::default_rope{});
        const auto inv = rope.frequencies().inv_freq;
        compared += check_matrix(
            "softcap",
            [&](std::size_t, const attn_problem&) {
                attn_model m;
                m.rot_q = m.rot_k = rope_rot(16, false, inv, 1.0);
                m.softcap = 1.5;
                return std::pair{posenc::attention_encoding{rope}, m};
            },
            D, Dv, 0, true, {.softcap = 1.5f});
    }
    {  // gpt-oss sinks: one learned logit per query head in the denominator
        const std::size_t D = 16, Dv = 16;
        std::vector<float> sinks8 = random_floats(8, 7, 1.0f);
        compared += check_matrix(
            "sinks",
            [&](std::size_t Hq, const attn_problem&) {
                attn_model m;
                m.sinks.assign(sinks8.begin(), sinks8.begin() + static_cast<std::ptrdiff_t>(Hq));
                return std::pair{posenc::attention_encoding{posenc::nope{}}, m};
            },
            D, Dv, 0, true, {.sinks = sinks8}, 0);
    }
    {  // xPos, half-split, center 0: queries scaled ζ^(n/512), keys ζ^(−m/512)
        const std::size_t D = 16, Dv = 16;
        const posenc::xpos params{};
        posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, params);
        auto rot = [&](double sign) { return xpos_half_split_rot(D, sign); };
        compared += check_matrix(
            "xpos",
            [&](std::size_t, const attn_problem&) {
                attn_model m;
                m.rot_q = rot(1.0);
                m.rot_k = rot(-1.0);
                return std::pair{posenc::attention_encoding{xp}, m};
            },
            D, Dv, 300);
    }
    REQUIRE(compared > 3 * 4 * 3 * 100);
}

TEST_CASE("attention equals the double reference: NoPE with a fixed lambda and Llama 4's temperature", "[attention]") {
    std::size_t compared = 0;
    compared += check_matrix(
        "nope-lambda",
        [&](std::size_t, const attn_problem&) {
            attn_model m;
            m.scale = [](std::int64_t) { return 0.3; };
            return std::pair{posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, posenc::fixed_scale{0.3}}, m};
        },
        16, 8, 0);
    compared += check_matrix(
        "llama4-temperature",
        [&](std::size_t, const attn_problem&) {
            attn_model m;
            m.scale = [](std::int64_t p) {
                return (std::log(std::floor((static_cast<double>(p) + 1.0) / 8.0) + 1.0) * 0.1 + 1.0) / std::sqrt(16.0);
            };
            const posenc::temperature_scale ts{{.floor_scale = 8, .attn_scale = 0.1}};
            return std::pair{posenc::attention_encoding{posenc::nope{}, posenc::no_bias{}, ts}, m};
        },
        16, 16, 5);
    REQUIRE(compared > 2 * 4 * 3 * 100);
}

TEST_CASE("attention equals the double reference: ALiBi (both forms, both orders) and T5", "[attention]") {
    std::size_t compared = 0;
    for (auto form : {posenc::alibi_form::causal, posenc::alibi_form::symmetric})
        for (auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale}) {
            const bool causal = form == posenc::alibi_form::causal;
            // The causal form grows without bound to the right of the query: it belongs with a causal mask.
            compared += check_matrix(
                std::string("alibi ") + (causal ? "causal" : "symmetric") +
                    (order == posenc::bias_order::add_then_scale ? " add_then_scale" : " scale_then_add"),
                [&](std::size_t Hq, const attn_problem&) {
                    attn_model m;
                    m.add_then_scale = order == posenc::bias_order::add_then_scale;
                    m.bias = [=](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
                        const double rel = static_cast<double>(j - i);
                        return alibi_closed_slope(h, Hq, 8.0) * (causal ? rel : -std::abs(rel));
                    };
                    posenc::alibi_bias b({.heads = Hq, .max_bias = 8, .form = form, .order = order});
                    return std::pair{posenc::attention_encoding{posenc::nope{}, b}, m};
                },
                16, 16, 40, !causal);
        }
    {
        const posenc::t5_buckets buckets{.num_buckets = 32, .max_distance = 20, .bidirectional = true};
        std::vector<float> table = random_floats(32 * 8, 11, 1.0f);
        compared += check_matrix(
            "t5",
            [&](std::size_t Hq, const attn_problem&) {
                attn_model m;
                m.scale = [](std::int64_t) { return 1.0; };
                std::vector<float> t(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(32 * Hq));
                // table [bucket][head] for this head count
                for (std::size_t b = 0; b < 32; ++b)
                    for (std::size_t h = 0; h < Hq; ++h) t[b * Hq + h] = table[b * 8 + h];
                m.bias = [=](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
                    return static_cast<double>(t[static_cast<std::size_t>(t5_closed_bucket(j - i, true, 32, 20)) * Hq + h]);
                };
                posenc::t5_bias b(buckets, Hq, t);
                return std::pair{posenc::attention_encoding{posenc::nope{}, b, posenc::fixed_scale{1.0}}, m};
            },
            16, 16, 0);
    }
    REQUIRE(compared > 3 * 4 * 3 * 100 + 2 * 3 * 3 * 100);
}

TEST_CASE("attention equals the double reference: Shaw relative positions", "[attention]") {
    const std::size_t D = 16, Dv = 24;
    const std::int64_t kmax = 3;
    const std::vector<float> ak = random_floats(7 * D, 21, 0.5f), av = random_floats(7 * Dv, 22, 1.0f);
    const posenc::shaw_rpr shaw({.max_distance = kmax}, ak, D, av, Dv);
    const std::size_t compared = check_matrix(
        "shaw",
        [&](std::size_t, const attn_problem&) {
            const attn_model m = shaw_model(ak, D, av, Dv, kmax);
            return std::pair{posenc::attention_encoding{posenc::nope{}, shaw}, m};
        },
        D, Dv, 0, true, {}, max_abs(av));
    REQUIRE(compared > 4 * 3 * 100);
}

TEST_CASE("attention at T = 1000 and packed sequences", "[attention]") {
    const std::size_t D = 32;
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    const auto inv = rope.frequencies().inv_freq;
    attn_model m;
    m.rot_q = m.rot_k = rope_rot(D, false, inv, 1.0);
    const auto causal = [](std::int64_t i, std::int64_t j) { return j <= i; };
    {
        const attn_problem p = make_attn_problem(1000, 1000, 4, 1, D, D, 5);
        const auto got = run_posenc(p, posenc::attention_encoding{rope}, posenc::causal_mask{});
        CHECK(error_of(got, reference_attention(p, m, causal)) / max_abs(p.v) <= bound);
    }
    {  // three packed sequences, each with positions from 0
        attn_problem p = make_attn_problem(300, 300, 4, 2, D, D, 6);
        for (std::size_t t = 0; t < 300; ++t) {
            const auto s = static_cast<std::int32_t>(t < 70 ? 0 : t < 200 ? 1 : 2);
            p.qseq.push_back(s);
            p.kseq.push_back(s);
            p.qpos[t] = p.kpos[t] = static_cast<std::int64_t>(t) - (s == 0 ? 0 : s == 1 ? 70 : 200);
        }
        const auto got = run_posenc(p, posenc::attention_encoding{rope}, posenc::causal_mask{});
        CHECK(error_of(got, reference_attention(p, m, causal)) / max_abs(p.v) <= bound);
        // ... and without a mask: each sequence sees only itself
        const auto got2 = run_posenc(p, posenc::attention_encoding{rope}, posenc::no_mask{});
        CHECK(error_of(got2, reference_attention(p, m, [](std::int64_t, std::int64_t) { return true; })) / max_abs(p.v) <=
              bound);
    }
}

TEST_CASE("attention: sliding windows and chunks wider than a key tile", "[attention][mask]") {
    // Windows and chunks of 64 (one key tile), 65, 100 and 200 over 300 tokens (5 key tiles, 5 query
    // tiles of 64 tokens, GQA 4:1): tiles the mask hides whole, sees whole and cuts through, at an offset that is
    // not a multiple of the tile, in prefill and for the last 7 queries alone (decode-like).
    const std::size_t D = 32, T = 300;
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = D}, posenc::default_rope{});
    attn_model m;
    m.rot_q = m.rot_k = rope_rot(D, true, rope.frequencies().inv_freq, 1.0);
    std::size_t compared = 0;
    auto check = [&](const auto& mask, const visible_fn& visible, const std::string& name) {
        for (const std::size_t Tq : {T, std::size_t{7}}) {
            // Queries at the last Tq keys' positions.
            // (Negative positions: chunks by floor division.)
            attn_problem p = make_attn_problem(Tq, T, 8, 2, D, D, 40 + static_cast<std::uint32_t>(compared % 97), -137);
            REQUIRE((is_consecutive(p.qpos) && is_consecutive(p.kpos)));  // the consecutive form below is taken
            const auto ref = reference_attention(p, m, visible);
            for (const positions_as as : {positions_as::int64, positions_as::consecutive}) {
                const auto got = run_posenc(p, posenc::attention_encoding{rope}, mask, {}, as);
                INFO(name << " Tq " << Tq << (as == positions_as::consecutive ? " consecutive" : " int64"));
                CHECK(error_of(got, ref) / max_abs(p.v) <= bound);
                compared += got.size();
            }
        }
    };
    for (const std::int64_t w : {64, 65, 100, 200})
        check(posenc::sliding_window_mask{.window = w}, [w](std::int64_t i, std::int64_t j) { return i - w < j && j <= i; },
              "window " + std::to_string(w));
    for (const std::int64_t c : {64, 100})
        check(posenc::chunked_mask{.chunk = c},
              [c](std::int64_t i, std::int64_t j) { return j <= i && floor_div(i, c) == floor_div(j, c); },
              "chunk " + std::to_string(c));
    REQUIRE(compared == 2 * 6 * (T + 7) * 8 * D);

    // Packed sequences over consecutive positions: the mask's fills, then the sequence test.
    attn_problem p = make_attn_problem(T, T, 8, 2, D, D, 77, -20);
    for (std::size_t t = 0; t < T; ++t) {
        p.qseq.push_back(t < 90 ? 0 : t < 201 ? 1 : 2);
        p.kseq.push_back(p.qseq.back());
    }
    const auto ref = reference_attention(p, m, [](std::int64_t i, std::int64_t j) { return i - 100 < j && j <= i; });
    for (const positions_as as : {positions_as::int64, positions_as::consecutive}) {
        INFO("packed, window 100, " << (as == positions_as::consecutive ? "consecutive" : "int64"));
        CHECK(error_of(run_posenc(p, posenc::attention_encoding{rope}, posenc::sliding_window_mask{.window = 100}, {}, as), ref) /
                  max_abs(p.v) <=
              bound);
    }
}

TEST_CASE("attention: key positions as consecutive() or as the same array give the same bits", "[attention][mask]") {
    // Over consecutive key positions a tile the mask cuts through is masked by fills and each block of
    // rows stops its products at its last visible key; an array takes neither shortcut. Both forms must
    // give the same bits (a stale score or a skipped visible key would differ): causal, window and
    // chunk masks, MHA and GQA 4:1, RoPE and ALiBi in both orders, soft-capping, packed sequences.
    const std::size_t D = 32, T = 200;
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    std::size_t compared = 0;
    auto same_bits = [&](const auto& enc, const auto& mask, attn_problem p, const posenc::attention_options& opt) {
        const auto a = run_posenc(p, enc, mask, opt, positions_as::int64);
        const auto c = run_posenc(p, enc, mask, opt, positions_as::consecutive);
        REQUIRE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0);
        compared += a.size();
    };
    auto each_mask = [&](const auto& enc, std::size_t Hkv, const posenc::attention_options& opt, bool packed) {
        attn_problem p = make_attn_problem(T, T, 8, Hkv, D, D, 300 + static_cast<std::uint32_t>(compared % 89), -37);
        if (packed)
            for (std::size_t t = 0; t < T; ++t) {
                p.qseq.push_back(t < 70 ? 0 : t < 150 ? 1 : 2);
                p.kseq.push_back(p.qseq.back());
            }
        same_bits(enc, posenc::causal_mask{}, p, opt);
        same_bits(enc, posenc::sliding_window_mask{.window = 100}, p, opt);
        same_bits(enc, posenc::chunked_mask{.chunk = 64}, p, opt);
    };
    for (const std::size_t Hkv : {std::size_t{8}, std::size_t{2}}) {
        INFO("kv heads " << Hkv);
        each_mask(posenc::attention_encoding{rope}, Hkv, {}, false);
        each_mask(posenc::attention_encoding{rope}, Hkv, {.softcap = 1.5f}, false);
        each_mask(posenc::attention_encoding{rope}, Hkv, {}, true);
        for (auto order : {posenc::bias_order::scale_then_add, posenc::bias_order::add_then_scale})
            each_mask(posenc::attention_encoding{posenc::nope{}, posenc::alibi_bias({.heads = 8, .max_bias = 8, .order = order})},
                      Hkv, {}, false);
    }
    REQUIRE(compared == 2 * 5 * 3 * T * 8 * D);

    // A zero's sign: row 6 sees keys 0-6, whose products with V (−0 for the top score, −denorm_min
    // for the others, p = 0.3) all round to −0; keys 7-15 are masked and hold V = 1. Adding their zero
    // products (the array form) makes the lane +0, skipping them (consecutive) leaves −0: the output
    // is +0 either way.
    attn_problem z = make_attn_problem(8, 16, 1, 1, 16, 16, 5);
    for (std::size_t i = 0; i < 8; ++i) z.qpos[i] = static_cast<std::int64_t>(i);
    for (std::size_t j = 0; j < 16; ++j) z.kpos[j] = static_cast<std::int64_t>(j);
    std::fill(z.q.begin(), z.q.end(), 0.0f);
    std::fill(z.k.begin(), z.k.end(), 0.0f);
    z.q[6 * 16] = 1.0f;
    for (std::size_t j = 1; j < 16; ++j) z.k[j * 16] = static_cast<float>(4.0 * std::log(0.3));  // s = ln 0.3 (scale 1/4)
    for (std::size_t j = 0; j < 16; ++j)
        for (std::size_t d = 0; d < 16; ++d)
            z.v[j * 16 + d] = j == 0 ? -0.0f : j <= 6 ? -std::numeric_limits<float>::denorm_min() : 1.0f;
    for (const positions_as as : {positions_as::int64, positions_as::consecutive}) {
        const auto out = run_posenc(z, posenc::attention_encoding{posenc::nope{}}, posenc::causal_mask{}, {}, as);
        for (std::size_t d = 0; d < 16; ++d) REQUIRE(std::bit_cast<std::uint32_t>(out[6 * 16 + d]) == 0u);
    }
}

TEST_CASE("attention masks: mask_scores hides exactly the keys visible() hides", "[attention][mask]") {
    // The kernel's row masking, both routes (two fills for consecutive key positions, a test per key
    // for an array), against visible() pair by pair: tiles of 1, 2, 7 and 64 keys that the mask's edges
    // cut anywhere, at both ends of int64.
    constexpr std::int64_t lo64 = std::numeric_limits<std::int64_t>::min(), hi64 = std::numeric_limits<std::int64_t>::max();
    std::size_t rows = 0, hidden = 0, shown = 0;
    auto check = [&](const auto& mask) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{64}})
            for (const std::int64_t base : {std::int64_t{-70}, std::int64_t{-3}, std::int64_t{0}, lo64, hi64 - 63})
                for (std::int64_t shift = -70; shift <= 70; shift += 7) {
                    const std::int64_t k_lo = base == lo64 ? lo64 : base == hi64 - 63 ? hi64 - static_cast<std::int64_t>(n - 1) : base;
                    std::vector<std::int64_t> keys(n);
                    for (std::size_t j = 0; j < n; ++j) keys[j] = k_lo + static_cast<std::int64_t>(j);
                    // Queries around the tile (saturated at the ends of int64).
                    std::int64_t qp = 0;
                    if (__builtin_add_overflow(k_lo, shift, &qp)) qp = shift < 0 ? lo64 : hi64;
                    for (const bool consecutive : {true, false}) {
                        const posenc::position_ids ks =
                            consecutive ? posenc::position_ids::consecutive(k_lo, n) : posenc::position_ids(std::span<const std::int64_t>(keys));
                        REQUIRE(ks.is_consecutive() == (consecutive || n == 1));
                        std::vector<float> row(n, 1.5f);
                        posenc::detail::mask_scores(mask, qp, ks, row.data());
                        for (std::size_t j = 0; j < n; ++j) {
                            INFO(mask.name << " qp " << qp << " key " << keys[j] << " n " << n << (consecutive ? " consecutive" : " array"));
                            CHECK(row[j] == (mask.visible(qp, keys[j]) ? 1.5f : -std::numeric_limits<float>::infinity()));
                            (row[j] == 1.5f ? shown : hidden) += 1;
                        }
                        ++rows;
                    }
                }
    };
    check(posenc::no_mask{});
    check(posenc::causal_mask{});
    for (const std::int64_t w : {std::int64_t{1}, std::int64_t{5}, std::int64_t{64}, std::int64_t{65}, hi64})
        check(posenc::sliding_window_mask{.window = w});
    for (const std::int64_t c : {std::int64_t{1}, std::int64_t{7}, std::int64_t{64}, hi64})
        check(posenc::chunked_mask{.chunk = c});
    REQUIRE(rows == 11 * 4 * 5 * 21 * 2);
    REQUIRE(hidden > 10000);
    REQUIRE(shown > 10000);
}

TEST_CASE("attention masks: visible_keys(i) is exactly the set visible(i, j) admits", "[attention][mask]") {
    // visible_keys lets the kernel mask a row of consecutive keys by two fills: the range must hold
    // every visible key and no other, also where its ends would leave int64 (windows and chunks that
    // start below its bottom).
    constexpr std::int64_t lo64 = std::numeric_limits<std::int64_t>::min(), hi64 = std::numeric_limits<std::int64_t>::max();
    std::size_t pairs = 0, visible_pairs = 0;
    auto check = [&](const auto& mask) {
        std::vector<std::int64_t> queries, keys;
        for (std::int64_t p = -14; p <= 14; ++p) queries.push_back(p), keys.push_back(p);
        for (const std::int64_t edge : {lo64, lo64 + 1, lo64 + 2, lo64 + 5, hi64 - 5, hi64 - 1, hi64}) {
            queries.push_back(edge);
            for (std::int64_t d = -6; d <= 6; ++d)
                if ((d <= 0 || edge <= hi64 - d) && (d >= 0 || edge >= lo64 - d)) keys.push_back(edge + d);
        }
        for (const std::int64_t i : queries) {
            const posenc::key_range r = mask.visible_keys(i);
            for (const std::int64_t j : keys) {
                INFO(mask.name << " i " << i << " j " << j << " range [" << r.lo << ", " << r.hi << "]");
                CHECK(mask.visible(i, j) == (r.lo <= j && j <= r.hi));
                ++pairs;
                visible_pairs += mask.visible(i, j);
            }
        }
    };
    check(posenc::no_mask{});
    check(posenc::causal_mask{});
    for (const std::int64_t w : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, std::int64_t{13}, hi64 / 2, hi64})
        check(posenc::sliding_window_mask{.window = w});
    // A window of 0 (which validate() rejects) sees nothing either way.
    check(posenc::sliding_window_mask{.window = 0});
    for (const std::int64_t c : {std::int64_t{1}, std::int64_t{3}, std::int64_t{8}, hi64 / 3, hi64})
        check(posenc::chunked_mask{.chunk = c});
    // The run-time mask forwards to the typed one's.
    check(posenc::any_mask{posenc::sliding_window_mask{.window = 3}});
    check(posenc::any_mask{posenc::chunked_mask{.chunk = 5}});
    REQUIRE(pairs > 16 * 1000);
    REQUIRE(visible_pairs > pairs / 8);  // the grid reaches both answers
    REQUIRE(visible_pairs < pairs * 4 / 5);
}

TEST_CASE("attention masks: classify() never contradicts visible() on a tile", "[attention][mask]") {
    // Every tile of query positions [q_lo, q_hi] × key positions [k_lo, k_hi] in a small grid (negative
    // positions included): `none` must mean no pair is visible, `all` that every pair is. (`partial` is
    // always safe.) Off-by-one edges in classify() show up here whatever the kernel's tile sizes.
    std::size_t tiles = 0, none = 0, all = 0;
    auto check = [&](const auto& mask) {
        for (std::int64_t ql = -12; ql <= 12; ql += 3)
            for (std::int64_t qn = 0; qn <= 6; qn += 2)
                for (std::int64_t kl = -20; kl <= 12; kl += 1)
                    for (std::int64_t kn = 0; kn <= 9; kn += 3) {
                        const posenc::tile_bounds t{ql, ql + qn, kl, kl + kn};
                        std::size_t visible = 0, pairs = 0;
                        for (std::int64_t i = t.q_lo; i <= t.q_hi; ++i)
                            for (std::int64_t j = t.k_lo; j <= t.k_hi; ++j, ++pairs) visible += mask.visible(i, j) ? 1 : 0;
                        const auto c = mask.classify(t);
                        INFO(mask.name << " q [" << t.q_lo << ", " << t.q_hi << "] k [" << t.k_lo << ", " << t.k_hi << "]");
                        if (c == posenc::tile_visibility::none) CHECK(visible == 0);
                        if (c == posenc::tile_visibility::all) CHECK(visible == pairs);
                        none += c == posenc::tile_visibility::none;
                        all += c == posenc::tile_visibility::all;
                        ++tiles;
                    }
    };
    check(posenc::no_mask{});
    check(posenc::causal_mask{});
    for (const std::int64_t w : {1, 2, 3, 5, 8, 13}) check(posenc::sliding_window_mask{.window = w});
    for (const std::int64_t c : {1, 2, 3, 5, 8}) check(posenc::chunked_mask{.chunk = c});
    REQUIRE(tiles == 13 * 9 * 4 * 33 * 4);
    REQUIRE(none > tiles / 10);  // the grid reaches every classification
    REQUIRE(all > tiles / 10);
}
