// Engine integration: 16-bit storage (bf16, fp16), out-of-place rotation with conversion, batch-
// invariant numerics, the caller's executor and the fused per-head RMSNorm, on every SIMD
// architecture this CPU has (forced), against references written here in double.
#include <posenc/posenc.hpp>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"

using posenc_test::random_floats;

namespace {

// ---- independent references -------------------------------------------------------------------

/// x rounded to nearest even with `mantissa` explicit bits, exponents from `min_exp` (subnormal
/// quantum below it), overflowing to inf at `max_finite` + half an ulp: evaluated in double.
double round_to_format(double x, int mantissa, int min_exp, double max_finite) {
    if (std::isnan(x) || x == 0.0) return x;
    const double a = std::abs(x);
    const int e = std::max(std::ilogb(a), min_exp);
    const double quantum = std::ldexp(1.0, e - mantissa);
    const double top_quantum = std::ldexp(1.0, std::ilogb(max_finite) - mantissa);
    if (a >= max_finite + top_quantum / 2) return std::copysign(INFINITY, x);
    double r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest even
    if (r > max_finite) r = INFINITY;
    return std::copysign(r, x);
}
double round_fp16(double x) { return round_to_format(x, 10, -14, 65504.0); }
double round_bf16(double x) { return round_to_format(x, 7, -126, std::ldexp(255.0, 120)); }  // (2 − 2^-7)·2^127

template <class T>
double round_to(double x) {
    if constexpr (std::is_same_v<T, posenc::bf16>) return round_bf16(x);
    else if constexpr (std::is_same_v<T, posenc::fp16>) return round_fp16(x);
    else return static_cast<double>(static_cast<float>(x));
}

/// One ulp of the storage type at |x| (the spacing above |x|'s binade start).
template <class T>
double ulp_of(double x) {
    const int mant = std::is_same_v<T, posenc::bf16> ? 7 : std::is_same_v<T, posenc::fp16> ? 10 : 23;
    const int min_exp = std::is_same_v<T, posenc::fp16> ? -14 : -126;
    return std::ldexp(1.0, std::max(std::ilogb(std::abs(x) + 1e-300), min_exp) - mant);
}

template <class T>
double as_double(T v) {
    return static_cast<double>(static_cast<float>(v));
}

template <class T>
std::vector<T> to_storage(const std::vector<float>& x) {
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = T(x[i]);
    return out;
}

template <class T>
const char* type_name() {
    return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, posenc::bf16> ? "bf16" : "fp16";
}

}  // namespace

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

namespace {

// ---- kernels forced per architecture -------------------------------------------------------------

struct case_shape {
    std::size_t head_dim, rotary_dim, token_stride, head_stride;  // strides 0 = dense
};

template <class Layout>
posenc::detail::rotate_job make_job(const posenc::rope_frequencies& freq, const posenc::position_ids& pos,
                                     std::size_t rotary_dim, const posenc::cos_sin_table* table) {
    posenc::detail::rotate_job j;
    j.positions = pos;
    j.rotary_dim = rotary_dim;
    j.table = table;
    j.inv_freq = freq.inv_freq.data();
    j.amplitude = freq.attention_factor;
    return j;
}

template <class Layout, class Arch>
void run_on(const posenc::detail::rotate_job& job) {
    posenc::simd::rotate_functor{}(Arch{}, posenc::detail::to_args<Layout>(job));
}

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
std::size_t check_rounding_all_archs(xsimd::arch_list<Archs...>) {
    std::size_t compared = 0;
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) return;
         compared += check_kernel_rounding<posenc::half_split, Archs, posenc::bf16>();
         compared += check_kernel_rounding<posenc::interleaved, Archs, posenc::fp16>();
         compared += check_kernel_rounding<posenc::half_split, Archs, posenc::fp16>();
     }()),
     ...);
    return compared;
}
}  // namespace

TEST_CASE("the kernels' bf16 and fp16 stores round ties to even, subnormals and overflow like the format", "[dtypes][simd]") {
    REQUIRE(check_rounding_all_archs(posenc::simd::dispatch_archs{}) >= 3 * 64);
}

// ---- out of place: the public API ----------------------------------------------------------------

TEST_CASE("apply_into writes exactly what the in-place call computes, into a cache slot", "[out_of_place]") {
    const std::size_t T = 40, HQ = 4, HK = 2, D = 128, cache_tokens = 100, slot = 37;
    posenc::rotary<posenc::half_split> rope({.head_dim = D, .rotary_dim = 96}, posenc::default_rope{.base = 10000});
    const auto table = rope.table(4096);
    const auto q0 = random_floats(T * HQ * D, 3), k0 = random_floats(T * HK * D, 4);
    const auto pos = posenc::position_ids::consecutive(1000, T);
    for (bool use_table : {false, true}) {
        auto q_ref = q0, k_ref = k0;
        posenc::heads_view<float> qv(std::span<float>(q_ref), {T, HQ, D}), kv(std::span<float>(k_ref), {T, HK, D});
        if (use_table) rope.apply(table, qv, kv, pos);
        else rope.apply(qv, kv, pos);
        // The cache holds [cache_tokens, HK, D]; the new keys go to tokens slot..slot+T−1; Q goes to another buffer.
        std::vector<float> cache(cache_tokens * HK * D, -5.0f), q_out(T * HQ * D, -5.0f);
        const posenc::heads_view<const float> q_src(std::span<const float>(q0), {T, HQ, D});
        const posenc::heads_view<const float> k_src(std::span<const float>(k0), {T, HK, D});
        posenc::heads_view<float> q_dst(std::span<float>(q_out), {T, HQ, D});
        posenc::heads_view<float> k_dst(cache.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply_into(table, q_src, q_dst, k_src, k_dst, pos);
        else rope.apply_into(q_src, q_dst, k_src, k_dst, pos);
        INFO("table " << use_table);
        CHECK(std::memcmp(q_out.data(), q_ref.data(), q_ref.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(cache.data() + slot * HK * D, k_ref.data(), k_ref.size() * sizeof(float)) == 0);
        std::size_t untouched = 0;
        for (std::size_t i = 0; i < cache.size(); ++i)
            if (i < slot * HK * D || i >= (slot + T) * HK * D) untouched += cache[i] == -5.0f;
        CHECK(untouched == cache.size() - T * HK * D);
    }
}

TEST_CASE("apply_into with a destination that is its source rotates that view in place: Q in place, K into a cache", "[out_of_place]") {
    const std::size_t T = 33, HQ = 4, HK = 2, D = 64, cache_tokens = 80, slot = 21;
    posenc::rotary<posenc::interleaved> rope({.head_dim = D, .rotary_dim = 48}, posenc::default_rope{.base = 10000});
    const auto table = rope.table(2048);
    const auto pos = posenc::position_ids::consecutive(900, T);
    const auto q0 = to_storage<posenc::bf16>(random_floats(T * HQ * D, 5));
    const auto k0 = random_floats(T * HK * D, 6);
    for (bool use_table : {false, true}) {
        // Reference: Q in place, then K into the cache, as two calls.
        auto q_ref = q0;
        std::vector<posenc::bf16> cache_ref(cache_tokens * HK * D, posenc::bf16(-5.0f));
        posenc::heads_view<posenc::bf16> q_ref_v(std::span<posenc::bf16>(q_ref), {T, HQ, D});
        const posenc::heads_view<const float> k_src(std::span<const float>(k0), {T, HK, D});
        posenc::heads_view<posenc::bf16> slot_ref(cache_ref.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply(table, q_ref_v, pos), rope.apply_into(table, k_src, slot_ref, pos);
        else rope.apply(q_ref_v, pos), rope.apply_into(k_src, slot_ref, pos);
        // One call: q_dst is q_src itself.
        auto q = q0;
        std::vector<posenc::bf16> cache(cache_tokens * HK * D, posenc::bf16(-5.0f));
        posenc::heads_view<posenc::bf16> qv(std::span<posenc::bf16>(q), {T, HQ, D});
        posenc::heads_view<posenc::bf16> slot_v(cache.data() + slot * HK * D, {T, HK, D});
        if (use_table) rope.apply_into(table, posenc::heads_view<const posenc::bf16>(qv), qv, k_src, slot_v, pos);
        else rope.apply_into(posenc::heads_view<const posenc::bf16>(qv), qv, k_src, slot_v, pos);
        INFO("table " << use_table);
        CHECK(q == q_ref);
        CHECK(cache == cache_ref);
        CHECK(q != q0);  // it did rotate Q
    }
    // The source's memory under another stride or element type is not the source: rejected, naming
    // what differs, nothing written.
    std::vector<float> buf(2 * T * HK * D, 0.25f);
    const auto before = buf;
    posenc::heads_view<float> a(buf.data(), {T, HK, D}, {4 * D, D}), b(buf.data(), {T, HK, D}, {D, T * D}),
        c(buf.data(), {T, HK, D}, {4 * D, 2 * D});
    posenc_test::expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(a), b, pos); }, "dst.token_stride",
                                     "64");
    posenc_test::expect_config_error([&] { rope.apply_into(posenc::heads_view<const float>(a), c, pos); }, "dst.head_stride",
                                     "128");
    CHECK(buf == before);
    std::vector<posenc::bf16> b16(T * HK * D, posenc::bf16(0.5f));
    const auto b16_before = b16;
    const posenc::heads_view<const posenc::bf16> s16(std::span<const posenc::bf16>(b16), {T, HK, D});
    const posenc::heads_view<posenc::fp16> as_fp16(reinterpret_cast<posenc::fp16*>(b16.data()), {T, HK, D});  // never read
    posenc_test::expect_config_error([&] { rope.apply_into(s16, as_fp16, pos); }, "dst", "another element type");
    CHECK(b16 == b16_before);
    // One token: the strides do not matter, a dense view over a strided row is that row (decode).
    auto row = random_floats(3 * HK * D, 8);  // one token of a wider row: heads at a stride of 3·D
    auto row_ref = row;
    const posenc::heads_view<float> strided(row.data(), {1, HK, D}, {3 * HK * D, 3 * D});
    const posenc::heads_view<float> same_row(row.data(), {1, HK, D}, {100 * D, 3 * D});
    const auto at = posenc::position_ids::consecutive(4321, 1);
    rope.apply_into(posenc::heads_view<const float>(strided), same_row, at);
    rope.apply(posenc::heads_view<float>(row_ref.data(), {1, HK, D}, {3 * HK * D, 3 * D}), at);
    CHECK(row == row_ref);
    // A single view whose destination is itself equals the in-place call.
    auto x = random_floats(T * HK * D, 7), x_ref = x;
    posenc::heads_view<float> xv(std::span<float>(x), {T, HK, D});
    rope.apply_into(posenc::heads_view<const float>(xv), xv, pos);
    rope.apply(posenc::heads_view<float>(std::span<float>(x_ref), {T, HK, D}), pos);
    CHECK(std::memcmp(x.data(), x_ref.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("Q and K of one fused QKV buffer: Q in place and K into a cache in one call, token rows checked exactly", "[out_of_place]") {
    const std::size_t T = 17, HQ = 4, HK = 2, D = 64, row = (HQ + 2 * HK) * D, cache_tokens = 40, slot = 9;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 500000});
    const auto pos = posenc::position_ids::consecutive(250, T);
    const auto qkv0 = random_floats(T * row, 9);
    auto q_of = [&](std::vector<float>& qkv) { return posenc::heads_view<float>(qkv.data(), {T, HQ, D}, {row, D}); };
    auto k_of = [&](std::vector<float>& qkv) { return posenc::heads_view<float>(qkv.data() + HQ * D, {T, HK, D}, {row, D}); };
    // Reference: Q in place, then K into the cache, two calls.
    auto qkv_ref = qkv0;
    std::vector<float> cache_ref(cache_tokens * HK * D, -3.0f);
    rope.apply(q_of(qkv_ref), pos);
    rope.apply_into(posenc::heads_view<const float>(k_of(qkv_ref)),
                    posenc::heads_view<float>(cache_ref.data() + slot * HK * D, {T, HK, D}), pos);
    for (unsigned threads : {1u, 3u}) {
        CAPTURE(threads);
        rope.set_threads(threads);
        auto qkv = qkv0;
        std::vector<float> cache(cache_tokens * HK * D, -3.0f);
        const auto qv = q_of(qkv);
        rope.apply_into(posenc::heads_view<const float>(qv), qv, posenc::heads_view<const float>(k_of(qkv)),
                        posenc::heads_view<float>(cache.data() + slot * HK * D, {T, HK, D}), pos);
        CHECK(qkv == qkv_ref);  // Q rotated in place, K and V untouched
        CHECK(cache == cache_ref);
    }
    rope.set_threads(1);
    // A K view that reaches one lane into Q's last head of each row does share bytes: rejected.
    auto qkv = qkv0;
    const auto qv = q_of(qkv);
    const posenc::heads_view<const float> k_shifted(qkv.data() + HQ * D - 1, {T, HK, D}, {row, D});
    std::vector<float> cache(T * HK * D);
    posenc_test::expect_config_error(
        [&] {
            rope.apply_into(posenc::heads_view<const float>(qv), qv, k_shifted,
                            posenc::heads_view<float>(std::span<float>(cache), {T, HK, D}), pos);
        },
        "q_dst", "k_src");
    // So does a K source that is Q's memory, with Q in place.
    posenc_test::expect_config_error(
        [&] {
            rope.apply_into(posenc::heads_view<const float>(qv), qv, posenc::heads_view<const float>(qkv.data(), {T, HK, D}, {row, D}),
                            posenc::heads_view<float>(std::span<float>(cache), {T, HK, D}), pos);
        },
        "q_dst", "k_src");
    CHECK(qkv == qkv0);
}

TEST_CASE("a destination that is its source, with the fused norm, threads and xPos", "[out_of_place][norm][xpos]") {
    const std::size_t T = 600, H = 4, D = 128;  // 300K floats: split into slices with set_threads(3)
    posenc::rotary<posenc::interleaved> rope({.head_dim = D, .rotary_dim = 96}, posenc::default_rope{});
    rope.set_threads(3);
    const posenc::head_rms_norm norm(random_floats(D, 81, 0.3f), 1e-6);
    const auto pos = posenc::position_ids::consecutive(3, T);
    auto x = to_storage<posenc::bf16>(random_floats(T * H * D, 82)), x_ref = x;
    const posenc::heads_view<posenc::bf16> xv(std::span<posenc::bf16>(x), {T, H, D});
    rope.apply_normed_into(norm, posenc::heads_view<const posenc::bf16>(xv), xv, pos);
    rope.apply_normed(norm, posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(x_ref), {T, H, D}), pos);
    CHECK(x == x_ref);
    // An empty view that is given still has its norm checked.
    const posenc::head_rms_norm narrow(std::vector<float>(32, 1.0f), 1e-6);
    posenc_test::expect_config_error(
        [&] { rope.apply_normed(narrow, posenc::heads_view<posenc::bf16>(x.data(), {T, 0, D}), pos); }, "norm.weight", "32");

    const posenc::xpos_rotary<posenc::half_split> xp({.head_dim = D}, posenc::xpos{});
    auto y = random_floats(5 * H * D, 83), y_ref = y;
    const posenc::heads_view<float> yv(std::span<float>(y), {5, H, D});
    const auto p5 = posenc::position_ids::consecutive(10, 5);
    xp.apply_keys_into(posenc::heads_view<const float>(yv), yv, p5);
    xp.apply_keys(posenc::heads_view<float>(std::span<float>(y_ref), {5, H, D}), p5);
    CHECK(y == y_ref);
}

TEST_CASE("apply_into converts float to bf16 on the way, and rejects overlapping or mismatched views", "[out_of_place]") {
    const std::size_t T = 9, H = 2, D = 64;
    posenc::any_rotary rope(posenc::rope_layout::interleaved, {.head_dim = D}, posenc::default_rope{});
    const auto x = random_floats(T * H * D, 8);
    std::vector<float> ref = x;
    rope.apply(posenc::heads_view<float>(std::span<float>(ref), {T, H, D}), posenc::position_ids::consecutive(5, T));
    std::vector<posenc::bf16> out(T * H * D);
    rope.apply_into(posenc::heads_view<const float>(std::span<const float>(x), {T, H, D}),
                    posenc::heads_view<posenc::bf16>(std::span<posenc::bf16>(out), {T, H, D}),
                    posenc::position_ids::consecutive(5, T));
    std::size_t equal = 0;
    for (std::size_t i = 0; i < out.size(); ++i) equal += out[i] == posenc::bf16(ref[i]);  // one rounding of the float result
    CHECK(equal == out.size());

    std::vector<float> buf(2 * T * H * D, 1.0f), before = buf;
    posenc::heads_view<float> a(buf.data(), {T, H, D}), b(buf.data() + D, {T, H, D}, {2 * H * D, D});
    posenc_test::expect_config_error([&] { rope.apply_into(a, b, posenc::position_ids::consecutive(0, T)); }, "dst",
                                     "overlapping");
    posenc::heads_view<float> small(buf.data() + T * H * D, {T, 1, D});
    posenc_test::expect_config_error([&] { rope.apply_into(a, small, posenc::position_ids::consecutive(0, T)); },
                                     "dst shape", "9x1x64");
    CHECK(buf == before);
}

TEST_CASE("apply_into with Q and K rejects a destination that overlaps the other view's source or destination", "[out_of_place]") {
    const std::size_t T = 4, H = 2, D = 32, n = T * H * D;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{});
    // Four disjoint regions of one buffer; each bad case points one destination at another view's bytes.
    std::vector<float> buf(4 * n);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 97) * 0.01f;
    const std::vector<float> before = buf;
    auto view = [&](std::size_t region) { return posenc::heads_view<float>(buf.data() + region * n, {T, H, D}); };
    auto src = [&](std::size_t region) { return posenc::heads_view<const float>(view(region)); };
    const auto pos = posenc::position_ids::consecutive(7, T);
    std::size_t cases = 0;
    // q_dst on k_src, q_dst on k_dst, k_dst on q_src.
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(2), src(2), view(3), pos); }, "q_dst", "k_src");
    ++cases;
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(3), src(2), view(3), pos); }, "q_dst", "k_dst");
    ++cases;
    posenc_test::expect_config_error([&] { rope.apply_into(src(0), view(1), src(2), view(0), pos); }, "k_dst", "q_src");
    ++cases;
    REQUIRE(cases == 3);
    CHECK(buf == before);
    rope.apply_into(src(0), view(1), src(2), view(3), pos);  // all four disjoint: accepted, and it writes
    CHECK(buf != before);
}

// ---- batch invariance ---------------------------------------------------------------------------

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
std::size_t check_invariance_all(xsimd::arch_list<Archs...>, const posenc::head_rms_norm* norm) {
    const posenc::cos_sin_table table(setup().freq, 8192);
    std::size_t compared = 0;
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) return;
         compared += check_invariance<posenc::half_split, Archs, T>(table, norm);
         compared += check_invariance<posenc::interleaved, Archs, T>(table, norm);
     }()),
     ...);
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

// ---- fused per-head RMSNorm + RoPE ------------------------------------------------------------------

namespace {
template <class Layout, class Arch, class S, class D>
std::size_t check_norm(std::size_t head_dim, std::size_t rotary_dim, posenc::rms_weight form, bool out_of_place) {
    constexpr std::size_t T = 5, H = 17;  // the kernels normalise 8 heads at a time: two blocks and one more
    // Gemma's eps is made large so that a kernel that dropped it would fail (|x| ~ 2, eps/mean x² ~ 1%).
    const double eps = form == posenc::rms_weight::offset_one ? 0.05 : 1e-6;
    std::vector<float> weight = random_floats(head_dim, 41, 0.5f);
    const posenc::head_rms_norm norm(weight, eps, form);
    const auto freq = posenc::default_rope{.base = 1000000}.frequencies(rotary_dim);
    const std::vector<std::int64_t> pos{0, 7, 4096, 99'999, 1'000'000};
    auto x_float = random_floats(T * H * head_dim, 42, 2.0f);
    x_float[3] = 0.0f;
    const auto src = to_storage<S>(x_float);
    std::vector<S> inplace = src;
    std::vector<D> dst(src.size());
    auto job = make_job<Layout>(freq, pos, rotary_dim, nullptr);
    if (out_of_place) {
        job.views[0] = posenc::detail::job_view::out_of_place(
            posenc::heads_view<const S>(std::span<const S>(src), {T, H, head_dim}),
            posenc::heads_view<D>(std::span<D>(dst), {T, H, head_dim}));
    } else {
        job.views[0] = posenc::detail::job_view::in_place(posenc::heads_view<S>(std::span<S>(inplace), {T, H, head_dim}));
    }
    job.views[0].norm_weight = norm.weight().data();
    job.views[0].norm_eps = eps;
    run_on<Layout, Arch>(job);
    const bool il = std::is_same_v<Layout, posenc::interleaved>;
    std::size_t compared = 0, bad = 0;
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
            const std::size_t at = (t * H + h) * head_dim;
            // Closed form in double: x̂ = x / √(mean x² + eps) · w (w = 1 + weight for Gemma), then rotate.
            std::vector<double> x(head_dim);
            double sq = 0;
            for (std::size_t i = 0; i < head_dim; ++i) {
                x[i] = as_double(src[at + i]);
                sq += x[i] * x[i];
            }
            const double inv = 1.0 / std::sqrt(sq / static_cast<double>(head_dim) + eps);
            for (std::size_t i = 0; i < head_dim; ++i)
                x[i] *= inv * (form == posenc::rms_weight::offset_one ? 1.0 + weight[i] : weight[i]);
            const auto ref = posenc_test::reference_rotate(x, rotary_dim, il, freq.inv_freq, pos[t]);
            for (std::size_t i = 0; i < head_dim; ++i) {
                double len = std::abs(x[i]);
                if (i < rotary_dim) {
                    const std::size_t pair = il ? i / 2 : i % (rotary_dim / 2);
                    len = il ? std::hypot(x[2 * pair], x[2 * pair + 1]) : std::hypot(x[pair], x[pair + rotary_dim / 2]);
                }
                const double got = out_of_place ? as_double(dst[at + i]) : as_double(inplace[at + i]);
                const double want = out_of_place ? round_to<D>(ref[i]) : round_to<S>(ref[i]);
                const double ulp = out_of_place ? ulp_of<D>(ref[i]) : ulp_of<S>(ref[i]);
                // Float32 computation: the scale, x·scale, ·w and the rotation round once each.
                if (!(std::abs(got - want) <= ulp + 6.0 * std::ldexp(len, -24))) {
                    if (bad < 5) UNSCOPED_INFO("token " << t << " head " << h << " lane " << i << " got " << got << " want " << want);
                    ++bad;
                }
                ++compared;
            }
        }
    INFO(Arch::name() << " " << Layout::name << " " << type_name<S>() << "->" << type_name<D>() << " head_dim " << head_dim
                      << " rotary " << rotary_dim << " gemma " << (form == posenc::rms_weight::offset_one));
    CHECK(bad == 0);
    return compared;
}

template <class... Archs>
std::size_t check_norm_all(xsimd::arch_list<Archs...>) {
    std::size_t compared = 0;
    (([&] {
         if (!posenc::simd::compat::cpu_supports<Archs>()) return;
         for (auto form : {posenc::rms_weight::plain, posenc::rms_weight::offset_one}) {
             compared += check_norm<posenc::half_split, Archs, float, float>(128, 128, form, false);
             compared += check_norm<posenc::interleaved, Archs, float, float>(128, 128, form, false);
             compared += check_norm<posenc::half_split, Archs, float, float>(80, 40, form, true);
             compared += check_norm<posenc::interleaved, Archs, float, posenc::bf16>(64, 64, form, true);
             compared += check_norm<posenc::interleaved, Archs, posenc::bf16, posenc::bf16>(128, 128, form, false);
             compared += check_norm<posenc::half_split, Archs, posenc::bf16, posenc::bf16>(256, 256, form, false);
             compared += check_norm<posenc::half_split, Archs, posenc::fp16, posenc::fp16>(128, 64, form, false);
             compared += check_norm<posenc::interleaved, Archs, float, float>(22, 22, form, false);
         }
     }()),
     ...);
    return compared;
}
}  // namespace

TEST_CASE("fused per-head RMSNorm + RoPE equals the closed form in double (Qwen3 and Gemma weights)", "[norm][simd]") {
    REQUIRE(check_norm_all(posenc::simd::dispatch_archs{}) > 0);
}

TEST_CASE("apply_normed: the public API equals normalising and then rotating, and checks the weight", "[norm]") {
    const std::size_t T = 20, HQ = 4, HK = 2, D = 128;
    posenc::rotary<posenc::half_split> rope({.head_dim = D}, posenc::default_rope{.base = 1000000});
    std::vector<float> wq = random_floats(D, 51, 0.3f), wk = random_floats(D, 52, 0.3f);
    const posenc::head_rms_norm qn(wq, 1e-6), kn(wk, 1e-6, posenc::rms_weight::offset_one);
    auto q = random_floats(T * HQ * D, 53), k = random_floats(T * HK * D, 54);
    // Two passes, in float like the kernel: the norm, then the rotation.
    auto q2 = q, k2 = k;
    for (auto* pair : {&q2, &k2}) {
        const bool is_q = pair == &q2;
        const auto& w = is_q ? qn.weight() : kn.weight();
        for (std::size_t row = 0; row < pair->size() / D; ++row) {
            float* x = pair->data() + row * D;
            double sq = 0;
            for (std::size_t i = 0; i < D; ++i) sq += double(x[i]) * x[i];
            const float scale = static_cast<float>(1.0 / std::sqrt(sq / D + 1e-6));
            for (std::size_t i = 0; i < D; ++i) x[i] = (x[i] * scale) * w[i];
        }
    }
    const auto pos = posenc::position_ids::consecutive(77, T);
    rope.apply(posenc::heads_view<float>(std::span<float>(q2), {T, HQ, D}), posenc::heads_view<float>(std::span<float>(k2), {T, HK, D}), pos);
    rope.apply_normed(qn, posenc::heads_view<float>(std::span<float>(q), {T, HQ, D}), kn,
                      posenc::heads_view<float>(std::span<float>(k), {T, HK, D}), pos);
    double worst = 0;
    for (std::size_t i = 0; i < q.size(); ++i) worst = posenc_test::worst_of(worst, double(std::abs(q[i] - q2[i])));
    for (std::size_t i = 0; i < k.size(); ++i) worst = posenc_test::worst_of(worst, double(std::abs(k[i] - k2[i])));
    CHECK(worst <= 4e-6);  // the sum of squares' float order differs from the double one here; values are O(1)

    const posenc::head_rms_norm wrong(std::vector<float>(64, 1.0f), 1e-6);
    const auto before = q;
    posenc_test::expect_config_error(
        [&] {
            rope.apply_normed(qn, posenc::heads_view<float>(std::span<float>(q), {T, HQ, D}), wrong,
                              posenc::heads_view<float>(std::span<float>(k), {T, HK, D}), pos);
        },
        "k_norm.weight", "64");
    CHECK(q == before);
}

TEST_CASE("apply_normed_into: from a table or on the fly, the in-place result written elsewhere", "[norm][out_of_place]") {
    const std::size_t T = 9, HQ = 4, HK = 2, D = 64;
    posenc::rotary<posenc::interleaved> rope({.head_dim = D}, posenc::default_rope{.base = 500000});
    const auto table = rope.table(40);
    const posenc::head_rms_norm qn(random_floats(D, 61, 0.3f), 1e-6), kn(random_floats(D, 62, 0.3f), 1e-5, posenc::rms_weight::offset_one);
    const auto q = random_floats(T * HQ * D, 63), k = random_floats(T * HK * D, 64);
    const auto pos = posenc::position_ids::consecutive(30, T);
    // The reference: the in-place fused call on copies (its own tests hold it to the closed form).
    auto q_in = q, k_in = k;
    rope.apply_normed(qn, posenc::heads_view<float>(std::span<float>(q_in), {T, HQ, D}), kn,
                      posenc::heads_view<float>(std::span<float>(k_in), {T, HK, D}), pos);
    for (const bool from_table : {false, true}) {
        CAPTURE(from_table);
        std::vector<float> q_out(q.size()), k_out(k.size());
        const posenc::heads_view<const float> qs(std::span<const float>(q), {T, HQ, D}), ks(std::span<const float>(k), {T, HK, D});
        const posenc::heads_view<float> qd(std::span<float>(q_out), {T, HQ, D}), kd(std::span<float>(k_out), {T, HK, D});
        if (from_table)
            rope.apply_normed_into(table, qn, qs, qd, kn, ks, kd, pos);
        else
            rope.apply_normed_into(qn, qs, qd, kn, ks, kd, pos);
        CHECK(q_out == q_in);  // bit for bit: a table built from the same frequencies
        CHECK(k_out == k_in);
        // A position past the table: range_error, nothing written.
        if (from_table) {
            std::fill(q_out.begin(), q_out.end(), 0.0f);
            std::fill(k_out.begin(), k_out.end(), 0.0f);
            CHECK_THROWS_AS(rope.apply_normed_into(table, qn, qs, qd, kn, ks, kd, posenc::position_ids::consecutive(32, T)),
                            posenc::range_error);
            CHECK(q_out == std::vector<float>(q.size(), 0.0f));
            CHECK(k_out == std::vector<float>(k.size(), 0.0f));
        }
    }
}

TEST_CASE("one-view apply_normed and apply_normed_into equal the two-view call's Q, through any_rotary too", "[norm][out_of_place]") {
    const std::size_t T = 11, HQ = 3, HK = 2, D = 64;
    const posenc::any_rotary rope(posenc::rope_layout::half_split, {.head_dim = D}, posenc::default_rope{.base = 1e6});
    const auto table = rope.table(64);
    const posenc::head_rms_norm qn(random_floats(D, 71, 0.3f), 1e-6), kn(random_floats(D, 72, 0.3f), 1e-6);
    const auto q = to_storage<posenc::fp16>(random_floats(T * HQ * D, 73));
    const auto k = to_storage<posenc::fp16>(random_floats(T * HK * D, 74));
    const auto pos = posenc::position_ids::consecutive(40, T);
    auto q_ref = q, k_ref = k;
    rope.apply_normed(qn, posenc::heads_view<posenc::fp16>(std::span<posenc::fp16>(q_ref), {T, HQ, D}), kn,
                      posenc::heads_view<posenc::fp16>(std::span<posenc::fp16>(k_ref), {T, HK, D}), pos);
    for (const bool from_table : {false, true}) {
        CAPTURE(from_table);
        auto q1 = q;
        const posenc::heads_view<posenc::fp16> qv(std::span<posenc::fp16>(q1), {T, HQ, D});
        if (from_table) rope.apply_normed(table, qn, qv, pos);
        else rope.apply_normed(qn, qv, pos);
        CHECK(q1 == q_ref);
        std::vector<posenc::fp16> out(q.size());
        const posenc::heads_view<const posenc::fp16> qs(std::span<const posenc::fp16>(q), {T, HQ, D});
        const posenc::heads_view<posenc::fp16> od(std::span<posenc::fp16>(out), {T, HQ, D});
        if (from_table) rope.apply_normed_into(table, qn, qs, od, pos);
        else rope.apply_normed_into(qn, qs, od, pos);
        CHECK(out == q_ref);
    }
    // The norm's error names it as the call's one norm; nothing written.
    const posenc::head_rms_norm wrong(std::vector<float>(32, 1.0f), 1e-6);
    auto q1 = q;
    posenc_test::expect_config_error(
        [&] { rope.apply_normed(wrong, posenc::heads_view<posenc::fp16>(std::span<posenc::fp16>(q1), {T, HQ, D}), pos); },
        "norm.weight", "32");
    CHECK(q1 == q);
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
