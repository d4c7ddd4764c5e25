#pragma once
// The attention kernel's three SIMD steps as plain-data calls, functors templated on the xsimd
// architecture (the shape xsimd::dispatch calls). Declared here; defined in kernels.hpp, which only
// the per-architecture translation units (or a build without run-time dispatch) include. Everything
// policy-shaped (transform, bias, mask, scale) stays in the caller's code: these steps are fixed types.
//
// Layout of a tile: `rows` query rows (row r = query token t·G + head g of a kv-head group), up to
// attn_key_tile keys. Scores S are [rows][attn_key_tile] floats, 64-byte aligned.

#include <cstddef>

namespace posenc::simd {

/// Keys per tile (every architecture: the summation order, hence the result, must not depend on it).
inline constexpr std::size_t attn_key_tile = 64;
/// Query rows are processed in blocks of this many (scratch rows are padded to a multiple).
inline constexpr std::size_t attn_row_block = 4;

/// S[r][j] = Σ_d q[r][d]·k_j[d] for r < rows (a multiple of attn_row_block), j < attn_key_tile
/// (keys ≥ `keys` give 0). q: dense [rows][head_dim]; key j at k + j·k_stride; kt: scratch of
/// head_dim·attn_key_tile floats, 64-byte aligned.
struct attn_qk_args {
    const float* q = nullptr;
    std::size_t rows = 0;
    std::size_t head_dim = 0;
    const float* k = nullptr;
    std::size_t k_stride = 0;
    std::size_t keys = 0;
    float* kt = nullptr;
    float* s = nullptr;
};

/// One online-softmax step over a score tile (rows real rows, keys valid columns; −∞ = masked):
/// soft-capping of finite logits (softcap > 0), new running max m, numerators p = exp(s − m) written
/// over S (0 past `keys`), running sum l and accumulator rows acc[r][0, dv) rescaled by exp(m_old − m).
/// A row that has seen no visible key keeps m = −∞, l = 0 and gets p = 0.
struct attn_softmax_args {
    float* s = nullptr;
    std::size_t rows = 0;
    std::size_t keys = 0;
    float* m = nullptr;
    float* l = nullptr;
    float* acc = nullptr;
    std::size_t acc_stride = 0;
    std::size_t dv = 0;
    float softcap = 0.0f;
};

/// acc[r][0, dv) += Σ_{j < keys} p[r][j]·v_j, v_j at v + j·v_stride. acc is 64-byte aligned and
/// acc_stride a multiple of 16 floats ≥ dv: the lanes [dv, acc_stride) are scratch (the last
/// vector of a row is read and written whole).
struct attn_pv_args {
    const float* p = nullptr;
    std::size_t rows = 0;
    std::size_t keys = 0;
    const float* v = nullptr;
    std::size_t v_stride = 0;
    std::size_t dv = 0;
    float* acc = nullptr;
    std::size_t acc_stride = 0;
};

struct attn_qk_functor {
    template <class Arch>
    void operator()(Arch, const attn_qk_args& a) const noexcept;
};
struct attn_softmax_functor {
    template <class Arch>
    void operator()(Arch, const attn_softmax_args& a) const noexcept;
};
struct attn_pv_functor {
    template <class Arch>
    void operator()(Arch, const attn_pv_args& a) const noexcept;
};

/// The three steps for one architecture, resolved once per attention call.
struct attn_kernels {
    void (*qk)(const attn_qk_args&) noexcept = nullptr;
    void (*softmax)(const attn_softmax_args&) noexcept = nullptr;
    void (*pv)(const attn_pv_args&) noexcept = nullptr;
    const char* arch = "";
};

}  // namespace posenc::simd
