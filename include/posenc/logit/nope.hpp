#pragma once
// NoPE: no positional encoding at all. Q and K pass through unchanged; what is left to choose is the
// logit scale.
//
//   posenc::nope{}.apply(q, k, positions);                   // the identity (checks the shapes)
//   posenc::logit_temperature t{.lambda = 0.125};            // softmax(λ·qᵀk); λ = 1/√d is the usual
//   posenc::llama4_attn_temperature llama4{};                // floor_scale 8192, attn_scale 0.1
//   llama4.apply(q, positions);                              // q ← q·s(pos), before qᵀk
//
// Without a causal mask, attention over NoPE is permutation-equivariant: permuting the tokens
// permutes the outputs, so "the dog bit the man" and "the man bit the dog" give the same outputs up
// to order. A causal mask is itself positional and breaks that symmetry (which is why NoPE decoders
// work at all).
//
// Llama 4 (HF transformers models/llama4/modeling_llama4.py, Llama4TextAttention.forward, with
// attn_temperature_tuning on and in its NoPE layers only): the query states are multiplied by
//   s(pos) = log(floor((pos + 1)/floor_scale) + 1)·attn_scale + 1
// (HF writes log1p(floor((cache_position + 1)/floor_scale))·attn_scale + 1, in float32; posenc in
// double), and the scores then get the usual 1/√head_dim. s = 1 for pos < floor_scale − 1, it steps
// up by ~attn_scale·ln 2 at the first multiple, and grows like attn_scale·ln(pos/floor_scale) after.
// HF indexes it by cache_position (the slot in the KV cache), which equals the position id whenever
// there is no left padding; pass whichever your engine means by "position in the sequence".

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"

namespace posenc {

namespace detail {

inline void require_tokens(const heads_view<float>& v, std::string_view name, std::size_t tokens) {
    if (absent(v)) return;
    require(v.tokens() == tokens, [&] { return std::string(name) + ".tokens"; }, v.tokens(),
            [&] { return "must equal the number of positions = " + to_text(tokens); });
}

}  // namespace detail

/// The identity query/key transform.
struct nope {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    static constexpr std::string_view name = "nope";
    static constexpr bool is_identity = true;  ///< attention reads K in place

    /// Leaves x unchanged; checks only that it has one token per position.
    void apply(heads_view<float> x, const position_ids& pos) const { detail::require_tokens(x, "x", pos.size()); }

    void apply(heads_view<float> q, heads_view<float> k, const position_ids& pos) const {
        detail::require_tokens(q, "q", pos.size());
        detail::require_tokens(k, "k", pos.size());
    }
};

static_assert(qk_transform<nope>);

/// A constant logit multiplier: softmax(λ·qᵀk). λ = 1/√head_dim is the standard scale; QK-norm
/// models learn or fix a different one; T5 uses λ = 1.
struct logit_temperature {
    double lambda = 1.0;

    /// The standard 1/√head_dim.
    [[nodiscard]] static logit_temperature inverse_sqrt(std::size_t head_dim) {
        detail::require(head_dim > 0, "head_dim", head_dim, "must be > 0");
        return {1.0 / std::sqrt(static_cast<double>(head_dim))};
    }

    void validate() const {
        detail::require(std::isfinite(lambda) && lambda > 0.0, "lambda", lambda, "must be finite and > 0");
    }

    /// λ (the same for every query).
    [[nodiscard]] double scale() const {
        validate();
        return lambda;
    }

    /// scores[j] ← λ·scores[j], each product in double, rounded once.
    void apply(std::span<float> scores) const {
        const double l = scale();
        for (float& s : scores) s = static_cast<float>(l * s);
    }
};

/// Llama 4's per-position query temperature (attn_temperature_tuning). HF config keys and defaults:
/// floor_scale = 8192, attn_scale = 0.1.
struct llama4_attn_temperature {
    double floor_scale = 8192.0;
    double attn_scale = 0.1;

    void validate() const {
        detail::require(std::isfinite(floor_scale) && floor_scale > 0.0, "floor_scale", floor_scale,
                        "must be finite and > 0");
        detail::require(std::isfinite(attn_scale) && attn_scale >= 0.0, "attn_scale", attn_scale,
                        "must be finite and >= 0");
    }

    /// s(pos) = log(floor((pos + 1)/floor_scale) + 1)·attn_scale + 1, in double. Positions are cache
    /// positions, ≥ 0 (range_error otherwise).
    [[nodiscard]] double scale(std::int64_t pos) const {
        validate();
        return scale_unchecked(pos);
    }

    /// q[t, h, :] ← s(pos[t])·q[t, h, :] in place, each product in double, rounded once.
    void apply(heads_view<float> q, const position_ids& pos) const {
        validate();
        detail::require_tokens(q, "q", pos.size());
        if (q.empty()) return;
        std::vector<double> s(pos.size());
        for (std::size_t t = 0; t < pos.size(); ++t) s[t] = scale_unchecked(pos[t]);  // all checks first
        for (std::size_t t = 0; t < q.tokens(); ++t)
            for (std::size_t h = 0; h < q.heads(); ++h) {
                float* x = q.row(t, h);
                for (std::size_t j = 0; j < q.head_dim(); ++j) x[j] = static_cast<float>(s[t] * x[j]);
            }
    }

private:
    [[nodiscard]] double scale_unchecked(std::int64_t pos) const {
        if (pos < 0)
            throw range_error("posenc: Llama 4 attention temperature needs a position >= 0, got " +
                              detail::to_text(pos));
        return std::log(std::floor((static_cast<double>(pos) + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0;
    }
};

}  // namespace posenc
