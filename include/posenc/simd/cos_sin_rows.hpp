#pragma once
// The rotary kernels' cos/sin rows, templated on the architecture: one position's row computed in
// double (a direct row), consecutive positions' rows by an exact-or-recomputed recurrence, and the
// rows of a table.
// Only arch-templated code lives here (the COMDAT rule, rotate_args.hpp); kernels.hpp puts the parts
// together.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "posenc/core/detail/angles.hpp"
#include "posenc/simd/lane_io.hpp"
#include "posenc/simd/rotate_args.hpp"
#include "posenc/simd/xsimd_compat.hpp"

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

template <class Arch>
struct cos_sin_rows : lane_io<Arch> {
    using base = lane_io<Arch>;
    using typename base::ops;
    using typename base::dbatch;
    using base::W;
    using base::WD;
    using typename base::fbatch;
    static constexpr std::int64_t far_position = std::int64_t{1} << 26;

    // ---- cos/sin rows ---------------------------------------------------------------------------

    /// cos/sin × amplitude of p·θᵢ for one position, into c[0, pairs) and s[0, pairs); c and s need
    /// room for `pairs` rounded up to W. All in double: the angle is reduced to a quadrant q and
    /// r ∈ [−π/4, π/4]; cos r and sin r come from their Taylor series (through r¹⁶ and r¹⁵, whose
    /// remainders are below 1e-16 there) and are mapped to the quadrant; only the result is rounded
    /// to float. Cheap enough to run per token in the hot loop (no general-purpose sincos with its
    /// own range reduction), and equal to the scalar reference up to a rare 1-ulp double rounding.
    /// Every lane takes the same operations whatever the width, so the rows are width-independent.
    /// Always inlined (the rest out of line): a one-token call waits on this row, and the call's
    /// frame for the scalar route's buffers and its prologue were a visible part of it.
    [[gnu::always_inline]] static void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position,
                                                   double amplitude, float* c, float* s) noexcept {
        if (pairs % W == 0 && position <= far_position && position >= -far_position) {
            // Whole float vectors narrowed in registers: no double row in memory, no per-lane
            // rounding loop whose narrow stores the rotation's vector loads would wait on.
            const dbatch p(static_cast<double>(position)), amp(amplitude);
            const auto columns = [&](auto scaled) {
                bool reduced = true;
                for (std::size_t i = 0; i < pairs; i += W) {
                    fbatch cv, sv;
                    reduced &= cos_sin_column<decltype(scaled)::value>(inv_freq + i, p, amp, cv, sv);
                    cv.store_unaligned(c + i);
                    sv.store_unaligned(s + i);
                }
                return reduced;
            };
            // (× 1 changes no bits: amplitude 1, the common case, skips the products.)
            if (amplitude == 1.0 ? columns(std::false_type{}) : columns(std::true_type{})) return;
        }
        cos_sin_row_through_double(inv_freq, pairs, position, amplitude, c, s);
    }

    /// The float row through a double row: pairs not a multiple of W, far positions, and angles
    /// beyond the vector reduction's reach (the scalar route).
    [[gnu::noinline]] static void cos_sin_row_through_double(const double* inv_freq, std::size_t pairs, std::int64_t position,
                                                             double amplitude, float* c, float* s) noexcept {
        alignas(64) double cd[max_rotary_dim / 2 + 2 * W], sd[max_rotary_dim / 2 + 2 * W];
        cos_sin_row(inv_freq, pairs, position, amplitude, cd, sd);
        to_float(cd, sd, pairs, c, s);
    }

    static void to_float(const double* cd, const double* sd, std::size_t pairs, float* c, float* s) noexcept {
        for (std::size_t i = 0; i < pairs; ++i) {
            c[i] = static_cast<float>(cd[i]);
            s[i] = static_cast<float>(sd[i]);
        }
    }

    /// The same in double, into cd and sd (room for `pairs` rounded up to the double vector width).
    static void cos_sin_row(const double* inv_freq, std::size_t pairs, std::int64_t position, double amplitude,
                            double* cd, double* sd) noexcept {
        // Positions beyond 2^26, and rows with an angle beyond the vector reduction's reach
        // (max_quadrants), take the scalar path.
        if (position > far_position || position < -far_position) return scalar_row(inv_freq, pairs, position, amplitude, cd, sd);
        // Whole vectors read in place, the last partial one from a zero-padded copy (g++ made a copy
        // of the whole row a rep movs, slow to start in a one-token call).
        const std::size_t full = pairs / WD * WD, padded = (pairs + WD - 1) / WD * WD;
        alignas(64) double tail[WD] = {};
        for (std::size_t i = full; i < pairs; ++i) tail[i - full] = inv_freq[i];
        const dbatch p(static_cast<double>(position)), amp(amplitude);
        bool reduced = true;
        for (std::size_t i = 0; i < padded; i += WD) {
            dbatch cv, sv;
            if (!cos_sin_lanes(p * (i < full ? dbatch::load_unaligned(inv_freq + i) : dbatch::load_aligned(tail)), amp, cv, sv))
                reduced = false;
            cv.store_unaligned(cd + i);
            sv.store_unaligned(sd + i);
        }
        if (!reduced) scalar_row(inv_freq, pairs, position, amplitude, cd, sd);
    }

    /// The row through detail::reduce_angle and std::cos/sin (the scalar reference's path).
    static void scalar_row(const double* inv_freq, std::size_t pairs, std::int64_t position, double amplitude, double* cd,
                           double* sd) noexcept {
        for (std::size_t i = 0; i < pairs; ++i) {
            const double r = detail::reduce_angle<Arch>(static_cast<double>(position) * inv_freq[i]);
            cd[i] = amplitude * std::cos(r);
            sd[i] = amplitude * std::sin(r);
        }
    }

    /// cos/sin × amp of p·θᵢ for the W pairs from inv_freq (|p| ≤ far_position), as float vectors in
    /// registers: the lanes cos_sin_row gives, computed the same way; false as cos_sin_lanes.
    template <bool Scaled = true>
    [[gnu::always_inline]] static bool cos_sin_column(const double* inv_freq, const dbatch& p, const dbatch& amp, fbatch& c,
                                                      fbatch& s) noexcept {
        static_assert(W == 2 * WD);
        dbatch c0, s0, c1, s1;
        const bool low = cos_sin_lanes<Scaled>(p * dbatch::load_unaligned(inv_freq), amp, c0, s0);
        const bool high = cos_sin_lanes<Scaled>(p * dbatch::load_unaligned(inv_freq + WD), amp, c1, s1);
        c = ops::narrow(c0, c1);
        s = ops::narrow(s0, s1);
        return low && high;
    }

    /// The vector reduction subtracts n·π/2 for |n| below this many quadrants: with FMA, π/2 in two
    /// parts (hi·n exact inside the FMA, the parts' error ~1e-33·n); without, in three whose
    /// products with n need no rounding (Cody and Waite: the first two parts have at most 24
    /// significant bits). Two parts with a rounded n·hi lost ~2^-53·|a|, many ulps of a cos or sin
    /// near 0 at large angles.
    static constexpr double max_quadrants = ops::has_fma ? 0x1p50 : 0x1p29;
    static constexpr double two_over_pi = 0.6366197723675814;

    /// The quadrant counts n = round(a·2/π) that cos_sin_lanes reduces the angles a by.
    [[gnu::always_inline]] static dbatch quadrants(const dbatch& a) noexcept { return xsimd::nearbyint(a * dbatch(two_over_pi)); }
    /// Whether every lane's n is within max_quadrants (false for NaN).
    [[gnu::always_inline]] static bool within_reach(const dbatch& n) noexcept {
        return xsimd::all(xsimd::abs(n) < dbatch(max_quadrants));
    }
    /// Whether cos_sin_lanes reduces every angle p·θᵢ of a row of `pairs` (a multiple of WD): the same
    /// test, asked before any of the row is used.
    static bool row_within_reach(const double* inv_freq, std::size_t pairs, const dbatch& p) noexcept {
        bool reach = true;
        for (std::size_t i = 0; i < pairs; i += WD) reach &= within_reach(quadrants(p * dbatch::load_unaligned(inv_freq + i)));
        return reach;
    }

    /// cos/sin × amp of the angles a, lane by lane in double: a is reduced to a quadrant q and
    /// r ∈ [−π/4, π/4]; cos r and sin r come from their Taylor series (through r¹⁶ and r¹⁵, whose
    /// remainders are below 1e-16 there) and are mapped to the quadrant. False when some lane's a is
    /// beyond max_quadrants·π/2 (or NaN): those lanes are garbage, and the caller takes the scalar path.
    template <bool Scaled = true>
    [[gnu::always_inline]] static bool cos_sin_lanes(const dbatch& a, const dbatch& amp, dbatch& c, dbatch& s) noexcept {
        constexpr double half_pi_hi = 1.5707963267948966, half_pi_lo = 6.123233995736766e-17;
        using ibatch = xsimd::batch<std::int64_t, Arch>;
        const dbatch n = quadrants(a);
        // Lanes out of reach (or NaN) compute garbage the caller discards: nothing below converts n
        // to an integer type, so no lane is undefined.
        const bool reduced = within_reach(n);
        dbatch r;
        if constexpr (ops::has_fma)
            r = ops::fnma(n, dbatch(half_pi_lo), ops::fnma(n, dbatch(half_pi_hi), a));
        else
            r = ((a - n * dbatch(0x1.921fb6p+0)) - n * dbatch(-0x1.777a5cp-25)) - n * dbatch(-0x1.ee59d9cceba40p-50);
        const dbatch z = r * r;
        dbatch sn = ops::fma(z, dbatch(-1.0 / 1307674368000.0), dbatch(1.0 / 6227020800.0));
        sn = ops::fma(z, sn, dbatch(-1.0 / 39916800.0));
        sn = ops::fma(z, sn, dbatch(1.0 / 362880.0));
        sn = ops::fma(z, sn, dbatch(-1.0 / 5040.0));
        sn = ops::fma(z, sn, dbatch(1.0 / 120.0));
        sn = ops::fma(z, sn, dbatch(-1.0 / 6.0));
        sn = ops::fma(z * r, sn, r);
        dbatch cs = ops::fma(z, dbatch(1.0 / 20922789888000.0), dbatch(-1.0 / 87178291200.0));
        cs = ops::fma(z, cs, dbatch(1.0 / 479001600.0));
        cs = ops::fma(z, cs, dbatch(-1.0 / 3628800.0));
        cs = ops::fma(z, cs, dbatch(1.0 / 40320.0));
        cs = ops::fma(z, cs, dbatch(-1.0 / 720.0));
        cs = ops::fma(z, cs, dbatch(1.0 / 24.0));
        cs = ops::fma(z * z, cs, ops::fnma(dbatch(0.5), z, dbatch(1.0)));
        // angle = n·π/2 + r: q = n mod 4 = 1 gives (cos, sin) = (−sin r, cos r), q = 2 (−cos r, −sin r),
        // q = 3 (sin r, −cos r). q is the low two bits of n + 1.5·2⁵² (exact for |n| < 2⁵¹; 1.5·2⁵²
        // is a multiple of 4, so negative n wrap as they should).
        ops::quadrant(xsimd::bitwise_cast<ibatch>(n + dbatch(0x1.8p52)), cs, sn, c, s);
        if constexpr (Scaled) {
            c *= amp;
            s *= amp;
        }
        return reduced;
    }

    /// Consecutive positions (prefill): the next row from the previous one by the angle-addition
    /// formulas in double, (c, s) ← (c·cos θ − s·sin θ, s·cos θ + c·sin θ), re-seeded with a direct
    /// row at every multiple of `reseed`. A recurrence value v is used only where it provably rounds
    /// to the same float as the direct row's: float(v − B) == float(v + B), with B bounding their
    /// difference (the two angles' roundings, (|p| + reseed)·θ·2^-52, plus 1e-13 for 31 steps of a
    /// few double ulps, × amplitude). Otherwise (a small fraction of the rows, more at large positions)
    /// the row is computed directly. So every row is bit-identical to the direct one — a token's
    /// result does not depend on where its call starts — at a fraction of the direct row's cost.
    struct consecutive_rows {
        static constexpr std::int64_t reseed = 32;
        alignas(64) double cd[max_rotary_dim / 2 + 2 * W], sd[max_rotary_dim / 2 + 2 * W];
        alignas(64) double step_c[max_rotary_dim / 2 + 2 * W], step_s[max_rotary_dim / 2 + 2 * W];
        std::size_t pairs = 0;

        void start(const double* inv_freq, std::size_t n) noexcept {
            pairs = n;
            cos_sin_row(inv_freq, n, 1, 1.0, step_c, step_s);
            const std::size_t padded = (n + WD - 1) / WD * WD;
            for (std::size_t i = n; i < padded; ++i) step_c[i] = step_s[i] = 0.0;
        }

        void advance() noexcept {
            for (std::size_t i = 0; i < pairs; i += WD) {
                const dbatch c0 = dbatch::load_aligned(cd + i), s0 = dbatch::load_aligned(sd + i);
                const dbatch sc = dbatch::load_aligned(step_c + i), ss = dbatch::load_aligned(step_s + i);
                ops::fnma(s0, ss, c0 * sc).store_aligned(cd + i);
                ops::fma(c0, ss, s0 * sc).store_aligned(sd + i);
            }
        }

        /// Rounds the recurrence row to float; false if some value might round differently from the
        /// direct row's.
        bool to_float_checked(const double* inv_freq, std::int64_t position, double amplitude, float* c,
                              float* s) const noexcept {
            // (No std::abs: a non-template inline function, the COMDAT rule.)
            const double p = static_cast<double>(position);
            const double reach = ((p < 0 ? -p : p) + reseed) * 0x1p-52;
            const double amp = amplitude < 0 ? -amplitude : amplitude;
            int unstable = 0;
            for (std::size_t i = 0; i < pairs; ++i) {
                const double b = amp * (reach * inv_freq[i] + 1e-13);
                const double x = cd[i], y = sd[i];
                c[i] = static_cast<float>(x);
                s[i] = static_cast<float>(y);
                unstable |= (static_cast<float>(x - b) != static_cast<float>(x + b)) |
                            (static_cast<float>(y - b) != static_cast<float>(y + b));
            }
            return unstable == 0;
        }

        /// Row of `position`; `first` for the first token of a call (or slice).
        void row(const double* inv_freq, std::int64_t position, double amplitude, bool first, float* c,
                 float* s) noexcept {
            const std::int64_t offset = ((position % reseed) + reseed) % reseed;
            if (offset == 0 || first) {
                cos_sin_row(inv_freq, pairs, position - offset, amplitude, cd, sd);
                if (offset == 0) return to_float(cd, sd, pairs, c, s);  // a direct row
                for (std::int64_t k = 0; k < offset; ++k) advance();
            } else {
                advance();
            }
            if (!to_float_checked(inv_freq, position, amplitude, c, s)) cos_sin_row(inv_freq, pairs, position, amplitude, c, s);
        }
    };

    /// Table rows: the same computation for consecutive positions.
    static void table_rows(const table_args& t) noexcept {
        for (std::size_t k = 0; k < t.positions; ++k) {
            float* row = t.out + k * 2 * t.pairs;
            cos_sin_row(t.inv_freq, t.pairs, t.first_position + static_cast<std::int64_t>(k), t.amplitude, row,
                        row + t.pairs);
        }
    }
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP
