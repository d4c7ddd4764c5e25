#pragma once
// xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer"): rotary plus a per-pair exponential
// decay. Pair i of a query at position n is rotated by n·θ_i and scaled by ζ_i^((n − c)/scale_base),
// pair i of a key at position m rotated by m·θ_i and scaled by ζ_i^(−(m − c)/scale_base), with
//   ζ_i = (2i/d + γ)/(1 + γ),  θ_i = base^(−2i/d),  d = rotary_dim,
// so that qᵀk carries ζ_i^((n − m)/scale_base) per pair: it depends only on n − m, and decays with
// distance for n > m (ζ_i < 1).
//
//   posenc::xpos_rotary<posenc::half_split> xp({.head_dim = 64}, posenc::xpos{});  // γ 0.4, scale_base 512
//   xp.apply(q, k, positions);                 // prefill: the same positions for Q and K
//   xp.apply_queries(q_new, decode_positions); // decode: new queries against cached keys
//   xp.apply_keys_into(k_proj, cache_slot, positions);  // out of place, e.g. float → bf16 cache
//
// Reference followed: flash-attention's RotaryEmbedding (Dao-AILab/flash-attention,
// flash_attn/layers/rotary.py: _compute_scale, _update_cos_sin_cache) — ζ from
// (arange(0, d, 2) + 0.4·d)/(1.4·d), queries get cos·scale and sin·scale, keys cos/scale and
// sin/scale, either layout (its `interleaved` flag). lucidrains/rotary-embedding-torch
// (get_scale, rotate_queries_and_keys) computes the same ζ and the same directions.
//
// Centering. Both of those subtract seq_len // 2 from the position before the power (torchscale
// subtracts ⌈len/2⌉): a constant shift c that cancels in qᵀk, there only to keep ζ^(±p/scale_base)
// inside float range for long sequences. Because they take c from the *current* call's length, keys
// cached in one call and queries scaled in a later call use different centers, and qᵀk then no longer
// depends on n − m alone. posenc takes c as an explicit, fixed parameter (`center`, default 0 = the
// paper's formula): use the same center for every call that shares a KV cache; to reproduce
// flash-attention's single-pass values for a sequence of length L, set center = L / 2.
// With center 0, ζ_0^(±p/512) leaves float range at |p| ≈ 36000 (d = 128): a scale that is not a finite,
// normal float throws range_error before anything is written.
//
// Angles and scales are computed in double (angles reduced like RoPE's), each row value
// cos·scale / sin·scale rounded once to float, and the rotation runs through the same backend as
// rotary (detail::rotate_job with per-token rows).

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/core/detail/angles.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/detail/rotate_scalar.hpp"
#include "posenc/rope/detail/simd_bridge.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"

namespace posenc {

/// xPos parameters (flash-attention: base, scale_base; rotary-embedding-torch: theta, xpos_scale_base).
struct xpos {
    static constexpr std::string_view rope_type = "xpos";

    double base = 10000.0;       ///< θ_i = base^(−2i/d)
    double gamma = 0.4;          ///< ζ_i = (2i/d + γ)/(1 + γ)
    double scale_base = 512.0;   ///< the decay exponent is position/scale_base
    std::int64_t center = 0;     ///< c: positions enter the decay as p − c (cancels in qᵀk; keep it fixed)

    void validate() const {
        detail::require_base(base);
        detail::require(std::isfinite(gamma) && gamma > 0.0, "gamma", gamma, "must be finite and > 0");
        detail::require(std::isfinite(scale_base) && scale_base > 0.0, "scale_base", scale_base,
                        "must be finite and > 0");
    }

    /// ζ_i for the rotary_dim/2 pairs.
    [[nodiscard]] std::vector<double> decay(std::size_t rotary_dim) const {
        validate();
        detail::require_rotary_dim(rotary_dim);
        std::vector<double> z(rotary_dim / 2);
        for (std::size_t i = 0; i < z.size(); ++i)
            z[i] = (static_cast<double>(2 * i) / static_cast<double>(rotary_dim) + gamma) / (1.0 + gamma);
        return z;
    }
};

/// Which side of qᵀk a vector is on: queries are scaled by ζ^(+(p−c)/scale_base), keys by ζ^(−(p−c)/…).
enum class xpos_role { query, key };

template <rotary_layout Layout>
class xpos_rotary {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    using layout = Layout;

    xpos_rotary(rope_dims dims, xpos params) : dims_(checked(dims)), params_(params) {
        params_.validate();
        inv_freq_ = detail::default_inv_freq(params_.base, dims_.rotary());
        log_zeta_ = params_.decay(dims_.rotary());
        for (double& z : log_zeta_) z = std::log(z);
    }

    [[nodiscard]] const rope_dims& dims() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return dims_; }
    [[nodiscard]] const xpos& params() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return params_; }
    [[nodiscard]] const std::vector<double>& inv_freq() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return inv_freq_; }

    /// The decay factor of pair `pair` at position `pos`: ζ^((pos − c)/scale_base) for a query, its
    /// inverse for a key (double, not range-checked).
    [[nodiscard]] double scale(std::size_t pair, std::int64_t pos, xpos_role role) const {
        if (pair >= log_zeta_.size())
            throw range_error("posenc: xPos pair " + detail::to_text(pair) + " is outside [0, " +
                              detail::to_text(log_zeta_.size()) + ")");
        return std::exp(exponent(pos, role) * log_zeta_[pair]);
    }

    /// Per-token rows [cos·scale | sin·scale] (rotary_dim/2 each), tokens × rotary_dim floats: what
    /// apply() rotates with. Throws range_error if a scale leaves the normal float range.
    [[nodiscard]] std::vector<float> rows(const position_ids& pos, xpos_role role) const {
        require_scales(pos, role);
        std::vector<float> out(pos.size() * dims_.rotary());
        fill_rows(pos, 0, pos.size(), role, out.data());
        return out;
    }

    /// Rotates and scales queries (xpos_role::query) at positions `pos`, in place (float, bf16 or
    /// fp16 storage: computed in float32, rounded once).
    template <storage_type T>
    void apply_queries(heads_view<T> q, const position_ids& pos) const {
        run(detail::job_view::in_place(q), q, pos, xpos_role::query);
    }
    void apply_queries(heads_view<float> q, const position_ids& pos) const { apply_queries<float>(q, pos); }

    /// Rotates and scales keys (xpos_role::key) at positions `pos`, in place.
    template <storage_type T>
    void apply_keys(heads_view<T> k, const position_ids& pos) const {
        run(detail::job_view::in_place(k), k, pos, xpos_role::key);
    }
    void apply_keys(heads_view<float> k, const position_ids& pos) const { apply_keys<float>(k, pos); }

    /// Out of place: dst ← xPos(src), converting between storage types on the way (e.g. keys from
    /// the projection output into a KV-cache slot). dst is src itself (rotated in place) or does not
    /// overlap it (checked).
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_queries_into(heads_view<S> src, heads_view<D> dst, const position_ids& pos) const {
        run_into(src, dst, pos, xpos_role::query);
    }
    template <class S, storage_type D>
        requires storage_type<std::remove_const_t<S>>
    void apply_keys_into(heads_view<S> src, heads_view<D> dst, const position_ids& pos) const {
        run_into(src, dst, pos, xpos_role::key);
    }

    /// Both, at the same positions (prefill). Every check runs before anything is written.
    template <storage_type T>
    void apply(heads_view<T> q, heads_view<T> k, const position_ids& pos) const {
        detail::require_in_place_views(q, k, pos.size(), dims_.head_dim, "q");
        if (!q.empty()) require_scales(pos, xpos_role::query);
        if (!k.empty()) require_scales(pos, xpos_role::key);
        execute(detail::job_view::in_place(q), pos, xpos_role::query);
        execute(detail::job_view::in_place(k), pos, xpos_role::key);
    }
    void apply(heads_view<float> q, heads_view<float> k, const position_ids& pos) const { apply<float>(q, k, pos); }

private:
    static rope_dims checked(rope_dims d) {
        d.validate();
        return d;
    }

    /// pos − center saturates at the int64 limits (no overflow, still monotonic in pos, so that the
    /// range check at the lowest and highest position covers every position).
    [[nodiscard]] double exponent(std::int64_t pos, xpos_role role) const noexcept {
        std::int64_t d = 0;
        if (__builtin_sub_overflow(pos, params_.center, &d)) d = pos > params_.center ? INT64_MAX : INT64_MIN;
        const double e = static_cast<double>(d) / params_.scale_base;
        return role == xpos_role::query ? e : -e;
    }

    template <class T>
    void require_view(const heads_view<T>& v, std::string_view name, std::size_t tokens) const {
        detail::require_view(v, name, tokens, dims_.head_dim);
    }

    template <class T>
    void run(const detail::job_view& jv, const heads_view<T>& x, const position_ids& pos, xpos_role role) const {
        require_view(x, role == xpos_role::query ? "q" : "k", pos.size());
        if (x.empty()) return;
        require_scales(pos, role);
        execute(jv, pos, role);
    }

    template <class S, class D>
    void run_into(heads_view<S> src, heads_view<D> dst, const position_ids& pos, xpos_role role) const {
        const heads_view<const std::remove_const_t<S>> s = src;
        require_view(s, detail::single_view.src, pos.size());
        detail::require_out_of_place(s, dst, detail::single_view);
        if (s.empty()) return;
        require_scales(pos, role);
        execute(detail::job_view::out_of_place(s, dst), pos, role);
    }

    /// Throws range_error if some scale at these positions is not a normal float. A scale is monotonic
    /// in the position for each pair, so the lowest and the highest position decide.
    void require_scales(const position_ids& pos, xpos_role role) const {
        if (pos.size() == 0) return;
        const auto [lo, hi] = pos.bounds();
        for (const std::int64_t p : {lo, hi})
            for (const double lz : log_zeta_) {
                const double sc = std::exp(exponent(p, role) * lz);
                if (!(sc >= static_cast<double>(FLT_MIN) && sc <= static_cast<double>(FLT_MAX)))
                    throw range_error("posenc: xPos scale at position " + detail::to_text(p) + " (center " +
                                      detail::to_text(params_.center) + ") is " + detail::to_text(sc) +
                                      ", outside the float range; choose a center near the middle of the positions");
            }
    }

    /// The rows of tokens [begin, end) into out (require_scales has passed).
    void fill_rows(const position_ids& pos, std::size_t begin, std::size_t end, xpos_role role, float* out) const {
        const std::size_t n = dims_.pairs();
        for (std::size_t t = begin; t < end; ++t) {
            const std::int64_t p = pos[t];
            const double e = exponent(p, role);
            float* c = out + (t - begin) * 2 * n;
            float* s = c + n;
            for (std::size_t i = 0; i < n; ++i) {
                const double sc = std::exp(e * log_zeta_[i]);
                const double a = detail::reduce_angle(static_cast<double>(p) * inv_freq_[i]);
                c[i] = static_cast<float>(sc * std::cos(a));
                s[i] = static_cast<float>(sc * std::sin(a));
            }
        }
    }

    /// Rotates x by blocks of tokens whose rows fit a buffer on the stack: a call (attention makes one
    /// per tile) allocates nothing, whatever its length.
    void execute(const detail::job_view& x, const position_ids& pos, xpos_role role) const {
        if (x.empty()) return;
        detail::rotate_job job;
        job.views = {x, {}};
        job.positions = pos;
        job.rotary_dim = dims_.rotary();
        if (!detail::simd_can_run(job)) {  // rows wider than the SIMD kernels take: the scalar path
            const std::vector<float> r = rows(pos, role);
            job.rows = r.data();
            return detail::run_scalar<Layout>(job);
        }
        constexpr std::size_t buffer_floats = 4096;  // 16 KiB, ≥ one row of simd::max_rotary_dim
        static_assert(buffer_floats >= simd::max_rotary_dim);
        alignas(64) float buffer[buffer_floats];
        const std::size_t block = buffer_floats / job.rotary_dim;
        const simd::rotate_args args = detail::to_args<Layout>(job);
        for (std::size_t b = 0; b < pos.size(); b += block) {
            const std::size_t e = std::min(pos.size(), b + block);
            fill_rows(pos, b, e, role, buffer);
            simd::rotate_args a = detail::slice(args, b, e);
            a.rows = buffer;  // the rows carry the decay
            simd::rotate(a);
        }
    }

    rope_dims dims_;
    xpos params_;
    std::vector<double> inv_freq_;
    std::vector<double> log_zeta_;
};

static_assert(qk_transform<xpos_rotary<half_split>>);
static_assert(qk_transform<xpos_rotary<interleaved>>);

}  // namespace posenc
