#pragma once
// T5's bucketed relative bias (Raffel et al. 2020): the relative position r = key − query is mapped to
// one of num_buckets buckets, and head h adds the learned table[bucket, h] to the logit.
//
//   posenc::t5_buckets buckets{.num_buckets = 32, .max_distance = 128, .bidirectional = true};
//   std::int64_t b = buckets.bucket(-7);                     // HF _relative_position_bucket
//   posenc::t5_bias bias(buckets, heads, table);             // table [num_buckets, heads], copied
//   bias.add_to_scores(h, query_pos, key_positions, scores); // scores[j] += table[bucket(key_j − i), h]
//
// Buckets, exactly as HF transformers' T5Attention._relative_position_bucket (and Mesh TensorFlow):
//   bidirectional: n' = num_buckets/2 buckets per direction, r > 0 adds n'; the distance is |r|.
//   unidirectional: n' = num_buckets; r > 0 maps to distance 0; the distance is −min(r, 0).
//   distance < max_exact = n'/2: its own bucket. Otherwise
//   max_exact + trunc(ln(distance/max_exact) / ln(max_distance/max_exact) · (n' − max_exact)),
//   capped at n' − 1.
// The logarithmic branch is evaluated in float32, as HF evaluates it: float32 distance/max_exact,
// float32 log, divided by ln(max_distance/max_exact) (computed in double, rounded to float32), times
// (n' − max_exact) in float32, truncated. Over the golden configs float32 and double agree, but not
// everywhere: scanning n' ≤ 128, max_distance ≤ 2048 and every distance, 195 of 1.3e8 buckets differ.
// Some are exact ties that double misses (num_buckets = 10 unidirectional, max_distance = 160,
// distance 20: 5 + ln 4/ln 32·5 = 7 exactly; float32 gives 5 + 2, double 5 + 1.9999999999999998 → 6),
// some go the other way (unidirectional n' = 16, max_distance = 1461, distance 762: exactly
// 8 + 6.9999992 → 14, float32 rounds the fraction up to 7 → 15).
// Matching HF's float32 keeps the buckets the learned tables were trained with.
// Every distance ≥ max_distance is the cap n' − 1 in either precision.
//
// T5 scales nothing: logits are qᵀk + bias with no 1/√d (the scale is folded into the initialisation),
// so an attention kernel using t5_bias takes a softmax scale of 1.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/bias/detail/score_row.hpp"

namespace posenc {

/// T5's bucketing parameters (HF relative_attention_num_buckets, relative_attention_max_distance; the
/// encoder is bidirectional, the decoder's self-attention is not).
struct t5_buckets {
    std::int64_t num_buckets = 32;
    std::int64_t max_distance = 128;
    bool bidirectional = true;

    /// Buckets per direction (n').
    [[nodiscard]] std::int64_t buckets_per_direction() const noexcept {
        return bidirectional ? num_buckets / 2 : num_buckets;
    }

    /// Distances below this have a bucket of their own (max_exact = n'/2).
    [[nodiscard]] std::int64_t exact_range() const noexcept { return buckets_per_direction() / 2; }

    void validate() const {
        detail::require(num_buckets >= (bidirectional ? 4 : 2), "num_buckets", num_buckets,
                        bidirectional ? "must be >= 4 when bidirectional (at least 2 buckets per direction)"
                                      : "must be >= 2");
        detail::require(!bidirectional || num_buckets % 2 == 0, "num_buckets", num_buckets,
                        "must be even when bidirectional (half the buckets for each direction)");
        if (max_distance <= exact_range())  // (message built only on failure: bucket() validates per call)
            throw config_error("max_distance", detail::to_text(max_distance),
                               "must exceed the exact range num_buckets" + std::string(bidirectional ? "/4" : "/2") +
                                   " = " + detail::to_text(exact_range()));
    }

    /// HF's bucket of relative position `relative_position` = key − query. Validates first.
    [[nodiscard]] std::int64_t bucket(std::int64_t relative_position) const {
        validate();
        return bucket_unchecked(relative_position);
    }

    /// Buckets of the relative positions first, first+1, …, last (the lookup a kernel or a tool uses
    /// for a window of distances). Empty when last < first.
    [[nodiscard]] std::vector<std::int32_t> buckets(std::int64_t first, std::int64_t last) const {
        validate();
        std::vector<std::int32_t> out;
        if (last < first) return out;
        out.reserve(static_cast<std::size_t>(last - first) + 1);
        for (std::int64_t r = first; r <= last; ++r) out.push_back(static_cast<std::int32_t>(bucket_unchecked(r)));
        return out;
    }

    /// bucket() without validate(); precondition: validate() passed.
    [[nodiscard]] std::int64_t bucket_unchecked(std::int64_t relative_position) const noexcept {
        const std::int64_t per_direction = buckets_per_direction();
        std::int64_t offset = 0;
        std::int64_t distance = 0;
        // |r| without overflow at INT64_MIN: every distance ≥ max_distance lands on the cap anyway.
        const std::int64_t magnitude = relative_position >= 0 ? std::min(relative_position, max_distance)
                                                              : std::min(-(relative_position + 1), max_distance - 1) + 1;
        if (bidirectional) {
            offset = relative_position > 0 ? per_direction : 0;
            distance = magnitude;
        } else {
            distance = relative_position < 0 ? magnitude : 0;
        }
        const std::int64_t max_exact = per_direction / 2;
        if (distance < max_exact) return offset + distance;
        if (distance >= max_distance) return offset + per_direction - 1;  // the cap, in any precision
        // HF, in float32: max_exact + (log(d.float() / max_exact) / math.log(max_distance / max_exact)
        //                               * (num_buckets − max_exact)).to(long)
        const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
        const auto log_range = static_cast<float>(
            std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
        const float scaled = std::log(ratio) / log_range * static_cast<float>(per_direction - max_exact);
        const auto large = max_exact + static_cast<std::int64_t>(scaled);
        return offset + std::min(large, per_direction - 1);
    }
};

/// HF's `_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)` as a
/// free function.
[[nodiscard]] inline std::int64_t t5_relative_bucket(std::int64_t relative_position, bool bidirectional = true,
                                                     std::int64_t num_buckets = 32, std::int64_t max_distance = 128) {
    return t5_buckets{.num_buckets = num_buckets, .max_distance = max_distance, .bidirectional = bidirectional}
        .bucket(relative_position);
}

/// The T5 score bias: the caller's learned table [num_buckets, heads] (HF's
/// relative_attention_bias.weight, row-major), copied, and expanded once into a per-head lookup over the
/// relative positions −max_distance..max_distance (beyond them the bucket no longer changes). The
/// lookup costs heads·(2·max_distance + 1) floats (32 heads at max_distance 128: 33 KB) and makes a row
/// segment of consecutive keys one contiguous add.
///
/// The table is copied rather than borrowed so that the bias cannot dangle when a weight buffer is
/// reloaded, and because the lookup is derived from it anyway.
class t5_bias {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    static constexpr std::string_view name = "t5";

    t5_bias(const t5_buckets& buckets, std::size_t heads, std::span<const float> table)
        : buckets_(buckets), heads_(heads), table_(table.begin(), table.end()) {
        buckets_.validate();
        detail::require(heads > 0, "heads", heads, "must be > 0");
        const auto expected = static_cast<std::size_t>(buckets_.num_buckets) * heads;
        detail::require(table.size() == expected, "table", "of " + detail::to_text(table.size()) + " values",
                        "needs num_buckets × heads = " + detail::to_text(expected) + " values");
        const std::int64_t md = buckets_.max_distance;
        width_ = static_cast<std::size_t>(2 * md + 1);
        lookup_.resize(heads_ * width_);
        for (std::int64_t r = -md; r <= md; ++r) {
            const auto b = static_cast<std::size_t>(buckets_.bucket_unchecked(r));
            for (std::size_t h = 0; h < heads_; ++h)
                lookup_[h * width_ + static_cast<std::size_t>(r + md)] = table_[b * heads_ + h];
        }
    }

    [[nodiscard]] const t5_buckets& buckets() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return buckets_; }
    [[nodiscard]] std::size_t heads() const noexcept { return heads_; }
    [[nodiscard]] std::span<const float> table() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return table_; }

    /// T5 adds the bias to unscaled logits (softmax scale 1), so the order never matters; reported as
    /// scale_then_add.
    [[nodiscard]] bias_order order() const noexcept { return bias_order::scale_then_add; }

    /// table[bucket(relative_position), head].
    [[nodiscard]] float bias(std::size_t head, std::int64_t relative_position) const {
        check_head(head);
        return lookup_[head * width_ + index(relative_position)];
    }

    /// scores[j] += table[bucket(keys[j] − query_pos), head] for every j. Consecutive keys
    /// (position_ids::consecutive) take three straight loops (clamped left, window, clamped right).
    /// Throws range_error if head ≥ heads() or keys.size() ≠ scores.size().
    void add_to_scores(std::size_t head, std::int64_t query_pos, const position_ids& keys,
                       std::span<float> scores) const {
        detail::check_score_row("T5", head, heads_, keys, scores);
        if (scores.empty()) return;
        const float* lut = lookup_.data() + head * width_;
        float* s = scores.data();
        const std::size_t n = scores.size();
        if (!keys.is_consecutive()) {
            for (std::size_t j = 0; j < n; ++j) s[j] += lut[index(detail::relative_position(keys[j], query_pos))];
            return;
        }
        // rel_j = rel0 + j; the window covers rel ∈ [−md, md], i.e. j ∈ [−md − rel0, md − rel0].
        const std::int64_t md = buckets_.max_distance;
        const std::int64_t rel0 = detail::relative_position(keys.front(), query_pos);
        const auto count = static_cast<std::int64_t>(n);
        const std::int64_t lo = std::clamp<std::int64_t>(-md - rel0, 0, count);      // first j inside
        const std::int64_t hi = std::clamp<std::int64_t>(md - rel0 + 1, lo, count);  // first j past it
        const float left = lut[0], right = lut[width_ - 1];
        for (std::int64_t j = 0; j < lo; ++j) s[j] += left;
        if (hi > lo) {
            const float* window = lut + (rel0 + lo + md);  // the lookup entry of key j = lo
            float* mid = s + lo;
            for (std::int64_t j = 0; j < hi - lo; ++j) mid[j] += window[j];
        }
        for (std::int64_t j = hi; j < count; ++j) s[j] += right;
    }

private:
    [[nodiscard]] std::size_t index(std::int64_t rel) const noexcept {
        const std::int64_t md = buckets_.max_distance;
        return static_cast<std::size_t>(std::clamp(rel, -md, md) + md);
    }

    void check_head(std::size_t head) const {
        if (head >= heads_)
            throw range_error("posenc: T5 head " + detail::to_text(head) + " is outside [0, " +
                              detail::to_text(heads_) + ")");
    }

    t5_buckets buckets_;
    std::size_t heads_ = 0;
    std::vector<float> table_;
    std::size_t width_ = 0;
    std::vector<float> lookup_;  ///< [heads][2·max_distance + 1], relative position −max_distance first
};

static_assert(score_bias<t5_bias>);

}  // namespace posenc
