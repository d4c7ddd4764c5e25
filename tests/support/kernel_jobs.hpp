// Rotation jobs run on one SIMD architecture chosen by the test (not the dispatcher's choice), so
// that every architecture this CPU has is checked.
#pragma once

#include <posenc/posenc.hpp>

#include <cstddef>

namespace posenc_test {

template <class Layout>
posenc::detail::rotate_job make_job(const posenc::rope_frequencies& freq, const posenc::position_ids& pos,
                                     std::size_t rotary_dim, const posenc::cos_sin_table* table) {
    posenc::detail::rotate_job j;
    j.positions = pos;
    j.rotary_dim = rotary_dim;
    j.table = table;
    j.inv_freq = freq.inv_freq.data();
    j.amplitude = freq.attention_factor;
    return j;
}

template <class Layout, class Arch>
void run_on(const posenc::detail::rotate_job& job) {
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
}

}  // namespace posenc_test
