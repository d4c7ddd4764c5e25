// Checkpoint layout conversion (rope/convert.hpp): a Meta-style checkpoint rotates interleaved
// pairs (2i, 2i+1), HF's Llama code half-split pairs (i, i + d/2). Permuting the rows of W_q and W_k
// within each head (interleaved_to_half_split, as HF's convert_llama_weights_to_hf.py does) makes the
// half-split model compute the same attention scores. Converting without the permutation does not.
//
// Prints the largest score difference with and without the permutation, and the round trip.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <posenc/rope/convert.hpp>
#include <posenc/rope/default.hpp>
#include <posenc/rope/rotary.hpp>

namespace {

constexpr std::size_t heads = 2, head_dim = 16, hidden = 32, tokens = 8;

// y[t, h, :] = W[h·hd .. , :] · x[t, :]
std::vector<float> project(const std::vector<float>& w, const std::vector<float>& x) {
    std::vector<float> y(tokens * heads * head_dim, 0.0f);
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t r = 0; r < heads * head_dim; ++r)
            for (std::size_t c = 0; c < hidden; ++c) y[t * heads * head_dim + r] += w[r * hidden + c] * x[t * hidden + c];
    return y;
}

// Scores qᵀk of every (token, token, head).
std::vector<double> scores(const std::vector<float>& q, const std::vector<float>& k) {
    std::vector<double> s;
    for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < tokens; ++i)
            for (std::size_t j = 0; j < tokens; ++j) {
                double a = 0;
                for (std::size_t l = 0; l < head_dim; ++l)
                    a += double(q[(i * heads + h) * head_dim + l]) * double(k[(j * heads + h) * head_dim + l]);
                s.push_back(a);
            }
    return s;
}

template <class Layout>
std::vector<double> attention_scores(const std::vector<float>& wq, const std::vector<float>& wk,
                                     const std::vector<float>& x) {
    auto q = project(wq, x), k = project(wk, x);
    const posenc::rotary<Layout> rope({.head_dim = head_dim}, posenc::default_rope{.base = 1e4});
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {tokens, heads, head_dim}),
               posenc::heads_view<float>(std::span<float>(k), {tokens, heads, head_dim}),
               posenc::position_ids::consecutive(1000, tokens));
    return scores(q, k);
}

/// The larger of m and d, NaN once either is (std::max(m, NaN) is m: a NaN would pass the check).
double worse(double m, double d) { return d > m || d != d ? d : m; }

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = worse(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 0.2f);
    std::vector<float> wq(heads * head_dim * hidden), wk(wq.size()), x(tokens * hidden);
    for (auto* v : {&wq, &wk, &x})
        for (auto& e : *v) e = g(rng);

    const auto reference = attention_scores<posenc::interleaved>(wq, wk, x);  // the original checkpoint
    auto wq_hf = wq, wk_hf = wk;
    posenc::interleaved_to_half_split(std::span<float>(wq_hf), heads, {.head_dim = head_dim}, hidden);
    posenc::interleaved_to_half_split(std::span<float>(wk_hf), heads, {.head_dim = head_dim}, hidden);
    const auto converted = attention_scores<posenc::half_split>(wq_hf, wk_hf, x);
    const auto unpermuted = attention_scores<posenc::half_split>(wq, wk, x);
    double scale = 0;
    for (const double v : reference) scale = std::max(scale, std::abs(v));

    std::printf("heads %zu, head_dim %zu, %zu tokens at positions 1000..1007, |scores| <= %.3f\n", heads, head_dim,
                tokens, scale);
    std::printf("half-split with permuted W_q, W_k vs interleaved original: max |score diff| = %.3g (float rounding)\n",
                max_diff(reference, converted));
    std::printf("half-split with the original rows (no permutation):        max |score diff| = %.3g (wrong model)\n",
                max_diff(reference, unpermuted));
    auto back = wq_hf;
    posenc::half_split_to_interleaved(std::span<float>(back), heads, {.head_dim = head_dim}, hidden);
    std::printf("half_split_to_interleaved(interleaved_to_half_split(W_q)) == W_q: %s\n", back == wq ? "yes" : "NO");
    std::printf("half-split lane j takes interleaved lane: ");
    for (std::size_t j = 0; j < head_dim; ++j) std::printf("%zu ", posenc::interleaved_lane_of_half_split(j, head_dim));
    std::printf("\n");
    return max_diff(reference, converted) < 1e-4 * scale && back == wq ? 0 : 1;
}
