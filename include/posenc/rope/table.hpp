#pragma once
// cos_sin_table: cos/sin for positions 0..positions()-1 and every rotary pair, float, amplitude
// included. Row p holds pairs() cosines followed by pairs() sines. Angles are formed and reduced in
// double, cos/sin evaluated in double (vectorized), and only the stored values are float.

#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/detail/angles.hpp"
#include "posenc/core/detail/checked_size.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/detail/table_storage.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/simd/dispatch.hpp"

namespace posenc {

class cos_sin_table {
public:
    cos_sin_table(const rope_frequencies& freq, std::int64_t positions)
        : inv_freq_(freq.inv_freq), amplitude_(freq.attention_factor), positions_(positions) {
        detail::require(positions >= 0, "positions", positions, "must be >= 0");
        detail::require(!inv_freq_.empty(), "inv_freq", "empty", "a table needs at least one pair");
        detail::require_usable(freq);
        const std::size_t n = pairs();
        data_.resize(detail::checked_mul(static_cast<std::size_t>(positions), 2 * n, "cos_sin_table size"));
        if (2 * n > simd::max_rotary_dim) {
            for (std::int64_t p = 0; p < positions; ++p) {
                float* r = data_.data() + static_cast<std::size_t>(p) * 2 * n;
                detail::cos_sin_row(inv_freq_.data(), n, p, amplitude_, r, r + n);
            }
            return;
        }
        simd::table_args args;
        args.inv_freq = inv_freq_.data();
        args.pairs = n;
        args.positions = static_cast<std::size_t>(positions);
        args.amplitude = amplitude_;
        args.out = data_.data();
        simd::build_table(args);
    }

    [[nodiscard]] std::int64_t positions() const noexcept { return positions_; }
    [[nodiscard]] std::size_t pairs() const noexcept { return inv_freq_.size(); }
    [[nodiscard]] double amplitude() const noexcept { return amplitude_; }
    [[nodiscard]] const std::vector<double>& inv_freq() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return inv_freq_; }

    [[nodiscard]] bool contains(std::int64_t p) const noexcept { return p >= 0 && p < positions_; }

    /// Throws range_error naming the first position outside the table.
    void check(const position_ids& ids) const {
        const auto [lo, hi] = ids.bounds();
        if (ids.size() == 0 || (contains(lo) && contains(hi))) return;
        const std::int64_t bad = contains(lo) ? hi : lo;
        throw range_error("posenc: position " + detail::to_text(bad) + " is outside the cos/sin table [0, " +
                          detail::to_text(positions_) + ")");
    }

    [[nodiscard]] std::span<const float> cos(std::int64_t p) const POSENC_DETAIL_LIFETIMEBOUND { return {checked_row(p), pairs()}; }
    [[nodiscard]] std::span<const float> sin(std::int64_t p) const POSENC_DETAIL_LIFETIMEBOUND { return {checked_row(p) + pairs(), pairs()}; }

    /// All rows, row p at data() + p·2·pairs().
    [[nodiscard]] const float* data() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return data_.data(); }

    /// Unchecked: precondition contains(p).
    [[nodiscard]] const float* row(std::int64_t p) const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        assert(contains(p));
        return data_.data() + static_cast<std::size_t>(p) * 2 * pairs();
    }

private:
    [[nodiscard]] const float* checked_row(std::int64_t p) const {
        check(position_ids::consecutive(p, 1));
        return row(p);
    }

    std::vector<double> inv_freq_;
    double amplitude_ = 1.0;
    std::int64_t positions_ = 0;
    detail::table_vector<float> data_;
};

}  // namespace posenc
