#pragma once
// rotary<Layout>: applies RoPE in place to Q and/or K, given as strided [tokens, heads, head_dim]
// views over the caller's memory, with one integer position per token.
//
//   posenc::rotary<posenc::half_split> rope({.head_dim = 128}, posenc::yarn{.base = 5e5, .factor = 4,
//                                            .original_max_position = 8192});
//   rope.apply(q, k, positions);            // cos/sin computed per token, any integer position
//   auto table = rope.table(8192);          // or cached for positions 0..8191
//   rope.apply(table, q, k, positions);     // checked: a position outside the table throws
//
//   rope.apply_into(table, k_proj, cache_slot, positions);  // out of place, e.g. float → bf16 cache
//   rope.apply_normed(table, q_norm, q, k_norm, k, positions);  // fused per-head RMSNorm + RoPE
//
// Views hold float, bf16 or fp16 (computed in float32, rounded once). A token's result is
// bit-identical whatever the call's size, slicing or threads (see simd/kernels.hpp).
// Every check runs before anything is written: after a throw the caller's buffers are unchanged.
// Dynamic schedules (dynamic_ntk, longrope) are evaluated once, for the seq_len given to the
// constructor; build a new rotary when the length changes (it costs rotary_dim/2 pow calls).

#include <array>
#include <cassert>
#include <cstring>
#include <string>
#include <string_view>

#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/executor.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/detail/simd_bridge.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/qk_norm.hpp"
#include "posenc/rope/table.hpp"

namespace posenc {

enum class rotation { forward, inverse };

template <rotary_layout Layout>
class rotary {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    using layout = Layout;

    rotary(rope_dims dims, rope_frequencies freq) : dims_(dims), freq_(std::move(freq)) {
        dims_.validate();
        detail::require(freq_.inv_freq.size() == dims_.pairs(), "inv_freq",
                        "list of length " + detail::to_text(freq_.inv_freq.size()),
                        "needs rotary_dim/2 = " + detail::to_text(dims_.pairs()) + " entries");
        detail::require_usable(freq_);
    }

    /// Evaluates `schedule` for this rotary width at sequence length `seq_len` (0 = not known).
    template <frequency_schedule Schedule>
    rotary(rope_dims dims, const Schedule& schedule, std::int64_t seq_len = 0)
        : rotary(dims, evaluate(dims, schedule, seq_len)) {}

    [[nodiscard]] const rope_dims& dims() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return dims_; }
    [[nodiscard]] const rope_frequencies& frequencies() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return freq_; }

    /// Up to `n` slices for large calls (tokens split across threads; calls under ~64K floats per
    /// slice stay single-threaded). Default 1. The slices run on the executor given to
    /// set_executor, else on OpenMP threads when the program is built with it, else std::threads
    /// started for the call.
    void set_threads(unsigned n) noexcept { threads_ = n ? n : 1; }
    [[nodiscard]] unsigned threads() const noexcept { return threads_; }

    /// cos/sin for positions 0..positions-1, from this rotary's frequencies: for dynamic_ntk and
    /// longrope those of the seq_len given to the constructor, whatever `positions` is.
    [[nodiscard]] cos_sin_table table(std::int64_t positions) const { return cos_sin_table(freq_, positions); }

    // ---- angles computed per token: any integer position, negative ones included -------------------
    void apply(heads_view<float> x, position_ids pos, rotation dir = rotation::forward) const {
        execute(in_place_job(x, {}, pos, dir, nullptr, "x"));
    }
    /// dir = rotation::inverse undoes a forward call (rotation by −θ, amplitude divided out), to
    /// float rounding.
    void apply(heads_view<float> q, heads_view<float> k, position_ids pos, rotation dir = rotation::forward) const {
        execute(in_place_job(q, k, pos, dir, nullptr));
    }

    // ---- cos/sin from a table: checked ---------------------------------------------------------------
    void apply(const cos_sin_table& table, heads_view<float> x, position_ids pos,
               rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(in_place_job(x, {}, pos, dir, &table, "x"));
    }
    void apply(const cos_sin_table& table, heads_view<float> q, heads_view<float> k, position_ids pos,
               rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(in_place_job(q, k, pos, dir, &table));
    }

    // ---- 16-bit storage (bf16, fp16), in place: computed in float32, rounded once (nearest even) ----
    template <half_storage T>
    void apply(heads_view<T> x, position_ids pos, rotation dir = rotation::forward) const {
        execute(in_place_job(x, heads_view<T>{}, pos, dir, nullptr, "x"));
    }
    template <half_storage T>
    void apply(heads_view<T> q, heads_view<T> k, position_ids pos, rotation dir = rotation::forward) const {
        execute(in_place_job(q, k, pos, dir, nullptr));
    }
    template <half_storage T>
    void apply(const cos_sin_table& table, heads_view<T> x, position_ids pos, rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(in_place_job(x, heads_view<T>{}, pos, dir, &table, "x"));
    }
    template <half_storage T>
    void apply(const cos_sin_table& table, heads_view<T> q, heads_view<T> k, position_ids pos,
               rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(in_place_job(q, k, pos, dir, &table));
    }

    // ---- out of place: read src, write the rotated result to dst (a KV-cache slot, a paged block) ----
    // One read and one write, converting between float, bf16 and fp16 on the way; lanes past
    // rotary_dim are copied (converted). src and dst must have the same shape and must not overlap,
    // unless dst is src itself (that view is then rotated in place); checked. Their strides are
    // independent.
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_into(heads_view<S> src, heads_view<D> dst, position_ids pos, rotation dir = rotation::forward) const {
        execute(out_of_place_job(src, dst, heads_view<const float>{}, heads_view<float>{}, pos, dir, nullptr, detail::single_view));
    }
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_into(const cos_sin_table& table, heads_view<S> src, heads_view<D> dst, position_ids pos,
                    rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(out_of_place_job(src, dst, heads_view<const float>{}, heads_view<float>{}, pos, dir, &table, detail::single_view));
    }
    /// Q and K in one call (they share each token's cos/sin row).
    template <class S1, storage_type D1, class S2, storage_type D2>
        requires storage_type<std::remove_const_t<S1>> && storage_type<std::remove_const_t<S2>>
    void apply_into(heads_view<S1> q_src, heads_view<D1> q_dst, heads_view<S2> k_src, heads_view<D2> k_dst,
                    position_ids pos, rotation dir = rotation::forward) const {
        execute(out_of_place_job(q_src, q_dst, k_src, k_dst, pos, dir, nullptr));
    }
    template <class S1, storage_type D1, class S2, storage_type D2>
        requires storage_type<std::remove_const_t<S1>> && storage_type<std::remove_const_t<S2>>
    void apply_into(const cos_sin_table& table, heads_view<S1> q_src, heads_view<D1> q_dst, heads_view<S2> k_src,
                    heads_view<D2> k_dst, position_ids pos, rotation dir = rotation::forward) const {
        check_table(table, pos);
        execute(out_of_place_job(q_src, q_dst, k_src, k_dst, pos, dir, &table));
    }

    // ---- fused per-head RMSNorm + RoPE (Qwen3, Gemma-3): read once, normalise, rotate, write once ----
    /// q ← rope(q_norm(q)), k ← rope(k_norm(k)), in place, any storage type; either view may be empty.
    template <storage_type T>
    void apply_normed(const head_rms_norm& q_norm, heads_view<T> q, const head_rms_norm& k_norm, heads_view<T> k,
                      position_ids pos) const {
        execute_normed(in_place_job(q, k, pos, rotation::forward, nullptr), q_norm, k_norm, present(q, k));
    }
    template <storage_type T>
    void apply_normed(const cos_sin_table& table, const head_rms_norm& q_norm, heads_view<T> q,
                      const head_rms_norm& k_norm, heads_view<T> k, position_ids pos) const {
        check_table(table, pos);
        execute_normed(in_place_job(q, k, pos, rotation::forward, &table), q_norm, k_norm, present(q, k));
    }
    /// One view (Q or K alone): x ← rope(norm(x)), in place.
    template <storage_type T>
    void apply_normed(const head_rms_norm& norm, heads_view<T> x, position_ids pos) const {
        execute_normed(in_place_job(x, heads_view<T>{}, pos, rotation::forward, nullptr, "x"), norm, norm,
                       present(x, heads_view<T>{}), single_norm);
    }
    template <storage_type T>
    void apply_normed(const cos_sin_table& table, const head_rms_norm& norm, heads_view<T> x, position_ids pos) const {
        check_table(table, pos);
        execute_normed(in_place_job(x, heads_view<T>{}, pos, rotation::forward, &table, "x"), norm, norm,
                       present(x, heads_view<T>{}), single_norm);
    }
    /// Out of place: q_dst ← rope(q_norm(q_src)), k_dst ← rope(k_norm(k_src)); one view: dst ← rope(norm(src)).
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_normed_into(const head_rms_norm& norm, heads_view<S> src, heads_view<D> dst, position_ids pos) const {
        execute_normed(out_of_place_job(src, dst, heads_view<const float>{}, heads_view<float>{}, pos, rotation::forward,
                                        nullptr, detail::single_view),
                       norm, norm, present(src, heads_view<float>{}), single_norm);
    }
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_normed_into(const cos_sin_table& table, const head_rms_norm& norm, heads_view<S> src, heads_view<D> dst,
                           position_ids pos) const {
        check_table(table, pos);
        execute_normed(out_of_place_job(src, dst, heads_view<const float>{}, heads_view<float>{}, pos, rotation::forward,
                                        &table, detail::single_view),
                       norm, norm, present(src, heads_view<float>{}), single_norm);
    }
    template <class S1, storage_type D1, class S2, storage_type D2>
        requires storage_type<std::remove_const_t<S1>> && storage_type<std::remove_const_t<S2>>
    void apply_normed_into(const head_rms_norm& q_norm, heads_view<S1> q_src, heads_view<D1> q_dst,
                           const head_rms_norm& k_norm, heads_view<S2> k_src, heads_view<D2> k_dst,
                           position_ids pos) const {
        execute_normed(out_of_place_job(q_src, q_dst, k_src, k_dst, pos, rotation::forward, nullptr), q_norm, k_norm,
                       present(q_src, k_src));
    }
    template <class S1, storage_type D1, class S2, storage_type D2>
        requires storage_type<std::remove_const_t<S1>> && storage_type<std::remove_const_t<S2>>
    void apply_normed_into(const cos_sin_table& table, const head_rms_norm& q_norm, heads_view<S1> q_src,
                           heads_view<D1> q_dst, const head_rms_norm& k_norm, heads_view<S2> k_src,
                           heads_view<D2> k_dst, position_ids pos) const {
        check_table(table, pos);
        execute_normed(out_of_place_job(q_src, q_dst, k_src, k_dst, pos, rotation::forward, &table), q_norm, k_norm,
                       present(q_src, k_src));
    }

    /// Unchecked table path for hot loops, in place, float or 16-bit. Preconditions (asserted in debug
    /// builds): the views match dims().head_dim and pos.size(), every position is inside the table, the
    /// table was built by this rotary's frequencies.
    void apply_unchecked(const cos_sin_table& table, heads_view<float> q, heads_view<float> k, position_ids pos,
                         rotation dir = rotation::forward) const {
        apply_unchecked<float>(table, q, k, pos, dir);
    }
    template <storage_type T>
    void apply_unchecked(const cos_sin_table& table, heads_view<T> q, heads_view<T> k, position_ids pos,
                         rotation dir = rotation::forward) const {
        assert(table.inv_freq() == freq_.inv_freq);
        assert(pos.size() == 0 || (table.contains(pos.bounds().first) && table.contains(pos.bounds().second)));
        assert(view_matches(q, pos) && view_matches(k, pos));
        assert(q.empty() || k.empty() || q.data() != k.data());
        execute(unchecked_job(detail::job_view::in_place(q), detail::job_view::in_place(k), pos, dir, &table));
    }

    /// Rotates every token of `x` by the same position offset `delta`, without the amplitude (keys
    /// already carry it): re-rotates cached keys after the cache was shifted (delta may be negative).
    template <storage_type T>
    void shift(heads_view<T> x, std::int64_t delta) const {
        auto job = in_place_job(x, heads_view<T>{}, position_ids::constant(delta, x.tokens()), rotation::forward,
                                nullptr, "x");
        job.amplitude = 1.0;
        execute(job);
    }
    void shift(heads_view<float> x, std::int64_t delta) const { shift<float>(x, delta); }

    // ---- threads -------------------------------------------------------------------------------------
    /// Runs the slices of large calls (see set_threads) on the caller's executor instead of posenc's
    /// own threads; an empty executor restores those. The result is bit-identical either way.
    void set_executor(executor ex) { executor_ = std::move(ex); }
    /// The executor set_executor gave; empty when the slices run on posenc's own threads.
    [[nodiscard]] const executor& slice_executor() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return executor_; }

private:
    template <frequency_schedule Schedule>
    static rope_frequencies evaluate(const rope_dims& dims, const Schedule& schedule, std::int64_t seq_len) {
        dims.validate();  // before the schedule, so that a bad head_dim is reported as such
        return schedule.frequencies(dims.rotary(), seq_len);
    }

    template <class T>
    [[nodiscard]] bool view_matches(const heads_view<T>& v, const position_ids& pos) const noexcept {
        return detail::absent(v) || (v.head_dim() == dims_.head_dim && v.tokens() == pos.size());
    }

    /// Whether `table` holds this rotary's frequencies, compared bytewise (memcmp is several times
    /// faster than the element loop): both sides passed require_usable, normal positive doubles,
    /// for which equal bytes and equal values are the same thing.
    [[nodiscard]] bool built_by_this(const cos_sin_table& table) const noexcept {
        const auto& inv = table.inv_freq();
        return inv.size() == freq_.inv_freq.size() && table.amplitude() == freq_.attention_factor &&
               std::memcmp(inv.data(), freq_.inv_freq.data(), inv.size() * sizeof(double)) == 0;
    }

    void check_table(const cos_sin_table& table, const position_ids& pos) const {
        if (!built_by_this(table))
            throw config_error("table", "of " + detail::to_text(table.pairs()) + " pairs",
                               "was built from other frequencies than this rotary's");
        table.check(pos);
    }

    template <class T>
    detail::rotate_job in_place_job(heads_view<T> q, heads_view<T> k, const position_ids& pos, rotation dir,
                                    const cos_sin_table* table, std::string_view q_name = "q") const {
        detail::require_in_place_views(q, k, pos.size(), dims_.head_dim, q_name);
        return unchecked_job(detail::job_view::in_place(q), detail::job_view::in_place(k), pos, dir, table);
    }

    template <class S1, class D1, class S2, class D2>
    detail::rotate_job out_of_place_job(heads_view<S1> q_src, heads_view<D1> q_dst, heads_view<S2> k_src,
                                        heads_view<D2> k_dst, const position_ids& pos, rotation dir,
                                        const cos_sin_table* table,
                                        detail::view_names q_names = detail::q_views) const {
        const heads_view<const std::remove_const_t<S1>> qs = q_src;
        const heads_view<const std::remove_const_t<S2>> ks = k_src;
        detail::require_out_of_place_views(qs, q_dst, ks, k_dst, pos.size(), dims_.head_dim, q_names);
        return unchecked_job(detail::job_view::out_of_place(qs, q_dst), detail::job_view::out_of_place(ks, k_dst), pos,
                             dir, table);
    }

    /// The names a call's norms go by in its errors.
    static constexpr std::array<std::string_view, 2> q_k_norms{"q_norm.weight", "k_norm.weight"},
        single_norm{"norm.weight", "norm.weight"};

    /// Which of a call's two views were given (not default-constructed): their norms are checked,
    /// an empty view's too.
    template <class A, class B>
    static std::array<bool, 2> present(const heads_view<A>& q, const heads_view<B>& k) noexcept {
        return {!detail::absent(q), !detail::absent(k)};
    }

    /// Runs `job` with each view normalised first by its norm, whose width must be head_dim for each
    /// view given.
    void execute_normed(detail::rotate_job job, const head_rms_norm& q_norm, const head_rms_norm& k_norm,
                        std::array<bool, 2> given, std::array<std::string_view, 2> names = q_k_norms) const {
        const head_rms_norm* norms[2] = {&q_norm, &k_norm};
        for (std::size_t v = 0; v < 2; ++v) {
            if (!given[v]) continue;
            if (norms[v]->head_dim() != dims_.head_dim)
                throw config_error(std::string(names[v]),
                                   "of " + detail::to_text(norms[v]->head_dim()) + " entries",
                                   "needs head_dim = " + detail::to_text(dims_.head_dim) + " entries");
            job.views[v].norm_weight = norms[v]->weight().data();
            job.views[v].norm_eps = norms[v]->eps();
        }
        execute(job);
    }

    detail::rotate_job unchecked_job(const detail::job_view& q, const detail::job_view& k, const position_ids& pos,
                                     rotation dir, const cos_sin_table* table) const noexcept {
        detail::rotate_job job;
        job.views = {q, k};
        job.positions = pos;
        job.rotary_dim = dims_.rotary();
        job.inverse = dir == rotation::inverse;
        job.table = table;
        job.inv_freq = freq_.inv_freq.data();
        // Forward: cos/sin × a. Inverse undoes it exactly: rotation by −θ, × 1/a (table rows hold a,
        // so they are scaled by 1/a²).
        const double a = freq_.attention_factor;
        job.amplitude = job.inverse ? 1.0 / a : a;
        job.row_scale = job.inverse ? 1.0 / (a * a) : 1.0;
        return job;
    }

    void execute(const detail::rotate_job& job) const {
        detail::run<Layout>(job, threads_, executor_ ? &executor_ : nullptr);
    }

    rope_dims dims_;
    rope_frequencies freq_;
    unsigned threads_ = 1;
    executor executor_;
};

}  // namespace posenc
