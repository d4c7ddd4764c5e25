// The attention kernel's QKᵀ and PV steps with row_keys (attn_qk_args, attn_pv_args), on every
// architecture this CPU runs: on a tile a causal-like mask cuts through, each block of rows stops at
// the largest key its rows see.
//
// Expected values: the same steps without row_keys, bit for bit, wherever the contract promises a
// value (every score a row needs; every accumulator lane), and the scores past every row's needs left
// as they were; with decode's few rows (the dot-product path) every score, as the contract says. K and
// V come as float, bf16 and fp16 rows. The full steps themselves are checked against double sums by
// the attention tests.
#include <posenc/attention/attention.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/each_arch.hpp"
#include "support/storage16.hpp"

namespace row_keys_test {

constexpr std::size_t BK = posenc::simd::attn_key_tile;

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

/// Row r's key count: a causal diagonal (r + offset, clamped), or random, or 0 / all by turns.
std::vector<std::size_t> random_row_keys(std::mt19937& rng, std::size_t rows, std::size_t rows_pad, std::size_t keys) {
    std::vector<std::size_t> ends(rows_pad, 0);
    const unsigned kind = rng() % 3;
    const std::size_t offset = rng() % (keys + 1);
    for (std::size_t r = 0; r < rows; ++r) {
        if (kind == 0) ends[r] = std::min(keys, r + offset);
        if (kind == 1) ends[r] = rng() % (keys + 1);
        if (kind == 2) ends[r] = rng() % 4 == 0 ? 0 : keys;
    }
    return ends;
}

/// Rows given as floats, stored in `type` (16-bit ones rounded once: posenc_test::to_storage) for a
/// step to read.
class kv_rows {
public:
    kv_rows(const std::vector<float>& x, posenc::dtype type)
        : type_(type), f32_(x), bf16_(posenc_test::to_storage<posenc::bf16>(x)), fp16_(posenc_test::to_storage<posenc::fp16>(x)) {}
    [[nodiscard]] const void* data() const {
        if (type_ == posenc::dtype::bf16) return bf16_.data();
        if (type_ == posenc::dtype::fp16) return fp16_.data();
        return f32_.data();
    }

private:
    posenc::dtype type_;
    std::vector<float> f32_;
    std::vector<posenc::bf16> bf16_;
    std::vector<posenc::fp16> fp16_;
};

template <class Arch>
void check_arch(Arch) {
    const auto ker = posenc::simd::attention_kernels_for<Arch>();
    INFO("architecture " << ker.arch);
    std::mt19937 rng(20261206);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float nan = std::nanf("");
    std::size_t needed = 0;
    for (int trial = 0; trial < 200; ++trial) {
        // One trial in four has decode's few rows (the dot-product path); the rest more than two row
        // blocks (the packed path).
        const std::size_t rows = trial % 4 == 0 ? 1 + rng() % 8 : 9 + rng() % 56, rows_pad = (rows + 3) / 4 * 4;
        const bool dot_path = rows_pad <= 2 * posenc::simd::attn_row_block;
        const std::size_t keys = 1 + rng() % BK, D = std::size_t{8} * (1 + rng() % 10), dv = 1 + rng() % 80;
        const std::size_t acc_stride = (dv + 15) / 16 * 16, k_stride = D + rng() % 3 * 8;
        const posenc::dtype kv_type = trial % 3 == 0 ? posenc::dtype::f32 : trial % 3 == 1 ? posenc::dtype::bf16 : posenc::dtype::fp16;
        INFO("trial " << trial << ", rows " << rows << ", keys " << keys << ", D " << D << ", dv " << dv << ", K/V "
                      << static_cast<int>(kv_type) << " (0 f32, 1 bf16, 2 fp16)");
        const std::vector<std::size_t> ends = random_row_keys(rng, rows, rows_pad, keys);

        // QKᵀ: the scores a row needs are the full step's; past every row's needs, untouched.
        posenc::detail::attn_floats q(rows_pad * D), kt(D * BK), full(rows_pad * BK), trimmed(rows_pad * BK, nan);
        std::vector<float> k(keys * k_stride), row_scale(rows_pad);
        for (float& x : q) x = u(rng);
        for (float& x : k) x = u(rng);
        for (float& x : row_scale) x = 0.5f + 0.5f * u(rng);
        const kv_rows k_rows(k, kv_type);
        const posenc::simd::attn_qk_args base{q.data(), rows_pad, D, k_rows.data(), k_stride, keys, kt.data(), full.data(),
                                              row_scale.data(), kv_type};
        ker.qk(base);
        posenc::simd::attn_qk_args cut = base;
        cut.s = trimmed.data();
        cut.row_keys = ends.data();
        ker.qk(cut);
        std::size_t most = 0;
        for (std::size_t r = 0; r < rows; ++r) {
            most = std::max(most, ends[r]);
            for (std::size_t j = 0; j < ends[r]; ++j) REQUIRE(bits(trimmed[r * BK + j]) == bits(full[r * BK + j]));
            needed += ends[r];
        }
        const std::size_t untouched = (most + 15) / 16 * 16;  // past the last 16-lane vector any row needs (any width ≤ 16)
        for (std::size_t r = 0; r < rows_pad; ++r)
            for (std::size_t j = dot_path ? 0 : untouched; j < BK; ++j) {
                if (dot_path)  // every key computed (and 0 past the tile's keys)
                    REQUIRE(bits(trimmed[r * BK + j]) == bits(full[r * BK + j]));
                else
                    REQUIRE(std::isnan(trimmed[r * BK + j]));
            }

        // PV: p zero past each row's keys (the caller's promise); every accumulator lane as the full step's.
        posenc::detail::attn_floats p(rows_pad * BK), acc_full(rows_pad * acc_stride), acc_cut(rows_pad * acc_stride);
        std::vector<float> v(keys * dv), scale(rows_pad);
        for (std::size_t r = 0; r < rows_pad; ++r)
            for (std::size_t j = 0; j < BK; ++j) p[r * BK + j] = j < ends[r] ? 0.5f + 0.5f * u(rng) : 0.0f;
        for (float& x : v) x = u(rng);
        for (float& x : scale) x = 0.5f + 0.5f * u(rng);
        for (std::size_t i = 0; i < acc_full.size(); ++i) acc_full[i] = acc_cut[i] = u(rng);
        const bool scaled = trial % 2 == 0;
        const kv_rows v_rows(v, kv_type);
        ker.pv({p.data(), rows, keys, v_rows.data(), dv, dv, acc_full.data(), acc_stride, kv_type, false, {},
                scaled ? scale.data() : nullptr});
        ker.pv({p.data(), rows, keys, v_rows.data(), dv, dv, acc_cut.data(), acc_stride, kv_type, false, {},
                scaled ? scale.data() : nullptr, ends.data()});
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t d = 0; d < dv; ++d) REQUIRE(bits(acc_cut[r * acc_stride + d]) == bits(acc_full[r * acc_stride + d]));
    }
    CHECK(needed > 10000);
}

}  // namespace row_keys_test

TEST_CASE("attention QK and PV steps: row_keys stop each block of rows at its last key, the full steps' bits", "[attention][kernels]") {
    REQUIRE(posenc_test::for_each_cpu_arch(posenc::simd::dispatch_archs{}, [](auto arch) { row_keys_test::check_arch(arch); }) >= 1);
}
