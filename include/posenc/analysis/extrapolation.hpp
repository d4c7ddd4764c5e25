#pragma once
// Rotation angles under extrapolation, the argument of the YaRN paper (Peng et al. 2023, arXiv
// 2309.00071, §3.2 "NTK-by-parts"): a pair whose wavelength 2π/θᵢ is shorter than the training
// length L_train turned through every angle during training, so any position is in distribution
// for it; a pair with a longer wavelength only ever saw angles in [0, L_train·θᵢ], and at a test
// length L_test it leaves that range unless the schedule slows it down to θᵢ' ≤ θᵢ·L_train/L_test.
// Position Interpolation keeps every pair in range but also slows the short-wavelength pairs that did
// not need it (their resolution drops by the factor); NTK-by-parts, YaRN and Llama-3 interpolate
// only the long-wavelength pairs.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "posenc/core/errors.hpp"

namespace posenc::analysis {

struct pair_angles {
    std::size_t pair = 0;
    double wavelength = 0.0;         ///< 2π/θᵢ of the trained (original) frequency, tokens
    double scaled_wavelength = 0.0;  ///< 2π/θᵢ' under the schedule evaluated
    double train_angle = 0.0;        ///< L_train·θᵢ, radians (unreduced)
    double test_angle = 0.0;         ///< L_test·θᵢ', radians (unreduced)
    bool full_turn_in_training = false;  ///< L_train·θᵢ ≥ 2π: every angle was seen in training
    bool out_of_range = false;       ///< !full_turn_in_training and test_angle > train_angle
    double slowdown = 1.0;           ///< θᵢ/θᵢ': 1 = untouched, the factor s = fully interpolated
};

/// Per pair: the angles at the training and the test length. `trained` are the inverse frequencies
/// the model was trained with (the default schedule at rope_theta), `scaled` the ones used at test
/// time (the same vector for plain extrapolation). A relative tolerance of 1e-12 absorbs rounding
/// (PI's L_test·θ/s equals L_train·θ only up to it).
[[nodiscard]] inline std::vector<pair_angles> rotation_angles(std::span<const double> trained,
                                                              std::span<const double> scaled,
                                                              std::int64_t train_length, std::int64_t test_length) {
    posenc::detail::require(!trained.empty(), "trained.size", trained.size(), "must be > 0");
    posenc::detail::require(scaled.size() == trained.size(), "scaled.size", scaled.size(),
                            "must equal trained.size = " + posenc::detail::to_text(trained.size()));
    posenc::detail::require(train_length > 0, "train_length", train_length, "must be > 0");
    posenc::detail::require(test_length > 0, "test_length", test_length, "must be > 0");
    const double two_pi = 2.0 * std::numbers::pi;
    std::vector<pair_angles> out(trained.size());
    for (std::size_t i = 0; i < trained.size(); ++i) {
        posenc::detail::require(std::isfinite(trained[i]) && trained[i] > 0.0, "trained", trained[i],
                                "must be finite and > 0");
        posenc::detail::require(std::isfinite(scaled[i]) && scaled[i] > 0.0, "scaled", scaled[i],
                                "must be finite and > 0");
        auto& p = out[i];
        p.pair = i;
        p.wavelength = two_pi / trained[i];
        p.scaled_wavelength = two_pi / scaled[i];
        p.train_angle = static_cast<double>(train_length) * trained[i];
        p.test_angle = static_cast<double>(test_length) * scaled[i];
        p.full_turn_in_training = p.train_angle >= two_pi;
        p.out_of_range = !p.full_turn_in_training && p.test_angle > p.train_angle * (1.0 + 1e-12);
        p.slowdown = trained[i] / scaled[i];
    }
    return out;
}

/// How many pairs leave the trained range.
[[nodiscard]] inline std::size_t out_of_range_pairs(std::span<const pair_angles> angles) {
    std::size_t n = 0;
    for (const auto& p : angles) n += p.out_of_range ? 1 : 0;
    return n;
}

}  // namespace posenc::analysis
