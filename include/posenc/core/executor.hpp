#pragma once
// The caller's executor: how posenc hands a call's slices to threads the caller owns.

#include <cstddef>
#include <functional>

namespace posenc {

/// The caller's executor: must run task(0), …, task(n − 1) — in any order, on any threads, each
/// exactly once — and return when all have finished. Tasks do not throw, and the executor must not
/// either: a call may already have written part of its output when it runs one (kv_cache::append
/// splits V after K is in the cache).
using executor = std::function<void(std::size_t n, const std::function<void(std::size_t)>& task)>;

}  // namespace posenc
