// bf16 in, bf16 out: every lane must be the float computation the kernels document — the products
// and the fused multiply-add in float32 from the float cos/sin row — rounded once to bf16, bit for
// bit. On AVX2 and AVX-512 this goes through the word-pair path (two bf16 lanes per 32-bit word,
// rounding half up with a tie fix-up), so the inputs here are chosen to hit what that path special-cases: exact ties
// (cos = 1 + 2⁻⁸), overflow to inf, inf − inf = NaN, NaN and inf inputs, subnormals, and a row that
// holds NaN (which must turn the pair path off). Expected values: std::fma and the scalar bf16
// conversion, evaluated here; on architectures without FMA hardware only the FMA-free parts are
// compared (their products round twice).

#include <posenc/posenc.hpp>
#include <posenc/simd/dispatch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"

namespace {

using posenc::bf16;

bool has_fma(const char* arch) {  // the dispatched ones: "fma3+avx2", "avx512bw"
    const std::string name(arch);
    return name.find("fma") != std::string::npos || name.find("avx512") != std::string::npos;
}

/// The bf16 inputs: random values in [−3, 3] with the special values mixed in.
std::vector<bf16> inputs(std::size_t n, std::uint32_t seed) {
    static const std::uint16_t special[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x7F7F,
                                            0xFF7F, 0x0001, 0x8040, 0x3F80, 0x3F81, 0x3F82, 0xBF83, 0x4000};
    std::vector<bf16> x(n);
    std::uint32_t state = seed;
    for (std::size_t i = 0; i < n; ++i) {
        state = state * 1664525u + 1013904223u;
        const float r = static_cast<float>(state >> 8) * 0x1p-24f * 6.0f - 3.0f;
        x[i] = (state >> 4) % 5 == 0 ? bf16::from_bits(special[(state >> 12) % 16]) : bf16(r);
    }
    return x;
}

/// [cos × pairs | sin × pairs] for each row kind.
std::vector<float> rows_of(std::size_t pairs, bool with_nan_row) {
    std::vector<float> rows;
    const auto add = [&](auto c, auto s) {
        for (std::size_t i = 0; i < pairs; ++i) rows.push_back(c(i));
        for (std::size_t i = 0; i < pairs; ++i) rows.push_back(s(i));
    };
    // x·(1 + 2⁻⁸) for an 8-bit x is exact in float and often a tie that rounds down to even; ties that
    // round up come from the rows below.
    add([](std::size_t) { return 1.0f + 0x1p-8f; }, [](std::size_t) { return 0.0f; });
    add([](std::size_t) { return 1.0f; }, [](std::size_t i) { return i % 2 ? 0x1p-9f : -0x1p-8f; });
    add([](std::size_t) { return 1.25f; }, [](std::size_t) { return 1.25f; });               // overflow
    add([](std::size_t i) { return static_cast<float>(std::cos(0.37 * static_cast<double>(i + 1))); },
        [](std::size_t i) { return static_cast<float>(std::sin(0.37 * static_cast<double>(i + 1))); });
    if (with_nan_row) {
        // NaNs whose low half is not zero: the pair rounding would carry them into −0, so each such
        // row must turn the pair path off (one in cos, one in sin at the last pair: the scan's tail).
        const float nan = std::bit_cast<float>(0x7FFFFFFFu);
        add([&](std::size_t i) { return i == 3 % pairs ? nan : 0.5f; }, [](std::size_t) { return 0.75f; });
        add([](std::size_t) { return 0.5f; }, [&](std::size_t i) { return i + 1 == pairs ? -nan : 0.75f; });
    }
    return rows;
}

struct bf16_shape {
    std::size_t head_dim, rotary_dim;
};

std::uint32_t bits(bf16 v) { return v.bits; }
std::uint32_t bits(float v) { return std::bit_cast<std::uint32_t>(v); }
bool quiet_nan(bf16 v) { return (v.bits & 0x7FC0) == 0x7FC0; }
bool quiet_nan(float v) { return (std::bit_cast<std::uint32_t>(v) & 0x7FC00000u) == 0x7FC00000u; }

/// Lanes of `got` (T = bf16 or float) that differ from std::fma's float result on `src`, rounded to T
/// (pass-through lanes: the same bits). Without FMA hardware only the s = 0 lanes compare.
template <class T>
std::size_t mismatches(const std::vector<T>& src, const std::vector<T>& got, const std::vector<float>& rows,
                       const bf16_shape& sh, std::size_t heads, bool interleaved, bool fused, std::size_t& compared) {
    const std::size_t r = sh.rotary_dim, n = r / 2, ts = heads * sh.head_dim;
    std::size_t bad = 0;
    for (std::size_t t = 0; t < rows.size() / r; ++t)
        for (std::size_t h = 0; h < heads; ++h) {
            const std::size_t at = t * ts + h * sh.head_dim;
            const float* c = rows.data() + t * r;
            const float* s = c + n;
            for (std::size_t i = 0; i < sh.head_dim; ++i) {
                const float xi = static_cast<float>(src[at + i]);
                float want = xi;
                bool exact_here = true;
                if (i < r) {
                    const std::size_t p = interleaved ? i / 2 : i % n;
                    const bool first = interleaved ? i % 2 == 0 : i < n;
                    const std::size_t partner = interleaved ? (first ? i + 1 : i - 1) : (first ? i + n : i - n);
                    const float xo = static_cast<float>(src[at + partner]);
                    // first: x·c − x_partner·s; second: x·c + x_partner·s (each one FMA on x86 FMA archs)
                    want = first ? std::fma(-xo, s[p], xi * c[p]) : std::fma(xo, s[p], xi * c[p]);
                    exact_here = fused || s[p] == 0.0f;  // without FMA only s = 0 rounds once
                }
                if (!exact_here) continue;
                const T w = i < r ? T(want) : src[at + i], g = got[at + i];  // pass-through: the same bits
                const bool both_nan = i < r && std::isnan(want) && quiet_nan(g);  // (payload: the hardware's pick)
                if (!(bits(g) == bits(w) || both_nan)) {
                    if (bad < 6)
                        UNSCOPED_INFO((sizeof(T) == 2 ? "bf16" : "float") << " token " << t << " head " << h << " lane " << i
                                                                         << " got " << static_cast<float>(g) << " (0x" << std::hex
                                                                         << bits(g) << ") want " << static_cast<float>(w) << " (0x"
                                                                         << bits(w) << ")" << std::dec);
                    ++bad;
                }
                ++compared;
            }
        }
    return bad;
}

/// A call over `rows` (one row of rotary_dim floats per token) with no views yet.
posenc::simd::rotate_args call_over(const std::vector<float>& rows, const bf16_shape& sh, bool interleaved) {
    posenc::simd::rotate_args a;
    a.tokens = rows.size() / sh.rotary_dim;
    a.head_dim = sh.head_dim;
    a.rotary_dim = sh.rotary_dim;
    a.layout = interleaved ? posenc::simd::layout_id::interleaved : posenc::simd::layout_id::half_split;
    a.rows = rows.data();
    return a;
}

/// Runs bf16 → bf16 (in place or into another buffer) on Arch, optionally with a float view in the
/// same call (a call the word pairs cover only in part), and compares every lane.
template <class Arch>
std::size_t check(const bf16_shape& sh, bool interleaved, bool in_place, bool with_nan_row, bool with_float_view) {
    constexpr std::size_t heads = 3;
    const std::size_t r = sh.rotary_dim, n = r / 2;
    const auto rows = rows_of(n, with_nan_row);
    const std::size_t tokens = rows.size() / r;
    const auto src = inputs(tokens * heads * sh.head_dim, static_cast<std::uint32_t>(sh.head_dim * 7 + r));
    std::vector<bf16> buf = src, out(src.size(), bf16::from_bits(0x1234));
    std::vector<float> fsrc(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) fsrc[i] = static_cast<float>(src[i]) * (1.0f + 0x1p-12f);
    std::vector<float> fbuf = fsrc;
    posenc::simd::rotate_args a = call_over(rows, sh, interleaved);
    const std::size_t ts = heads * sh.head_dim;
    a.view[0] = {buf.data(), in_place ? static_cast<void*>(buf.data()) : static_cast<void*>(out.data()),
                 posenc::dtype::bf16, posenc::dtype::bf16, heads, ts, sh.head_dim, ts, sh.head_dim, nullptr, 0.0};
    if (with_float_view)
        a.view[1] = {fbuf.data(), fbuf.data(), posenc::dtype::f32, posenc::dtype::f32, heads, ts, sh.head_dim, ts,
                     sh.head_dim, nullptr, 0.0};
    posenc::simd::rotate_functor{}(Arch{}, a);

    const bool fused = has_fma(Arch::name());
    std::size_t compared = 0;
    std::size_t bad = mismatches(src, in_place ? buf : out, rows, sh, heads, interleaved, fused, compared);
    if (with_float_view) bad += mismatches(fsrc, fbuf, rows, sh, heads, interleaved, fused, compared);
    INFO(Arch::name() << (interleaved ? " interleaved" : " half_split") << (in_place ? " in place" : " out of place")
                      << " head_dim " << sh.head_dim << " rotary " << r << (with_nan_row ? " with a NaN row" : "")
                      << (with_float_view ? " with a float view" : ""));
    CHECK(bad == 0);
    return compared;
}

template <class... Archs>
std::size_t check_bf16_archs(xsimd::arch_list<Archs...> archs) {
    std::size_t compared = 0;
    if (!posenc::simd::compat::cpu_supports<xsimd::fma3<xsimd::avx2>>())
        WARN("this CPU lacks AVX2: the word-pair path is not exercised here");
    posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        // Pair steps of 2W lanes, single vectors and tails (W = 4, 8, 16), and partial rotary; on
        // AVX-512 the rows held in registers for 1, 2 and 4 steps (64: 1 / 2, 128: 2 / 4, 32: – / 1,
        // half-split / interleaved) and the loop where they do not fit (96: – / 3).
        for (const bf16_shape sh : std::initializer_list<bf16_shape>{{128, 128}, {96, 96}, {64, 64}, {56, 56}, {40, 40}, {34, 34},
                                                                     {32, 32}, {16, 16}, {6, 6}, {128, 64}, {80, 48}, {256, 128}})
            for (bool il : {false, true})
                for (bool in_place : {true, false})
                    for (bool nan_row : {false, true})
                        for (bool mixed : {false, true}) compared += check<Arch>(sh, il, in_place, nan_row, mixed);
    });
    return compared;
}

}  // namespace

TEST_CASE("bf16 to bf16 rounds the float FMA result once, bit for bit, at ties, overflow and NaN", "[dtypes][simd]") {
    // Every CPU runs the SSE2 kernels: 12 shapes × 2 layouts × 2 placements × 2 row sets × 2 view sets, each comparing
    // at least its s = 0 token (3 heads × head_dim ≥ 6 lanes; without FMA only such lanes compare).
    REQUIRE(check_bf16_archs(posenc::simd::dispatch_archs{}) >= 12 * 16 * 3 * 6);
}

namespace {

/// bf16 → bf16 into a destination whose head and token strides differ from the source's: the same
/// bits as into a dense destination, and nothing written between the destination's rows.
template <class Arch>
std::size_t check_strided_destination(const bf16_shape& sh, bool interleaved) {
    constexpr std::size_t heads = 3;
    constexpr std::uint16_t sentinel = 0x1234;
    const std::size_t r = sh.rotary_dim, n = r / 2;
    const auto rows = rows_of(n, false);
    const std::size_t tokens = rows.size() / r;
    const std::size_t sts = heads * sh.head_dim, dhs = sh.head_dim + 40, dts = heads * dhs + 8;
    const auto src = inputs(tokens * sts, static_cast<std::uint32_t>(sh.head_dim * 5 + r));
    std::vector<bf16> dense(src.size(), bf16::from_bits(sentinel)), strided(tokens * dts, bf16::from_bits(sentinel));
    auto run = [&](bf16* dst, std::size_t ts, std::size_t hs) {
        posenc::simd::rotate_args a = call_over(rows, sh, interleaved);
        a.view[0] = {src.data(), dst, posenc::dtype::bf16, posenc::dtype::bf16, heads, sts, sh.head_dim, ts, hs, nullptr, 0.0};
        posenc::simd::rotate_functor{}(Arch{}, a);
    };
    run(dense.data(), sts, sh.head_dim);
    run(strided.data(), dts, dhs);
    std::size_t differ = 0, overwritten = 0;
    for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t i = 0; i < sh.head_dim; ++i)
                differ += dense[t * sts + h * sh.head_dim + i].bits != strided[t * dts + h * dhs + i].bits;
    for (std::size_t j = 0; j < strided.size(); ++j) {
        const std::size_t in = j % dts;
        if (in >= heads * dhs || in % dhs >= sh.head_dim) overwritten += strided[j].bits != sentinel;
    }
    INFO(Arch::name() << (interleaved ? " interleaved" : " half_split") << " head_dim " << sh.head_dim << " rotary " << r);
    CHECK(differ == 0);
    CHECK(overwritten == 0);
    return 1;
}

template <class... Archs>
std::size_t check_strided_all(xsimd::arch_list<Archs...> archs) {
    std::size_t checked = 0;
    for (const bf16_shape sh : std::initializer_list<bf16_shape>{{128, 128}, {64, 64}, {32, 32}, {256, 128}, {128, 64}, {96, 96}})
        for (bool il : {false, true})
            posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) { checked += check_strided_destination<Arch>(sh, il); });
    return checked;
}

}  // namespace

TEST_CASE("bf16 to bf16 into a destination with other strides gives the dense destination's bits", "[dtypes][simd]") {
    REQUIRE(check_strided_all(posenc::simd::dispatch_archs{}) >= 6 * 2);  // SSE2 at least
}
