#pragma once
// The rotary kernels' lane access, templated on the architecture: the vector types, a head's lanes
// read as float (stored values widened from float, bf16 or fp16, or normalised on the fly), partial
// vectors written back rounded to the destination type, and one token's cos/sin rows.
// Only arch-templated code lives here (the COMDAT rule, rotate_args.hpp); kernels.hpp puts the parts
// together.

#include <cstddef>
#include <cstdint>

#include "posenc/core/dtypes.hpp"
#include "posenc/simd/arch_ops.hpp"
#include "posenc/simd/xsimd_compat.hpp"

POSENC_SIMD_DIAGNOSTICS_PUSH  // g++ 12's AVX-512 headers (xsimd_compat.hpp)
namespace posenc::simd {

/// Makes the compiler treat a loaded vector as produced here, so every load of a head happens before
/// its first store: compilers otherwise interleave them (load, store, …), which halved the 512-bit
/// loop's speed at L3/DRAM sizes. Register operands only: no memory clobber, nothing is spilled.
template <class Batch>
inline void pin_in_register(Batch& b) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    asm volatile("" : "+v"(b.data));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
    asm volatile("" : "+w"(b.data));
#else
    (void)b;
#endif
}

template <class Arch>
struct lane_io {
    using ops = arch_ops<Arch>;
    using fbatch = xsimd::batch<float, Arch>;
    using dbatch = xsimd::batch<double, Arch>;
    static constexpr std::size_t W = fbatch::size;
    static constexpr std::size_t WD = dbatch::size;

    // ---- reading a head ----------------------------------------------------------------------------
    // The rotations read their input through a lane source: the stored values widened to float, or
    // (fused norm) those values normalised, (x·scale)·w — two roundings per lane whatever the width.
    // load_padded reads m < W lanes into a zero-padded vector, so the lanes past the last full vector
    // take the same vector code as the others.

    template <class S>
    struct stored_lanes {
        const S* x;
        fbatch load(std::size_t i) const noexcept { return ops::load(x + i); }
        fbatch load_padded(std::size_t i, std::size_t m) const noexcept {
            S in[W] = {};
            for (std::size_t k = 0; k < m; ++k) in[k] = x[i + k];
            return ops::load(static_cast<const S*>(in));
        }
    };

    template <class S>
    struct normed_lanes {
        const S* x;
        const float* w;
        fbatch scale;
        fbatch load(std::size_t i) const noexcept { return (ops::load(x + i) * scale) * fbatch::load_unaligned(w + i); }
        fbatch load_padded(std::size_t i, std::size_t m) const noexcept {
            alignas(64) float wp[W] = {};
            for (std::size_t k = 0; k < m; ++k) wp[k] = w[i + k];
            return (stored_lanes<S>{x}.load_padded(i, m) * scale) * fbatch::load_aligned(wp);
        }
    };

    /// Writes the first m lanes of v to y (m < W), rounded to D.
    template <class D>
    static void store_partial(D* y, const fbatch& v, std::size_t m) noexcept {
        D out[W];
        ops::store(out, v);
        for (std::size_t k = 0; k < m; ++k) y[k] = out[k];
    }

    /// One token's cos/sin rows, in the orders the rotations read them.
    struct token_rows {
        std::size_t head_dim, r, n;
        bool interleaved, out_of_place;
        const float *c, *s;        // compact, direction applied
        const float *cdup, *sdup;  // interleaved: per lane, (c₀, c₀, c₁, c₁, …), (−s₀, s₀, −s₁, s₁, …);
                                   // not rebuilt for a token whose lanes all go through word pairs
        const float *cpair, *spair;  // half-split bf16 pairs: per 2W lanes, the even ones, then the odd ones
        bool pairs;                  // bf16 word pairs allowed: the rows hold no NaN (ops::store_pairs)
        bool prefetch_16bit;         // rotate_args::prefetch_16bit
        bool last;                   // the call's (or slice's) last token: no next token to prefetch
    };
};

}  // namespace posenc::simd
POSENC_SIMD_DIAGNOSTICS_POP
