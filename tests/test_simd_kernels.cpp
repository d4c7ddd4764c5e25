// The SIMD kernels, forced on every architecture this CPU has, against the scalar reference
// (every product in double, one rounding) for each layout × stride × rotary_dim × row source, and
// across thread counts.
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cfloat>
#include <tuple>

#include "support/catch.hpp"
#include "support/reference.hpp"

using posenc_test::random_floats;

namespace {

struct shape {
    std::size_t head_dim, rotary_dim, token_stride, head_stride;  // strides 0 = dense
};

enum class source { table, on_the_fly, rows };

// Error of `got` against `ref`, in float ulps of the rotated pair's length amplitude·|(x1, x2)|: the
// natural unit of a rotation (one output lane alone can be tiny through cancellation).
template <class Layout>
double worst_ulps(const std::vector<float>& x, const std::vector<float>& got, const std::vector<float>& ref,
                  std::size_t head_dim, std::size_t rotary_dim, double amplitude) {
    double worst = 0;
    for (std::size_t base = 0; base + head_dim <= x.size(); base += head_dim)
        for (std::size_t i = 0; i < rotary_dim / 2; ++i) {
            const std::size_t a = base + Layout::first(i, rotary_dim), b = base + Layout::second(i, rotary_dim);
            const float m = static_cast<float>(std::hypot(double(x[a]), double(x[b])) * amplitude);
            const double ulp = std::nextafter(m, FLT_MAX) - m;
            worst = std::max({worst, std::abs(double(got[a]) - ref[a]) / ulp, std::abs(double(got[b]) - ref[b]) / ulp});
        }
    return worst;
}

struct fixture {
    shape sh;
    posenc::rope_frequencies freq;
    std::vector<std::int64_t> pos;
    posenc::cos_sin_table table;
    std::vector<float> rows;      // the table's rows for `pos`, as a caller would pass them
    std::vector<float> original;  // T tokens of H heads

    static constexpr std::size_t T = 7, H = 3;

    explicit fixture(shape s)
        : sh(s),
          freq(posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 4096}.frequencies(s.rotary_dim)),
          pos(s.rotary_dim <= 256 ? std::vector<std::int64_t>{0, 1, 4095, 4096, 65537, 70000, 123}
                                  : std::vector<std::int64_t>{0, 1, 4095, 4096, 17, 5000, 123}),
          table(freq, s.rotary_dim <= 256 ? 70001 : 5001) {
        for (auto p : pos) {
            const auto c = table.cos(p), si = table.sin(p);
            rows.insert(rows.end(), c.begin(), c.end());
            rows.insert(rows.end(), si.begin(), si.end());
        }
        original = random_floats(T * token_stride() + H * head_stride(), 77, 2.0f);
    }
    std::size_t head_stride() const { return sh.head_stride ? sh.head_stride : sh.head_dim; }
    std::size_t token_stride() const { return sh.token_stride ? sh.token_stride : H * head_stride(); }

    posenc::detail::rotate_job job(std::vector<float>& buf, source src, bool inverse) const {
        posenc::detail::rotate_job j;
        j.views[0] = posenc::heads_view<float>(std::span<float>(buf), {T, H, sh.head_dim}, {token_stride(), head_stride()});
        j.positions = pos;
        j.rotary_dim = sh.rotary_dim;
        j.inverse = inverse;
        j.table = src == source::table ? &table : nullptr;
        j.rows = src == source::rows ? rows.data() : nullptr;
        j.inv_freq = freq.inv_freq.data();
        const double a = freq.attention_factor;  // as rotary sets them: inverse divides a out
        j.amplitude = inverse ? 1.0 / a : a;
        j.row_scale = inverse ? 1.0 / (a * a) : 1.0;
        return j;
    }
};

template <class Layout, class Arch>
void check_arch(const fixture& f) {
    const auto& sh = f.sh;
    const std::size_t ts = f.token_stride(), hs = f.head_stride();
    for (source src : {source::table, source::on_the_fly, source::rows})
        for (bool inverse : {false, true}) {
            std::vector<float> ref = f.original, got = f.original;
            posenc::detail::run_scalar<Layout>(f.job(ref, src, inverse));
            posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(f.job(got, src, inverse)));

            INFO(Arch::name() << " " << Layout::name << " head_dim " << sh.head_dim << " rotary " << sh.rotary_dim
                              << " strides " << ts << "/" << hs << " source " << int(src) << " inverse " << inverse);
            // Lanes outside the rotary part of each head, and outside the heads, are untouched.
            std::vector<float> gathered_x, gathered_got, gathered_ref;
            std::size_t changed_outside = 0;
            for (std::size_t j = 0; j < f.original.size(); ++j) {
                const std::size_t in_token = j % ts, t = j / ts;
                const bool in_head = t < fixture::T && in_token < fixture::H * hs && in_token % hs < sh.head_dim;
                const bool rotated = in_head && in_token % hs < sh.rotary_dim;
                if (!rotated && got[j] != f.original[j]) ++changed_outside;
                if (in_head) {
                    gathered_x.push_back(f.original[j]);
                    gathered_got.push_back(got[j]);
                    gathered_ref.push_back(ref[j]);
                }
            }
            CHECK(changed_outside == 0);
            const double a = f.freq.attention_factor;
            const double ulps = worst_ulps<Layout>(gathered_x, gathered_got, gathered_ref, sh.head_dim, sh.rotary_dim,
                                                   inverse ? 1.0 / a : a);
            // Same cos/sin (on the fly: correctly rounded like the reference's, bar a rare double
            // rounding); only the rotation's float arithmetic differs. Measured: ≤ 1 ulp everywhere.
            CHECK(ulps <= 2.0);
        }
}

template <class Arch>
void check_if_supported(const fixture& f) {
    if (!posenc::simd::compat::cpu_supports<Arch>()) {
        WARN("this CPU lacks " << Arch::name() << ": not tested here");
        return;
    }
    check_arch<posenc::half_split, Arch>(f);
    check_arch<posenc::interleaved, Arch>(f);
}

template <class... Archs>
void check_all(xsimd::arch_list<Archs...>, const fixture& f) {
    (check_if_supported<Archs>(f), ...);
}

}  // namespace

TEST_CASE("every SIMD architecture equals the scalar reference, all layouts, strides and widths", "[simd]") {
    const std::vector<shape> shapes{{128, 128, 0, 0}, {64, 64, 0, 0},   {128, 128, 40 * 128, 0}, {96, 24, 0, 0},
                                    {160, 130, 0, 0}, {64, 64, 0, 192}, {80, 80, 0, 0},          {256, 64, 0, 0},
                                    {6, 6, 0, 0},     {2, 2, 0, 0},     {48, 46, 0, 0},          {1024, 1024, 0, 0}};
    for (const auto& sh : shapes) check_all(posenc::simd::dispatch_archs{}, fixture(sh));
}

TEST_CASE("SIMD tables equal the double-precision scalar rows to 1 ulp", "[simd]") {
    for (std::size_t rotary : {2u, 24u, 64u, 128u, 130u}) {
        const auto freq = posenc::default_rope{.base = 500000}.frequencies(rotary);
        const posenc::cos_sin_table table(freq, 70000);
        std::vector<float> c(rotary / 2), s(rotary / 2);
        for (std::int64_t p : {0LL, 1LL, 4095LL, 65536LL, 69999LL}) {
            posenc::detail::cos_sin_row(freq.inv_freq.data(), rotary / 2, p, 1.0, c.data(), s.data());
            for (std::size_t i = 0; i < rotary / 2; ++i) {
                INFO("rotary " << rotary << " p " << p << " pair " << i);
                CHECK(std::abs(table.cos(p)[i] - c[i]) <= std::nextafter(std::abs(c[i]), 2.0f) - std::abs(c[i]));
                CHECK(std::abs(table.sin(p)[i] - s[i]) <= std::nextafter(std::abs(s[i]), 2.0f) - std::abs(s[i]));
            }
        }
    }
}

TEST_CASE("results are identical for 1, 2 and 3 threads", "[simd][threads]") {
    const std::size_t T = 300, HQ = 16, HK = 4, D = 128;
    for (bool interleaved : {false, true}) {
        posenc::any_rotary rope(interleaved ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split,
                                {.head_dim = D}, posenc::llama3{.base = 500000, .factor = 8, .original_max_position = 8192});
        const auto table = rope.table(4096);
        const auto q0 = random_floats(T * HQ * D, 1), k0 = random_floats(T * HK * D, 2);  // 300 tokens: slices start mid-block
        std::vector<std::vector<float>> results;
        for (unsigned threads : {1u, 2u, 3u}) {
            rope.set_threads(threads);
            for (bool use_table : {false, true}) {
                auto q = q0, k = k0;
                posenc::heads_view<float> qv(std::span<float>(q), {T, HQ, D}), kv(std::span<float>(k), {T, HK, D});
                if (use_table)
                    rope.apply(table, qv, kv, posenc::position_ids::consecutive(3000, T));
                else
                    rope.apply(qv, kv, posenc::position_ids::consecutive(3000, T));
                q.insert(q.end(), k.begin(), k.end());
                results.push_back(q);
            }
        }
        for (std::size_t i = 2; i < results.size(); ++i) {
            INFO("run " << i << " (threads " << 1 + i / 2 << ", table " << i % 2 << ")");
            CHECK(std::equal(results[i].begin(), results[i].end(), results[i % 2].begin()));  // bit for bit
        }
    }
}

namespace {
template <class Layout, class Arch>
void check_consecutive(std::int64_t start) {
    // Prefill rows come from the angle-addition recurrence, re-seeded every 32 tokens: 100 tokens
    // cross three re-seeds; the rows must still equal the scalar reference's.
    const std::size_t T = 100, H = 2, D = 96;
    const auto freq = posenc::longrope{.short_factor = std::vector<double>(48, 1.5), .long_factor = std::vector<double>(48, 3.0),
                                       .original_max_position = 4096, .factor = 8}
                          .frequencies(D, 100000);
    const auto original = random_floats(T * H * D, 5);
    std::vector<float> ref = original, got = original;
    posenc::detail::rotate_job job;
    job.positions = posenc::position_ids::consecutive(start, T);
    job.rotary_dim = D;
    job.inv_freq = freq.inv_freq.data();
    job.amplitude = freq.attention_factor;
    job.views[0] = posenc::heads_view<float>(std::span<float>(ref), {T, H, D});
    posenc::detail::run_scalar<Layout>(job);
    job.views[0] = posenc::heads_view<float>(std::span<float>(got), {T, H, D});
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
    INFO(Arch::name() << " " << Layout::name << " start " << start);
    CHECK(worst_ulps<Layout>(original, got, ref, D, D, freq.attention_factor) <= 2.0);
}

template <class... Archs>
void check_consecutive_all(xsimd::arch_list<Archs...>) {
    for (std::int64_t start : {0LL, 131000LL, 999'950LL})
        (([&] {
             if (!posenc::simd::compat::cpu_supports<Archs>()) return;
             check_consecutive<posenc::half_split, Archs>(start);
             check_consecutive<posenc::interleaved, Archs>(start);
         }()),
         ...);
}
}  // namespace

TEST_CASE("prefill rows from the angle-addition recurrence equal the scalar reference", "[simd]") {
    check_consecutive_all(posenc::simd::dispatch_archs{});
}

namespace {
template <class Layout, class Arch>
void check_far_positions() {
    const std::size_t H = 2, D = 64;
    const std::vector<std::int64_t> pos{999'999'937LL,       -1'000'000'007LL,  (1LL << 26) + 1, 1'000'000'000'039LL,
                                        1LL << 60,           -(1LL << 62),      67'108'863LL};
    const std::size_t T = pos.size();
    const auto freq = posenc::default_rope{.base = 10000}.frequencies(D);
    const auto original = random_floats(T * H * D, 6);
    std::vector<float> ref = original, got = original;
    posenc::detail::rotate_job job;
    job.positions = pos;
    job.rotary_dim = D;
    job.inv_freq = freq.inv_freq.data();
    job.views[0] = posenc::heads_view<float>(std::span<float>(ref), {T, H, D});
    posenc::detail::run_scalar<Layout>(job);
    job.views[0] = posenc::heads_view<float>(std::span<float>(got), {T, H, D});
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
    INFO(Arch::name() << " " << Layout::name);
    CHECK(worst_ulps<Layout>(original, got, ref, D, D, 1.0) <= 2.0);
}

template <class... Archs>
void check_far_all(xsimd::arch_list<Archs...>) {
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) return;
         check_far_positions<posenc::half_split, Archs>();
         check_far_positions<posenc::interleaved, Archs>();
     }()),
     ...);
}
}  // namespace

TEST_CASE("positions far beyond any context (up to 2^62, negative) equal the scalar reference", "[simd]") {
    check_far_all(posenc::simd::dispatch_archs{});
}
