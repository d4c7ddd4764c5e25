#pragma once
// Splitting a call's tokens into slices: on the caller's executor when it gave one, else OpenMP
// when the program is built with it, else std::thread. Nothing global: threads live for one call.
// Calls too small to pay for a thread (a microsecond or two of synchronisation) stay on the caller's
// thread. A token's result does not depend on the slicing.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "posenc/core/executor.hpp"

namespace posenc::detail {

/// Below this many floats per thread, an extra thread costs more than it saves.
inline constexpr std::size_t min_floats_per_thread = std::size_t{1} << 16;

[[nodiscard]] inline unsigned useful_threads(unsigned requested, std::size_t tokens, std::size_t floats) noexcept {
    const std::size_t by_size = std::max<std::size_t>(1, floats / min_floats_per_thread);
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min({std::size_t{requested}, tokens, by_size})));
}

/// Calls f(begin, end) on `threads` contiguous, near-equal slices of [0, n), one per thread.
template <class F>
void parallel_slices(unsigned threads, std::size_t n, const F& f) {
    auto slice = [&](unsigned k) { f(n * k / threads, n * (k + 1) / threads); };
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int k = 0; k < static_cast<int>(threads); ++k) slice(static_cast<unsigned>(k));
#else
    std::vector<std::thread> pool;
    try {
        pool.reserve(threads - 1);
        for (unsigned k = 1; k < threads; ++k) pool.emplace_back(slice, k);
    } catch (...) {  // a thread could not start: finish the slices here, after joining the others
        for (auto& t : pool) t.join();
        for (unsigned k = static_cast<unsigned>(pool.size()) + 1; k < threads; ++k) slice(k);
        slice(0);
        return;
    }
    slice(0);
    for (auto& t : pool) t.join();
#endif
}

/// The same slices, run by the caller's executor.
template <class F>
void executor_slices(const executor& ex, unsigned slices, std::size_t n, const F& f) {
    const auto task = [&](std::size_t k) { f(n * k / slices, n * (k + 1) / slices); };
    ex(slices, std::cref(task));  // a std::function of a reference_wrapper never allocates (never throws)
}

/// f(begin, end) over [0, n) of a call that reads `floats` floats (and writes as many): in up to
/// `threads` slices (fewer for a small call, where a thread costs more than it saves), on `ex` when
/// given, else on posenc's own threads. Throws nothing that posenc raises itself.
template <class F>
void run_slices(unsigned threads, const executor* ex, std::size_t n, std::size_t floats, const F& f) {
    const unsigned k = useful_threads(threads, n, floats);
    if (k <= 1) return f(std::size_t{0}, n);
    if (ex && *ex) return executor_slices(*ex, k, n, f);
    parallel_slices(k, n, f);
}

}  // namespace posenc::detail
