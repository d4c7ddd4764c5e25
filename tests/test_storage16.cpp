// 16-bit storage (bf16, fp16): the formats' rounding, the kernels' conversions in and out on every
// SIMD architecture this CPU has (forced), the unchecked entry point and xPos over 16-bit views,
// against references written in double (tests/support/storage16.hpp).
#include <posenc/posenc.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <map>
#include <random>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/kernel_jobs.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

using posenc_test::as_double;
using posenc_test::make_job;
using posenc_test::random_floats;
using posenc_test::round_bf16;
using posenc_test::round_fp16;
using posenc_test::round_to;
using posenc_test::run_on;
using posenc_test::to_storage;
using posenc_test::type_name;
using posenc_test::ulp_of;

TEST_CASE("bf16 and fp16 round to nearest even like the double-precision format definition", "[dtypes]") {
    std::vector<float> xs{1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 70000.0f, 6.1035156e-05f, 5.9604645e-08f,
                          2.9802322e-08f, 2.9802326e-08f, 1e-10f, -3.0e38f, 3.3895314e38f, 3.3961e38f, FLT_MAX,
                          FLT_MIN, 1e-40f, 0.333333343f, 1.00048828125f, 1.001953125f, 1.0009765625f};
    // Exact ties of both formats (the bits below the kept mantissa are 100…0) and their neighbours.
    for (std::uint32_t base : {0x3F800000u, 0x3F810000u, 0x40490000u, 0xC2F60000u})
        for (std::uint32_t low : {0x8000u, 0x7FFFu, 0x8001u, 0x18000u})
            xs.push_back(std::bit_cast<float>(base + low));
    for (std::uint32_t base : {0x3F800000u, 0x3F802000u, 0x38800000u})
        for (std::uint32_t low : {0x1000u, 0x0FFFu, 0x1001u, 0x3000u}) xs.push_back(std::bit_cast<float>(base + low));
    std::mt19937 gen(11);
    for (int i = 0; i < 20000; ++i) {
        std::uint32_t bits = gen();
        if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // inf/NaN checked separately
        xs.push_back(std::bit_cast<float>(bits));
    }
    for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(static_cast<float>(gen() % 100000) / 1e5f + 0.5f, int(gen() % 44) - 28));
    std::size_t compared = 0;
    for (float x : xs) {
        INFO("x = " << x << " bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x));
        const double b = as_double(posenc::bf16(x)), h = as_double(posenc::fp16(x));
        CHECK((b == round_bf16(x)));
        CHECK((h == round_fp16(x)));
        // Round trip: a storage value converts to float exactly and back to itself.
        CHECK(posenc::bf16(static_cast<float>(posenc::bf16(x))) == posenc::bf16(x));
        CHECK(posenc::fp16(static_cast<float>(posenc::fp16(x))) == posenc::fp16(x));
        ++compared;
    }
    REQUIRE(compared == xs.size());
    CHECK(std::isnan(static_cast<float>(posenc::bf16(NAN))));
    CHECK(std::isnan(static_cast<float>(posenc::fp16(NAN))));
    CHECK(static_cast<float>(posenc::fp16(INFINITY)) == INFINITY);
    CHECK(static_cast<float>(posenc::bf16(-INFINITY)) == -INFINITY);
    // All 65536 fp16 bit patterns: exact to float and back.
    std::size_t patterns = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
        const auto h = posenc::fp16::from_bits(static_cast<std::uint16_t>(b));
        const float f = static_cast<float>(h);
        if (std::isnan(f)) continue;
        CHECK(posenc::fp16(f) == h);
        ++patterns;
    }
    REQUIRE(patterns == 65536 - 2 * 1023);
}

TEST_CASE("bf16 and fp16 keep a NaN whose payload lies only in the dropped low bits a quiet NaN and never inf", "[dtypes]") {
    // IEEE 754 (6.2.3): a conversion of a NaN delivers a NaN. A signalling NaN whose payload bits all lie in the
    // 16 (bf16) or 13 (fp16) low bits that the conversion drops would come out as the all-zero mantissa of
    // +-inf unless the quiet bit is set: dtypes.hpp promises a quiet NaN (fp16: as F16C's vcvtps2ph).
    for (const std::uint32_t bits : {0x7F800001u, 0xFF800001u, 0x7F801FFFu, 0x7F80FFFFu, 0xFF808000u}) {
        INFO("x bits 0x" << std::hex << bits);
        const float x = std::bit_cast<float>(bits);
        REQUIRE(std::isnan(x));
        const posenc::bf16 b(x);
        const posenc::fp16 h(x);
        CHECK((b.bits & 0x7FC0u) == 0x7FC0u);  // exponent all ones, quiet bit set
        CHECK((b.bits & 0x8000u) == ((bits >> 16) & 0x8000u));
        CHECK((h.bits & 0x7E00u) == 0x7E00u);
        CHECK((h.bits & 0x8000u) == ((bits >> 16) & 0x8000u));
        CHECK(std::isnan(static_cast<float>(b)));
        CHECK(std::isnan(static_cast<float>(h)));
    }
}

TEST_CASE("fp16 rounds exact ties between subnormals to the even neighbour", "[dtypes]") {
    // (q + 1/2)·2^-24 lies halfway between the subnormal halves q·2^-24 and (q + 1)·2^-24 (bits: mantissa q,
    // exponent 0); round-to-nearest-even takes the even q. 1023.5·2^-24 rounds up into 2^-14, the smallest normal.
    struct subnormal_tie {
        int twice;           // x = twice·2^-25
        std::uint16_t bits;  // the even neighbour's binary16 bits
    };
    for (const subnormal_tie t : {subnormal_tie{3, 2}, subnormal_tie{5, 2}, subnormal_tie{7, 4}, subnormal_tie{9, 4},
                                  subnormal_tie{2045, 1022}, subnormal_tie{2047, 0x400}, subnormal_tie{-5, 0x8002}}) {
        const float x = std::ldexp(static_cast<float>(t.twice), -25);
        INFO("x = " << t.twice << "·2^-25");
        CHECK(posenc::fp16(x).bits == t.bits);
    }
}

namespace {

// ---- kernels forced per architecture -------------------------------------------------------------

struct case_shape {
    std::size_t head_dim, rotary_dim, token_stride, head_stride;  // strides 0 = dense
};



/// The YaRN table of one rotary width, built once for every architecture, layout and dtype pair (a
/// static inside the check_types template below would be one per instantiation: 64 builds of each).
const posenc::cos_sin_table& types_table(const posenc::rope_frequencies& freq, std::size_t rotary_dim) {
    static std::map<std::size_t, posenc::cos_sin_table> tables;
    return tables.try_emplace(rotary_dim, freq, 70001).first->second;
}

/// Rotates S-typed data into a D-typed destination (out of place) on Arch and compares each lane
/// with the double reference rounded once to D: |got − ref_D| ≤ 1 ulp of D at the reference, plus the
/// float32 computation's own error (4 float ulps of the pair's length: cos/sin rows are float).
template <class Layout, class Arch, class S, class D>
void check_types(const case_shape& sh, bool use_table, std::size_t& compared) {
    constexpr std::size_t T = 6, H = 3;
    const std::size_t hs = sh.head_stride ? sh.head_stride : sh.head_dim;
    const std::size_t ts = sh.token_stride ? sh.token_stride : H * hs;
    const auto freq = posenc::yarn{.base = 10000, .factor = 4, .original_max_position = 4096}.frequencies(sh.rotary_dim);
    const std::vector<std::int64_t> pos{0, 1, 4095, 65537, 123, 70000};
    const posenc::cos_sin_table& table = types_table(freq, sh.rotary_dim);  // one per width (Debug builds are slow)
    const auto x_float = random_floats(T * ts + H * hs, 21, 3.0f);
    const auto src = to_storage<S>(x_float);
    std::vector<D> dst(src.size(), D(-77.0f));  // sentinel outside the view
    auto job = make_job<Layout>(freq, pos, sh.rotary_dim, use_table ? &table : nullptr);
    job.views[0] = posenc::detail::job_view::out_of_place(
        posenc::heads_view<const S>(std::span<const S>(src), {T, H, sh.head_dim}, {ts, hs}),
        posenc::heads_view<D>(std::span<D>(dst), {T, H, sh.head_dim}, {ts, hs}));
    run_on<Layout, Arch>(job);
    const bool il = std::is_same_v<Layout, posenc::interleaved>;
    std::size_t bad = 0, sentinel_ok = 0;
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t at = t * ts + h * hs;
            std::vector<double> x(sh.head_dim);
            for (std::size_t i = 0; i < sh.head_dim; ++i) x[i] = as_double(src[at + i]);
            const auto ref = posenc_test::reference_rotate(x, sh.rotary_dim, il, freq.inv_freq, pos[t], freq.attention_factor);
            for (std::size_t i = 0; i < sh.head_dim; ++i) {
                const std::size_t pair = il ? i / 2 : (i < sh.rotary_dim / 2 ? i : i - sh.rotary_dim / 2);
                const std::size_t a = il ? 2 * pair : pair, b = il ? 2 * pair + 1 : pair + sh.rotary_dim / 2;
                const double len = i < sh.rotary_dim ? std::hypot(x[a], x[b]) * freq.attention_factor : 0.0;
                const double want = round_to<D>(ref[i]), got = as_double(dst[at + i]);
                const double tol = ulp_of<D>(ref[i]) + 4.0 * std::ldexp(len, -24);
                if (!(std::abs(got - want) <= tol)) {
                    if (bad < 5) UNSCOPED_INFO("lane " << i << " token " << t << " got " << got << " want " << want);
                    ++bad;
                }
                ++compared;
            }
        }
    for (std::size_t j = 0; j < dst.size(); ++j) {
        const std::size_t in_token = j % ts, t = j / ts;
        const bool in_view = t < T && in_token < H * hs && in_token % hs < sh.head_dim;
        if (!in_view) sentinel_ok += as_double(dst[j]) == round_to<D>(-77.0);
        else ++sentinel_ok;
    }
    INFO(Arch::name() << " " << Layout::name << " " << type_name<S>() << "->" << type_name<D>() << " head_dim "
                      << sh.head_dim << " rotary " << sh.rotary_dim << " table " << use_table);
    CHECK(bad == 0);
    CHECK(sentinel_ok == dst.size());
}

template <class Layout, class Arch>
void check_all_types(std::size_t& compared) {
    const std::vector<case_shape> shapes{{128, 128, 0, 0}, {64, 64, 0, 192}, {96, 24, 0, 0}, {48, 46, 0, 0}, {6, 6, 0, 0}};
    for (const auto& sh : shapes)
        for (bool table : {false, true}) {
            check_types<Layout, Arch, float, float>(sh, table, compared);
            check_types<Layout, Arch, float, posenc::bf16>(sh, table, compared);
            check_types<Layout, Arch, float, posenc::fp16>(sh, table, compared);
            check_types<Layout, Arch, posenc::bf16, posenc::bf16>(sh, table, compared);
            check_types<Layout, Arch, posenc::fp16, posenc::fp16>(sh, table, compared);
            check_types<Layout, Arch, posenc::bf16, float>(sh, table, compared);
            check_types<Layout, Arch, posenc::fp16, float>(sh, table, compared);
            check_types<Layout, Arch, posenc::bf16, posenc::fp16>(sh, table, compared);
        }
}

template <class... Archs>
std::size_t check_types_all_archs(xsimd::arch_list<Archs...>) {
    std::size_t compared = 0;
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) {
             WARN("this CPU lacks " << Archs::name() << ": not tested here");
             return;
         }
         check_all_types<posenc::half_split, Archs>(compared);
         check_all_types<posenc::interleaved, Archs>(compared);
     }()),
     ...);
    return compared;
}

}  // namespace

TEST_CASE("bf16 and fp16 in and out: the double reference rounded once, within 1 ulp, on every arch", "[dtypes][simd]") {
    REQUIRE(check_types_all_archs(posenc::simd::dispatch_archs{}) >= 2 * 5 * 8 * 2 * 6 * 3 * 6);
}

namespace {
/// At position 0 (cos 1, sin 0, amplitude 1) the rotation is the identity, so an out-of-place call
/// is a pure conversion through the kernel's stores: ties, subnormals and overflow must round like
/// the format's definition.
template <class Layout, class Arch, class D>
std::size_t check_kernel_rounding() {
    std::vector<float> xs;
    for (std::uint32_t base : {0x3F800000u, 0x3F810000u, 0xC0490000u, 0x3F802000u, 0x38800000u, 0x33800000u})
        for (std::uint32_t low : {0x8000u, 0x7FFFu, 0x8001u, 0x18000u, 0x1000u, 0x0FFFu, 0x1001u, 0x3000u, 0x1u})
            xs.push_back(std::bit_cast<float>(base + low));
    for (float v : {65519.0f, 65520.0f, -70000.0f, 3.0e-8f, 2.98023224e-08f, 1e-6f, 6.1e-5f, 3.3961e38f}) xs.push_back(v);
    while (xs.size() % 64) xs.push_back(0.75f + static_cast<float>(xs.size()) * 0.001f);
    const std::size_t head_dim = 64, T = xs.size() / head_dim;
    const auto freq = posenc::default_rope{}.frequencies(head_dim);
    std::vector<D> dst(xs.size());
    const std::vector<std::int64_t> zeros(T, 0);  // outlives the job (position_ids is a view)
    auto job = make_job<Layout>(freq, zeros, head_dim, nullptr);
    job.views[0] = posenc::detail::job_view::out_of_place(
        posenc::heads_view<const float>(std::span<const float>(xs), {T, 1, head_dim}),
        posenc::heads_view<D>(std::span<D>(dst), {T, 1, head_dim}));
    run_on<Layout, Arch>(job);
    std::size_t compared = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
        INFO(Arch::name() << " " << type_name<D>() << " x = " << xs[i]);
        CHECK(as_double(dst[i]) == round_to<D>(xs[i]));
        ++compared;
    }
    return compared;
}

template <class... Archs>
std::size_t check_rounding_all_archs(xsimd::arch_list<Archs...> archs) {
    std::size_t compared = 0;
    posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        compared += check_kernel_rounding<posenc::half_split, Arch, posenc::bf16>();
        compared += check_kernel_rounding<posenc::interleaved, Arch, posenc::fp16>();
        compared += check_kernel_rounding<posenc::half_split, Arch, posenc::fp16>();
    });
    return compared;
}
}  // namespace

TEST_CASE("the kernels' bf16 and fp16 stores round ties to even, subnormals and overflow like the format", "[dtypes][simd]") {
    REQUIRE(check_rounding_all_archs(posenc::simd::dispatch_archs{}) >= 3 * 64);
}


TEST_CASE("apply_unchecked takes 16-bit views and equals the checked call", "[dtypes]") {
    const std::size_t T = 13, HQ = 3, HK = 1, D = 128;
    const posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{});
    const auto table = rope.table(T);
    const auto pos = posenc::position_ids::consecutive(0, T);
    auto q = to_storage<posenc::bf16>(random_floats(T * HQ * D, 75)), k = to_storage<posenc::bf16>(random_floats(T * HK * D, 76));
    auto q_ref = q, k_ref = k;
    rope.apply(table, posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(q_ref), {T, HQ, D}),
               posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(k_ref), {T, HK, D}), pos);
    rope.apply_unchecked(table, posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(q), {T, HQ, D}),
                         posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(k), {T, HK, D}), pos);
    CHECK(q == q_ref);
    CHECK(k == k_ref);
}

// ---- xPos in 16-bit storage, in and out of place ----------------------------------------------------

TEST_CASE("xPos accepts bf16 and fp16, in place and out of place: the float result rounded once", "[xpos][dtypes]") {
    const std::size_t T = 12, H = 2, D = 64;
    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D, .rotary_dim = 48}, posenc::xpos{.center = 6});
    const auto pos = posenc::position_ids::consecutive(0, T);
    // Inputs representable in bf16 and fp16, so that the float path sees the same values.
    auto x = random_floats(T * H * D, 61);
    for (float& v : x) v = static_cast<float>(posenc::fp16(static_cast<float>(posenc::bf16(v))));
    auto q_ref = x, k_ref = x;
    xp.apply_queries(posenc::heads_view<float>(std::span<float>(q_ref), {T, H, D}), pos);
    xp.apply_keys(posenc::heads_view<float>(std::span<float>(k_ref), {T, H, D}), pos);

    auto q16 = to_storage<posenc::bf16>(x);
    xp.apply_queries(posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(q16), {T, H, D}), pos);
    std::vector<posenc::fp16> cache(T * H * D);
    xp.apply_keys_into(posenc::heads_view<const float>(std::span<const float>(x), {T, H, D}),
                       posenc::heads_view<posenc::fp16>(std::span<posenc::fp16>(cache), {T, H, D}), pos);
    std::size_t equal_q = 0, equal_k = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        equal_q += q16[i] == posenc::bf16(q_ref[i]);
        equal_k += cache[i] == posenc::fp16(k_ref[i]);
    }
    CHECK(equal_q == x.size());
    CHECK(equal_k == x.size());
}
