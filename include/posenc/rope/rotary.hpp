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
// Every check runs before anything is written: after a throw the caller's buffers are unchanged.
// Dynamic schedules (dynamic_ntk, longrope) are evaluated once, for the seq_len given to the
// constructor; build a new rotary when the length changes (it costs rotary_dim/2 pow calls).

#include <cassert>

#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/detail/simd_bridge.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/table.hpp"

namespace posenc {

enum class rotation { forward, inverse };

template <rotary_layout Layout>
class rotary {
public:
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

    [[nodiscard]] const rope_dims& dims() const noexcept { return dims_; }
    [[nodiscard]] const rope_frequencies& frequencies() const noexcept { return freq_; }

    /// Up to `n` threads for large calls (tokens split across threads; calls under ~64K floats per
    /// thread stay single-threaded). Default 1. OpenMP when the program is built with it.
    void set_threads(unsigned n) noexcept { threads_ = n ? n : 1; }
    [[nodiscard]] unsigned threads() const noexcept { return threads_; }

    /// cos/sin for positions 0..positions-1, from this rotary's frequencies: for dynamic_ntk and
    /// longrope those of the seq_len given to the constructor, whatever `positions` is.
    [[nodiscard]] cos_sin_table table(std::int64_t positions) const { return cos_sin_table(freq_, positions); }

    // ---- angles computed per token: any integer position, negative ones included -------------------
    void apply(heads_view<float> x, position_ids pos, rotation dir = rotation::forward) const {
        apply(x, {}, pos, dir);
    }
    /// dir = rotation::inverse undoes a forward call (rotation by −θ, amplitude divided out), to
    /// float rounding.
    void apply(heads_view<float> q, heads_view<float> k, position_ids pos, rotation dir = rotation::forward) const {
        execute(make_job(q, k, pos, dir, nullptr));
    }

    // ---- cos/sin from a table: checked ---------------------------------------------------------------
    void apply(const cos_sin_table& table, heads_view<float> x, position_ids pos,
               rotation dir = rotation::forward) const {
        apply(table, x, {}, pos, dir);
    }
    void apply(const cos_sin_table& table, heads_view<float> q, heads_view<float> k, position_ids pos,
               rotation dir = rotation::forward) const {
        check_table(table);
        table.check(pos);
        execute(make_job(q, k, pos, dir, &table));
    }

    /// Unchecked table path for hot loops. Preconditions (asserted in debug builds): the views match
    /// dims().head_dim and pos.size(), every position is inside the table, the table was built by this
    /// rotary's frequencies.
    void apply_unchecked(const cos_sin_table& table, heads_view<float> q, heads_view<float> k, position_ids pos,
                         rotation dir = rotation::forward) const {
        assert(table.inv_freq() == freq_.inv_freq);
        assert(pos.size() == 0 || (table.contains(pos.bounds().first) && table.contains(pos.bounds().second)));
        assert(view_matches(q, pos) && view_matches(k, pos));
        execute(unchecked_job(q, k, pos, dir, &table));
    }

    /// Rotates every token of `x` by the same position offset `delta`, without the amplitude (keys
    /// already carry it): re-rotates cached keys after the cache was shifted (delta may be negative).
    void shift(heads_view<float> x, std::int64_t delta) const {
        auto job = make_job(x, {}, position_ids::constant(delta, x.tokens()), rotation::forward, nullptr);
        job.amplitude = 1.0;
        execute(job);
    }

private:
    template <frequency_schedule Schedule>
    static rope_frequencies evaluate(const rope_dims& dims, const Schedule& schedule, std::int64_t seq_len) {
        dims.validate();  // before the schedule, so that a bad head_dim is reported as such
        return schedule.frequencies(dims.rotary(), seq_len);
    }

    [[nodiscard]] bool view_matches(const heads_view<float>& v, const position_ids& pos) const noexcept {
        return v.empty() || (v.head_dim() == dims_.head_dim && v.tokens() == pos.size());
    }

    void require_view(const heads_view<float>& v, std::string_view name, std::size_t tokens) const {
        detail::require_view(v, name, tokens, dims_.head_dim);
    }

    void check_table(const cos_sin_table& table) const {
        if (table.inv_freq() != freq_.inv_freq || table.amplitude() != freq_.attention_factor)
            throw config_error("table", "of " + detail::to_text(table.pairs()) + " pairs",
                               "was built from other frequencies than this rotary's");
    }

    detail::rotate_job make_job(heads_view<float> q, heads_view<float> k, const position_ids& pos, rotation dir,
                                const cos_sin_table* table) const {
        require_view(q, "q", pos.size());
        require_view(k, "k", pos.size());
        return unchecked_job(q, k, pos, dir, table);
    }

    detail::rotate_job unchecked_job(heads_view<float> q, heads_view<float> k, const position_ids& pos, rotation dir,
                           const cos_sin_table* table) const noexcept {
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

    void execute(const detail::rotate_job& job) const { detail::run<Layout>(job, threads_); }

    rope_dims dims_;
    rope_frequencies freq_;
    unsigned threads_ = 1;
};

}  // namespace posenc
