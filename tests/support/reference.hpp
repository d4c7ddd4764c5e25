#pragma once
// Independent double-precision references, written from the formulas (not from posenc's code).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace posenc_test {

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

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::abs(b[i]));
    return m;
}

}  // namespace posenc_test
