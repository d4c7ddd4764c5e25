#pragma once
// head_rms_norm: the per-head RMSNorm that Qwen3 and Gemma-3 apply to Q and K
// right before RoPE (HF Qwen3RMSNorm / Gemma3RMSNorm on q_norm, k_norm):
//   y = x · 1/√(mean over head_dim of x² + eps) · w
// with a [head_dim] weight w (Gemma: w = 1 + weight, rms_weight::offset_one, computed once in float as
// Gemma does). rotary::apply_normed fuses it with the rotation: read once, normalise, rotate, write once.
// OLMo-2 and OLMo-3 normalise over all heads of a token at once (q_norm over num_heads·head_dim):
// that is not this per-head form and is not covered.

#include <cmath>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/lifetimebound.hpp"

namespace posenc {

enum class rms_weight {
    plain,       ///< y = x̂ · weight (Qwen3)
    offset_one,  ///< y = x̂ · (1 + weight) (Gemma-2/3)
};

class head_rms_norm {
public:
    head_rms_norm(std::span<const float> weight, double eps, rms_weight form = rms_weight::plain)
        : eps_(eps), w_(weight.begin(), weight.end()) {
        detail::require(!w_.empty(), "norm weight", "empty", "needs head_dim entries");
        detail::require(std::isfinite(eps) && eps >= 0.0, "eps", eps, "must be finite and >= 0");
        if (form == rms_weight::offset_one)
            for (float& x : w_) x = 1.0f + x;
    }

    [[nodiscard]] std::size_t head_dim() const noexcept { return w_.size(); }
    [[nodiscard]] double eps() const noexcept { return eps_; }
    /// The multiplier of each lane (1 + weight for offset_one).
    [[nodiscard]] const std::vector<float>& weight() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return w_; }

private:
    double eps_;
    std::vector<float> w_;
};

}  // namespace posenc
