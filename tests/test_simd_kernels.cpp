// The SIMD kernels, forced on every architecture this CPU has, against an independent
// double-precision rotation written in the test (support/reference.hpp: its own lane pairing, its
// own angle p·θᵢ in double with std::cos / std::sin, θᵢ = base^(−2i/d) from the closed form), for
// each layout × stride × rotary_dim × row source, and across thread counts. Nothing here is
// compared with posenc's own scalar path or row code.
//
// Tolerances, in float ulps of each rotated pair's length a·|(x₁, x₂)|: cos/sin are rounded once to
// float (≤ ½ ulp each), the rotation's products and sum in float add ≤ ~1½ ulp; rows given with a
// row_scale ≠ 1 are rounded twice. Bound used: 3 ulps (measured worst on x86-64 AVX2/SSE: 2.16,
// table rows at head_dim 1024).
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <type_traits>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/reference.hpp"

using posenc_test::random_floats;

namespace {

struct kernel_shape {
    std::size_t head_dim, rotary_dim, token_stride, head_stride;  // strides 0 = dense
};

enum class row_source { table, on_the_fly, rows };

constexpr double amplitude = 1.1386294361119891;  // a YaRN-like cos/sin amplitude ≠ 1
// Inverse calls in these kernel tests use arbitrary amplitudes (not rotary's formula, which the
// public-API tests check): the kernel contract is amplitude for computed rows, row_scale for given ones.
constexpr double inverse_amplitude = 0.8, inverse_row_scale = 0.75;

struct fixture {
    kernel_shape sh;
    std::vector<double> inv;  // closed form, base 10000
    std::vector<std::int64_t> pos;
    posenc::cos_sin_table table;
    std::vector<float> rows;      // the table's rows for `pos`, as a caller would pass them
    std::vector<float> original;  // T tokens of H heads

    static constexpr std::size_t T = 7, H = 3;

    explicit fixture(kernel_shape s)
        : sh(s),
          inv(posenc_test::closed_form_inv_freq(10000.0, s.rotary_dim)),
          pos(s.rotary_dim <= 256 ? std::vector<std::int64_t>{0, 1, 4095, 4096, 65537, 70000, 123}
                                  : std::vector<std::int64_t>{0, 1, 4095, 4096, 17, 5000, 123}),
          table(posenc::rope_frequencies{inv, amplitude}, s.rotary_dim <= 256 ? 70001 : 5001) {
        for (auto p : pos) {
            const auto c = table.cos(p), si = table.sin(p);
            rows.insert(rows.end(), c.begin(), c.end());
            rows.insert(rows.end(), si.begin(), si.end());
        }
        original = random_floats(T * token_stride() + H * head_stride(), 77, 2.0f);
    }
    std::size_t head_stride() const { return sh.head_stride ? sh.head_stride : sh.head_dim; }
    std::size_t token_stride() const { return sh.token_stride ? sh.token_stride : H * head_stride(); }

    posenc::detail::rotate_job job(std::vector<float>& buf, row_source src, bool inverse) const {
        posenc::detail::rotate_job j;
        j.views[0] = posenc::heads_view<float>(std::span<float>(buf), {T, H, sh.head_dim}, {token_stride(), head_stride()});
        j.positions = pos;
        j.rotary_dim = sh.rotary_dim;
        j.inverse = inverse;
        j.table = src == row_source::table ? &table : nullptr;
        j.rows = src == row_source::rows ? rows.data() : nullptr;
        j.inv_freq = inv.data();
        j.amplitude = inverse ? inverse_amplitude : amplitude;
        j.row_scale = inverse ? inverse_row_scale : 1.0;
        return j;
    }

    /// What the call must produce: rotation by ±p·θ, amplitude as the contract says.
    double expected_amplitude(row_source src, bool inverse) const {
        if (!inverse) return amplitude;
        return src == row_source::on_the_fly ? inverse_amplitude : amplitude * inverse_row_scale;
    }
};

template <class Layout, class Arch>
std::size_t check_arch(const fixture& f) {
    constexpr bool inter = std::is_same_v<Layout, posenc::interleaved>;
    const auto& sh = f.sh;
    const std::size_t ts = f.token_stride(), hs = f.head_stride();
    std::size_t checked = 0;
    for (row_source src : {row_source::table, row_source::on_the_fly, row_source::rows})
        for (bool inverse : {false, true}) {
            std::vector<float> got = f.original;
            posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(f.job(got, src, inverse)));

            INFO(Arch::name() << " " << Layout::name << " head_dim " << sh.head_dim << " rotary " << sh.rotary_dim
                              << " strides " << ts << "/" << hs << " source " << int(src) << " inverse " << inverse);
            // Lanes outside the heads are untouched; every head is compared with the reference.
            std::size_t changed_outside = 0;
            std::vector<float> gathered_x, gathered_got;
            std::vector<double> gathered_ref;
            const double a = f.expected_amplitude(src, inverse);
            for (std::size_t j = 0; j < f.original.size(); ++j) {
                const std::size_t in_token = j % ts, t = j / ts;
                const bool in_head = t < fixture::T && in_token < fixture::H * hs && in_token % hs < sh.head_dim;
                if (!in_head && got[j] != f.original[j]) ++changed_outside;
                if (in_head && in_token % hs == 0) {
                    const std::vector<double> x(f.original.begin() + static_cast<std::ptrdiff_t>(j),
                                                f.original.begin() + static_cast<std::ptrdiff_t>(j + sh.head_dim));
                    const std::int64_t p = f.pos[t];
                    const auto ref = posenc_test::reference_rotate(x, sh.rotary_dim, inter, f.inv, inverse ? -p : p, a);
                    gathered_x.insert(gathered_x.end(), x.begin(), x.end());
                    gathered_ref.insert(gathered_ref.end(), ref.begin(), ref.end());
                    gathered_got.insert(gathered_got.end(), got.begin() + static_cast<std::ptrdiff_t>(j),
                                        got.begin() + static_cast<std::ptrdiff_t>(j + sh.head_dim));
                }
            }
            CHECK(changed_outside == 0);
            REQUIRE(gathered_x.size() == fixture::T * fixture::H * sh.head_dim);
            const double ulps =
                posenc_test::worst_pair_ulps(gathered_x, gathered_got, gathered_ref, sh.head_dim, sh.rotary_dim, inter, a);
            CHECK(ulps <= 3.0);
            ++checked;
        }
    return checked;
}

template <class Arch>
std::size_t check_if_supported(const fixture& f) {
    if (!posenc::simd::compat::cpu_supports<Arch>()) {
        WARN("this CPU lacks " << Arch::name() << ": not tested here");
        return 0;
    }
    return check_arch<posenc::half_split, Arch>(f) + check_arch<posenc::interleaved, Arch>(f);
}

template <class... Archs>
std::size_t check_all(xsimd::arch_list<Archs...>, const fixture& f) {
    return (check_if_supported<Archs>(f) + ... + 0);
}

}  // namespace

TEST_CASE("every SIMD architecture equals the double reference, all layouts, strides and widths", "[simd]") {
    const std::vector<kernel_shape> shapes{{128, 128, 0, 0}, {64, 64, 0, 0},   {128, 128, 40 * 128, 0}, {96, 24, 0, 0},
                                    {160, 130, 0, 0}, {64, 64, 0, 192}, {80, 80, 0, 0},          {256, 64, 0, 0},
                                    {6, 6, 0, 0},     {2, 2, 0, 0},     {48, 46, 0, 0},          {1024, 1024, 0, 0}};
    std::size_t checked = 0;
    for (const auto& sh : shapes) checked += check_all(posenc::simd::dispatch_archs{}, fixture(sh));
    // Every shape × 2 layouts × 3 sources × 2 directions, on at least the baseline architecture.
    REQUIRE(checked >= shapes.size() * 12);
    REQUIRE(checked % (shapes.size() * 12) == 0);
}

TEST_CASE("SIMD tables equal float(a·cos(p·θ)), float(a·sin(p·θ)) in double to 1 ulp", "[simd]") {
    std::size_t compared = 0;
    for (std::size_t rotary : {2u, 24u, 64u, 128u, 130u}) {
        const auto inv = posenc_test::closed_form_inv_freq(500000.0, rotary);
        for (double a : {1.0, amplitude}) {
            const posenc::cos_sin_table table(posenc::rope_frequencies{inv, a}, 70000);
            for (std::int64_t p : {0LL, 1LL, 4095LL, 65536LL, 69999LL}) {
                for (std::size_t i = 0; i < rotary / 2; ++i) {
                    INFO("rotary " << rotary << " amplitude " << a << " p " << p << " pair " << i);
                    const double ang = static_cast<double>(p) * inv[i];
                    const auto c = static_cast<float>(a * std::cos(ang)), s = static_cast<float>(a * std::sin(ang));
                    CHECK(std::abs(table.cos(p)[i] - c) <= std::nextafter(std::abs(c), 2.0f) - std::abs(c));
                    CHECK(std::abs(table.sin(p)[i] - s) <= std::nextafter(std::abs(s), 2.0f) - std::abs(s));
                    ++compared;
                }
            }
        }
    }
    REQUIRE(compared == 2 * 5 * (1 + 12 + 32 + 64 + 65));
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
void check_positions(const posenc::position_ids& ids, const std::vector<std::int64_t>& pos, std::size_t D,
                     const std::vector<double>& inv, double a) {
    constexpr bool inter = std::is_same_v<Layout, posenc::interleaved>;
    const std::size_t T = pos.size(), H = 2;
    const auto original = random_floats(T * H * D, 5);
    std::vector<float> got = original;
    posenc::detail::rotate_job job;
    job.positions = ids;
    job.rotary_dim = D;
    job.inv_freq = inv.data();
    job.amplitude = a;
    job.views[0] = posenc::heads_view<float>(std::span<float>(got), {T, H, D});
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
    std::vector<double> ref;
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            const std::vector<double> x(original.begin() + static_cast<std::ptrdiff_t>((t * H + h) * D),
                                        original.begin() + static_cast<std::ptrdiff_t>((t * H + h + 1) * D));
            const auto y = posenc_test::reference_rotate(x, D, inter, inv, pos[t], a);
            ref.insert(ref.end(), y.begin(), y.end());
        }
    INFO(Arch::name() << " " << Layout::name << " first position " << pos.front());
    CHECK(posenc_test::worst_pair_ulps(original, got, ref, D, D, inter, a) <= 3.0);
}

template <class Layout, class Arch>
void check_consecutive(std::int64_t start) {
    // Prefill rows come from the angle-addition recurrence, re-seeded every 32 tokens: 100 tokens
    // cross three re-seeds; the rows must still equal the double reference's.
    const std::size_t T = 100;
    std::vector<std::int64_t> pos(T);
    for (std::size_t t = 0; t < T; ++t) pos[t] = start + static_cast<std::int64_t>(t);
    check_positions<Layout, Arch>(posenc::position_ids::consecutive(start, T), pos, 96,
                                  posenc_test::closed_form_inv_freq(1e6, 96), amplitude);
}

template <class... Archs>
std::size_t check_consecutive_all(xsimd::arch_list<Archs...> archs) {
    std::size_t checked = 0;
    for (std::int64_t start : {0LL, 131000LL, 999'950LL, -77LL})
        posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
            check_consecutive<posenc::half_split, Arch>(start);
            check_consecutive<posenc::interleaved, Arch>(start);
            checked += 2;
        });
    return checked;
}
}  // namespace

TEST_CASE("prefill rows from the angle-addition recurrence equal the double reference", "[simd]") {
    REQUIRE(check_consecutive_all(posenc::simd::dispatch_archs{}) >= 8);
}

namespace {
template <class Layout, class Arch>
void check_far_positions() {
    const std::vector<std::int64_t> pos{999'999'937LL,       -1'000'000'007LL,  (1LL << 26) + 1, 1'000'000'000'039LL,
                                        1LL << 60,           -(1LL << 62),      67'108'863LL};
    check_positions<Layout, Arch>(pos, pos, 64, posenc_test::closed_form_inv_freq(10000.0, 64), 1.0);
}

template <class... Archs>
std::size_t check_far_all(xsimd::arch_list<Archs...> archs) {
    std::size_t checked = 0;
    posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        check_far_positions<posenc::half_split, Arch>();
        check_far_positions<posenc::interleaved, Arch>();
        checked += 2;
    });
    return checked;
}
}  // namespace

TEST_CASE("positions far beyond any context (up to 2^62, negative) equal the double reference", "[simd]") {
    REQUIRE(check_far_all(posenc::simd::dispatch_archs{}) >= 2);
}

namespace {
// Rows are read where they lie (in the table, or in the caller's array) when the rotary width is a
// multiple of the vector width and they need no scaling or sign; nothing may be read past a row's
// 2·pairs floats. Here the last rows of a table and of a caller's array, each sized exactly, so that
// AddressSanitizer (CI's clang build) sees any read past the end — without it a stray read would go
// unnoticed (lanes past a row are discarded) — and the results must give the bits of the same rows
// computed on the fly: in place, out of place (float → bf16), inverse (row_scale 1: a copy with the
// sign flipped), with a fused norm; and with the 16-bit prefetch on and off.
struct last_rows_case {
    bool inverse, out_of_place, norm;
};

template <class Layout, class T, class Arch>
void check_last_rows(std::size_t rotary, last_rows_case c) {
    const std::size_t H = 3, P = 40;
    const auto inv = posenc_test::closed_form_inv_freq(10000.0, rotary);
    const posenc::cos_sin_table table(posenc::rope_frequencies{inv, amplitude}, static_cast<std::int64_t>(P));
    const std::vector<std::int64_t> pos{static_cast<std::int64_t>(P) - 2, static_cast<std::int64_t>(P) - 1};
    std::vector<float> rows(pos.size() * rotary);
    for (std::size_t t = 0; t < pos.size(); ++t) {
        std::copy(table.cos(pos[t]).begin(), table.cos(pos[t]).end(), rows.begin() + static_cast<std::ptrdiff_t>(t * rotary));
        std::copy(table.sin(pos[t]).begin(), table.sin(pos[t]).end(),
                  rows.begin() + static_cast<std::ptrdiff_t>(t * rotary + rotary / 2));
    }
    std::vector<T> original;
    for (float v : random_floats(pos.size() * H * rotary, 9)) original.push_back(T(v));
    std::vector<float> weight(rotary);
    for (std::size_t i = 0; i < rotary; ++i) weight[i] = 0.75f + 0.01f * static_cast<float>(i);
    const auto rotated = [&](row_source src, bool prefetch_16bit = false) {
        std::vector<T> buf = original;
        std::vector<posenc::bf16> out(c.out_of_place ? buf.size() : 0);
        const posenc::heads_view<T> view(std::span<T>(buf), {pos.size(), H, rotary});
        posenc::detail::rotate_job j;
        if (c.out_of_place)
            j.views[0] = posenc::detail::job_view::out_of_place(
                posenc::heads_view<const T>(view), posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(out), {pos.size(), H, rotary}));
        else
            j.views[0] = posenc::detail::job_view::in_place(view);
        if (c.norm) j.views[0].norm_weight = weight.data(), j.views[0].norm_eps = 1e-6;
        j.positions = pos;
        j.rotary_dim = rotary;
        j.inverse = c.inverse;
        j.table = src == row_source::table ? &table : nullptr;
        j.rows = src == row_source::rows ? rows.data() : nullptr;
        j.inv_freq = inv.data();
        j.amplitude = amplitude;
        auto args = posenc::detail::to_args<Layout>(j);
        args.prefetch_16bit = prefetch_16bit;
        posenc::simd::rotate_functor{}(Arch{}, args);
        std::vector<unsigned char> bytes(c.out_of_place ? out.size() * sizeof(posenc::bf16) : buf.size() * sizeof(T));
        std::memcpy(bytes.data(), c.out_of_place ? static_cast<const void*>(out.data()) : static_cast<const void*>(buf.data()),
                    bytes.size());
        return bytes;
    };
    const auto direct = rotated(row_source::on_the_fly), from_table = rotated(row_source::table), from_rows = rotated(row_source::rows);
    INFO(Arch::name() << " " << Layout::name << " rotary " << rotary << " "
                      << (std::is_same_v<T, float> ? "float" : std::is_same_v<T, posenc::bf16> ? "bf16" : "fp16")
                      << " inverse " << c.inverse << " out of place " << c.out_of_place << " norm " << c.norm);
    CHECK(from_table == direct);
    CHECK(from_rows == direct);
    CHECK(rotated(row_source::table, true) == direct);  // prefetching 16-bit buffers (simd::prefetch_16bit) changes no bit
    CHECK(std::count(direct.begin(), direct.end(), 0) < static_cast<std::ptrdiff_t>(direct.size() / 4));  // written
}

template <class Arch>
std::size_t check_last_rows_arch() {
    std::size_t checked = 0;
    // n = rotary/2 of 4, 8, 16, 32, 64, 128: rows in place for W = 4, 8 and 16; 12 and 20: copied for W = 8, 16.
    for (std::size_t rotary : {8u, 16u, 32u, 64u, 128u, 256u, 24u, 40u})
        for (last_rows_case c : {last_rows_case{false, false, false}, last_rows_case{true, false, false},
                                 last_rows_case{false, true, false}, last_rows_case{false, false, true}}) {
            check_last_rows<posenc::half_split, float, Arch>(rotary, c);
            check_last_rows<posenc::interleaved, float, Arch>(rotary, c);
            check_last_rows<posenc::half_split, posenc::bf16, Arch>(rotary, c);
            check_last_rows<posenc::interleaved, posenc::bf16, Arch>(rotary, c);
            check_last_rows<posenc::half_split, posenc::fp16, Arch>(rotary, c);
            check_last_rows<posenc::interleaved, posenc::fp16, Arch>(rotary, c);
            checked += 6;
        }
    return checked;
}

template <class... Archs>
void check_last_rows_all(xsimd::arch_list<Archs...>) {
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) {
             WARN("this CPU lacks " << Archs::name() << ": its rows read in place are not tested here");
             return;
         }
         CHECK(check_last_rows_arch<Archs>() == 8 * 4 * 6);
     }()),
     ...);
}
}  // namespace

TEST_CASE("the last rows of a table or of a caller's array: nothing read past them, the bits of direct rows", "[simd]") {
    check_last_rows_all(posenc::simd::dispatch_archs{});
}

TEST_CASE("CPUID decoding: F16C", "[simd]") {
    STATIC_REQUIRE(posenc::simd::decode_cpuid(1u << 29).f16c);  // CPUID.1:ECX bit 29
    STATIC_REQUIRE(!posenc::simd::decode_cpuid(~(1u << 29)).f16c);
#ifndef POSENC_PREFETCH_16BIT
    CHECK(posenc::simd::prefetch_16bit());  // on by default, on every CPU
#endif
}

TEST_CASE("CPUID decoding: the vendor string", "[simd]") {
    using posenc::simd::decode_cpuid;
    // CPUID.0 returns the vendor string in EBX, EDX, ECX, four ASCII bytes each, little-endian.
    constexpr auto word = [](const char* s) {
        return unsigned(std::uint8_t(s[0])) | unsigned(std::uint8_t(s[1])) << 8 | unsigned(std::uint8_t(s[2])) << 16 |
               unsigned(std::uint8_t(s[3])) << 24;
    };
    STATIC_REQUIRE(decode_cpuid(0, word("Genu"), word("ineI"), word("ntel")).intel);
    STATIC_REQUIRE(!decode_cpuid(0, word("Genu"), word("ntel"), word("ineI")).intel);  // the registers' order matters
    STATIC_REQUIRE(!decode_cpuid(0, word("Auth"), word("enti"), word("cAMD")).intel);
    STATIC_REQUIRE(!decode_cpuid(1u << 29).intel);
    STATIC_REQUIRE(decode_cpuid(1u << 29, word("Genu"), word("ineI"), word("ntel")).f16c);
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)  // where this_cpu() reads CPUID
    // This CPU's, against the kernel's account of it where there is one (Linux).
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("vendor_id", 0) == 0) {
            INFO(line);
            CHECK(posenc::simd::this_cpu().intel == (line.find("GenuineIntel") != std::string::npos));
            break;
        }
#endif
}
