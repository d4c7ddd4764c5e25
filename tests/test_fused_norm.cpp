// The fused per-head RMSNorm + RoPE (Qwen3's and Gemma's q/k norms): the kernels on every SIMD
// architecture this CPU has (forced) against the closed form in double, and the public apply_normed
// and apply_normed_into calls against two float passes and against each other.
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/errors.hpp"
#include "support/kernel_jobs.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

using posenc_test::as_double;
using posenc_test::make_job;
using posenc_test::random_floats;
using posenc_test::round_to;
using posenc_test::run_on;
using posenc_test::to_storage;
using posenc_test::type_name;
using posenc_test::ulp_of;

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
std::size_t check_norm_all(xsimd::arch_list<Archs...> archs) {
    std::size_t compared = 0;
    posenc_test::for_each_cpu_arch(archs, [&]<class Arch>(Arch) {
        for (auto form : {posenc::rms_weight::plain, posenc::rms_weight::offset_one}) {
            compared += check_norm<posenc::half_split, Arch, float, float>(128, 128, form, false);
            compared += check_norm<posenc::interleaved, Arch, float, float>(128, 128, form, false);
            compared += check_norm<posenc::half_split, Arch, float, float>(80, 40, form, true);
            compared += check_norm<posenc::interleaved, Arch, float, posenc::bf16>(64, 64, form, true);
            compared += check_norm<posenc::interleaved, Arch, posenc::bf16, posenc::bf16>(128, 128, form, false);
            compared += check_norm<posenc::half_split, Arch, posenc::bf16, posenc::bf16>(256, 256, form, false);
            compared += check_norm<posenc::half_split, Arch, posenc::fp16, posenc::fp16>(128, 64, form, false);
            compared += check_norm<posenc::interleaved, Arch, float, float>(22, 22, form, false);
        }
    });
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
