// The README's analysis snippet, compiled and run as it stands, and the README block checked to be its
// text. Both answers are checked against B(m) = Σᵢ cos(m·θᵢ) summed here in double with std::cos.
#include <posenc/analysis/base_bound.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdint>

#include "support/catch.hpp"
#include "support/readme.hpp"

namespace analysis_readme_test {

/// B(m) for head_dim 128 and θᵢ = base^(−2i/128), i < 64, written out from Men et al. 2024's definition.
double cos_sum_of_base(double base, std::int64_t m) {
    double b = 0.0;
    for (int i = 0; i < 64; ++i) b += std::cos(static_cast<double>(m) * std::pow(base, -2.0 * i / 128.0));
    return b;
}

/// The first m in [0, limit] with B(m) < 0, or -1 when there is none.
std::int64_t first_negative(double base, std::int64_t limit) {
    for (std::int64_t m = 0; m <= limit; ++m)
        if (cos_sum_of_base(base, m) < 0.0) return m;
    return -1;
}

}  // namespace analysis_readme_test

TEST_CASE("README snippet: an analysis", "[readme][analysis]") {
    // --- snippet begin ---
    // How far does base 10000 (head_dim 128) keep B(m) = Σᵢ cos(m·θᵢ) ≥ 0, Men et al. 2024's bound?
    namespace an = posenc::analysis;
    const auto inv_freq = posenc::default_rope{.base = 10000}.frequencies(128).inv_freq;
    const std::int64_t reach = an::context_length_bound(inv_freq, /*limit=*/1 << 20);
    // And the first base on a 2-significant-digit grid whose bound reaches 32768 tokens:
    const an::base_search_result found = an::smallest_base_for_length(/*head_dim=*/128, /*target=*/32768);
    // --- snippet end ---
    // reach is the last m before B first turns negative.
    REQUIRE(reach < (1 << 20));
    CHECK(analysis_readme_test::first_negative(10000.0, reach + 1) == reach + 1);
    // The base found keeps B ≥ 0 through 32768; the grid point below it (one step of 0.1 in the
    // mantissa) does not, since the search scans upward.
    REQUIRE(found.base > 0.0);
    CHECK(analysis_readme_test::first_negative(found.base, 32768) == -1);
    const double step = std::pow(10.0, std::floor(std::log10(found.base)) - 1);
    CHECK(analysis_readme_test::first_negative(found.base - step, 32768) != -1);
}

TEST_CASE("README's analysis block is the compiled snippet", "[readme][analysis]") {
    const std::string snippet = posenc_test::snippet_of(__FILE__);
    REQUIRE(!snippet.empty());
    CHECK(posenc_test::readme_block("analysis") == snippet);
}
