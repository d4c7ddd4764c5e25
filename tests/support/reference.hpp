#pragma once
// Independent double-precision references, written from the formulas (not from posenc's code).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace posenc_test {

/// The larger of a running worst case m and a new difference d, NaN once either is NaN. (std::max(m, d)
/// returns m for a NaN d, so a NaN lane would pass every later `<= tolerance` check.) Every running
/// worst-case difference in the tests folds through this.
template <class T>
constexpr T worst_of(T m, std::type_identity_t<T> d) noexcept {
    static_assert(std::is_floating_point_v<T>, "a floating-point accumulator (worst_of(0, x) would be int)");
    return (d > m || d != d) ? d : m;
}

/// Rotates one head (double) by angle p·inv[i] per pair, amplitude a; `interleaved` selects pairs
/// (2i, 2i+1), otherwise (i, i + r/2). Lanes ≥ r untouched.
inline std::vector<double> reference_rotate(const std::vector<double>& x, std::size_t r, bool interleaved,
                                            const std::vector<double>& inv, std::int64_t p, double a = 1.0) {
    std::vector<double> y = x;
    for (std::size_t i = 0; i < r / 2; ++i) {
        const std::size_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + r / 2;
        const double ang = static_cast<double>(p) * inv[i];
        const double c = a * std::cos(ang), s = a * std::sin(ang);
        y[i1] = x[i1] * c - x[i2] * s;
        y[i2] = x[i2] * c + x[i1] * s;
    }
    return y;
}

/// Closed-form inverse frequencies base^(−2i/d), i < d/2, in double.
inline std::vector<double> closed_form_inv_freq(double base, std::size_t d) {
    std::vector<double> inv(d / 2);
    for (std::size_t i = 0; i < inv.size(); ++i)
        inv[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    return inv;
}

/// Worst error of the float lanes `got` against the double reference `ref`, over heads of `head_dim`
/// lanes laid end to end in `x` (the input), in float ulps of each rotated pair's length
/// amplitude·|(x1, x2)| (one output lane alone can be tiny through cancellation). Pairs as
/// reference_rotate pairs them. Lanes ≥ r of every head must be bit-identical to the input:
/// any change there counts as infinitely wrong.
inline double worst_pair_ulps(const std::vector<float>& x, const std::vector<float>& got, const std::vector<double>& ref,
                              std::size_t head_dim, std::size_t r, bool interleaved, double amplitude) {
    double worst = 0;
    for (std::size_t base = 0; base + head_dim <= x.size(); base += head_dim) {
        for (std::size_t i = 0; i < r / 2; ++i) {
            const std::size_t i1 = base + (interleaved ? 2 * i : i), i2 = base + (interleaved ? 2 * i + 1 : i + r / 2);
            const auto m = static_cast<float>(std::hypot(double(x[i1]), double(x[i2])) * amplitude);
            const double ulp = std::max(double(std::nextafter(m, 3e38f) - m), 1e-38);
            worst = worst_of(worst_of(worst, std::abs(double(got[i1]) - ref[i1]) / ulp), std::abs(double(got[i2]) - ref[i2]) / ulp);
        }
        for (std::size_t j = base + r; j < base + head_dim; ++j)
            if (got[j] != x[j]) return 1e300;
    }
    return worst;
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// Both differences are NaN when the sizes differ or some element of a or b is NaN, so that every
// comparison with them fails (a `<= tolerance` check and a `> tolerance` one alike).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = worst_of(m, std::abs(a[i] - b[i]));
    return m;
}

inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = worst_of(m, a[i] == b[i] ? 0.0 : std::abs(a[i] - b[i]) / std::abs(b[i]));  // equal elements (zeros too): 0, not 0/0
    return m;
}

/// y = W·x in double, rounded to float: W is [rows][x.size()], row-major.
inline std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x) {
    const std::size_t cols = x.size(), rows = w.size() / cols;
    std::vector<float> y(rows);
    for (std::size_t r = 0; r < rows; ++r) {
        double s = 0;
        for (std::size_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * x[c];
        y[r] = static_cast<float>(s);
    }
    return y;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

inline double max_abs(const std::vector<float>& x) {
    double m = 0;
    for (float f : x) m = worst_of(m, static_cast<double>(std::abs(f)));  // NaN data: a NaN scale
    return m;
}

/// Bit-for-bit equality (so -0 ≠ +0 and equal NaNs count as equal).
/// (n = 0 compares nothing: an empty vector's data() may be null, which memcmp must not get.)
inline bool same_bits(const float* a, const float* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0; }
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

}  // namespace posenc_test
