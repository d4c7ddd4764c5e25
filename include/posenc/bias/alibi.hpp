#pragma once
// ALiBi (Press et al. 2022): no position in Q or K; head h adds −m_h·(i − j) to the logit of query
// position i against key position j (causal form), or −m_h·|i − j| (symmetric form, for encoders).
//
//   posenc::alibi_bias bias({.heads = 12});                    // slopes as the authors' get_slopes
//   bias.add_to_scores(h, query_pos, key_positions, scores);   // scores[j] += −m_h·(i − key_j)
//
// Slopes. For a power of two n: m_k = 2^(−8k/n), k = 1..n. Otherwise the n' = 2^⌊log₂ n⌋ slopes of n'
// followed by every other slope of 2n' (the odd ones, 2^(−4(2k−1)/n')) until there are n. That is the
// authors' get_slopes (ofirpress/attention_with_linear_biases, fairseq/models/transformer.py), ggml's
// m0/m1 rule, and, with 8 replaced by max_bias, the max_bias generalisation (MPT's alibi_bias_max,
// ggml's f_max_alibi_bias). The values are evaluated the way get_slopes evaluates them — start·start^k
// in double with start = 2^(−max_bias/n') — so they equal the authors' float64 slopes bit for bit (the
// exactly rounded 2^(−8k/n) differs from them by up to ~7e-15 relative at 128 heads, because the
// rounding of `start` is raised to the power k).
//
// BLOOM adds +m_h·j and the authors' fairseq code adds +m_h·j too: both equal −m_h·(i − j) after the
// softmax (the difference is a constant per query row). posenc adds the paper's −m_h·(i − j), which
// needs the query's real position: decode with a KV cache gives exactly the prefill row. Masking
// (causal, padding) is the kernel's business, not the bias's.

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
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

/// Which ALiBi distance: causal −m·(i − j) (decoders) or symmetric −m·|i − j| (bidirectional encoders).
enum class alibi_form { causal, symmetric };

namespace detail {

inline void require_alibi_heads(std::size_t heads) { require(heads > 0, "heads", heads, "must be > 0"); }

inline void require_max_bias(double max_bias) {
    // The smallest slope is about 2^(−max_bias): beyond 1000 it would underflow to 0 (or a denormal).
    require(std::isfinite(max_bias) && max_bias > 0.0 && max_bias <= 1000.0, "max_bias", max_bias,
            "must be finite, > 0 and <= 1000 (so that every slope is a normal double)");
}

/// Slope of head `head` (0-based) of `heads`, unchecked.
inline double alibi_slope_unchecked(std::size_t head, std::size_t heads, double max_bias) noexcept {
    const std::size_t c = std::bit_floor(heads);  // the closest power of two ≤ heads
    // get_slopes_power_of_2(m): start = 2^(−max_bias/m), slope_k = start·start^k (k = 0..m−1).
    if (head < c) {
        const double start = std::pow(2.0, -max_bias / static_cast<double>(c));
        return start * std::pow(start, static_cast<double>(head));
    }
    // The extra heads take slopes 0, 2, 4, … of get_slopes(2c).
    const double start = std::pow(2.0, -max_bias / static_cast<double>(2 * c));
    return start * std::pow(start, static_cast<double>(2 * (head - c)));
}

/// A bias of the key-query distance d = j − i alone, as the attention kernel asks for it: the term
/// is slope·d (linear) or −(slope·|d|) (symmetric), each product in double.
struct distance_slope {
    double slope;
    bool symmetric;
};

}  // namespace detail

/// ALiBi slope of head `head` (0-based) for `heads` heads. Throws config_error for heads = 0 or a bad
/// max_bias, range_error for head ≥ heads.
[[nodiscard]] inline double alibi_slope(std::size_t head, std::size_t heads, double max_bias = 8.0) {
    detail::require_alibi_heads(heads);
    detail::require_max_bias(max_bias);
    if (head >= heads)
        throw range_error("posenc: ALiBi head " + detail::to_text(head) + " is outside [0, " +
                          detail::to_text(heads) + ")");
    return detail::alibi_slope_unchecked(head, heads, max_bias);
}

/// All `heads` ALiBi slopes, head 0 first (the steepest for a power of two).
[[nodiscard]] inline std::vector<double> alibi_slopes(std::size_t heads, double max_bias = 8.0) {
    detail::require_alibi_heads(heads);
    detail::require_max_bias(max_bias);
    std::vector<double> s(heads);
    for (std::size_t h = 0; h < heads; ++h) s[h] = detail::alibi_slope_unchecked(h, heads, max_bias);
    return s;
}

/// ALiBi's parameters.
struct alibi {
    static constexpr std::string_view name = "alibi";

    std::size_t heads = 0;                          ///< number of attention heads (HF num_heads / n_head)
    double max_bias = 8.0;                          ///< the 8 of 2^(−8k/n) (MPT alibi_bias_max)
    alibi_form form = alibi_form::causal;           ///< causal −m(i−j) or symmetric −m|i−j|
    bias_order order = bias_order::scale_then_add;  ///< BLOOM: scale_then_add; Falcon: add_then_scale

    void validate() const {
        detail::require_alibi_heads(heads);
        detail::require_max_bias(max_bias);
    }

    [[nodiscard]] std::vector<double> slopes() const {
        validate();
        return alibi_slopes(heads, max_bias);
    }
};

/// The ALiBi score bias: a score_bias with the slopes computed once.
class alibi_bias {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    static constexpr std::string_view name = "alibi";

    explicit alibi_bias(const alibi& params) : params_(params), slopes_(params.slopes()) {}

    [[nodiscard]] const alibi& params() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return params_; }
    [[nodiscard]] std::size_t heads() const noexcept { return params_.heads; }
    [[nodiscard]] alibi_form form() const noexcept { return params_.form; }
    [[nodiscard]] bias_order order() const noexcept { return params_.order; }
    [[nodiscard]] const std::vector<double>& slopes() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return slopes_; }

    [[nodiscard]] double slope(std::size_t head) const {
        check_head(head);
        return slopes_[head];
    }

    /// The bias of one (head, query, key) triple, in double: −m·(i − j) or −m·|i − j|.
    [[nodiscard]] double bias(std::size_t head, std::int64_t query_pos, std::int64_t key_pos) const {
        const double rel = static_cast<double>(detail::relative_position(key_pos, query_pos));  // j − i
        return slope(head) * (params_.form == alibi_form::causal ? rel : -std::abs(rel));
    }

    /// scores[j] += bias(head, query_pos, keys[j]) for every j, each sum formed in double and rounded
    /// once. Consecutive keys (position_ids::consecutive) take a straight loop the compiler vectorizes.
    /// Throws range_error if head ≥ heads() or keys.size() ≠ scores.size().
    void add_to_scores(std::size_t head, std::int64_t query_pos, const position_ids& keys,
                       std::span<float> scores) const {
        detail::check_score_row("ALiBi", head, params_.heads, keys, scores);
        if (scores.empty()) return;
        const double m = slopes_[head];
        const bool causal = params_.form == alibi_form::causal;
        float* s = scores.data();
        const std::size_t n = scores.size();
        if (keys.is_consecutive()) {
            // key j is at front + j: rel_j = (front − i) + j, exact in double for |positions| < 2^53.
            const double rel0 = static_cast<double>(detail::relative_position(keys.front(), query_pos));
            if (causal)
                add_linear(s, n, m, rel0);
            else
                add_symmetric(s, n, m, rel0);
            return;
        }
        for (std::size_t j = 0; j < n; ++j) {
            const double rel = static_cast<double>(detail::relative_position(keys[j], query_pos));
            s[j] = static_cast<float>(s[j] + m * (causal ? rel : -std::abs(rel)));
        }
    }

    /// For the attention kernel (found by argument-dependent lookup only): the bias depends on the
    /// distance alone, so a tile's terms are computed once per distance instead of once per score.
    /// Not for derived classes, which may hide add_to_scores.
    template <class B>
        requires std::same_as<B, alibi_bias>
    [[nodiscard]] friend detail::distance_slope attention_distance_slope(const B& b, std::size_t head) noexcept {
        return {b.slopes_[head], b.params_.form == alibi_form::symmetric};
    }

private:
    void check_head(std::size_t head) const {
        if (head >= params_.heads)
            throw range_error("posenc: ALiBi head " + detail::to_text(head) + " is outside [0, " +
                              detail::to_text(params_.heads) + ")");
    }

    // The index enters as a 32-bit integer so that the int → double conversion vectorizes on every
    // x86-64 level (a 64-bit one needs AVX-512DQ); long rows go in chunks.
    static void add_linear(float* s, std::size_t n, double m, double rel0) noexcept {
        constexpr std::size_t chunk = std::size_t{1} << 30;
        for (std::size_t off = 0; off < n; off += chunk) {
            const auto len = static_cast<std::int32_t>(std::min(chunk, n - off));
            float* p = s + off;
            const double r = rel0 + static_cast<double>(off);
            for (std::int32_t j = 0; j < len; ++j) p[j] = static_cast<float>(p[j] + m * (r + static_cast<double>(j)));
        }
    }

    static void add_symmetric(float* s, std::size_t n, double m, double rel0) noexcept {
        constexpr std::size_t chunk = std::size_t{1} << 30;
        for (std::size_t off = 0; off < n; off += chunk) {
            const auto len = static_cast<std::int32_t>(std::min(chunk, n - off));
            float* p = s + off;
            const double r = rel0 + static_cast<double>(off);
            for (std::int32_t j = 0; j < len; ++j)
                p[j] = static_cast<float>(p[j] - m * std::abs(r + static_cast<double>(j)));
        }
    }

    alibi params_;
    std::vector<double> slopes_;
};

static_assert(score_bias<alibi_bias>);

}  // namespace posenc
