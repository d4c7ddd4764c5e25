#pragma once
// kv_cache: the keys (already transformed), values and positions of one layer's past tokens, for
// Hkv heads, stored head-major [kv head][token][dim] so that decode reads each head's keys as one
// contiguous run (a token-major cache interleaves the heads and defeats the prefetcher: measured
// 0.23 of the read limit in decode against 0.6 head-major).
//
//   posenc::rotary<posenc::half_split> rope({.head_dim = 128}, posenc::default_rope{});
//   posenc::kv_cache cache(rope, {.kv_heads = 8, .head_dim = 128, .capacity = 8192});
//   cache.append(k, v, positions);                 // K rotated while it is written (one read, one write)
//   posenc::attention(posenc::attention_encoding{rope}, q, cache, out, q_positions, posenc::causal_mask{});
//   cache.context_shift(4, 2044);                  // keep 4 sink tokens and the last 2044, drop the middle
//
//   posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16> cache16(rope, shape);  // or fp16
//
// Storage is float, bf16 or fp16: a 16-bit cache rotates K in float32 and rounds it once (nearest
// even), rounds V once, and is read by attention's 16-bit path (half the bytes per decode step).
//
// The transform is the layer's key transform (rotary, any_rotary, or nope): the cache owns a copy, so
// that append and context_shift always use the one the keys were rotated with, and attention over the
// cache rejects a query transform that differs from it. xPos is not cacheable
// here: its key decay does not compose with a rotation by a constant offset.
//
// append checks everything (capacity, shapes, positions strictly increasing past the cached ones, the
// transform's own checks) before it writes: after a throw the cache is byte-identical.
//
// context_shift(n_sink, n_recent), as llama.cpp's context shift and StreamingLLM do it: keeps the first
// n_sink tokens (attention sinks) and the most recent n_recent, drops the middle, moves the kept recent
// tokens down behind the sinks and re-rotates their keys by the position offset delta (rotary::shift, no
// amplitude: the keys already carry it), so that the first kept recent token sits right after the last
// sink (positions stay contiguous when they were). Keys rotated at p and then by delta equal keys
// rotated at p + delta to float rounding (not bit-exactly: two roundings instead of one; in a 16-bit
// cache, to 16-bit rounding).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/detail/huge_page_allocator.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/core/detail/parallel.hpp"
#include "posenc/rope/layout.hpp"

namespace posenc {

struct kv_cache_shape {
    std::size_t kv_heads = 0;
    std::size_t head_dim = 0;
    std::size_t value_dim = 0;  ///< 0 means head_dim
    std::size_t capacity = 0;   ///< tokens
};

/// A key transform a cache of `Storage` elements can hold: the identity (copied in), or one with a
/// fused out-of-place apply_into (rotated while copied in, converted to Storage) and a shift
/// (re-rotation after a context shift).
template <class T, class Storage = float>
concept cacheable_transform =
    qk_transform<T> && storage_type<Storage> &&
    (is_identity_transform<T> ||
     requires(const T& t, heads_view<const float> src, heads_view<Storage> dst, const position_ids& p) {
         t.apply_into(src, dst, p);
         t.shift(dst, std::int64_t{0});
     });

template <class Transform, storage_type Storage = float>
    requires cacheable_transform<Transform, Storage>
class kv_cache {
public:
    using element_type = Storage;

    kv_cache(Transform transform, kv_cache_shape shape) : transform_(std::move(transform)), shape_(shape) {
        if (shape_.value_dim == 0) shape_.value_dim = shape_.head_dim;
        detail::require(shape_.kv_heads > 0, "kv_heads", shape_.kv_heads, "must be > 0");
        detail::require(shape_.head_dim > 0, "head_dim", shape_.head_dim, "must be > 0");
        detail::require(shape_.capacity > 0, "capacity", shape_.capacity, "must be > 0");
        if constexpr (requires { transform_.dims().head_dim; })
            detail::require(transform_.dims().head_dim == shape_.head_dim, "head_dim", shape_.head_dim,
                            "must equal the rotary's head_dim = " + detail::to_text(transform_.dims().head_dim));
        const std::size_t slots = detail::checked_mul(shape_.capacity, shape_.kv_heads, "kv_cache size");
        k_.resize(detail::checked_mul(slots, shape_.head_dim, "kv_cache size"));
        v_.resize(detail::checked_mul(slots, shape_.value_dim, "kv_cache size"));
        pos_.resize(shape_.capacity);
    }

    [[nodiscard]] const Transform& transform() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return transform_; }

    /// The threads append runs on (K rotated in and V copied, both split into slices as the rotary's
    /// set_threads / set_executor split a call): the cache's copy of the transform starts with the
    /// settings the transform had when the cache was made, and these change them. A cache of an
    /// identity transform (NoPE) copies on the caller's thread and has neither.
    void set_threads(unsigned n) noexcept
        requires requires(Transform& t, unsigned k) { t.set_threads(k); }
    {
        transform_.set_threads(n);
    }
    void set_executor(executor ex)
        requires requires(Transform& t, executor e) { t.set_executor(std::move(e)); }
    {
        transform_.set_executor(std::move(ex));
    }

    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return shape_.capacity; }
    [[nodiscard]] std::size_t kv_heads() const noexcept { return shape_.kv_heads; }
    [[nodiscard]] std::size_t head_dim() const noexcept { return shape_.head_dim; }
    [[nodiscard]] std::size_t value_dim() const noexcept { return shape_.value_dim; }

    /// [size, kv_heads, head_dim] over the cache (token stride head_dim, head stride capacity·head_dim):
    /// what attention takes as K with keys_transformed = true. Valid until the next append/shift/clear.
    [[nodiscard]] heads_view<const Storage> keys() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return view(k_.data(), size_, shape_.head_dim);
    }
    [[nodiscard]] heads_view<const Storage> values() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return view(v_.data(), size_, shape_.value_dim);
    }
    [[nodiscard]] position_ids positions() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return std::span<const std::int64_t>(pos_.data(), size_);
    }
    /// The position a next token continues with: last cached + 1 (0 when empty).
    [[nodiscard]] std::int64_t next_position() const noexcept { return size_ ? pos_[size_ - 1] + 1 : 0; }

    /// The whole storage, capacity included (diagnostics and tests).
    [[nodiscard]] std::span<const Storage> key_storage() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return k_; }
    [[nodiscard]] std::span<const Storage> value_storage() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return v_; }
    [[nodiscard]] std::span<const std::int64_t> position_storage() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return pos_; }

    /// Appends tokens: K [n, kv_heads, head_dim] transformed at `pos` while written, V [n, kv_heads,
    /// value_dim] copied, both on the transform's threads (set_threads above), the positions recorded.
    /// Into a 16-bit cache each is rounded once (nearest even): K after its rotation in float.
    /// Positions must increase strictly, past the cached ones, and stay below INT64_MAX
    /// (next_position() is last + 1).
    void append(heads_view<const float> k, heads_view<const float> v, const position_ids& pos) {
        append_views(k, v, pos);
    }
    /// K and V already in the cache's 16-bit type (K still un-rotated: it is rotated in float and
    /// rounded again).
    template <class S = Storage>
        requires(!std::same_as<S, float>)
    void append(std::type_identity_t<heads_view<const S>> k, std::type_identity_t<heads_view<const S>> v,
                const position_ids& pos) {
        append_views(k, v, pos);
    }

private:
    template <class Src>
    void append_views(const heads_view<const Src>& k, const heads_view<const Src>& v, const position_ids& pos) {
        const std::size_t n = pos.size();
        check_view(k, "k", n, shape_.head_dim);
        check_view(v, "v", n, shape_.value_dim);
        if (n > shape_.capacity - size_)
            throw range_error("posenc: kv_cache append of " + detail::to_text(n) + " tokens to " +
                              detail::to_text(size_) + " of capacity " + detail::to_text(shape_.capacity));
        if (n == 0) return;
        for (std::size_t i = 0; i < n; ++i) {
            const std::int64_t p = pos[i];
            const bool after = i == 0 ? (size_ == 0 || p > pos_[size_ - 1]) : p > pos[i - 1];
            if (!after)
                throw config_error("positions[" + detail::to_text(i) + "]", detail::to_text(p),
                                   "must increase strictly, past the last cached position " +
                                       (size_ ? detail::to_text(pos_[size_ - 1]) : std::string("(none)")));
            if (p == std::numeric_limits<std::int64_t>::max())
                throw config_error("positions[" + detail::to_text(i) + "]", detail::to_text(p),
                                   "must be < 2^63 - 1, so that next_position() exists");
        }
        const heads_view<Storage> kdst = view(k_.data(), size_, n, shape_.head_dim);
        if constexpr (is_identity_transform<Transform>) {
            copy_rows(k, kdst, 0, n);
        } else {
            transform_.apply_into(k, kdst, pos);  // checks everything before it writes; the first write here
        }
        copy_values(v, view(v_.data(), size_, n, shape_.value_dim));
        for (std::size_t i = 0; i < n; ++i) pos_[size_ + i] = pos[i];
        size_ += n;
    }

public:

    /// Keeps the first n_sink and the last n_recent tokens, drops the middle and re-rotates the kept
    /// recent keys so that they follow the sinks (see the top of this file). Returns the number of
    /// tokens dropped (0 when n_sink + n_recent == size()). n_sink + n_recent > size() throws.
    std::size_t context_shift(std::size_t n_sink, std::size_t n_recent) {
        if (n_sink > size_ || n_recent > size_ - n_sink)
            throw range_error("posenc: kv_cache context_shift keeps " + detail::to_text(n_sink) + " sink + " +
                              detail::to_text(n_recent) + " recent tokens of " + detail::to_text(size_));
        const std::size_t dropped = size_ - n_sink - n_recent;
        if (dropped == 0) return 0;
        const std::size_t from = size_ - n_recent;
        if (n_recent > 0) {
            const std::int64_t target = n_sink > 0 ? pos_[n_sink - 1] + 1 : pos_[0];
            std::int64_t delta = 0;  // < 0; past -2^63 for positions at both ends of int64
            if (__builtin_sub_overflow(target, pos_[from], &delta))
                throw range_error("posenc: kv_cache context_shift moves position " + detail::to_text(pos_[from]) + " to " +
                                  detail::to_text(target) + ": the offset overflows int64");
            // Rotate first, where the keys are: the only step that can throw, before anything moved.
            if constexpr (!is_identity_transform<Transform>)
                transform_.shift(view(k_.data(), from, n_recent, shape_.head_dim), delta);
            move_rows(k_.data(), from, n_sink, n_recent, shape_.head_dim);
            move_rows(v_.data(), from, n_sink, n_recent, shape_.value_dim);
            for (std::size_t i = 0; i < n_recent; ++i) pos_[n_sink + i] = pos_[from + i] + delta;
        }
        size_ -= dropped;
        return dropped;
    }

    void clear() noexcept { size_ = 0; }

private:
    template <class T>
    heads_view<T> view(T* base, std::size_t first, std::size_t n, std::size_t dim) const noexcept {
        return heads_view<T>(base + first * dim, {n, shape_.kv_heads, dim}, {dim, shape_.capacity * dim});
    }
    heads_view<const Storage> view(const Storage* base, std::size_t n, std::size_t dim) const noexcept {
        return view(base, 0, n, dim);
    }
    heads_view<Storage> view(Storage* base, std::size_t first, std::size_t n, std::size_t dim) noexcept {
        return view<Storage>(base, first, n, dim);
    }

    template <class Src>
    void check_view(const heads_view<const Src>& x, const char* name, std::size_t n, std::size_t dim) const {
        if (n == 0 && detail::absent(x)) return;
        if (x.tokens() != n || x.heads() != shape_.kv_heads || x.head_dim() != dim)
            throw config_error(std::string(name) + " shape",
                               detail::to_text(x.tokens()) + "x" + detail::to_text(x.heads()) + "x" +
                                   detail::to_text(x.head_dim()),
                               "needs " + detail::to_text(n) + " tokens (one per position) x kv_heads = " +
                                   detail::to_text(shape_.kv_heads) + " x " + detail::to_text(dim));
    }

    // Token-major, as the projection output is laid out: the source is read in order (head-major
    // reads jump a token stride per row, which the hardware prefetcher does not follow), and the
    // cache's kv_heads rows per token are kv_heads sequential write streams. Each token's source
    // rows start a new 4 KiB page for the usual shapes, where the hardware prefetcher restarts, so
    // the next token's rows, source and destination, are asked for before a token is copied: row by
    // row in the same-type copy (memcpy), all of its heads at once before a float token is narrowed
    // into a 16-bit cache (the narrowing step takes a token's heads in one call).
    /// A float source into a 16-bit cache is rounded by the SIMD narrowing step, one token's heads a call.
    template <class Src>
    static void copy_rows(const heads_view<const Src>& src, const heads_view<Storage>& dst, std::size_t begin,
                          std::size_t end) noexcept {
        if constexpr (std::is_same_v<Src, Storage>) {
            const std::size_t bytes = src.head_dim() * sizeof(Storage);
            for (std::size_t t = begin; t < end; ++t)
                for (std::size_t h = 0; h < src.heads(); ++h) {
                    if (t + 1 < end) prefetch_row(src.row(t + 1, h), bytes, dst.row(t + 1, h), bytes);
                    std::memcpy(dst.row(t, h), src.row(t, h), bytes);
                }
        } else {
            static_assert(std::is_same_v<Src, float>);
            const auto narrow = simd::attention_kernels().narrow;
            const std::size_t dim = src.head_dim();
            for (std::size_t t = begin; t < end; ++t) {
                if (t + 1 < end)
                    for (std::size_t h = 0; h < src.heads(); ++h)
                        prefetch_row(src.row(t + 1, h), dim * sizeof(float), dst.row(t + 1, h), dim * sizeof(Storage));
                narrow({src.row(t, 0), src.heads(), dim, src.head_stride(), dst.row(t, 0), dtype_of<Storage>, dst.head_stride()});
            }
        }
    }
    // Always inlined: g++ 12 at -O2 deletes calls to an out-of-line function whose only effect is a
    // prefetch (see simd/kernels.hpp). Not shared with the kernels' prefetch_lines: code included by
    // the per-architecture units must not be shared with baseline code (the COMDAT rule).
    [[gnu::always_inline]] static void prefetch_row(const void* src, std::size_t src_bytes, void* dst,
                                                    std::size_t dst_bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC unroll 8
        for (std::size_t b = 0; b < src_bytes; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(src) + b);
#pragma GCC unroll 8
        for (std::size_t b = 0; b < dst_bytes; b += 64) __builtin_prefetch(reinterpret_cast<char*>(dst) + b, 1);
#else
        (void)src, (void)src_bytes, (void)dst, (void)dst_bytes;
#endif
    }
    // V on the threads the transform rotates K on (its set_threads / set_executor): with K split and
    // V on one thread, a 2-thread append ran at 0.67 of a 2-thread copy.
    template <class Src>
    void copy_values(const heads_view<const Src>& src, const heads_view<Storage>& dst) const {
        if constexpr (requires {
                          { transform_.threads() } -> std::convertible_to<unsigned>;
                          { transform_.slice_executor() } -> std::convertible_to<const executor&>;
                      }) {
            const executor& ex = transform_.slice_executor();
            detail::run_slices(transform_.threads(), &ex, src.tokens(), src.tokens() * src.heads() * src.head_dim(),
                               [&](std::size_t b, std::size_t e) { copy_rows(src, dst, b, e); });
        } else {
            copy_rows(src, dst, 0, src.tokens());
        }
    }

    // Tokens [from, from + n) → [to, to + n) in every head (to < from; the ranges may overlap).
    void move_rows(Storage* base, std::size_t from, std::size_t to, std::size_t n, std::size_t dim) noexcept {
        for (std::size_t h = 0; h < shape_.kv_heads; ++h) {
            Storage* head = base + h * shape_.capacity * dim;
            std::memmove(head + to * dim, head + from * dim, n * dim * sizeof(Storage));
        }
    }

    Transform transform_;
    kv_cache_shape shape_;
    std::vector<Storage, detail::huge_page_allocator<Storage>> k_, v_;  // (decode reads them whole per token)
    std::vector<std::int64_t> pos_;
    std::size_t size_ = 0;
};

namespace detail {

/// The layout of a rotary-like transform, as a name ("" for none).
template <class T>
std::string_view rotary_layout_name(const T& t) noexcept {
    if constexpr (requires { t.layout(); })
        return t.layout() == rope_layout::interleaved ? interleaved::name : half_split::name;
    else if constexpr (requires { T::layout::name; })
        return T::layout::name;
    else
        return {};
}

template <class T>
std::string key_transform_kind(const T& t) {
    if constexpr (is_identity_transform<T>)
        return "NoPE";
    else if constexpr (requires { t.frequencies(); t.dims(); })
        return std::string(rotary_layout_name(t)) + " RoPE";
    else
        return "a custom transform";
}

/// Empty when `enc` rotates keys as `cached` did (same kind, layout, dims, frequencies and amplitude),
/// else what differs: a query transform that is not the cache's compares queries and keys in
/// different frames. A table_transform is judged by its rotary (its table is checked against that
/// rotary on use).
template <class E, class C>
[[nodiscard]] std::string key_transform_mismatch(const E& enc, const C& cached) {
    if constexpr (requires { enc.rotary; enc.table; }) {
        return key_transform_mismatch(enc.rotary, cached);
    } else if constexpr (requires { enc.frequencies(); enc.dims(); cached.frequencies(); cached.dims(); }) {
        const auto &fe = enc.frequencies(), &fc = cached.frequencies();
        if (rotary_layout_name(enc) != rotary_layout_name(cached))
            return key_transform_kind(enc) + ", but the cache's keys were rotated by " + key_transform_kind(cached);
        if (enc.dims().head_dim != cached.dims().head_dim || enc.dims().rotary() != cached.dims().rotary())
            return "rotary_dim " + to_text(enc.dims().rotary()) + " of head_dim " + to_text(enc.dims().head_dim) +
                   ", but the cache's is " + to_text(cached.dims().rotary()) + " of " + to_text(cached.dims().head_dim);
        for (std::size_t i = 0; i < fe.inv_freq.size(); ++i)
            if (fe.inv_freq[i] != fc.inv_freq[i])
                return "inv_freq[" + to_text(i) + "] = " + to_text(fe.inv_freq[i]) + ", but the cache's is " +
                       to_text(fc.inv_freq[i]);
        if (fe.attention_factor != fc.attention_factor)
            return "amplitude (attention_factor) " + to_text(fe.attention_factor) + ", but the cache's is " +
                   to_text(fc.attention_factor);
        return {};
    } else if constexpr (is_identity_transform<E> && is_identity_transform<C>) {
        return {};
    } else if constexpr (std::is_same_v<E, C> && std::equality_comparable<E>) {
        return enc == cached ? std::string() : "a custom transform that compares unequal to the cache's";
    } else if constexpr (std::is_same_v<E, C>) {
        return {};  // the cache's own type, with nothing to compare: the caller's responsibility
    } else {
        return key_transform_kind(enc) + ", but the cache's keys were transformed by " + key_transform_kind(cached);
    }
}

template <class E, class C>
void require_cache_transform(const E& enc, const C& cached) {
    if (const std::string why = key_transform_mismatch(enc, cached); !why.empty())
        throw config_error("enc.transform", why, "must transform queries as the cache's keys were (cache.transform())");
}

}  // namespace detail

/// Decode (or chunked prefill): queries at their positions against everything the cache holds, with
/// keys_transformed = true (the cache's keys are rotated already). enc.transform must rotate as the
/// cache's transform does (cache.transform(), or a table_transform of it): same kind, layout, dims,
/// frequencies and amplitude; checked. A 16-bit cache is read by the 16-bit path.
template <class Transform, class Bias, class Scale, class CacheTransform, class Storage, attention_mask Mask = no_mask>
void attention(const attention_encoding<Transform, Bias, Scale>& enc, heads_view<const float> q,
               const kv_cache<CacheTransform, Storage>& cache, heads_view<float> out, const position_ids& q_positions,
               const Mask& mask = {}, attention_options options = {}) {
    detail::require_cache_transform(enc.transform, cache.transform());
    detail::require(q.head_dim() == cache.head_dim(), "q.head_dim", q.head_dim(),
                    [&] { return "must equal the cache's head_dim = " + detail::to_text(cache.head_dim()); });
    options.keys_transformed = true;
    attention(enc, q, cache.keys(), cache.values(), out, q_positions, cache.positions(), mask, options);
}

}  // namespace posenc
