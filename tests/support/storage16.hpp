// Independent references for 16-bit storage tests: bf16 and fp16 rounding written out in double
// from the formats' definitions, and conversions between float vectors and 16-bit storage.
#pragma once

#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace posenc_test {

/// x rounded to nearest even with `mantissa` explicit bits, exponents from `min_exp` (subnormal
/// quantum below it), overflowing to inf at `max_finite` + half an ulp: evaluated in double.
inline double round_to_format(double x, int mantissa, int min_exp, double max_finite) {
    if (std::isnan(x) || x == 0.0) return x;
    const double a = std::abs(x);
    const int e = std::max(std::ilogb(a), min_exp);
    const double quantum = std::ldexp(1.0, e - mantissa);
    const double top_quantum = std::ldexp(1.0, std::ilogb(max_finite) - mantissa);
    if (a >= max_finite + top_quantum / 2) return std::copysign(INFINITY, x);
    double r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest even
    if (r > max_finite) r = INFINITY;
    return std::copysign(r, x);
}
inline double round_fp16(double x) { return round_to_format(x, 10, -14, 65504.0); }
inline double round_bf16(double x) { return round_to_format(x, 7, -126, std::ldexp(255.0, 120)); }  // (2 − 2^-7)·2^127

template <class T>
double round_to(double x) {
    if constexpr (std::is_same_v<T, posenc::bf16>) return round_bf16(x);
    else if constexpr (std::is_same_v<T, posenc::fp16>) return round_fp16(x);
    else return static_cast<double>(static_cast<float>(x));
}

/// One ulp of the storage type at |x| (the spacing above |x|'s binade start).
template <class T>
double ulp_of(double x) {
    const int mant = std::is_same_v<T, posenc::bf16> ? 7 : std::is_same_v<T, posenc::fp16> ? 10 : 23;
    const int min_exp = std::is_same_v<T, posenc::fp16> ? -14 : -126;
    return std::ldexp(1.0, std::max(std::ilogb(std::abs(x) + 1e-300), min_exp) - mant);
}

template <class T>
double as_double(T v) {
    return static_cast<double>(static_cast<float>(v));
}

template <class T>
std::vector<T> to_storage(const std::vector<float>& x) {
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = T(x[i]);
    return out;
}

template <class T>
const char* type_name() {
    return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, posenc::bf16> ? "bf16" : "fp16";
}

}  // namespace posenc_test
