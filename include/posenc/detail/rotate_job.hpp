#pragma once
// One rotary call, described as data: which views, which positions, where cos/sin come from.
// The public API validates it; backends (scalar reference, SIMD) only execute it.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/rope/table.hpp"

namespace posenc::detail {

struct rotate_job {
    std::array<heads_view<float>, 2> views{};  ///< Q and K (either may be empty); same tokens
    position_ids positions = position_ids::consecutive(0, 0);
    std::size_t rotary_dim = 0;
    bool inverse = false;
    const float* rows = nullptr;           ///< per-token rows [cos | sin] (pairs each), when set
    const cos_sin_table* table = nullptr;  ///< else rows from this table by position, when set
                                           ///< else computed on the fly from inv_freq
    const double* inv_freq = nullptr;      ///< rotary_dim/2 values, for on-the-fly rows
    double amplitude = 1.0;                ///< on-the-fly rows: cos/sin × amplitude
    double row_scale = 1.0;                ///< rows and table rows: × row_scale (they hold the amplitude)

    [[nodiscard]] std::size_t pairs() const noexcept { return rotary_dim / 2; }
};

/// A Q or K view for a call: head_dim as the encoding's, one token per position. Builds its
/// messages only on failure (it runs on every call).
inline void require_view(const heads_view<float>& v, std::string_view name, std::size_t tokens, std::size_t head_dim) {
    if (v.empty()) return;
    if (v.head_dim() != head_dim)
        throw config_error(std::string(name) + ".head_dim", to_text(v.head_dim()),
                           "must equal the encoding's head_dim = " + to_text(head_dim));
    if (v.tokens() != tokens)
        throw config_error(std::string(name) + ".tokens", to_text(v.tokens()),
                           "must equal the number of positions = " + to_text(tokens));
}

}  // namespace posenc::detail
