#pragma once
// Storage for large cos/sin tables: elements left uninitialized until written (no memset of a
// table about to be overwritten), 64-byte aligned, and on Linux backed by transparent huge pages
// where the system allows it (madvise mode): a 64 MiB table then takes 32 page faults, not 16384.

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace posenc::detail {

template <class T>
struct table_allocator {
    using value_type = T;
    static constexpr std::size_t huge_page = std::size_t{2} << 20;

    table_allocator() = default;
    template <class U>
    table_allocator(const table_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

    T* allocate(std::size_t n) {
        const std::size_t bytes = n * sizeof(T);
        const std::size_t align = bytes >= huge_page ? huge_page : 64;
        void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
        if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (align == huge_page) (void)madvise(p, bytes, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t) noexcept { std::free(p); }

    /// Default-initialize (for float: leave as is) instead of zeroing.
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }

    friend bool operator==(const table_allocator&, const table_allocator&) noexcept { return true; }
};

template <class T>
using table_vector = std::vector<T, table_allocator<T>>;

}  // namespace posenc::detail
