#pragma once
// Storage for large cos/sin tables: elements left uninitialized until written (no memset of a
// table about to be overwritten), on huge_page_allocator's pages (a 64 MiB table then takes 32 page
// faults, not 16384, where the system allows it).

#include <new>
#include <utility>
#include <vector>

#include "posenc/core/detail/huge_page_allocator.hpp"

namespace posenc::detail {

template <class T>
struct table_allocator : huge_page_allocator<T> {
    table_allocator() = default;
    template <class U>
    table_allocator(const table_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

    /// Default-initialize (for float: leave as is) instead of zeroing.
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

template <class T>
using table_vector = std::vector<T, table_allocator<T>>;

}  // namespace posenc::detail
