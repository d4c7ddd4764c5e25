// fuzz_attention's kv_cache half: append (from float, or from 16-bit views into a 16-bit cache) /
// context_shift / clear / attention and attention_partial sequences against the cache's capacity, in
// every storage type; a rejected call leaves the cache (and the partial's lse) byte-identical.
#include "fuzz_attention_inputs.hpp"

namespace posenc_fuzz {
namespace {

/// The cache's whole state, to compare before and after a rejected call.
template <class Cache>
struct cache_state {
    using S = typename Cache::element_type;
    std::vector<S> k, v;
    std::vector<std::int64_t> pos;
    std::size_t size;
    explicit cache_state(const Cache& c)
        : k(c.key_storage().begin(), c.key_storage().end()), v(c.value_storage().begin(), c.value_storage().end()),
          pos(c.position_storage().begin(), c.position_storage().end()), size(c.size()) {}
    bool same(const Cache& c) const {
        return size == c.size() && std::memcmp(k.data(), c.key_storage().data(), k.size() * sizeof(S)) == 0 &&
               std::memcmp(v.data(), c.value_storage().data(), v.size() * sizeof(S)) == 0 &&
               std::equal(pos.begin(), pos.end(), c.position_storage().begin());
    }
};

template <class Transform, class Storage = float>
void fuzz_cache_ops(FuzzedDataProvider& in, const Transform& transform, posenc::kv_cache_shape shape, bool finite_inputs) {
    using cache_type = posenc::kv_cache<Transform, Storage>;
    std::optional<cache_type> cache;
    try {
        cache.emplace(transform, shape);
    } catch (const posenc::error&) {
        return;
    }
    bool sane_cache = finite_inputs;  // everything appended so far finite and in range
    const std::size_t ops = in.ConsumeIntegralInRange<std::size_t>(1, 12);
    for (std::size_t op = 0; op < ops && in.remaining_bytes() > 0; ++op) {
        const cache_state<cache_type> before(*cache);
        try {
            switch (in.ConsumeIntegralInRange(0, 5)) {
                case 0:
                case 1: {  // append
                    sane_flag sane;
                    const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 12);
                    const auto odd = [&](std::size_t x) { return in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 13) : x; };
                    tensor k(in, {odd(n), odd(cache->kv_heads()), odd(cache->head_dim())}, sane);
                    tensor v(in, {odd(n), cache->kv_heads(), odd(cache->value_dim())}, sane);
                    positions pos(in, odd(n), sane);
                    const auto kv = k.view();
                    const auto vv = v.view();
                    if constexpr (!std::is_same_v<Storage, float>) {
                        if (in.ConsumeBool()) {  // K and V already in the cache's type (the same elements, rounded)
                            std::vector<Storage> k16, v16;
                            for (float x : k.buf->mem) k16.push_back(Storage(x));
                            for (float x : v.buf->mem) v16.push_back(Storage(x));
                            cache->append(posenc::heads_view<const Storage>(k16.data(), {kv.tokens(), kv.heads(), kv.head_dim()},
                                                                            {kv.token_stride(), kv.head_stride()}),
                                          posenc::heads_view<const Storage>(v16.data(), {vv.tokens(), vv.heads(), vv.head_dim()},
                                                                            {vv.token_stride(), vv.head_stride()}),
                                          pos.ids);
                            sane_cache = sane_cache && sane.ok;
                            break;
                        }
                    }
                    cache->append(kv, vv, pos.ids);
                    sane_cache = sane_cache && sane.ok;
                    break;
                }
                case 2: cache->context_shift(in.ConsumeIntegralInRange<std::size_t>(0, cache->size() + 2),
                                             in.ConsumeIntegralInRange<std::size_t>(0, cache->size() + 2));
                    break;
                case 3: cache->clear(); sane_cache = finite_inputs; break;
                default: {  // attention against the cache
                    sane_flag sane;
                    sane.ok = sane_cache;
                    const std::size_t tq = in.ConsumeIntegralInRange<std::size_t>(0, 6);
                    const std::size_t hq = cache->kv_heads() * in.ConsumeIntegralInRange<std::size_t>(1, 3);
                    tensor q(in, {tq, hq, cache->head_dim()}, sane), out(in, {tq, hq, cache->value_dim()}, sane);
                    positions qpos(in, tq, sane);
                    const fuzz_mask mask = make_mask(in);
                    fuzz_options opts(in, hq, tq, cache->size(), sane);
                    const auto qv = q.view();
                    const auto ov = out.view();
                    if (in.ConsumeIntegralInRange(0, 2) == 0) {  // a partial result over the cache (out and lse)
                        std::vector<float> lse(in.ConsumeBool() ? tq * hq : in.ConsumeIntegralInRange<std::size_t>(0, 40), 3.0f);
                        const std::vector<float> lse0 = lse;
                        checked_call(out, sane.ok, [&] {
                            try {
                                posenc::attention_partial(posenc::attention_encoding{cache->transform()}, qv, *cache, ov, lse, qpos.ids,
                                                          mask, opts.opt);
                            } catch (const posenc::error&) {
                                require(lse == lse0);  // a rejected partial call writes no lse either
                                throw;
                            }
                        });
                        break;
                    }
                    checked_call(out, sane.ok, [&] {
                        if (in.ConsumeBool())
                            posenc::attention(posenc::attention_encoding{cache->transform()}, qv, *cache, ov, qpos.ids, mask,
                                              opts.opt);
                        else
                            posenc::attention(posenc::attention_encoding{cache->transform(), posenc::alibi_bias({.heads = hq})}, qv,
                                              *cache, ov, qpos.ids, mask, opts.opt);
                    });
                    break;
                }
            }
        } catch (const posenc::error&) {
            require(before.same(*cache));  // a rejected call leaves the cache byte-identical
            continue;
        }
        // The invariants of a cache: within capacity, positions strictly increasing, finite keys when
        // what went in was finite.
        require(cache->size() <= cache->capacity());
        const auto p = cache->positions();
        for (std::size_t i = 1; i < p.size(); ++i) require(p[i] > p[i - 1]);
        if (sane_cache) {
            const auto keys = cache->keys();
            for (std::size_t h = 0; h < keys.heads(); ++h)
                for (std::size_t t = 0; t < keys.tokens(); ++t)
                    for (std::size_t i = 0; i < keys.head_dim(); ++i) require(std::isfinite(static_cast<float>(keys.row(t, h)[i])));
        }
    }
}

}  // namespace

void fuzz_kv_cache(FuzzedDataProvider& in) {
    posenc::kv_cache_shape shape{.kv_heads = in.ConsumeIntegralInRange<std::size_t>(0, 3),
                                 .head_dim = in.ConsumeIntegralInRange<std::size_t>(0, 24),
                                 .value_dim = in.ConsumeIntegralInRange<std::size_t>(0, 12),
                                 .capacity = in.ConsumeIntegralInRange<std::size_t>(0, 40)};
    const int storage = in.ConsumeIntegralInRange(0, 2);  // float, bf16, fp16
    if (in.ConsumeBool()) {
        if (storage == 0) fuzz_cache_ops(in, posenc::nope{}, shape, true);
        if (storage == 1) fuzz_cache_ops<posenc::nope, posenc::bf16>(in, posenc::nope{}, shape, true);
        if (storage == 2) fuzz_cache_ops<posenc::nope, posenc::fp16>(in, posenc::nope{}, shape, true);
        return;
    }
    const std::size_t rope_dim = in.ConsumeBool() ? shape.head_dim : in.ConsumeIntegralInRange<std::size_t>(1, 24);
    fuzz_rope rope(in, rope_dim);
    if (!rope.rope) return;
    if (storage == 0) fuzz_cache_ops(in, *rope.rope, shape, true);
    if (storage == 1) fuzz_cache_ops<posenc::any_rotary, posenc::bf16>(in, *rope.rope, shape, true);
    if (storage == 2) fuzz_cache_ops<posenc::any_rotary, posenc::fp16>(in, *rope.rope, shape, true);
}

}  // namespace posenc_fuzz
