// attention's extra memory is O(tile), independent of the sequence length: this translation unit
// replaces the global operator new (for the whole test program; it only counts while a counter is
// armed; every form is replaced so that new and delete always pair, also under AddressSanitizer) and
// compares the allocations of T = 1024 and T = 8192.
#include <posenc/attention/attention.hpp>
#include <posenc/posenc.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include "support/attention_reference.hpp"
#include "support/catch.hpp"

namespace {
std::atomic<bool> armed{false};
std::atomic<std::size_t> count{0}, bytes{0};
void note(std::size_t n) noexcept {
    if (armed.load(std::memory_order_relaxed)) {
        count.fetch_add(1, std::memory_order_relaxed);
        bytes.fetch_add(n, std::memory_order_relaxed);
    }
}
void* allocate(std::size_t n, std::size_t align) {
    note(n);
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n ? n : 1)
                                                 : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return allocate(n, alignof(std::max_align_t));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return allocate(n, static_cast<std::size_t>(a));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept { return operator new(n, a, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
struct usage {
    std::size_t count, bytes;
};

// RoPE (K tiles rotated in scratch) with a sliding window (so that T = 8192 stays quick), GQA 4:1.
usage measure(std::size_t T) {
    const std::size_t D = 32;
    const auto p = posenc_test::make_attn_problem(T, T, 4, 1, D, D, 3);
    std::vector<float> q = p.q, k = p.k, v = p.v, out(T * 4 * D);
    posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope, posenc::alibi_bias({.heads = 4})};
    const auto pos = posenc::position_ids::consecutive(0, T);
    posenc::heads_view<float> Q(std::span<float>(q), {T, 4, D}), K(std::span<float>(k), {T, 1, D}),
        V(std::span<float>(v), {T, 1, D}), O(std::span<float>(out), {T, 4, D});
    count = 0;
    bytes = 0;
    armed = true;
    posenc::attention(enc, Q, K, V, O, pos, pos, posenc::sliding_window_mask{.window = 200});
    armed = false;
    return {count.load(), bytes.load()};
}
}  // namespace

TEST_CASE("attention allocates no more for T = 8192 than for T = 1024", "[attention][memory]") {
    const usage small = measure(1024), large = measure(8192);
    INFO("T=1024: " << small.count << " allocations, " << small.bytes << " bytes; T=8192: " << large.count << ", "
                    << large.bytes);
    CHECK(small.count > 0);  // the counter sees the kernel's scratch
    CHECK(large.count <= small.count);
    CHECK(large.bytes <= small.bytes);
    CHECK(small.bytes < 200 * 1024);  // O(tile): Q, K, S, accumulator tiles
}
