#pragma once
// Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with Relative Position Representations": learned
// vectors per clipped relative distance r = clip(j − i, −k, k), shared by every head,
//   e_ij = (q_i·k_j + q_i·a^K_r) · s          (the scale applies to both terms: add_then_scale)
//   z_i  = Σ_j p_ij (v_j + a^V_r)
// a^K is [2k + 1, D] and a^V [2k + 1, Dv], row-major, row k + r for distance r (so row 0 is −k).
//
//   posenc::shaw_rpr shaw({.max_distance = 16}, a_k, head_dim, a_v, value_dim);   // tables copied
//   posenc::attention(posenc::attention_encoding{posenc::nope{}, shaw}, q, k, v, out, qpos, kpos, mask);
//
// It is a score_bias that takes the query row (q·a^K) and adds an output term (Σ p·a^V): the two
// optional members of the concept (core/concepts.hpp), so the kernel has no Shaw-specific code.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/bias/detail/score_row.hpp"
#include "posenc/core/detail/lifetimebound.hpp"

namespace posenc {

struct shaw_params {
    std::int64_t max_distance = 16;  ///< k: distances are clipped to [−k, k]
};

class shaw_rpr {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    static constexpr std::string_view name = "shaw";

    shaw_rpr(shaw_params p, std::span<const float> a_k, std::size_t head_dim, std::span<const float> a_v,
             std::size_t value_dim)
        : k_(p.max_distance), d_(head_dim), dv_(value_dim), ak_(a_k.begin(), a_k.end()), av_(a_v.begin(), a_v.end()) {
        detail::require(k_ >= 0 && k_ <= (std::int64_t{1} << 30), "max_distance", k_, "must be in [0, 2^30]");
        detail::require(head_dim > 0, "head_dim", head_dim, "must be > 0");
        detail::require(value_dim > 0, "value_dim", value_dim, "must be > 0");
        const std::size_t rows = static_cast<std::size_t>(2 * k_ + 1);
        detail::require(ak_.size() == rows * d_, "a_k", [&] { return "of " + detail::to_text(ak_.size()) + " values"; },
                        [&] { return "needs (2·max_distance + 1)·head_dim = " + detail::to_text(rows * d_); });
        detail::require(av_.size() == rows * dv_, "a_v", [&] { return "of " + detail::to_text(av_.size()) + " values"; },
                        [&] { return "needs (2·max_distance + 1)·value_dim = " + detail::to_text(rows * dv_); });
    }

    [[nodiscard]] bias_order order() const noexcept { return bias_order::add_then_scale; }
    [[nodiscard]] std::int64_t max_distance() const noexcept { return k_; }
    /// The copied tables a^K [2k + 1, D] and a^V [2k + 1, Dv] (attention_backward reads them).
    [[nodiscard]] std::span<const float> key_table() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return ak_; }
    [[nodiscard]] std::span<const float> value_table() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return av_; }
    [[nodiscard]] std::size_t head_dim() const noexcept { return d_; }
    [[nodiscard]] std::size_t value_dim() const noexcept { return dv_; }

    /// Row index of the clipped distance j − i.
    [[nodiscard]] std::size_t row(std::int64_t query_pos, std::int64_t key_pos) const noexcept {
        const std::int64_t d = detail::relative_position(key_pos, query_pos);
        const std::int64_t r = d > k_ ? k_ : (d < -k_ ? -k_ : d);
        return static_cast<std::size_t>(r + k_);
    }

    void check_shape(std::size_t /*heads*/, std::size_t head_dim, std::size_t value_dim) const {
        detail::require(head_dim == d_, "head_dim", head_dim,
                        [&] { return "must equal the Shaw a^K width " + detail::to_text(d_); });
        detail::require(value_dim == dv_, "value_dim", value_dim,
                        [&] { return "must equal the Shaw a^V width " + detail::to_text(dv_); });
    }

    /// scores[j] += query·a^K_{clip(keys[j] − query_pos)}; one dot product per run of equal rows
    /// (far keys all clip to ±k).
    void add_to_scores(std::size_t /*head*/, std::int64_t query_pos, const position_ids& keys, std::span<float> scores,
                       std::span<const float> query) const {
        if (keys.size() != scores.size())
            throw range_error("posenc: " + detail::to_text(keys.size()) + " key positions for " +
                              detail::to_text(scores.size()) + " scores");
        if (scores.empty()) return;
        if (query.size() != d_)
            throw range_error("posenc: Shaw query of " + detail::to_text(query.size()) + " values, needs " +
                              detail::to_text(d_));
        std::size_t last = static_cast<std::size_t>(-1);
        float dot = 0.0f;
        for (std::size_t j = 0; j < scores.size(); ++j) {
            const std::size_t r = row(query_pos, keys[j]);
            if (r != last) {
                const float* a = ak_.data() + r * d_;
                float acc = 0.0f;
                for (std::size_t d = 0; d < d_; ++d) acc += query[d] * a[d];
                dot = acc;
                last = r;
            }
            scores[j] += dot;
        }
    }

    /// out += Σ_j weights[j]·a^V_{clip(keys[j] − query_pos)}, one axpy per run of equal rows.
    void add_to_output(std::size_t /*head*/, std::int64_t query_pos, const position_ids& keys,
                       std::span<const float> weights, std::span<float> out) const {
        if (weights.size() != keys.size() || out.size() != dv_)
            throw range_error("posenc: Shaw output term for " + detail::to_text(weights.size()) + " weights, " +
                              detail::to_text(keys.size()) + " key positions and an output row of " +
                              detail::to_text(out.size()) + " values; needs one weight per key and " + detail::to_text(dv_) +
                              " values");
        std::size_t j = 0;
        const std::size_t n = weights.size(), w = dv_;
        while (j < n) {
            const std::size_t r = row(query_pos, keys[j]);
            float sum = 0.0f;
            for (; j < n && row(query_pos, keys[j]) == r; ++j) sum += weights[j];
            if (sum == 0.0f) continue;
            const float* a = av_.data() + r * dv_;
            for (std::size_t d = 0; d < w; ++d) out[d] += sum * a[d];
        }
    }

private:
    std::int64_t k_;
    std::size_t d_, dv_;
    std::vector<float> ak_, av_;
};

static_assert(score_bias<shaw_rpr>);

}  // namespace posenc
