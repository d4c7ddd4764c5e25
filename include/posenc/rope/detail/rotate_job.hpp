#pragma once
// One rotary call, described as data: which tensors (read from where, written where, in which
// element types, optionally normalised first), which positions, where cos/sin come from.
// The public API validates it; backends (scalar reference, SIMD) only execute it.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "posenc/core/dtypes.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/rope/table.hpp"

namespace posenc::detail {

/// One tensor (Q or K) of a call: [tokens, heads, head_dim] read from src and written to dst (the
/// same memory, same strides and type, for an in-place call).
struct job_view {
    const void* src = nullptr;
    void* dst = nullptr;
    dtype src_type = dtype::f32, dst_type = dtype::f32;
    std::size_t tokens = 0, heads = 0, head_dim = 0;
    std::size_t src_token_stride = 0, src_head_stride = 0, dst_token_stride = 0, dst_head_stride = 0;
    const float* norm_weight = nullptr;  ///< fused per-head RMSNorm weight (head_dim floats), when set
    double norm_eps = 0.0;

    job_view() = default;
    job_view(heads_view<float> v) : job_view(in_place(v)) {}  // NOLINT(google-explicit-constructor)

    template <storage_type T>
    [[nodiscard]] static job_view in_place(heads_view<T> v) noexcept {
        job_view j;
        if (v.empty()) return j;
        j.src = v.data();
        j.dst = v.data();
        j.src_type = j.dst_type = dtype_of<T>;
        j.tokens = v.tokens();
        j.heads = v.heads();
        j.head_dim = v.head_dim();
        j.src_token_stride = j.dst_token_stride = v.token_stride();
        j.src_head_stride = j.dst_head_stride = v.head_stride();
        return j;
    }

    template <storage_type S, storage_type D>
    [[nodiscard]] static job_view out_of_place(heads_view<const S> src, heads_view<D> dst) noexcept {
        job_view j;
        if (src.empty()) return j;
        j.src = src.data();
        j.dst = dst.data();
        j.src_type = dtype_of<S>;
        j.dst_type = dtype_of<D>;
        j.tokens = src.tokens();
        j.heads = src.heads();
        j.head_dim = src.head_dim();
        j.src_token_stride = src.token_stride();
        j.src_head_stride = src.head_stride();
        j.dst_token_stride = dst.token_stride();
        j.dst_head_stride = dst.head_stride();
        return j;
    }

    [[nodiscard]] bool empty() const noexcept { return src == nullptr || tokens == 0 || heads == 0; }
    [[nodiscard]] bool in_place_call() const noexcept { return src == dst; }
};

struct rotate_job {
    std::array<job_view, 2> views{};  ///< Q and K (either may be empty); same tokens
    position_ids positions = position_ids::consecutive(0, 0);
    std::size_t rotary_dim = 0;
    bool inverse = false;
    const float* rows = nullptr;           ///< per-token rows [cos | sin] (pairs each), when set
    const cos_sin_table* table = nullptr;  ///< else rows from this table by position, when set
                                           ///< else computed on the fly from inv_freq
    const double* inv_freq = nullptr;      ///< rotary_dim/2 values, for on-the-fly rows
    double amplitude = 1.0;                ///< on-the-fly rows: cos/sin × amplitude
    double row_scale = 1.0;                ///< rows and table rows: × row_scale (they hold the amplitude)

    [[nodiscard]] std::size_t pairs() const noexcept { return rotary_dim / 2; }
    [[nodiscard]] std::size_t head_dim() const noexcept {
        return views[0].empty() ? views[1].head_dim : views[0].head_dim;
    }
};

/// The names a call's views go by in its errors: its parameters' names ("q", "k"; "x" for a single
/// view; out of place "src" and "dst", or "q_src", "q_dst", "k_src", "k_dst").
struct view_names {
    std::string_view src, dst;
};
inline constexpr view_names single_view{"src", "dst"}, q_views{"q_src", "q_dst"}, k_views{"k_src", "k_dst"};

/// Throws require_view's error for a view whose head_dim or tokens differ (out of line: the check
/// inlines into every call without the registers and frame the messages need).
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_view_shape(std::string_view name, std::size_t view_head_dim,
                                                                   std::size_t head_dim, std::size_t view_tokens,
                                                                   std::size_t tokens) {
    if (view_head_dim != head_dim)
        throw config_error(std::string(name) + ".head_dim", to_text(view_head_dim),
                           "must equal the encoding's head_dim = " + to_text(head_dim));
    throw config_error(std::string(name) + ".tokens", to_text(view_tokens),
                       "must equal the number of positions = " + to_text(tokens));
}

/// A Q or K view for a call: head_dim as the encoding's, one token per position.
template <class T>
void require_view(const heads_view<T>& v, std::string_view name, std::size_t tokens, std::size_t head_dim) {
    if (!absent(v) && (v.head_dim() != head_dim || v.tokens() != tokens)) [[unlikely]]
        throw_view_shape(name, v.head_dim(), head_dim, v.tokens(), tokens);
}

/// Byte range [first, last) a view touches (empty: {0, 0}).
template <class T>
[[nodiscard]] std::pair<const char*, const char*> byte_extent(const heads_view<T>& v) noexcept {
    if (v.empty()) return {nullptr, nullptr};
    const std::size_t last = (v.tokens() - 1) * v.token_stride() + (v.heads() - 1) * v.head_stride() + v.head_dim();
    const char* b = reinterpret_cast<const char*>(v.data());
    return {b, b + last * sizeof(T)};
}

/// Whether two views may share a byte. By the byte ranges they span, except where both have the same
/// token stride in bytes: then token by token, each token's row (its heads, from the first head's
/// first lane to the last head's last) against every row of the other, so that Q and K of one fused
/// QKV row, which interleave row by row, are disjoint. Conservative: views interleaved within a row
/// (even and odd heads) count as overlapping.
template <class A, class B>
[[nodiscard]] bool may_overlap(const heads_view<A>& a, const heads_view<B>& b) noexcept {
    const auto [a0, a1] = byte_extent(a);
    const auto [b0, b1] = byte_extent(b);
    const auto at = [](const char* p) { return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)); };
    if (a0 == nullptr || b0 == nullptr || at(a1) <= at(b0) || at(b1) <= at(a0)) return false;
    const auto ts = static_cast<std::int64_t>(a.token_stride() * sizeof(A));
    if (a.tokens() == 1 || b.tokens() == 1 || ts == 0 || ts != static_cast<std::int64_t>(b.token_stride() * sizeof(B)))
        return true;  // one row each (their spans overlap), or rows of different strides
    const auto row = [](const auto& v, std::size_t size) {
        return static_cast<std::int64_t>(((v.heads() - 1) * v.head_stride() + v.head_dim()) * size);
    };
    const std::int64_t ra = row(a, sizeof(A)), rb = row(b, sizeof(B)), d = at(b0) - at(a0);
    // a's row t and b's row u meet when d + (u − t)·ts lies in (−rb, ra); k = u − t ∈ [1 − Ta, Tb − 1].
    // The smallest k with d + k·ts > −rb:
    const std::int64_t num = -rb - d;
    const std::int64_t k = (num >= 0 ? num / ts : -((-num + ts - 1) / ts)) + 1;
    const std::int64_t k_lo = std::max<std::int64_t>(k, 1 - static_cast<std::int64_t>(a.tokens()));
    return k_lo <= static_cast<std::int64_t>(b.tokens()) - 1 && d + k_lo * ts < ra;
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_same_memory() {
    throw config_error("k", "the memory of q", "Q and K of one call must be different memory (each would be rotated twice)");
}

/// The two views of an in-place call with Q and K: each a view for the call, and not the same memory
/// (each would be rotated twice). Other overlaps are not detected: Q and K of a fused QKV row
/// interleave in memory without sharing an element, so their byte ranges cannot tell.
template <class T>
void require_in_place_views(const heads_view<T>& q, const heads_view<T>& k, std::size_t tokens, std::size_t head_dim,
                            std::string_view q_name) {
    require_view(q, q_name, tokens, head_dim);
    require_view(k, "k", tokens, head_dim);
    if (!q.empty() && !k.empty() && q.data() == k.data()) [[unlikely]]
        throw_same_memory();
}

/// An out-of-place source and destination: same shape, and either the source itself (the same
/// memory, element type and strides, where they matter: that view is rotated in place, e.g. Q in
/// place while K goes into a cache) or not overlapping (may_overlap).
template <class S, class D>
void require_out_of_place(const heads_view<const S>& src, const heads_view<D>& dst, view_names names) {
    if (absent(src) && absent(dst)) return;
    if (src.tokens() != dst.tokens() || src.heads() != dst.heads() || src.head_dim() != dst.head_dim())
        throw config_error(std::string(names.dst) + " shape",
                           to_text(dst.tokens()) + "x" + to_text(dst.heads()) + "x" + to_text(dst.head_dim()),
                           "must equal the source's " + to_text(src.tokens()) + "x" + to_text(src.heads()) + "x" +
                               to_text(src.head_dim()));
    if (!src.empty() && static_cast<const void*>(src.data()) == static_cast<const void*>(dst.data())) {
        // The source's memory: rotated in place when it is the same view.
        // (A literal: this branch runs on every call with a destination that is its source.)
        constexpr const char* in_place = " to rotate its source in place (a destination on the source's memory)";
        if constexpr (!std::is_same_v<S, std::remove_const_t<D>>)
            throw config_error(std::string(names.dst), "the source's memory in another element type",
                               std::string("must have the source's element type") + in_place);
        if (src.tokens() > 1 && dst.token_stride() != src.token_stride())
            throw config_error(std::string(names.dst) + ".token_stride", to_text(dst.token_stride()),
                               "must equal the source's " + to_text(src.token_stride()) + in_place);
        if (src.heads() > 1 && dst.head_stride() != src.head_stride())
            throw config_error(std::string(names.dst) + ".head_stride", to_text(dst.head_stride()),
                               "must equal the source's " + to_text(src.head_stride()) + in_place);
        return;
    }
    if (may_overlap(src, dst))
        throw config_error(std::string(names.dst), "overlapping the source",
                           "a destination must be its source itself (rotated in place) or not overlap it");
}

/// Two views of one call that must not share bytes (a Q destination and a K source or destination):
/// otherwise one view's writes would change what the other reads, or the result would depend on the
/// order of the work. Checked by may_overlap.
template <class A, class B>
void require_disjoint(const heads_view<A>& a, const heads_view<B>& b, std::string_view a_name, std::string_view b_name) {
    if (may_overlap(a, b))
        throw config_error(std::string(a_name), "overlapping " + std::string(b_name),
                           "the views of one call must not overlap");
}

/// The four views of an out-of-place call (K's pair may be absent): each source a view for the
/// call, each destination its source's shape, and no destination sharing bytes with another view.
template <class QS, class QD, class KS, class KD>
void require_out_of_place_views(const heads_view<const QS>& q_src, const heads_view<QD>& q_dst,
                                const heads_view<const KS>& k_src, const heads_view<KD>& k_dst, std::size_t tokens,
                                std::size_t head_dim, view_names q) {
    require_view(q_src, q.src, tokens, head_dim);
    require_view(k_src, k_views.src, tokens, head_dim);
    require_out_of_place(q_src, q_dst, q);
    require_out_of_place(k_src, k_dst, k_views);
    require_disjoint(q_dst, k_src, q.dst, k_views.src);
    require_disjoint(q_dst, k_dst, q.dst, k_views.dst);
    require_disjoint(k_dst, q_src, k_views.dst, q.src);
}

}  // namespace posenc::detail
