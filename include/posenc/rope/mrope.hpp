#pragma once
// Multimodal RoPE (M-RoPE) of Qwen2-VL / Qwen2.5-VL and the interleaved M-RoPE of Qwen3-VL: every token
// has three positions (t, h, w) and each rotary pair takes its angle from one of them.
//
// Sectioned (HF `apply_multimodal_rotary_pos_emb`): the rotary_dim/2 pairs are split into consecutive
// sections of mrope_section = [s_t, s_h, s_w] pairs, read from t, h, w in that order. HF builds cos/sin
// of width head_dim = cat(freqs, freqs), splits it by mrope_section·2 and gives chunk i component i % 3:
// the same split in both halves, i.e. pair j (lanes j and j + d/2 in the half-split layout) reads
//   t for j < s_t,  h for s_t ≤ j < s_t + s_h,  w for the rest.
// HF's split needs s_t + s_h + s_w = rotary_dim/2 exactly, and so does posenc.
//
// Interleaved (Qwen3-VL, HF `Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope`): start from t for
// every pair, then for (axis, offset) in ((h, 1), (w, 2)) overwrite the pairs
// idx = slice(offset, 3·s_axis, 3), i.e. pair j reads
//   h if j % 3 == 1 and j < 3·s_h,  w if j % 3 == 2 and j < 3·s_w,  t otherwise
// (so s_t is implicit: HF never reads it, and neither does posenc). [24, 20, 20] over 64 pairs gives
// t h w t h w … for pairs 0..59 and t for 60..63.
//
// Text tokens have t = h = w and get plain RoPE: bit-identical to posenc::rotary with the same
// frequencies. Inverse frequencies come from any schedule (Qwen2-VL: default_rope{.base = 1e6}).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/multi_axis.hpp"

namespace posenc {

/// M-RoPE's pair split (HF `rope_scaling.mrope_section`, `mrope_interleaved`).
struct mrope {
    std::array<std::size_t, 3> section{};  ///< pairs per component t, h, w
    bool interleaved = false;              ///< Qwen3-VL's t h w t h w … order instead of consecutive sections

    /// The component (0 = t, 1 = h, 2 = w) of each of `pairs` rotary pairs. Throws config_error naming
    /// mrope_section if the sections do not fit.
    [[nodiscard]] std::vector<std::uint8_t> pair_axes(std::size_t pairs) const {
        const std::string shown = "[" + detail::to_text(section[0]) + ", " + detail::to_text(section[1]) + ", " +
                                  detail::to_text(section[2]) + "]";
        std::vector<std::uint8_t> axis(pairs, 0);
        if (!interleaved) {
            const std::size_t sum = section[0] + section[1] + section[2];
            if (section[0] > pairs || section[1] > pairs || section[2] > pairs || sum != pairs)
                throw config_error("mrope_section", shown, "must sum to rotary_dim/2 = " + detail::to_text(pairs));
            for (std::size_t j = section[0]; j < pairs; ++j) axis[j] = j < section[0] + section[1] ? 1 : 2;
            return axis;
        }
        if (section[1] > pairs || section[2] > pairs)
            throw config_error("mrope_section", shown,
                               "h and w sections must not exceed rotary_dim/2 = " + detail::to_text(pairs));
        for (std::size_t a = 1; a <= 2; ++a)
            for (std::size_t j = a; j < 3 * section[a] && j < pairs; j += 3) axis[j] = static_cast<std::uint8_t>(a);
        return axis;
    }
};

/// multi_axis_rotary with M-RoPE's pair → component map (t, h, w).
template <rotary_layout Layout>
class mrope_rotary : public multi_axis_rotary<Layout> {
public:
    mrope_rotary(rope_dims dims, rope_frequencies freq, mrope m)
        : multi_axis_rotary<Layout>(dims, std::move(freq), axes_of(dims, m), 3), mrope_(m) {}

    /// Evaluates `schedule` for this rotary width at sequence length `seq_len` (0 = not known).
    template <frequency_schedule Schedule>
    mrope_rotary(rope_dims dims, const Schedule& schedule, mrope m, std::int64_t seq_len = 0)
        : mrope_rotary(dims, evaluate(dims, schedule, seq_len), m) {}

    [[nodiscard]] const mrope& params() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return mrope_; }

private:
    static std::vector<std::uint8_t> axes_of(const rope_dims& dims, const mrope& m) {
        dims.validate();  // before the sections, so that a bad head_dim is reported as such
        return m.pair_axes(dims.pairs());
    }
    template <frequency_schedule Schedule>
    static rope_frequencies evaluate(const rope_dims& dims, const Schedule& schedule, std::int64_t seq_len) {
        dims.validate();
        return schedule.frequencies(dims.rotary(), seq_len);
    }

    mrope mrope_;
};

static_assert(qk_transform<mrope_rotary<half_split>>);

}  // namespace posenc
