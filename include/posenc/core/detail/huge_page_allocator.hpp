#pragma once
// An allocator for large buffers that are read whole again and again (a KV cache: decode reads every
// cached token per step): each buffer of 2 MiB or more is aligned to 2 MiB and, on Linux, advised for
// transparent huge pages, so that the read needs one TLB entry per 2 MiB instead of one per 4 KiB
// (2 MiB: the huge page of x86-64, and of arm64 with 4 KiB pages). The advice matters where THP is
// `madvise` (a kernel set to `always` gives such pages anyway, one set to `never` none); define
// POSENC_NO_HUGE_PAGES to leave it out. Smaller buffers are 64-byte aligned. Through the aligned
// operator new, so that allocation hooks see it.

#include <cstddef>
#include <new>

#if defined(__linux__) && !defined(POSENC_NO_HUGE_PAGES)
#include <sys/mman.h>
#endif

namespace posenc::detail {

template <class T>
struct huge_page_allocator {
    using value_type = T;
    static constexpr std::size_t huge_page = std::size_t{1} << 21;

    huge_page_allocator() = default;
    template <class U>
    huge_page_allocator(const huge_page_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

    /// The alignment a buffer of n elements gets.
    static constexpr std::size_t alignment(std::size_t n) noexcept { return n * sizeof(T) >= huge_page ? huge_page : 64; }
    static constexpr std::size_t max_size() noexcept { return static_cast<std::size_t>(-1) / sizeof(T); }

    T* allocate(std::size_t n) {
        if (n > max_size()) throw std::bad_array_new_length();
        void* p = ::operator new(n * sizeof(T), std::align_val_t{alignment(n)});
#if defined(__linux__) && defined(MADV_HUGEPAGE) && !defined(POSENC_NO_HUGE_PAGES)
        // Advice only: a kernel without THP refuses it and the buffer keeps 4 KiB pages.
        if (alignment(n) == huge_page) (void)::madvise(p, n * sizeof(T), MADV_HUGEPAGE);
#endif
        return static_cast<T*>(p);
    }
    /// n must be the count given to allocate: it decides the alignment the buffer is freed with.
    void deallocate(T* p, std::size_t n) noexcept { ::operator delete(p, std::align_val_t{alignment(n)}); }
};

template <class T, class U>
constexpr bool operator==(const huge_page_allocator<T>&, const huge_page_allocator<U>&) noexcept {
    return true;
}

}  // namespace posenc::detail
