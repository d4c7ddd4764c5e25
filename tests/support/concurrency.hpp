// The [concurrency] tests' harness (test_thread_safety*.cpp): work run on many threads started
// together, and each thread's result compared bit for bit with a reference.
#pragma once

#include <cstddef>
#include <functional>
#include <latch>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/reference.hpp"

namespace posenc_test {

inline constexpr unsigned concurrent_workers = 8;

/// Runs work(i) on `concurrent_workers` threads started together (a latch, so that first uses race as
/// they would in a server that starts many workers at once); returns each thread's result.
inline std::vector<std::vector<float>> on_threads(const std::function<std::vector<float>(unsigned)>& work) {
    std::vector<std::vector<float>> results(concurrent_workers);
    std::latch start(concurrent_workers);
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < concurrent_workers; ++i)
        pool.emplace_back([&, i] {
            start.arrive_and_wait();
            results[i] = work(i);
        });
    for (auto& t : pool) t.join();
    return results;
}

/// Every thread's result equals `expected(i)` bit for bit; returns how many were compared.
inline std::size_t require_all_equal(const std::vector<std::vector<float>>& got,
                                     const std::function<std::vector<float>(unsigned)>& expected) {
    std::size_t compared = 0;
    for (unsigned i = 0; i < got.size(); ++i) {
        INFO("thread " << i);
        REQUIRE(!got[i].empty());
        CHECK(same_bits(got[i], expected(i)));
        ++compared;
    }
    return compared;
}

}  // namespace posenc_test
