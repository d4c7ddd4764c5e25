// posenc-bench's 16-bit and engine family: S1 in bf16/fp16 storage (and the same kernels with the data
// in L2), K rotated out of place into a cache slot, and the fused per-head RMSNorm + RoPE.
#include "harness.hpp"

#include "attention_limit.hpp"  // copy_pass: kv/append's limit

namespace posenc_bench {
namespace {

// ---- 16-bit storage ------------------------------------------------------------------------------

template <class T>
struct buffers16 {
    std::vector<T, xsimd::aligned_allocator<T, 64>> q, k;
    std::size_t tokens;
    explicit buffers16(std::size_t t = S1_tokens) : q(t * S1_q_heads * S1_head_dim), k(t * S1_kv_heads * S1_head_dim), tokens(t) {
        fill();
    }
    void fill() {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = T(static_cast<float>(i % 97) * 0.01f);
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = T(static_cast<float>(i % 89) * 0.01f);
    }
    [[nodiscard]] double bytes_moved() const { return 2.0 * static_cast<double>((q.size() + k.size()) * sizeof(T)); }
};

template <class T>
buffers16<T>& s1_buffers16() {  // refilled for every run, as s1_buffers
    static buffers16<T> b;
    b.fill();
    return b;
}

/// S1's heads for L2_tokens tokens: 40 heads × 256 bytes × 64 = 640 KiB, in L2 on the machines measured.
constexpr std::size_t L2_tokens = 64;
template <class T>
buffers16<T>& l2_buffers16() {
    static buffers16<T> b(L2_tokens);
    b.fill();
    return b;
}

/// In place over 16-bit buffers (S1's, or the L2-sized ones), against x ^= sign over the same bytes.
template <class Layout, class T>
void rope_16(benchmark::State& state, buffers16<T>& b, unsigned threads) {
    const std::size_t tokens = b.tokens;
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    rope.set_threads(threads);
    const auto table = rope.table(static_cast<std::int64_t>(tokens));
    posenc::heads_view<T> q(std::span<T>(b.q), {tokens, S1_q_heads, S1_head_dim});
    posenc::heads_view<T> k(std::span<T>(b.k), {tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(0, tokens);
    const double seconds = paired(
        state, b.bytes_moved(),
        [&](bool prefetch) {
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.q.data()), b.q.size(), threads, prefetch);
            posenc_bench::flip16_in_place(reinterpret_cast<std::uint16_t*>(b.k.data()), b.k.size(), threads, prefetch);
        },
        [&] { rope.apply(table, q, k, pos); });
    const double heads = static_cast<double>(tokens * (S1_q_heads + S1_kv_heads)) * static_cast<double>(state.iterations());
    if (heads > 0) state.counters["ns_per_head"] = seconds / heads * 1e9;
    require_representative(state, b);
}

// ---- KV-cache append: out of place into a cache slot ------------------------------------------------

template <class Layout>
void kv_append(benchmark::State& state) {
    constexpr std::size_t cache_tokens = 2 * S1_tokens, slot = 1000;
    const std::size_t n = S1_tokens * S1_kv_heads * S1_head_dim;
    static aligned_vector src = [&] {
        aligned_vector v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 89) * 0.01f;
        return v;
    }();
    static aligned_vector cache(cache_tokens * S1_kv_heads * S1_head_dim, 0.0f);
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{});
    const auto table = rope.table(slot + S1_tokens);
    float* dst = cache.data() + slot * S1_kv_heads * S1_head_dim;
    const posenc::heads_view<const float> sv(std::span<const float>(src), {S1_tokens, S1_kv_heads, S1_head_dim});
    const posenc::heads_view<float> dv(dst, {S1_tokens, S1_kv_heads, S1_head_dim});
    const auto pos = posenc::position_ids::consecutive(slot, S1_tokens);
    paired(
        state, 2.0 * static_cast<double>(n * sizeof(float)), [&](bool prefetch) { posenc_bench::copy_pass(src.data(), dst, n, 1, prefetch); },
        [&] { rope.apply_into(table, sv, dv, pos); });
}

// ---- fused QK-norm + RoPE ----------------------------------------------------------------------------

template <class Layout>
void rope_qknorm(benchmark::State& state, bool two_passes) {
    auto& b = s1_buffers();
    posenc::rotary<Layout> rope({.head_dim = S1_head_dim}, posenc::default_rope{.base = 1000000});
    const auto table = rope.table(S1_tokens);
    std::vector<float> w(S1_head_dim);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9f + 0.001f * static_cast<float>(i);
    const posenc::head_rms_norm qn(w, 1e-6), kn(w, 1e-6, posenc::rms_weight::offset_one);
    auto q = view(b.q, S1_tokens, S1_q_heads), k = view(b.k, S1_tokens, S1_kv_heads);
    const auto pos = posenc::position_ids::consecutive(0, S1_tokens);
    const auto at_zero = posenc::position_ids::constant(0, S1_tokens);  // the identity rotation
    // Normalising with the same weights again and again would drain the lanes of small weight towards
    // subnormals (see representative_data): every iteration starts from S1's data.
    static const buffers pristine(S1_tokens, S1_q_heads, S1_kv_heads, S1_head_dim);
    paired_loop(
        state, b, 1,
        [&] {
            if (two_passes) {
                rope.apply_normed(table, qn, q, kn, k, at_zero);
                rope.apply(table, q, k, pos);
            } else {
                rope.apply_normed(table, qn, q, kn, k, pos);
            }
        },
        1.0f, &pristine);
}

}  // namespace

template <class Layout>
void register_engine16(const std::string& name) {
    for (unsigned t : {1u, 2u}) {
        const std::string th = "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(("rope/S1-bf16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_16<Layout>(s, s1_buffers16<posenc::bf16>(), t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
        benchmark::RegisterBenchmark(("rope/S1-fp16/" + name + th).c_str(),
                                     [t](benchmark::State& s) { rope_16<Layout>(s, s1_buffers16<posenc::fp16>(), t); })
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
    }
    // The arithmetic alone: the same kernels with the data in L2 (ns_per_head), against the same pass there.
    benchmark::RegisterBenchmark(("rope/L2-bf16/" + name).c_str(),
                                 [](benchmark::State& s) { rope_16<Layout>(s, l2_buffers16<posenc::bf16>(), 1); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("rope/L2-fp16/" + name).c_str(),
                                 [](benchmark::State& s) { rope_16<Layout>(s, l2_buffers16<posenc::fp16>(), 1); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("kv/append/" + name).c_str(), kv_append<Layout>)->Unit(benchmark::kMicrosecond)->UseManualTime();
    benchmark::RegisterBenchmark(("rope/S1-qknorm/" + name).c_str(), [](benchmark::State& s) { rope_qknorm<Layout>(s, false); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("rope/S1-qknorm-2pass/" + name).c_str(),
                                 [](benchmark::State& s) { rope_qknorm<Layout>(s, true); })
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
}

template void register_engine16<posenc::half_split>(const std::string&);
template void register_engine16<posenc::interleaved>(const std::string&);

}  // namespace posenc_bench
