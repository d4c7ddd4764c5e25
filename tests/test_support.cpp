// The tests' own helpers (tests/support): a NaN lane must fail every worst-case check made through
// them. (std::max(worst, NaN) is worst: folded that way, a kernel writing NaN into one lane of a
// tail passed the rotary reference tests.)
#include <cmath>
#include <limits>
#include <vector>

#include "support/catch.hpp"
#include "support/reference.hpp"

namespace {
constexpr double nan_d = std::numeric_limits<double>::quiet_NaN();
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST_CASE("test support: worst-case folds keep a NaN, wherever it comes") {
    using posenc_test::worst_of;
    CHECK(worst_of(1.0, 2.0) == 2.0);
    CHECK(worst_of(2.0, 1.0) == 2.0);
    CHECK(std::isnan(worst_of(0.0, nan_d)));
    CHECK(std::isnan(worst_of(nan_d, 1.0)));
    CHECK(std::isnan(worst_of(0.0f, nan_f)));
    CHECK(std::isnan(worst_of(worst_of(0.0, nan_d), 5.0)));  // stays NaN after a larger difference

    CHECK(posenc_test::max_abs_diff({1.0, 2.0}, {1.0, 2.5}) == 0.5);
    CHECK(std::isnan(posenc_test::max_abs_diff({1.0, 2.0, 3.0}, {1.0, nan_d, 3.0})));
    CHECK(std::isnan(posenc_test::max_abs_diff({nan_d}, {nan_d})));  // equal NaNs are no match
    CHECK(posenc_test::max_rel_diff({0.0, 2.0}, {0.0, 4.0}) == 0.5);  // equal zeros: 0, not 0/0
    CHECK(std::isnan(posenc_test::max_rel_diff({1.0, nan_d}, {1.0, 1.0})));
    CHECK(std::isnan(posenc_test::max_abs({1.0f, nan_f, -3.0f})));
    CHECK(posenc_test::max_abs({1.0f, -3.0f}) == 3.0);
}

TEST_CASE("test support: worst_pair_ulps reports a NaN lane as NaN") {
    const std::vector<float> x{1.0f, 0.0f, 0.5f, 0.25f};  // one head of 4 lanes, rotary_dim 2
    const std::vector<double> ref{1.0, 0.0, 0.5, 0.25};   // the identity rotation
    CHECK(posenc_test::worst_pair_ulps(x, x, ref, 4, 2, true, 1.0) == 0.0);
    std::vector<float> got = x;
    got[1] = nan_f;
    CHECK(std::isnan(posenc_test::worst_pair_ulps(x, got, ref, 4, 2, true, 1.0)));
    got = x;
    got[3] = 0.3f;  // a pass-through lane changed
    CHECK(posenc_test::worst_pair_ulps(x, got, ref, 4, 2, true, 1.0) > 1e299);
}
