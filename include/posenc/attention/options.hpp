#pragma once
// What an attention call takes besides Q, K, V and the positions: the encoding (query/key transform,
// score bias, logit scale) and the options real models add on top.
//
//   posenc::attention_encoding enc{rope, posenc::no_bias{}, posenc::inverse_sqrt_scale{}};
//   posenc::attention_options opt{.softcap = 50.0f, .threads = 2};
//
// Logit scales (the s of softmax(s·qᵀk + bias)), per query row:
//   inverse_sqrt_scale          1/√D (the default)
//   fixed_scale{λ}              λ: logit_temperature's λ, T5's 1, Gemma's query_pre_attn_scalar^−½,
//                               or YaRN/DeepSeek's softmax_scale_multiplier()/√D (fixed_scale::yarn)
//   temperature_scale{t}        Llama 4's NoPE layers: s(pos)/√D with t a llama4_attn_temperature
//                               (HF multiplies q by s(pos); the same thing, applied to the logits)

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "posenc/bias/no_bias.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/executor.hpp"
#include "posenc/logit/nope.hpp"

namespace posenc {

struct inverse_sqrt_scale {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    [[nodiscard]] double scale(std::int64_t /*query_pos*/, std::size_t head_dim) const noexcept {
        return 1.0 / std::sqrt(static_cast<double>(head_dim));
    }
};

struct fixed_scale {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    double lambda = 1.0;

    [[nodiscard]] static fixed_scale of(const logit_temperature& t) { return {t.scale()}; }
    /// YaRN / DeepSeek: softmax_scale_multiplier()/√D (mscale² when mscale_all_dim is set).
    [[nodiscard]] static fixed_scale yarn(double softmax_scale_multiplier, std::size_t head_dim) {
        detail::require(head_dim > 0, "head_dim", head_dim, "must be > 0");
        return {softmax_scale_multiplier / std::sqrt(static_cast<double>(head_dim))};
    }
    [[nodiscard]] double scale(std::int64_t /*query_pos*/, std::size_t /*head_dim*/) const {
        detail::require(std::isfinite(lambda) && lambda > 0.0, "lambda", lambda, "must be finite and > 0");
        return lambda;
    }
};

struct temperature_scale {
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    llama4_attn_temperature temperature{};
    [[nodiscard]] double scale(std::int64_t query_pos, std::size_t head_dim) const {
        return temperature.scale(query_pos) / std::sqrt(static_cast<double>(head_dim));
    }
};

static_assert(logit_scale<inverse_sqrt_scale> && logit_scale<fixed_scale> && logit_scale<temperature_scale>);

/// An encoding as attention consumes it: the Q/K transform, the score bias, the logit scale.
template <qk_transform Transform = nope, score_bias Bias = no_bias, logit_scale Scale = inverse_sqrt_scale>
struct attention_encoding {
    Transform transform;
    Bias bias;
    Scale scale;

    // A constructor rather than an aggregate: omitted policies default only when they can (ALiBi, T5
    // and Shaw have no default), and class template argument deduction works on every compiler.
    explicit attention_encoding(Transform t, Bias b = Bias{}, Scale s = Scale{})
        : transform(std::move(t)), bias(std::move(b)), scale(std::move(s)) {}
};

class attention_workspace;

struct attention_options {
    /// Gemma-2's attn_logit_softcapping c: logits ← c·tanh(logit/c), after scale and bias, before the
    /// mask. 0 = off.
    float softcap = 0.0f;
    /// gpt-oss's per-head sink logits (one per query head, or empty): each joins its head's softmax
    /// denominator as exp(sink) and contributes nothing to the output.
    std::span<const float> sinks{};
    /// Packed batches: one sequence id per query and per key (both or neither); a key is visible only
    /// from queries of the same sequence, on top of the mask.
    std::span<const std::int32_t> query_sequence{};
    std::span<const std::int32_t> key_sequence{};
    /// K already carries the transform (a KV cache of rotated keys): only the queries are transformed.
    bool keys_transformed = false;
    /// Up to this many threads across (kv head, query tile) items, or across key segments when there are
    /// fewer items than threads (decode); fewer for a small call (min_fmas_per_thread). The output is
    /// bit-identical for any count.
    unsigned threads = 1;
    /// A call gets at most one thread per this many multiply-adds (QKᵀ and PV over every key, an upper
    /// bound on its work): below it an extra thread costs more than it saves, so a one-token decode
    /// against a short cache stays on the caller's thread. 0: as many threads as asked for.
    std::size_t min_fmas_per_thread = std::size_t{1} << 21;
    /// attention_backward (grad/attention.hpp) only: the most bytes its per-item buffers of Shaw's
    /// parameter gradients may take at once. Within it each query item keeps its own buffer (fastest);
    /// beyond it they run in waves that reuse a few buffers, whatever the query count. Same bits either way.
    std::size_t max_grad_buffer_bytes = std::size_t{64} << 20;
    /// Runs those threads' work on the caller's pool instead of posenc's own threads (OpenMP, else
    /// std::thread per call); empty: posenc's. Not called when the call runs on one thread. The
    /// result is the same either way.
    ::posenc::executor executor{};
    /// Tile buffers kept between calls (attention/workspace.hpp): a call whose tile shape and thread
    /// count the workspace already holds allocates none of them. One call at a time (copies of these
    /// options share it: one workspace per calling thread); null: each call allocates its own.
    attention_workspace* workspace = nullptr;
};

}  // namespace posenc
