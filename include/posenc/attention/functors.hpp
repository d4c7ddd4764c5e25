#pragma once
// The attention kernel's SIMD steps (and the 16-bit conversions a cache needs) as plain-data calls, functors templated on the xsimd
// architecture (the shape xsimd::dispatch calls). Declared here; defined in kernels.hpp, which only
// the per-architecture translation units (or a build without run-time dispatch) include. Everything
// policy-shaped (transform, bias, mask, scale) stays in the caller's code: these steps are fixed types.
//
// Layout of a tile: `rows` query rows (row r = query token t·G + head g of a kv-head group), up to
// attn_key_tile keys. Scores S are [rows][attn_key_tile] floats, 64-byte aligned.

#include <cstddef>

#include "posenc/core/dtypes.hpp"

namespace posenc::simd {

/// Keys per tile (every architecture: the summation order, hence the result, must not depend on it).
inline constexpr std::size_t attn_key_tile = 64;
/// Query rows are processed in blocks of this many (scratch rows are padded to a multiple).
inline constexpr std::size_t attn_row_block = 4;

/// Rows a step asks the caches for (into L2) as it goes: the tile loop requests the tile's V rows
/// during QKᵀ and the next tile's K rows during PV, so that both streams stay in flight through every
/// phase (decode's steps prefetch their own rows into L1 a few rows ahead; prefill packs them).
struct attn_rows_ahead {
    const void* base = nullptr;
    std::size_t rows = 0;
    std::size_t stride_bytes = 0;
    std::size_t row_bytes = 0;
};

/// Decode's software prefetch (steps of ≤ 2·attn_row_block rows: QKᵀ by dot products, V read in
/// place, streaming the cache from memory at compute pace), a tuning no result depends on;
/// attention_kernels() sets the CPU's (dispatch.hpp's decode_prefetch_for), and the default is the one
/// measured on an AMD Zen 5.
struct attn_decode_prefetch {
    /// How many rows past the one in use a step asks for its own stream's rows (into L1): a few (0
    /// asks for the row in use; rows past the keys' end are hints that never fault).
    std::size_t stream_rows = 12;
    /// Whether the tile loop has the steps also ask for the other stream's rows (into L2, attn_rows_ahead).
    bool other_stream = true;
};

/// S[r][j] = Σ_d q[r][d]·k_j[d] for r < rows (a multiple of attn_row_block), j < attn_key_tile
/// (keys ≥ `keys` give 0 unless row_keys cuts them off), times row_scale[r] when row_scale is set
/// (the sum rounded, then the product: the bits of scaling S afterwards). q: dense [rows][head_dim];
/// key j at k + j·k_stride elements of k_type (16-bit keys are widened exactly as they are loaded:
/// the float keys' bits);
/// kt: scratch of head_dim·attn_key_tile floats, 64-byte aligned; `ahead`: rows to request meanwhile
/// (attn_rows_ahead). row_keys (optional, `rows` entries ≤ keys; a tile a causal-like mask cuts
/// through): row r needs only the scores of keys below row_keys[r]. Each register block of rows stops
/// at the vector holding its rows' largest entry and leaves the scores past it as they were, so the
/// caller must overwrite row r's scores at keys ≥ row_keys[r] (mask them) before the softmax reads
/// them. Calls with rows ≤ 2·attn_row_block (the dot-product path) compute every key, and ask for
/// the key rows stream_rows ahead of the one in use.
struct attn_qk_args {
    const float* q = nullptr;
    std::size_t rows = 0;
    std::size_t head_dim = 0;
    const void* k = nullptr;
    std::size_t k_stride = 0;
    std::size_t keys = 0;
    float* kt = nullptr;
    float* s = nullptr;
    const float* row_scale = nullptr;
    dtype k_type = dtype::f32;
    attn_rows_ahead ahead{};
    const std::size_t* row_keys = nullptr;
    std::size_t stream_rows = attn_decode_prefetch{}.stream_rows;  ///< decode's own stream, rows ahead (L1)
};

/// One online-softmax step over a score tile (rows real rows, keys valid columns; −∞ = masked):
/// soft-capping of finite logits (softcap > 0), new running max m, numerators p = exp(s − m) written
/// over S (0 past `keys`), running sum l rescaled by α = exp(m_old − m), and, when `alpha` is given,
/// each row's α written to alpha[r] (α = 1 for a row that sees nothing). The step does not touch the
/// accumulator: a caller that keeps one must pass `alpha` and hand it to the pv step as acc_scale,
/// which multiplies row r by alpha[r] as it loads it (without it the accumulator is never rescaled).
/// A row that has seen no visible key keeps m = −∞, l = 0 and gets p = 0. Where m is not finite
/// (kernels_softmax.hpp's exp_unbounded) p is the softmax's limit under +∞ (1 on the +∞ logits, 0
/// elsewhere) and NaN under NaN (a tile of only −∞ and NaN sets m = NaN); masked keys get 0 always.
struct attn_softmax_args {
    float* s = nullptr;
    std::size_t rows = 0;
    std::size_t keys = 0;
    float* m = nullptr;
    float* l = nullptr;
    float softcap = 0.0f;
    float* alpha = nullptr;
};

/// acc[r][0, dv) += Σ_{j < keys} p[r][j]·v_j, v_j at v + j·v_stride elements of v_type (16-bit
/// values widened exactly as they are loaded). acc is 64-byte aligned and acc_stride a multiple of
/// 16 floats ≥ dv: the lanes [dv, acc_stride) are scratch (the last vector of a row is read and
/// written whole). p[r][j] is p[r·attn_key_tile + j], or with p_transposed p[j·attn_key_tile + r]
/// (rows ≤ attn_key_tile, v_type f32: the backward's Pᵀ·dO and dSᵀ·Q over a block, without a transposed copy).
/// With acc_scale, row r of acc is first multiplied by acc_scale[r] (the softmax step's alpha).
/// row_keys (optional, as attn_qk_args'): the caller promises p[r][j] = 0 for j ≥ row_keys[r], and each
/// register block of rows stops at its rows' largest entry. For finite V that gives the bits of adding
/// the zero products, up to the sign of a zero (a −0 lane stays −0 where +0·v would make it +0); with
/// ±∞ or NaN in V at such a key, whether the row comes out NaN depends on the blocking.
/// `ahead`: rows to request meanwhile (attn_rows_ahead); calls with rows ≤ 2·attn_row_block ask for the
/// V rows stream_rows ahead of the one in use (attn_decode_prefetch).
struct attn_pv_args {
    const float* p = nullptr;
    std::size_t rows = 0;
    std::size_t keys = 0;
    const void* v = nullptr;
    std::size_t v_stride = 0;
    std::size_t dv = 0;
    float* acc = nullptr;
    std::size_t acc_stride = 0;
    dtype v_type = dtype::f32;
    bool p_transposed = false;
    attn_rows_ahead ahead{};
    const float* acc_scale = nullptr;
    const std::size_t* row_keys = nullptr;
    std::size_t stream_rows = attn_decode_prefetch{}.stream_rows;  ///< decode's own stream, rows ahead (L1)
};

/// dst[j][0, dim) = float(src_j) for j < rows, exactly (16-bit K or V widened for the float steps,
/// float rows packed); src_j at src + j·src_stride elements of `type`, dst rows dst_stride floats apart.
struct attn_widen_args {
    const void* src = nullptr;
    dtype type = dtype::bf16;
    std::size_t rows = 0;
    std::size_t dim = 0;
    std::size_t src_stride = 0;
    float* dst = nullptr;
    std::size_t dst_stride = 0;
};

/// dst_j = 16-bit(src_j) for j < rows, rounded to nearest even (values into a 16-bit cache); src
/// rows of `dim` floats src_stride apart, dst rows of `type` dst_stride elements apart.
struct attn_narrow_args {
    const float* src = nullptr;
    std::size_t rows = 0;
    std::size_t dim = 0;
    std::size_t src_stride = 0;
    void* dst = nullptr;
    dtype type = dtype::bf16;
    std::size_t dst_stride = 0;
};

/// s[j] = float(double(s[j]) + terms[j]) for j < n: one rounding of a double sum per score (a bias
/// whose terms a caller computed in double, e.g. one that depends on the key-query distance only).
/// terms_f (optional): the same terms as floats, given only where each is exactly terms[j]; the sum
/// is then taken in float, with the same bits (tile_loop.hpp's terms_as_floats).
struct attn_add_terms_args {
    float* s = nullptr;
    const double* terms = nullptr;
    std::size_t n = 0;
    const float* terms_f = nullptr;
};

/// The backward's gradient of the logits, for r < rows and every j < attn_key_tile:
/// ds[r][j] = p[r][j]·(ds[r][j] − delta[r]), times factor[r] when factor is set (ds holds dP on entry;
/// both blocks [rows][attn_key_tile], 64-byte aligned).
struct attn_grad_ds_args {
    const float* p = nullptr;
    float* ds = nullptr;
    std::size_t rows = 0;
    const float* delta = nullptr;
    const float* factor = nullptr;
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
struct attn_widen_functor {
    template <class Arch>
    void operator()(Arch, const attn_widen_args& a) const noexcept;
};
struct attn_narrow_functor {
    template <class Arch>
    void operator()(Arch, const attn_narrow_args& a) const noexcept;
};
struct attn_add_terms_functor {
    template <class Arch>
    void operator()(Arch, const attn_add_terms_args& a) const noexcept;
};
struct attn_grad_ds_functor {
    template <class Arch>
    void operator()(Arch, const attn_grad_ds_args& a) const noexcept;
};

/// The steps for one architecture, resolved once per attention call, and how decode prefetches on the
/// CPU they run on (attention_kernels(); attention_kernels_for<Arch>() leaves the default).
struct attn_kernels {
    void (*qk)(const attn_qk_args&) noexcept = nullptr;
    void (*softmax)(const attn_softmax_args&) noexcept = nullptr;
    void (*pv)(const attn_pv_args&) noexcept = nullptr;
    void (*widen)(const attn_widen_args&) noexcept = nullptr;
    void (*narrow)(const attn_narrow_args&) noexcept = nullptr;
    void (*add_terms)(const attn_add_terms_args&) noexcept = nullptr;
    void (*grad_ds)(const attn_grad_ds_args&) noexcept = nullptr;
    const char* arch = "";
    attn_decode_prefetch decode_prefetch{};  ///< passed to the steps of decode-sized tiles
};

}  // namespace posenc::simd
