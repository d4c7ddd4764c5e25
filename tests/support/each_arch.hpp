// Runs a check once for every SIMD architecture of the dispatch list that this CPU runs (not only
// the dispatcher's choice), so that every kernel variant the machine can execute is tested.
#pragma once

#include <posenc/simd/dispatch.hpp>

#include <cstddef>

namespace posenc_test {

/// check(Arch{}) for each such architecture; returns how many ran.
template <class Check, class... Archs>
std::size_t for_each_cpu_arch(xsimd::arch_list<Archs...>, const Check& check) {
    std::size_t ran = 0;
    ((posenc::simd::compat::cpu_supports<Archs>() ? (check(Archs{}), ++ran) : ran), ...);
    return ran;
}

}  // namespace posenc_test
