#pragma once
// multi_axis_rotary<Layout>: RoPE whose pairs take their angles from different position components of
// a token. Each token has up to three integer positions (M-RoPE: t, h, w; a vision encoder: row,
// column), and rotary pair j is rotated by p[axis(j)]·inv_freq[j]. The pair → axis map and the
// inverse frequencies are data, so one class serves every such policy: M-RoPE and interleaved M-RoPE
// (rope/mrope.hpp), the Qwen-VL ViT's and Pixtral's 2-D RoPE (rope/vision2d.hpp).
//
//   posenc::mrope_rotary<posenc::half_split> rope({.head_dim = 128}, posenc::default_rope{.base = 1e6},
//                                                 posenc::mrope{.section = {16, 24, 24}});
//   rope.apply(q, k, {pos.t, pos.h, pos.w});   // three position_ids, one entry per token each
//   rope.apply(q, k, position_ids::consecutive(0, n));  // text only: every axis the same
//
// How: per token, the cos/sin row is built from its components — for each axis, the pairs that read it
// are evaluated at that axis's position by the same vectorized cos/sin code as rotary's rows (angles
// formed and reduced in double, rounded once to float), or gathered from a cos_sin_table — and the
// rotation runs through the same SIMD kernels as rotary (detail::rotate_job with per-token rows).
// A token whose components are all equal therefore gets exactly rotary's row: text tokens are
// bit-identical to posenc::rotary with the same frequencies (tested).
//
// Positions are component-major, like HF's position_ids[3, seq] and vLLM's [3, tokens]: one
// position_ids (a span of int64/int32, or consecutive()) per axis. Every check (views, positions,
// table bounds, overlaps) runs before anything is written.

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/core/detail/angles.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/detail/simd_bridge.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/rotary.hpp"
#include "posenc/rope/table.hpp"
#include "posenc/simd/dispatch.hpp"

namespace posenc {

/// The positions of a call's tokens: one position_ids per axis (component-major), all the same
/// length; or one position_ids shared by every axis (text tokens, t = h = w). Views, like position_ids.
class axis_positions {
public:
    static constexpr std::size_t max_axes = 3;

    /// One position per token, the same on every axis.
    axis_positions(position_ids shared POSENC_DETAIL_LIFETIMEBOUND) : ids_{shared, shared, shared} {}  // NOLINT(google-explicit-constructor)
    axis_positions(position_ids a0 POSENC_DETAIL_LIFETIMEBOUND, position_ids a1 POSENC_DETAIL_LIFETIMEBOUND) : ids_{a0, a1, a1}, axes_(2) {}
    axis_positions(position_ids a0 POSENC_DETAIL_LIFETIMEBOUND, position_ids a1 POSENC_DETAIL_LIFETIMEBOUND, position_ids a2 POSENC_DETAIL_LIFETIMEBOUND)
        : ids_{a0, a1, a2}, axes_(3) {}

    /// Number of components given: 2 or 3, or 0 for one position shared by every axis.
    [[nodiscard]] std::size_t axes() const noexcept { return axes_; }
    [[nodiscard]] std::size_t size() const noexcept { return ids_[0].size(); }
    /// Component `axis` (for a shared position, the same ids for every axis).
    [[nodiscard]] const position_ids& axis(std::size_t a) const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        assert(a < max_axes);
        return ids_[axes_ == 0 ? 0 : a];
    }

    /// Throws config_error unless these positions fit an encoding of `axes` axes: as many components
    /// (or a shared one), all of the same length.
    void check(std::size_t axes) const {
        if (axes_ != 0 && axes_ != axes)
            throw config_error("positions", detail::to_text(axes_) + " components",
                               "this encoding needs " + detail::to_text(axes) +
                                   " per token (or one position shared by every axis)");
        for (std::size_t a = 1; a < axes_; ++a)
            if (ids_[a].size() != ids_[0].size())
                throw config_error("positions[" + detail::to_text(a) + "]", "of " + detail::to_text(ids_[a].size()) + " tokens",
                                   "must have as many tokens as positions[0] (" + detail::to_text(ids_[0].size()) + ")");
    }

private:
    std::array<position_ids, max_axes> ids_;
    std::size_t axes_ = 0;
};

template <rotary_layout Layout>
class multi_axis_rotary {
public:
    using layout = Layout;

    /// `pair_axis[j]` (< axes) is the component pair j takes its position from; `freq.inv_freq[j]` its
    /// inverse frequency. rotary_dim/2 entries each.
    multi_axis_rotary(rope_dims dims, rope_frequencies freq, std::vector<std::uint8_t> pair_axis, std::size_t axes)
        : dims_(dims), freq_(std::move(freq)), pair_axis_(std::move(pair_axis)), axes_(axes) {
        dims_.validate();
        const std::size_t n = dims_.pairs();
        detail::require(freq_.inv_freq.size() == n, "inv_freq", "list of length " + detail::to_text(freq_.inv_freq.size()),
                        "needs rotary_dim/2 = " + detail::to_text(n) + " entries");
        detail::require_usable(freq_);
        detail::require(axes_ >= 1 && axes_ <= axis_positions::max_axes, "axes", axes_, "must be 1, 2 or 3");
        detail::require(pair_axis_.size() == n, "pair_axis", "list of length " + detail::to_text(pair_axis_.size()),
                        "needs rotary_dim/2 = " + detail::to_text(n) + " entries");
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t a = pair_axis_[j];
            detail::require(a < axes_, "pair_axis[" + detail::to_text(j) + "]", a,
                            "must be < axes = " + detail::to_text(axes_));
            group_pair_[a].push_back(static_cast<std::uint32_t>(j));
            group_inv_[a].push_back(freq_.inv_freq[j]);
        }
    }

    [[nodiscard]] const rope_dims& dims() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return dims_; }
    [[nodiscard]] const rope_frequencies& frequencies() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return freq_; }
    [[nodiscard]] const std::vector<std::uint8_t>& pair_axis() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return pair_axis_; }
    [[nodiscard]] std::size_t axes() const noexcept { return axes_; }

    /// Up to `n` slices for large calls, as rotary::set_threads (the rows are built on the caller's thread).
    void set_threads(unsigned n) noexcept { threads_ = n ? n : 1; }
    [[nodiscard]] unsigned threads() const noexcept { return threads_; }

    /// cos/sin for positions 0..positions-1 of every pair (rotary's table of the same frequencies): a
    /// token's row gathers pair j from the table row of its axis's position.
    [[nodiscard]] cos_sin_table table(std::int64_t positions) const { return cos_sin_table(freq_, positions); }

    /// The per-token rows [cos × pairs | sin × pairs] (amplitude included) apply() rotates with,
    /// tokens × rotary_dim floats.
    [[nodiscard]] std::vector<float> rows(const axis_positions& pos) const {
        pos.check(axes_);
        return computed_rows(pos, freq_.attention_factor);
    }

    // ---- in place: angles computed per token, any integer positions -------------------------------
    template <storage_type T>
    void apply(heads_view<T> q, heads_view<T> k, const axis_positions& pos, rotation dir = rotation::forward) const {
        in_place(nullptr, q, k, pos, dir);
    }
    void apply(heads_view<float> q, heads_view<float> k, const axis_positions& pos,
               rotation dir = rotation::forward) const {
        in_place<float>(nullptr, q, k, pos, dir);
    }
    template <storage_type T>
    void apply(heads_view<T> x, const axis_positions& pos, rotation dir = rotation::forward) const {
        in_place(nullptr, x, heads_view<T>{}, pos, dir, "x");
    }
    void apply(heads_view<float> x, const axis_positions& pos, rotation dir = rotation::forward) const {
        in_place<float>(nullptr, x, {}, pos, dir, "x");
    }

    // ---- in place, rows from a table (checked: every component of every token inside it) ----------
    template <storage_type T>
    void apply(const cos_sin_table& table, heads_view<T> q, heads_view<T> k, const axis_positions& pos,
               rotation dir = rotation::forward) const {
        in_place(&table, q, k, pos, dir);
    }
    void apply(const cos_sin_table& table, heads_view<float> q, heads_view<float> k, const axis_positions& pos,
               rotation dir = rotation::forward) const {
        in_place<float>(&table, q, k, pos, dir);
    }
    template <storage_type T>
    void apply(const cos_sin_table& table, heads_view<T> x, const axis_positions& pos,
               rotation dir = rotation::forward) const {
        in_place(&table, x, heads_view<T>{}, pos, dir, "x");
    }
    void apply(const cos_sin_table& table, heads_view<float> x, const axis_positions& pos,
               rotation dir = rotation::forward) const {
        in_place<float>(&table, x, {}, pos, dir, "x");
    }

    // ---- out of place (src → dst, converting float/bf16/fp16; dst is src itself or does not overlap it)
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_into(heads_view<S> src, heads_view<D> dst, const axis_positions& pos,
                    rotation dir = rotation::forward) const {
        out_of_place(nullptr, src, dst, heads_view<const float>{}, heads_view<float>{}, pos, dir, detail::single_view);
    }
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_into(const cos_sin_table& table, heads_view<S> src, heads_view<D> dst, const axis_positions& pos,
                    rotation dir = rotation::forward) const {
        out_of_place(&table, src, dst, heads_view<const float>{}, heads_view<float>{}, pos, dir, detail::single_view);
    }
    /// Q and K in one call (they share each token's row).
    template <class S1, storage_type D1, class S2, storage_type D2>
        requires storage_type<std::remove_const_t<S1>> && storage_type<std::remove_const_t<S2>>
    void apply_into(heads_view<S1> q_src, heads_view<D1> q_dst, heads_view<S2> k_src, heads_view<D2> k_dst,
                    const axis_positions& pos, rotation dir = rotation::forward) const {
        out_of_place(nullptr, q_src, q_dst, k_src, k_dst, pos, dir);
    }

private:
    template <class T>
    void in_place(const cos_sin_table* table, heads_view<T> q, heads_view<T> k, const axis_positions& pos,
                  rotation dir, std::string_view q_name = "q") const {
        pos.check(axes_);
        detail::require_in_place_views(q, k, pos.size(), dims_.head_dim, q_name);
        if (table) check_table(*table, pos);
        execute(detail::job_view::in_place(q), detail::job_view::in_place(k), table, pos, dir);
    }

    template <class S1, class D1, class S2, class D2>
    void out_of_place(const cos_sin_table* table, heads_view<S1> q_src, heads_view<D1> q_dst, heads_view<S2> k_src,
                      heads_view<D2> k_dst, const axis_positions& pos, rotation dir,
                      detail::view_names q_names = detail::q_views) const {
        const heads_view<const std::remove_const_t<S1>> qs = q_src;
        const heads_view<const std::remove_const_t<S2>> ks = k_src;
        pos.check(axes_);
        detail::require_out_of_place_views(qs, q_dst, ks, k_dst, pos.size(), dims_.head_dim, q_names);
        if (table) check_table(*table, pos);
        execute(detail::job_view::out_of_place(qs, q_dst), detail::job_view::out_of_place(ks, k_dst), table, pos, dir);
    }

    void check_table(const cos_sin_table& table, const axis_positions& pos) const {
        if (table.inv_freq() != freq_.inv_freq || table.amplitude() != freq_.attention_factor)
            throw config_error("table", "of " + detail::to_text(table.pairs()) + " pairs",
                               "was built from other frequencies than this rotary's");
        for (std::size_t a = 0; a < (pos.axes() == 0 ? 1 : pos.axes()); ++a) table.check(pos.axis(a));
    }

    /// Validated views in, rotation out: rows first (all checks are done), then the SIMD kernels.
    void execute(const detail::job_view& q, const detail::job_view& k, const cos_sin_table* table,
                 const axis_positions& pos, rotation dir) const {
        if (q.empty() && k.empty()) return;
        const bool inverse = dir == rotation::inverse;
        const double a = freq_.attention_factor;
        // As rotary: forward rows carry a; the inverse rotates by −θ and divides a out (on-the-fly
        // rows are built with 1/a, table rows hold a and are scaled by 1/a²).
        const std::vector<float> rows = table ? gathered_rows(*table, pos) : computed_rows(pos, inverse ? 1.0 / a : a);
        detail::rotate_job job;
        job.views = {q, k};
        job.positions = position_ids::constant(0, pos.size());  // the token count: rows are per token
        job.rotary_dim = dims_.rotary();
        job.inverse = inverse;
        job.rows = rows.data();
        job.row_scale = table && inverse ? 1.0 / (a * a) : 1.0;
        detail::run<Layout>(job, threads_);
    }

    /// cos/sin of `m` pairs at one position, the same code as rotary's on-the-fly rows (the SIMD row
    /// for widths the kernels take, the scalar one beyond), so that equal inputs give equal floats.
    void row_of(const double* inv, std::size_t m, std::int64_t p, double amplitude, float* out) const {
        if (dims_.rotary() > simd::max_rotary_dim) return detail::cos_sin_row(inv, m, p, amplitude, out, out + m);
        simd::table_args t;
        t.inv_freq = inv;
        t.pairs = m;
        t.first_position = p;
        t.positions = 1;
        t.amplitude = amplitude;
        t.out = out;
        simd::build_table(t);
    }

    [[nodiscard]] bool same_position(const axis_positions& pos, std::size_t t, std::int64_t (&p)[3]) const noexcept {
        bool same = true;
        for (std::size_t a = 0; a < axes_; ++a) {
            p[a] = pos.axis(a)[t];
            same = same && p[a] == p[0];
        }
        return same;
    }

    [[nodiscard]] std::vector<float> computed_rows(const axis_positions& pos, double amplitude) const {
        const std::size_t n = dims_.pairs(), tokens = pos.size();
        std::vector<float> out(detail::checked_mul(tokens, 2 * n, "rows size"));
        std::vector<float> part(2 * n);
        for (std::size_t t = 0; t < tokens; ++t) {
            float* row = out.data() + t * 2 * n;
            std::int64_t p[3] = {0, 0, 0};
            if (same_position(pos, t, p)) {  // text: one row, exactly rotary's
                row_of(freq_.inv_freq.data(), n, p[0], amplitude, row);
                continue;
            }
            for (std::size_t a = 0; a < axes_; ++a) {
                const std::size_t m = group_pair_[a].size();
                if (m == 0) continue;
                row_of(group_inv_[a].data(), m, p[a], amplitude, part.data());
                for (std::size_t i = 0; i < m; ++i) {
                    row[group_pair_[a][i]] = part[i];
                    row[n + group_pair_[a][i]] = part[m + i];
                }
            }
        }
        return out;
    }

    [[nodiscard]] std::vector<float> gathered_rows(const cos_sin_table& table, const axis_positions& pos) const {
        const std::size_t n = dims_.pairs(), tokens = pos.size();
        std::vector<float> out(detail::checked_mul(tokens, 2 * n, "rows size"));
        for (std::size_t t = 0; t < tokens; ++t) {
            float* row = out.data() + t * 2 * n;
            std::int64_t p[3] = {0, 0, 0};
            if (same_position(pos, t, p)) {
                std::memcpy(row, table.row(p[0]), 2 * n * sizeof(float));
                continue;
            }
            const float* src[3] = {table.row(p[0]), axes_ > 1 ? table.row(p[1]) : nullptr,
                                   axes_ > 2 ? table.row(p[2]) : nullptr};
            for (std::size_t j = 0; j < n; ++j) {
                const float* s = src[pair_axis_[j]];
                row[j] = s[j];
                row[n + j] = s[n + j];
            }
        }
        return out;
    }

    rope_dims dims_;
    rope_frequencies freq_;
    std::vector<std::uint8_t> pair_axis_;
    std::size_t axes_ = 1;
    std::array<std::vector<std::uint32_t>, axis_positions::max_axes> group_pair_{};  // pairs reading each axis
    std::array<std::vector<double>, axis_positions::max_axes> group_inv_{};          // and their inv_freq
    unsigned threads_ = 1;
};

static_assert(qk_transform<multi_axis_rotary<half_split>>);
static_assert(qk_transform<multi_axis_rotary<interleaved>>);

}  // namespace posenc
