#pragma once
// Whether the tests run under a sanitizer (AddressSanitizer, ThreadSanitizer; .ci/run's clang++
// Debug + ASan + UBSan build), or with POSENC_SANITIZED defined. Unoptimised instrumented code (the
// test files; CI compiles posenc-tests' kernel units at -O1) runs 10-50× slower, so some long loops
// take fewer iterations there: fewer repetitions of the same code path (call sizes above the largest
// tail and re-seed period, positions further out, more tokens, finite-difference samples), never
// fewer paths — every architecture, layout, dtype, width, tail and row source still runs. The
// Release build runs every loop in full. Each test that uses this says what it shrinks.
#if defined(POSENC_SANITIZED) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POSENC_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define POSENC_TEST_SANITIZED 1
#endif
#endif

namespace posenc_test {
#ifdef POSENC_TEST_SANITIZED
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
}  // namespace posenc_test
