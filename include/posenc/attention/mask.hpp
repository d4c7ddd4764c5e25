#pragma once
// Attention masks as small policies over integer positions (never over buffer indices, so that a KV
// cache, left padding or packed sequences mask correctly). Query position i, key position j:
//
//   no_mask                    every key visible (encoders)
//   causal_mask                j ≤ i
//   sliding_window_mask{W}     i − W < j ≤ i: the query and the W − 1 keys before it (HF's
//                              sliding_window_overlay: a key is visible while i − j < W; Mistral,
//                              Gemma-2/3 local layers, gpt-oss sliding layers). W ≥ 1.
//   chunked_mask{C}            ⌊j/C⌋ = ⌊i/C⌋ and j ≤ i (Llama 4's attention_chunk_size: causal inside
//                              fixed chunks of C positions; floor division, so negative positions
//                              chunk consistently). C ≥ 1.
//
// Packed batches add per-token sequence ids (attention_options): a key is visible only from a query
// of the same sequence, on top of the mask.
//
// A mask answers visible(i, j) for one pair and classify() for a whole tile given the ranges of its
// query and key positions, so that the kernel skips tiles nothing sees and skips the per-element test
// on tiles everything sees. Optionally, visible_keys(i) names the keys query i sees as one range of
// positions (every mask here has one): on a tile it cuts through, a row of keys at consecutive
// positions is then masked by two fills instead of a test per key.

#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>

#include "posenc/core/errors.hpp"

namespace posenc {

/// What a tile of queries × keys sees.
enum class tile_visibility { none, partial, all };

/// Position ranges of a tile: queries in [q_lo, q_hi], keys in [k_lo, k_hi] (inclusive).
struct tile_bounds {
    std::int64_t q_lo, q_hi, k_lo, k_hi;
};

/// Key positions [lo, hi] (inclusive) a query sees: visible(i, j) ⇔ lo ≤ j ≤ hi; lo > hi: none.
struct key_range {
    std::int64_t lo, hi;
};

template <class M>
concept attention_mask = requires(const M& m, std::int64_t i, std::int64_t j, tile_bounds t) {
    { M::name } -> std::convertible_to<std::string_view>;
    { m.visible(i, j) } -> std::same_as<bool>;
    { m.classify(t) } -> std::same_as<tile_visibility>;
    { m.validate() } -> std::same_as<void>;
};

struct no_mask {
    static constexpr std::string_view name = "none";
    [[nodiscard]] constexpr bool visible(std::int64_t, std::int64_t) const noexcept { return true; }
    [[nodiscard]] constexpr tile_visibility classify(tile_bounds) const noexcept { return tile_visibility::all; }
    [[nodiscard]] constexpr key_range visible_keys(std::int64_t) const noexcept {
        return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
    }
    void validate() const noexcept {}
};

struct causal_mask {
    static constexpr std::string_view name = "causal";
    [[nodiscard]] constexpr bool visible(std::int64_t i, std::int64_t j) const noexcept { return j <= i; }
    [[nodiscard]] constexpr tile_visibility classify(tile_bounds t) const noexcept {
        if (t.k_lo > t.q_hi) return tile_visibility::none;
        return t.k_hi <= t.q_lo ? tile_visibility::all : tile_visibility::partial;
    }
    [[nodiscard]] constexpr key_range visible_keys(std::int64_t i) const noexcept {
        return {std::numeric_limits<std::int64_t>::min(), i};
    }
    void validate() const noexcept {}
};

struct sliding_window_mask {
    static constexpr std::string_view name = "sliding_window";
    std::int64_t window = 0;  ///< W: keys i − W < j ≤ i

    // i − j is formed only when j ≤ i, in uint64, where it is exact for any two int64 positions.
    [[nodiscard]] static constexpr std::uint64_t distance(std::int64_t i, std::int64_t j) noexcept {
        return static_cast<std::uint64_t>(i) - static_cast<std::uint64_t>(j);
    }
    [[nodiscard]] constexpr bool visible(std::int64_t i, std::int64_t j) const noexcept {
        return j <= i && distance(i, j) < static_cast<std::uint64_t>(window);
    }
    [[nodiscard]] constexpr tile_visibility classify(tile_bounds t) const noexcept {
        const auto w = static_cast<std::uint64_t>(window);
        if (t.k_lo > t.q_hi) return tile_visibility::none;                            // every key after every query
        if (t.k_hi < t.q_lo && distance(t.q_lo, t.k_hi) >= w) return tile_visibility::none;  // all too old
        if (t.k_hi <= t.q_lo && distance(t.q_hi, t.k_lo) < w) return tile_visibility::all;
        return tile_visibility::partial;
    }
    /// [i − W + 1, i]; below int64's range, from its bottom. For a window validate() accepts (W ≥ 1);
    /// no keys for the others (attention validates first), without overflow.
    [[nodiscard]] constexpr key_range visible_keys(std::int64_t i) const noexcept {
        if (window <= 0) return {1, 0};
        std::int64_t lo = 0;
        if (__builtin_sub_overflow(i, window - 1, &lo)) lo = std::numeric_limits<std::int64_t>::min();
        return {lo, i};
    }
    void validate() const { detail::require(window > 0, "sliding_window", window, "must be > 0"); }
};

struct chunked_mask {
    static constexpr std::string_view name = "chunked";
    std::int64_t chunk = 0;  ///< C (Llama 4: attention_chunk_size = 8192)

    [[nodiscard]] constexpr std::int64_t chunk_of(std::int64_t p) const noexcept {
        const std::int64_t c = p / chunk;
        return (p % chunk != 0 && p < 0) ? c - 1 : c;  // floor division
    }
    [[nodiscard]] constexpr bool visible(std::int64_t i, std::int64_t j) const noexcept {
        return j <= i && chunk_of(i) == chunk_of(j);
    }
    [[nodiscard]] constexpr tile_visibility classify(tile_bounds t) const noexcept {
        if (t.k_lo > t.q_hi) return tile_visibility::none;
        const std::int64_t ql = chunk_of(t.q_lo), qh = chunk_of(t.q_hi), kl = chunk_of(t.k_lo), kh = chunk_of(t.k_hi);
        if (kh < ql || kl > qh) return tile_visibility::none;  // no chunk in common
        if (t.k_hi <= t.q_lo && ql == qh && kl == kh && kl == ql) return tile_visibility::all;
        return tile_visibility::partial;
    }
    /// [first position of i's chunk, i]; a chunk that starts below int64's range, from its bottom.
    [[nodiscard]] constexpr key_range visible_keys(std::int64_t i) const noexcept {
        std::int64_t lo = 0;
        if (__builtin_mul_overflow(chunk_of(i), chunk, &lo)) lo = std::numeric_limits<std::int64_t>::min();
        return {lo, i};
    }
    void validate() const { detail::require(chunk > 0, "attention_chunk_size", chunk, "must be > 0"); }
};

static_assert(attention_mask<no_mask> && attention_mask<causal_mask> && attention_mask<sliding_window_mask> &&
              attention_mask<chunked_mask>);

}  // namespace posenc
