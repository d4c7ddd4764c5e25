#pragma once
// The plain-data description of one rotary call (and of one table build) that the per-architecture
// kernels receive. Plain fields, no member functions: code compiled with -mavx512f in a kernel
// translation unit must not emit copies of non-template inline functions that the linker could then
// pick for the whole program (the COMDAT rule, docs/simd-and-precision.md).

#include <cstddef>
#include <cstdint>

#include "posenc/core/dtypes.hpp"

namespace posenc::simd {

enum class layout_id : int { interleaved, half_split };

/// Largest rotary_dim (and, with a fused norm, head_dim) the SIMD kernels handle (their per-token
/// rows live on the stack); wider ones take the scalar path.
inline constexpr std::size_t max_rotary_dim = 1024;

/// One tensor of a call (Q or K): read from `src`, written to `dst` (the same memory for an in-place
/// call; otherwise not overlapping it), element types `src_type` / `dst_type`, strides in elements.
struct view_args {
    const void* src = nullptr;  ///< nullptr or 0 heads: absent
    void* dst = nullptr;
    dtype src_type = dtype::f32;
    dtype dst_type = dtype::f32;
    std::size_t heads = 0;
    std::size_t src_token_stride = 0, src_head_stride = 0;
    std::size_t dst_token_stride = 0, dst_head_stride = 0;
    /// Fused per-head RMSNorm before the rotation: x·(1/√(mean(x²) + eps))·w over head_dim lanes,
    /// w = norm_weight[0, head_dim) (already 1 + weight for Gemma). nullptr: no norm.
    const float* norm_weight = nullptr;
    double norm_eps = 0.0;
};

struct rotate_args {
    view_args view[2];
    std::size_t tokens = 0;
    // Position of token t: pos64[t], else pos32[t], else pos_start + pos_step·t.
    const std::int64_t* pos64 = nullptr;
    const std::int32_t* pos32 = nullptr;
    std::int64_t pos_start = 0;
    std::int64_t pos_step = 1;
    std::size_t head_dim = 0;  ///< lanes [rotary_dim, head_dim) pass through (copied when out of place)
    std::size_t rotary_dim = 0;
    layout_id layout = layout_id::half_split;
    bool inverse = false;
    // cos/sin rows ([cos × pairs | sin × pairs], amplitude included), first match wins:
    const float* rows = nullptr;      ///< one per token
    const float* table = nullptr;     ///< one per position (row p at table + p·rotary_dim)
    const double* inv_freq = nullptr;  ///< else computed on the fly, × amplitude
    double amplitude = 1.0;
    double row_scale = 1.0;  ///< rows and table rows are multiplied by this (inverse: 1/amplitude²)
    /// Software-prefetch bf16/fp16 sources as float ones are (the next token's heads). detail::to_args
    /// sets it from simd::prefetch_16bit() (simd/cpu.hpp: on unless POSENC_PREFETCH_16BIT is 0); code
    /// that fills rotate_args itself gets false unless it asks. (Not defaulted to that call here: this
    /// header is compiled into the per-architecture kernel units, which must not emit it.)
    bool prefetch_16bit = false;
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
