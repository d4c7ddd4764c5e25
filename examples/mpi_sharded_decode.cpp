// Context parallelism with MPI: a long KV cache sharded across ranks, one decode step attended per
// shard (posenc::attention_partial), the partial results gathered on rank 0 and merged with
// posenc::merge_attention_partials; rank 0 then checks the merge against one call over the whole
// cache. Run: mpirun -np 2 ./mpi_sharded_decode  (exit 0 when the two agree to float rounding).
//
// Each rank fills its own shard of a bf16 cache (keys rotated on append at their global positions);
// no rank holds another's keys. Rank 0 regenerates the whole cache only to check the result.
#include <mpi.h>

#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr std::size_t tokens = 6000, heads = 16, kv_heads = 4, head_dim = 64;

/// Token t's K and V rows ([kv_heads][head_dim] each), the same on every rank.
void make_token(std::size_t t, std::vector<float>& k, std::vector<float>& v) {
    std::mt19937 gen(static_cast<std::uint32_t>(1000 + t));
    std::normal_distribution<float> n(0.0f, 0.5f);
    for (float& x : k) x = n(gen);
    for (float& x : v) x = n(gen);
}

using cache_t = posenc::kv_cache<posenc::rotary<posenc::half_split>, posenc::bf16>;

void fill(cache_t& cache, std::size_t begin, std::size_t end) {
    const std::size_t row = kv_heads * head_dim;
    std::vector<float> k((end - begin) * row), v(k.size()), kt(row), vt(row);
    for (std::size_t t = begin; t < end; ++t) {
        make_token(t, kt, vt);
        std::copy(kt.begin(), kt.end(), k.begin() + static_cast<std::ptrdiff_t>((t - begin) * row));
        std::copy(vt.begin(), vt.end(), v.begin() + static_cast<std::ptrdiff_t>((t - begin) * row));
    }
    cache.append(posenc::heads_view<const float>(k.data(), {end - begin, kv_heads, head_dim}),
                 posenc::heads_view<const float>(v.data(), {end - begin, kv_heads, head_dim}),
                 posenc::position_ids::consecutive(static_cast<std::int64_t>(begin), end - begin));
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const auto r = static_cast<std::size_t>(rank), p = static_cast<std::size_t>(size);

    const posenc::rotary<posenc::half_split> rope({.head_dim = head_dim}, posenc::default_rope{.base = 500000});
    const std::size_t begin = tokens * r / p, end = tokens * (r + 1) / p;
    cache_t shard(rope, {.kv_heads = kv_heads, .head_dim = head_dim, .capacity = std::max<std::size_t>(1, end - begin)});
    if (end > begin) fill(shard, begin, end);

    // The decode query (the same on every rank) at the position after the last cached token.
    std::vector<float> q(heads * head_dim);
    std::mt19937 gen(7);
    std::normal_distribution<float> n(0.0f, 0.5f);
    for (float& x : q) x = n(gen);
    const auto q_pos = posenc::position_ids::constant(static_cast<std::int64_t>(tokens), 1);
    const posenc::heads_view<const float> Q(q.data(), {1, heads, head_dim});
    const posenc::attention_encoding enc{shard.transform()};

    // Each rank: out and lse over its shard; one buffer of heads·(head_dim + 1) floats to send.
    const std::size_t part_floats = heads * head_dim + heads;
    std::vector<float> part(part_floats);
    posenc::attention_partial(enc, Q, shard, posenc::heads_view<float>(part.data(), {1, heads, head_dim}),
                              std::span<float>(part.data() + heads * head_dim, heads), q_pos, posenc::causal_mask{});

    std::vector<float> all(rank == 0 ? part_floats * p : 0);
    MPI_Gather(part.data(), static_cast<int>(part_floats), MPI_FLOAT, all.data(), static_cast<int>(part_floats), MPI_FLOAT, 0,
               MPI_COMM_WORLD);
    int status = 0;
    if (rank == 0) {
        std::vector<posenc::attention_part> parts;
        for (std::size_t i = 0; i < p; ++i) {
            const float* base = all.data() + i * part_floats;
            parts.push_back({posenc::heads_view<const float>(base, {1, heads, head_dim}),
                             std::span<const float>(base + heads * head_dim, heads)});
        }
        std::vector<float> merged(heads * head_dim), single(heads * head_dim);
        posenc::merge_attention_partials(parts, posenc::heads_view<float>(merged.data(), {1, heads, head_dim}));

        cache_t whole(rope, {.kv_heads = kv_heads, .head_dim = head_dim, .capacity = tokens});
        fill(whole, 0, tokens);
        posenc::attention(enc, Q, whole, posenc::heads_view<float>(single.data(), {1, heads, head_dim}), q_pos,
                          posenc::causal_mask{});
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < merged.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::abs(merged[i] - single[i])));
            scale = std::max(scale, static_cast<double>(std::abs(single[i])));
        }
        std::printf("%d ranks, %zu tokens of a bf16 cache: max |merged - single| = %.3g (largest output %.3g)\n", size,
                    tokens, worst, scale);
        status = worst <= 2e-6 ? 0 : 1;  // the attention tests' bound, 2e-6·max|v| with |v| ≲ 1 here
    }
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return status;
}
