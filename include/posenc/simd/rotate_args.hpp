#pragma once
// The plain-data description of one rotary call (and of one table build) that the per-architecture
// kernels receive. Plain fields, no member functions: code compiled with -mavx512f in a kernel
// translation unit must not emit copies of non-template inline functions that the linker could then
// pick for the whole program (the COMDAT trap, shared/notes/xsimd.md).

#include <cstddef>
#include <cstdint>

namespace posenc::simd {

enum class layout_id : int { interleaved, half_split };

/// Largest rotary_dim the SIMD kernels handle (their per-token rows live on the stack); wider
/// rotations take the scalar path.
inline constexpr std::size_t max_rotary_dim = 1024;

struct rotate_args {
    float* data[2] = {nullptr, nullptr};  ///< Q and K (nullptr or 0 heads: absent)
    std::size_t heads[2] = {0, 0};
    std::size_t token_stride[2] = {0, 0};
    std::size_t head_stride[2] = {0, 0};
    std::size_t tokens = 0;
    // Position of token t: pos64[t], else pos32[t], else pos_start + pos_step·t.
    const std::int64_t* pos64 = nullptr;
    const std::int32_t* pos32 = nullptr;
    std::int64_t pos_start = 0;
    std::int64_t pos_step = 1;
    std::size_t rotary_dim = 0;
    layout_id layout = layout_id::half_split;
    bool inverse = false;
    // cos/sin rows ([cos × pairs | sin × pairs], amplitude included), first match wins:
    const float* rows = nullptr;      ///< one per token
    const float* table = nullptr;     ///< one per position (row p at table + p·rotary_dim)
    const double* inv_freq = nullptr;  ///< else computed on the fly, × amplitude
    double amplitude = 1.0;
    double row_scale = 1.0;  ///< rows and table rows are multiplied by this (inverse: 1/amplitude²)
};

struct table_args {
    const double* inv_freq = nullptr;
    std::size_t pairs = 0;
    std::int64_t first_position = 0;
    std::size_t positions = 0;
    double amplitude = 1.0;
    float* out = nullptr;  ///< positions rows of [cos × pairs | sin × pairs]
};

}  // namespace posenc::simd
