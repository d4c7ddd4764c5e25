#pragma once
// Storage types for Q/K activations: float, bf16 (bfloat16: float's sign and exponent, 7 mantissa
// bits) and fp16 (IEEE binary16). posenc computes in float32 and rounds once to the storage type,
// round-to-nearest-even; these are storage only (no arithmetic operators), two bytes, trivially
// copyable, so that a heads_view<bf16> can sit on an engine's own buffers.
//
// The conversions are templates on a tag (default void) so that every SIMD kernel unit, compiled
// with its own -m flags, instantiates its own copy and never shares machine code with baseline code
// (the COMDAT rule, docs/simd-and-precision.md); __builtin_bit_cast rather than std::bit_cast, whose
// instantiations would be shared between the units.

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace posenc {

enum class dtype : int { f32, bf16, fp16 };

namespace detail {

/// float → bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN, overflow gives ±inf.
template <class Tag = void>
constexpr std::uint16_t float_to_bf16_bits(float f) noexcept {
    const std::uint32_t u = __builtin_bit_cast(std::uint32_t, f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

template <class Tag = void>
constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
    return __builtin_bit_cast(float, static_cast<std::uint32_t>(b) << 16);
}

/// float → IEEE binary16 bits, round to nearest even (subnormals included); |f| ≥ 65520 gives ±inf;
/// NaN → quiet NaN with the top mantissa bits kept (what F16C's vcvtps2ph does).
template <class Tag = void>
constexpr std::uint16_t float_to_fp16_bits(float f) noexcept {
    const std::uint32_t u = __builtin_bit_cast(std::uint32_t, f);
    const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // ≥ 65520: rounds to inf
    if (a >= 0x38800000u)                                                      // normal half (≥ 2^-14)
        return static_cast<std::uint16_t>(sign | ((a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u)) >> 13));
    if (a <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // ≤ 2^-25 (the tie rounds to even 0)
    // Subnormal half: round(|f| / 2^-24), |f| = m·2^(e−150).
    const std::uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;  // 14 ≤ shift ≤ 24
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
}

template <class Tag = void>
constexpr float fp16_bits_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {  // zero or subnormal: m·2^-24, exact in float
        const float v = static_cast<float>(m) * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return __builtin_bit_cast(float, sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
    return __builtin_bit_cast(float, sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

/// bfloat16 storage. bf16(x) rounds to nearest even; float(b) is exact.
struct bf16 {
    std::uint16_t bits;  // no initializer: a trivial type, like float (bf16{} is zero)

    bf16() = default;
    explicit constexpr bf16(float f) noexcept : bits(detail::float_to_bf16_bits(f)) {}
    [[nodiscard]] static constexpr bf16 from_bits(std::uint16_t b) noexcept {
        bf16 r{};
        r.bits = b;
        return r;
    }
    explicit constexpr operator float() const noexcept { return detail::bf16_bits_to_float(bits); }
    friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }  // bit equality
};

/// IEEE binary16 storage. fp16(x) rounds to nearest even; float(h) is exact.
struct fp16 {
    std::uint16_t bits;  // no initializer: a trivial type, like float (fp16{} is zero)

    fp16() = default;
    explicit constexpr fp16(float f) noexcept : bits(detail::float_to_fp16_bits(f)) {}
    [[nodiscard]] static constexpr fp16 from_bits(std::uint16_t b) noexcept {
        fp16 r{};
        r.bits = b;
        return r;
    }
    explicit constexpr operator float() const noexcept { return detail::fp16_bits_to_float(bits); }
    friend constexpr bool operator==(fp16 a, fp16 b) noexcept { return a.bits == b.bits; }  // bit equality
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2);
static_assert(std::is_standard_layout_v<bf16> && std::is_standard_layout_v<fp16>);  // one uint16_t each (docs/engine-integration.md)
static_assert(std::is_trivial_v<bf16> && std::is_trivial_v<fp16>);

/// The element types Q/K views may hold.
template <class T>
concept storage_type = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, fp16>;

/// bf16 or fp16 (float has its own, non-template overloads).
template <class T>
concept half_storage = storage_type<T> && !std::same_as<T, float>;

/// K and V element types (each const or not) of which at least one is bf16 or fp16: what the 16-bit
/// attention overloads take; a float/16-bit mix only to stop it at a static_assert that names the rule.
template <class K, class V>
concept half_kv_pair = storage_type<std::remove_const_t<K>> && storage_type<std::remove_const_t<V>> &&
                       (half_storage<std::remove_const_t<K>> || half_storage<std::remove_const_t<V>>);

template <storage_type T>
inline constexpr dtype dtype_of = std::same_as<T, float> ? dtype::f32 : std::same_as<T, bf16> ? dtype::bf16 : dtype::fp16;

[[nodiscard]] constexpr std::size_t size_of(dtype t) noexcept { return t == dtype::f32 ? 4 : 2; }

}  // namespace posenc
