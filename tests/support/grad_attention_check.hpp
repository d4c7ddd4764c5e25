#pragma once
// attention_backward against central finite differences of L = Σ dOut ⊙ attention(...), with the
// attention computed by the independent double model of support/attention_reference.hpp (every
// encoding's closed form written there, not posenc's code): the helpers of test_grad_attention.cpp and
// test_grad_attention_cases.cpp.
//
// Tolerance: the analytic gradient is computed in float (scores, P = exp(S − lse), dS, sums of at most
// a few dozen terms), so each element carries a relative error of ~1e-6 of the magnitudes involved;
// the finite difference (step h = 2^-9, the actual steps after float rounding divided out) has a
// truncation error of h²/6·|L'''| ~ 1e-6 and double rounding ~1e-16/h. 2e-4 of max(1, max |gradient|)
// leaves room for both and still fails on any wrong term (a dropped scale or bias term moves the
// gradient by O(1)).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "posenc/attention/partial.hpp"
#include "posenc/grad/attention.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace grad_attention_test {

using namespace posenc_test;

constexpr double grad_tolerance = 2e-4;
constexpr float fd_step = 1.0f / 512.0f;

/// A parameter the finite differences perturb: its float storage (read by the model factory) and the
/// analytic gradient (check_encoding has posenc add it to a span of ones and takes the ones off, so an
/// assignment where the gradient must be added shows).
struct param_check {
    std::string name;
    std::vector<float>* storage;
    std::vector<float> grad;
};

struct grad_result {
    std::vector<float> dq, dk, dv;
};

/// The forward (posenc's attention_partial, merged with the sinks when there are some) and the backward.
template <class Enc, class Mask>
grad_result run_backward(const attn_problem& p, const Enc& enc, const Mask& mask, const posenc::attention_options& opt,
                         const std::vector<float>& dout, const posenc::attention_param_grads& pg,
                         std::vector<float>* out_lse = nullptr) {
    std::vector<float> out(p.Tq * p.Hq * p.Dv), lse(p.Tq * p.Hq);
    posenc::heads_view<const float> q(p.q.data(), {p.Tq, p.Hq, p.D}), k(p.k.data(), {p.Tk, p.Hkv, p.D}),
        v(p.v.data(), {p.Tk, p.Hkv, p.Dv});
    posenc::heads_view<float> o(out.data(), {p.Tq, p.Hq, p.Dv});
    const posenc::position_ids qpos(std::span<const std::int64_t>(p.qpos)), kpos(std::span<const std::int64_t>(p.kpos));
    posenc::attention_options fwd = opt;
    fwd.sinks = {};
    posenc::attention_partial(enc, q, k, v, o, lse, qpos, kpos, mask, fwd);
    if (!opt.sinks.empty()) posenc::merge_attention_partials({posenc::attention_part{o, lse}}, o, {.lse = lse, .sinks = opt.sinks});
    grad_result g{std::vector<float>(p.q.size()), std::vector<float>(p.k.size()), std::vector<float>(p.v.size())};
    posenc::attention_backward(enc, q, k, v, o, lse, posenc::heads_view<const float>(dout.data(), {p.Tq, p.Hq, p.Dv}),
                               posenc::heads_view<float>(g.dq.data(), {p.Tq, p.Hq, p.D}),
                               posenc::heads_view<float>(g.dk.data(), {p.Tk, p.Hkv, p.D}),
                               posenc::heads_view<float>(g.dv.data(), {p.Tk, p.Hkv, p.Dv}), qpos, kpos, mask, opt, pg);
    if (out_lse) *out_lse = lse;
    return g;
}

inline double loss_of(const attn_problem& p, const attn_model& m, const visible_fn& vis, const std::vector<float>& dout) {
    const std::vector<double> out = reference_attention(p, m, vis);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += static_cast<double>(dout[i]) * out[i];
    return l;
}

/// Central difference of L in x (a float the model reads), dividing by the steps float could take.
inline double central_difference(float& x, const std::function<double()>& loss) {
    const float x0 = x, xp = x0 + fd_step, xm = x0 - fd_step;
    x = xp;
    const double lp = loss();
    x = xm;
    const double lm = loss();
    x = x0;
    return (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
}

/// Compares each analytic gradient with the finite differences of every element (of q, k and v, only
/// `stride`-spaced elements for a large case). Returns the number of elements compared.
inline std::size_t compare_with_differences(const std::string& name, attn_problem& p, const std::function<attn_model()>& model_of,
                                     const visible_fn& vis, const std::vector<float>& dout, const grad_result& g,
                                     std::vector<param_check>& params, std::size_t stride = 1) {
    const auto loss = [&] { return loss_of(p, model_of(), vis, dout); };
    std::size_t compared = 0;
    auto check = [&](const std::string& what, std::vector<float>& x, const std::vector<float>& grad, std::size_t step) {
        REQUIRE(x.size() == grad.size());
        std::vector<double> fd, got;
        for (std::size_t i = 0; i < x.size(); i += step) {
            fd.push_back(central_difference(x[i], loss));
            got.push_back(grad[i]);
        }
        double scale = 1.0, worst = 0.0;
        for (double f : fd) scale = std::max(scale, std::abs(f));
        for (std::size_t i = 0; i < fd.size(); ++i) worst = std::max(worst, std::abs(got[i] - fd[i]));
        INFO(name << ": d" << what << " worst |analytic - finite difference| " << worst << " of scale " << scale);
        CHECK(worst <= grad_tolerance * scale);
        compared += fd.size();
    };
    check("q", p.q, g.dq, stride);
    check("k", p.k, g.dk, stride);
    check("v", p.v, g.dv, stride);
    for (param_check& pc : params) check(pc.name, *pc.storage, pc.grad, 1);
    return compared;
}

struct mask_case {
    std::string name;
    visible_fn visible;
};

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

inline const visible_fn see_all = [](std::int64_t, std::int64_t) { return true; };
inline const visible_fn see_causal = [](std::int64_t i, std::int64_t j) { return j <= i; };
inline const visible_fn see_window3 = [](std::int64_t i, std::int64_t j) { return j <= i && i - j < 3; };
inline const visible_fn see_chunk4 = [](std::int64_t i, std::int64_t j) { return j <= i && floor_div(i, 4) == floor_div(j, 4); };

/// f(name, mask, visible) for the four masks.
template <class F>
void for_each_mask(const F& f) {
    f("none", posenc::no_mask{}, see_all);
    f("causal", posenc::causal_mask{}, see_causal);
    f("sliding_window 3", posenc::sliding_window_mask{3}, see_window3);
    f("chunked 4", posenc::chunked_mask{4}, see_chunk4);
}

struct case_shape {
    std::size_t Tq = 7, Tk = 9, Hq = 2, Hkv = 2, D = 8, Dv = 6;
    std::int64_t offset = 5;
    std::size_t stride = 1;  ///< q, k, v compared at every stride-th element (a large case); parameters at all
};

/// One encoding over the four masks: every gradient against finite differences.
template <class Enc>
std::size_t check_encoding(const std::string& name, const Enc& enc, const std::function<attn_model()>& model_of,
                           const posenc::attention_options& opt = {}, case_shape cs = {},
                           const std::function<void(attn_problem&)>& edit = {},
                           std::vector<param_check> params = {}, std::vector<float>* sink_storage = nullptr) {
    std::size_t compared = 0;
    std::uint32_t seed = 100;
    for_each_mask([&](const char* mname, const auto& mask, const visible_fn& vis) {
        attn_problem p = make_attn_problem(cs.Tq, cs.Tk, cs.Hq, cs.Hkv, cs.D, cs.Dv, seed, cs.offset);
        if (edit) edit(p);
        const std::vector<float> dout = random_floats(cs.Tq * cs.Hq * cs.Dv, seed + 7, 1.0f);
        seed += 10;
        posenc::attention_options o = opt;
        if (!p.qseq.empty()) o.query_sequence = p.qseq, o.key_sequence = p.kseq;
        for (param_check& pc : params) std::fill(pc.grad.begin(), pc.grad.end(), 1.0f);
        posenc::attention_param_grads pg;
        for (param_check& pc : params) {
            if (pc.name == "bias_table") pg.bias_table = pc.grad;
            if (pc.name == "shaw_keys") pg.shaw_keys = pc.grad;
            if (pc.name == "shaw_values") pg.shaw_values = pc.grad;
            if (pc.name == "sinks") pg.sinks = pc.grad;
        }
        if (sink_storage) o.sinks = *sink_storage;
        const grad_result g = run_backward(p, enc, mask, o, dout, pg);
        for (param_check& pc : params)
            for (float& x : pc.grad) x -= 1.0f;
        compared += compare_with_differences(name + " mask " + mname, p, model_of, vis, dout, g, params, cs.stride);
    });
    return compared;
}

inline attn_model plain_model() { return attn_model{}; }

/// T5 in the double model: a fixed logit scale and the bias table[bucket(j − i)·heads + h] of a table the
/// finite differences perturb (read through the pointer at each call), bidirectional buckets from the
/// closed form.
inline attn_model t5_model(const std::vector<float>* table, std::size_t heads, std::int64_t num_buckets,
                           std::int64_t max_distance, double scale) {
    attn_model m;
    m.scale = [scale](std::int64_t) { return scale; };
    m.bias = [=](std::size_t h, std::int64_t i, std::int64_t j, const std::vector<double>&) {
        const auto bucket = static_cast<std::size_t>(t5_closed_bucket(j - i, true, num_buckets, max_distance));
        return static_cast<double>((*table)[bucket * heads + h]);
    };
    return m;
}

}  // namespace grad_attention_test
