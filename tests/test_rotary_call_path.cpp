// The checked table call compares the table's frequencies with the rotary's byte by byte
// (rotary::built_by_this): a table that differs in one frequency by one ulp, or in its number of pairs,
// is still rejected, and one built from an equal copy of the frequencies is accepted.
#include <posenc/posenc.hpp>

#include <cmath>
#include <vector>

#include "support/catch.hpp"

TEST_CASE("a checked table call rejects a table one ulp away in its last frequency", "[rope][table]") {
    const std::size_t D = 64, H = 2;
    for (auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
        const posenc::any_rotary rope(layout, {.head_dim = D}, posenc::default_rope{.base = 10000});
        std::vector<float> x(H * D, 0.5f);
        const posenc::heads_view<float> xv(std::span<float>(x), {1, H, D});
        const auto pos = posenc::position_ids::consecutive(5, 1);

        posenc::rope_frequencies same = rope.frequencies();  // an equal copy: accepted
        CHECK_NOTHROW(rope.apply(posenc::cos_sin_table(same, 16), xv, pos));

        posenc::rope_frequencies last_ulp = rope.frequencies();
        last_ulp.inv_freq.back() = std::nextafter(last_ulp.inv_freq.back(), 1.0);
        const std::vector<float> before = x;
        CHECK_THROWS_AS(rope.apply(posenc::cos_sin_table(last_ulp, 16), xv, pos), posenc::config_error);
        CHECK(x == before);  // nothing written

        posenc::rope_frequencies first_ulp = rope.frequencies();
        first_ulp.inv_freq.front() = std::nextafter(first_ulp.inv_freq.front(), 0.0);
        CHECK_THROWS_AS(rope.apply(posenc::cos_sin_table(first_ulp, 16), xv, pos), posenc::config_error);

        // The same leading frequencies, fewer of them.
        posenc::rope_frequencies fewer = rope.frequencies();
        fewer.inv_freq.resize(fewer.inv_freq.size() / 2);
        CHECK_THROWS_AS(rope.apply(posenc::cos_sin_table(fewer, 16), xv, pos), posenc::config_error);
        CHECK(x == before);
    }
}
