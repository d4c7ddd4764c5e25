// Batch invariance: a token's result does not depend on the call's size, its place in the call, the
// thread count or the executor, on every SIMD architecture this CPU has (forced) and through the
// public API; and how a call is split onto the caller's executor. The reference is the same token
// rotated alone (a decode call), compared bit for bit.
#include <posenc/posenc.hpp>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/kernel_jobs.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"
#include "support/storage16.hpp"

using posenc_test::make_job;
using posenc_test::random_floats;
using posenc_test::run_on;
using posenc_test::to_storage;
using posenc_test::type_name;

namespace {

struct invariance_setup {
    static constexpr std::size_t HQ = 3, HK = 2, D = 128, max_tokens = 4096;
    posenc::rope_frequencies freq =
        posenc::yarn{.base = 1000000, .factor = 4, .original_max_position = 32768}.frequencies(D);
    std::vector<float> q = random_floats(max_tokens * HQ * D, 31), k = random_floats(max_tokens * HK * D, 32);
};

const invariance_setup& setup() {
    static const invariance_setup s;
    return s;
}

/// Rotates tokens [first, first + n) of the setup's data, stored as T, on Arch, at positions
/// start + t (or the given list), in one call; returns Q then K.
template <class Layout, class Arch, class T = float>
std::vector<T> rotate_call(std::size_t first, std::size_t n, const posenc::position_ids& pos,
                           const posenc::cos_sin_table* table, const posenc::head_rms_norm* norm) {
    const auto& s = setup();
    auto q = to_storage<T>(std::vector<float>(s.q.begin() + first * s.HQ * s.D, s.q.begin() + (first + n) * s.HQ * s.D));
    auto k = to_storage<T>(std::vector<float>(s.k.begin() + first * s.HK * s.D, s.k.begin() + (first + n) * s.HK * s.D));
    auto job = make_job<Layout>(s.freq, pos, s.D, table);
    job.views[0] = posenc::detail::job_view::in_place(posenc::heads_view<T>(std::span<T>(q), {n, s.HQ, s.D}));
    job.views[1] = posenc::detail::job_view::in_place(posenc::heads_view<T>(std::span<T>(k), {n, s.HK, s.D}));
    if (norm)
        for (auto& v : job.views) {
            v.norm_weight = norm->weight().data();
            v.norm_eps = norm->eps();
        }
    run_on<Layout, Arch>(job);
    q.insert(q.end(), k.begin(), k.end());
    return q;
}

/// Token `first` rotated alone at position p, its row computed directly (a decode step).
template <class Layout, class Arch, class T>
std::vector<T> rotate_alone(std::size_t first, std::int64_t p, const posenc::head_rms_norm* norm) {
    const std::vector<std::int64_t> one{p};
    return rotate_call<Layout, Arch, T>(first, 1, one, nullptr, norm);
}

/// Token t's part (Q heads, then K heads) of a call's output of n tokens.
template <class T>
std::vector<T> token_part(const std::vector<T>& out, std::size_t n, std::size_t t) {
    const auto& s = setup();
    std::vector<T> r(out.begin() + t * s.HQ * s.D, out.begin() + (t + 1) * s.HQ * s.D);
    const auto k0 = out.begin() + n * s.HQ * s.D;
    r.insert(r.end(), k0 + t * s.HK * s.D, k0 + (t + 1) * s.HK * s.D);
    return r;
}

// Under a sanitizer the sizes stop at 1000 (every tail of every vector width and more than 31 re-seed
// periods of 32 positions: 2048 and 4096 repeat those paths, in the Release run).
const std::vector<std::size_t> call_sizes = posenc_test::sanitized
                                                ? std::vector<std::size_t>{1, 2, 3, 5, 8, 16, 31, 32, 33, 64, 100, 257, 1000}
                                                : std::vector<std::size_t>{1, 2, 3, 5, 8, 16, 31, 32, 33, 64, 100, 257, 1000, 2048, 4096};

/// Every call size, each token of the call equal bit for bit to the same token rotated alone (a
/// decode call, direct row); consecutive positions from several starts up to 10^6, a table, and a
/// scattered position list.
template <class Layout, class Arch, class T>
std::size_t check_invariance(const posenc::cos_sin_table& table, const posenc::head_rms_norm* norm) {
    std::size_t compared = 0, differing = 0;
    for (std::int64_t start : {0LL, 31LL, 99'000LL, 999'000LL}) {
        for (std::size_t n : call_sizes) {
            const std::size_t first = (static_cast<std::size_t>(start) * 7 + n) % (invariance_setup::max_tokens - n + 1);
            std::vector<std::int64_t> pos(n);
            for (std::size_t t = 0; t < n; ++t) pos[t] = start + static_cast<std::int64_t>(t);
            // The table is built by the dispatcher's best architecture (FMA on this CPU): rotating with
            // its rows on an SSE architecture mixes two arithmetics, which no real dispatch does.
            constexpr bool fma_arch = std::is_base_of_v<xsimd::avx2, Arch> || std::is_base_of_v<xsimd::avx512f, Arch>;
            const bool in_table = fma_arch && start + static_cast<std::int64_t>(n) <= table.positions();
            // A consecutive run (prefill: rows from the recurrence) or the same positions as a list
            // (rows computed directly).
            const auto run = n % 3 ? posenc::position_ids::consecutive(start, n) : posenc::position_ids(pos);
            const auto whole = rotate_call<Layout, Arch, T>(first, n, run, in_table && n % 2 ? &table : nullptr, norm);
            // Sample tokens: the first, last and a spread in between (every token for small calls).
            for (std::size_t t = 0; t < n; t += (n <= 64 ? 1 : n / 37 + 1)) {
                const auto alone = rotate_alone<Layout, Arch, T>(first + t, pos[t], norm);
                differing += token_part(whole, n, t) != alone;
                ++compared;
            }
            const auto last = rotate_alone<Layout, Arch, T>(first + n - 1, pos[n - 1], norm);
            differing += token_part(whole, n, n - 1) != last;
            ++compared;
        }
    }
    // Every token of a 4096-token prefill reaching position 10^6 (where the recurrence's angle
    // roundings differ most from the direct row's), each against itself alone; 1024 tokens (32 re-seed
    // periods) under a sanitizer.
    {
        const std::size_t n = posenc_test::sanitized ? 1024 : invariance_setup::max_tokens;
        std::vector<std::int64_t> pos(n);
        for (std::size_t t = 0; t < n; ++t) pos[t] = 1'000'000 - static_cast<std::int64_t>(n) + static_cast<std::int64_t>(t);
        const auto whole = rotate_call<Layout, Arch, T>(0, n, posenc::position_ids::consecutive(pos[0], n), nullptr, norm);
        for (std::size_t t = 0; t < n; ++t) {
            differing += token_part(whole, n, t) != rotate_alone<Layout, Arch, T>(t, pos[t], norm);
            ++compared;
        }
    }
    // Scattered positions (a batch of sequences at different offsets).
    std::vector<std::int64_t> scattered;
    for (std::int64_t p : {5LL, 999'999LL, 17LL, 65'536LL, 1'000'000LL, 4095LL, 123'457LL}) scattered.push_back(p);
    const auto whole = rotate_call<Layout, Arch, T>(10, scattered.size(), scattered, nullptr, norm);
    for (std::size_t t = 0; t < scattered.size(); ++t) {
        differing += token_part(whole, scattered.size(), t) != rotate_alone<Layout, Arch, T>(10 + t, scattered[t], norm);
        ++compared;
    }
    INFO(Arch::name() << " " << Layout::name << " " << type_name<T>() << " norm " << (norm != nullptr));
    CHECK(differing == 0);
    return compared;
}

template <class T, class... Archs>
std::size_t check_invariance_all(xsimd::arch_list<Archs...> archs, const posenc::head_rms_norm* norm) {
    const posenc::cos_sin_table table(setup().freq, 8192);
    std::size_t compared = 0;
    posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        compared += check_invariance<posenc::half_split, Arch, T>(table, norm);
        compared += check_invariance<posenc::interleaved, Arch, T>(table, norm);
    });
    return compared;
}

/// Architectures with the same arithmetic (FMA hardware, or none) give bit-identical results (the
/// dispatcher picks the widest for every call, but a program built without dispatch, or for another
/// -march, may use the other).
template <class A, class B, class Layout, class T>
std::size_t check_same_results(const posenc::head_rms_norm* norm) {
    if (!posenc::simd::compat::cpu_supports<A>() || !posenc::simd::compat::cpu_supports<B>()) {
        WARN("this CPU lacks " << A::name() << " or " << B::name() << ": their agreement is not tested here");
        return 0;
    }
    std::size_t compared = 0, differing = 0;
    const posenc::cos_sin_table table(setup().freq, 8192);
    for (std::size_t n : call_sizes) {
        std::vector<std::int64_t> pos(n);
        for (std::size_t t = 0; t < n; ++t) pos[t] = 998'000 + static_cast<std::int64_t>(t * 3);
        differing += rotate_call<Layout, A, T>(0, n, pos, nullptr, norm) != rotate_call<Layout, B, T>(0, n, pos, nullptr, norm);
        for (std::size_t t = 0; t < n; ++t) pos[t] = static_cast<std::int64_t>(t);
        differing += rotate_call<Layout, A, T>(0, n, pos, &table, norm) != rotate_call<Layout, B, T>(0, n, pos, &table, norm);
        compared += 2;
    }
    INFO(A::name() << " vs " << B::name() << " " << Layout::name << " " << type_name<T>());
    CHECK(differing == 0);
    return compared;
}

}  // namespace

TEST_CASE("batch invariance: a token's result does not depend on the call size or its place in the call", "[invariance][simd]") {
    REQUIRE(check_invariance_all<float>(posenc::simd::dispatch_archs{}, nullptr) > 0);
}

// bf16 (through the word-pair path wherever it runs) and fp16: a token's 16-bit result does not
// depend on the call either.
TEMPLATE_TEST_CASE("batch invariance in 16-bit storage", "[invariance][simd][dtypes]", posenc::bf16, posenc::fp16) {
    REQUIRE(check_invariance_all<TestType>(posenc::simd::dispatch_archs{}, nullptr) > 0);
}

TEMPLATE_TEST_CASE("batch invariance of the fused RMSNorm + RoPE", "[invariance][simd][norm]", float, posenc::bf16, posenc::fp16) {
    std::vector<float> w(128);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.01f * static_cast<float>(i);
    const posenc::head_rms_norm norm(w, 1e-6);
    REQUIRE(check_invariance_all<TestType>(posenc::simd::dispatch_archs{}, &norm) > 0);
}

TEMPLATE_TEST_CASE("AVX-512 and AVX2 (and SSE4.2 and SSE2) compute every lane identically", "[invariance][simd]", float,
                   posenc::bf16, posenc::fp16) {
    std::vector<float> w(128, 1.25f);
    const posenc::head_rms_norm norm(w, 1e-5);
    for (const posenc::head_rms_norm* n : {static_cast<const posenc::head_rms_norm*>(nullptr), &norm}) {
        check_same_results<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, posenc::half_split, TestType>(n);
        check_same_results<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, posenc::interleaved, TestType>(n);
        CHECK(check_same_results<xsimd::sse4_2, xsimd::sse2, posenc::half_split, TestType>(n) == 2 * call_sizes.size());
        CHECK(check_same_results<xsimd::sse4_2, xsimd::sse2, posenc::interleaved, TestType>(n) == 2 * call_sizes.size());
    }
}

TEST_CASE("batch invariance through the public API: call sizes, 1/2/3 threads, table or not, an executor", "[invariance][threads]") {
    const auto& s = setup();
    for (bool il : {false, true}) {
        posenc::any_rotary rope(il ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split, {.head_dim = s.D},
                                s.freq);
        const auto table = rope.table(8192);
        // Reference: every token alone (decode).
        const std::size_t N = invariance_setup::max_tokens;
        std::vector<float> q_alone = s.q, k_alone = s.k;
        for (std::size_t t = 0; t < N; ++t)
            rope.apply(posenc::heads_view<float>(q_alone.data() + t * s.HQ * s.D, {1, s.HQ, s.D}),
                       posenc::heads_view<float>(k_alone.data() + t * s.HK * s.D, {1, s.HK, s.D}),
                       posenc::position_ids::consecutive(static_cast<std::int64_t>(t), 1));
        std::size_t compared = 0, differing = 0;
        std::atomic<std::size_t> executor_tasks{0};
        for (unsigned threads : {1u, 2u, 3u})
            for (int mode = 0; mode < 3; ++mode) {  // 0: on the fly, 1: table, 2: on the fly on an executor
                rope.set_threads(threads);
                if (mode == 2)
                    rope.set_executor([&](std::size_t n, const std::function<void(std::size_t)>& task) {
                        std::vector<std::thread> pool;  // reverse order, one thread each: any schedule must do
                        for (std::size_t i = n; i-- > 0;) pool.emplace_back([&, i] { task(i); ++executor_tasks; });
                        for (auto& th : pool) th.join();
                    });
                else
                    rope.set_executor({});
                for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{300}, std::size_t{4096}}) {
                    const std::size_t first = N - n;  // tokens first..N−1 at positions first..N−1
                    std::vector<float> q(s.q.begin() + first * s.HQ * s.D, s.q.end());
                    std::vector<float> k(s.k.begin() + first * s.HK * s.D, s.k.end());
                    posenc::heads_view<float> qv(std::span<float>(q), {n, s.HQ, s.D}), kv(std::span<float>(k), {n, s.HK, s.D});
                    const auto pos = posenc::position_ids::consecutive(static_cast<std::int64_t>(first), n);
                    if (mode == 1) rope.apply(table, qv, kv, pos);
                    else rope.apply(qv, kv, pos);
                    differing += std::memcmp(q.data(), q_alone.data() + first * s.HQ * s.D, q.size() * sizeof(float)) != 0;
                    differing += std::memcmp(k.data(), k_alone.data() + first * s.HK * s.D, k.size() * sizeof(float)) != 0;
                    compared += 2;
                }
            }
        INFO("layout " << (il ? "interleaved" : "half_split"));
        CHECK(differing == 0);
        REQUIRE(compared == 3 * 3 * 4 * 2);
        CHECK(executor_tasks > 0);  // the 4096-token calls were split onto the executor
    }
}


TEST_CASE("small calls never reach the executor, large ones are split into the requested slices", "[threads]") {
    posenc::rotary<posenc::interleaved> rope({.head_dim = 128}, posenc::default_rope{});
    std::vector<std::size_t> calls;
    rope.set_threads(3);
    rope.set_executor([&](std::size_t n, const std::function<void(std::size_t)>& task) {
        calls.push_back(n);
        for (std::size_t i = 0; i < n; ++i) task(i);
    });
    std::vector<float> q(2048 * 8 * 128, 0.5f);
    rope.apply(posenc::heads_view<float>(q.data(), {1, 8, 128}), posenc::position_ids::consecutive(9, 1));  // decode
    CHECK(calls.empty());
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {2048, 8, 128}), posenc::position_ids::consecutive(0, 2048));
    REQUIRE(calls.size() == 1);
    CHECK(calls[0] == 3);
}
