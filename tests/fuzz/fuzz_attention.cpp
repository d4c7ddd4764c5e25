// libFuzzer target: posenc::attention and kv_cache driven by random (small, bounded) shapes,
// strides, buffer sizes, positions (out of range, negative, duplicates, int32/int64/consecutive/
// constant), masks, encodings (NoPE, any_rotary in both layouts, a cos/sin table; no bias, ALiBi in
// both orders, T5, Shaw) and options (softcap, sinks, sequence ids, keys_transformed, threads, a
// workspace the input's two calls share), and by kv_cache append / context_shift / clear / attention
// sequences against its capacity.
// Partial results (over float, bf16 or fp16 K/V) are merged with themselves or with parts of other
// shapes and lse sizes.
// Property: a call either throws posenc::error and leaves every byte of the output buffer (and of the
// cache) as it was, or it returns having written only the lanes of `out`'s view (guard floats after
// the buffer, stride gaps unchanged) and, when the inputs are finite and in the documented ranges,
// only finite values.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_attention.cpp \
//       tests/fuzz/fuzz_attention_cache.cpp
#include "fuzz_attention_inputs.hpp"

namespace posenc_fuzz {
namespace {

/// A bias for the call: none, ALiBi (either order and form), T5, Shaw; calls f(bias) with it.
template <class F>
void with_bias(FuzzedDataProvider& in, std::size_t hq, std::size_t d, std::size_t dv, F&& f) {
    std::optional<posenc::alibi_bias> alibi;
    std::optional<posenc::t5_bias> t5;
    std::optional<posenc::shaw_rpr> shaw;
    try {
        switch (in.ConsumeIntegralInRange(0, 3)) {
            case 0: return f(posenc::no_bias{});
            case 1: {
                posenc::alibi a{.heads = in.ConsumeBool() ? hq : in.ConsumeIntegralInRange<std::size_t>(0, 12),
                                .max_bias = in.ConsumeBool() ? 8.0 : in.ConsumeFloatingPointInRange(-1.0, 2000.0)};
                a.form = in.ConsumeBool() ? posenc::alibi_form::causal : posenc::alibi_form::symmetric;
                a.order = in.ConsumeBool() ? posenc::bias_order::add_then_scale : posenc::bias_order::scale_then_add;
                alibi.emplace(a);
                return f(*alibi);
            }
            case 2: {
                const posenc::t5_buckets b{.num_buckets = in.ConsumeIntegralInRange<std::int64_t>(-1, 40),
                                           .max_distance = in.ConsumeIntegralInRange<std::int64_t>(-1, 200),
                                           .bidirectional = in.ConsumeBool()};
                const std::size_t heads = in.ConsumeBool() ? hq : in.ConsumeIntegralInRange<std::size_t>(0, 12);
                std::vector<float> table(in.ConsumeBool() && b.num_buckets > 0 ? static_cast<std::size_t>(b.num_buckets) * heads
                                                                               : in.ConsumeIntegralInRange<std::size_t>(0, 300));
                for (float& t : table) t = in.ConsumeFloatingPointInRange(-8.0f, 8.0f);
                t5.emplace(b, heads, table);
                return f(*t5);
            }
            default: {
                const std::int64_t k = in.ConsumeIntegralInRange<std::int64_t>(-1, 12);
                const std::size_t rows = k >= 0 ? static_cast<std::size_t>(2 * k + 1) : 0;
                const std::size_t dk = in.ConsumeBool() ? d : in.ConsumeIntegralInRange<std::size_t>(0, 40);
                const std::size_t dvv = in.ConsumeBool() ? dv : in.ConsumeIntegralInRange<std::size_t>(0, 24);
                std::vector<float> ak(in.ConsumeBool() ? rows * dk : in.ConsumeIntegralInRange<std::size_t>(0, 200));
                std::vector<float> av(in.ConsumeBool() ? rows * dvv : in.ConsumeIntegralInRange<std::size_t>(0, 200));
                for (float& x : ak) x = in.ConsumeFloatingPointInRange(-1.0f, 1.0f);
                for (float& x : av) x = in.ConsumeFloatingPointInRange(-1.0f, 1.0f);
                shaw.emplace(posenc::shaw_params{.max_distance = k}, ak, dk, av, dvv);
                return f(*shaw);
            }
        }
    } catch (const posenc::config_error&) {
        // a bias the constructor rejected: nothing to call
    }
}

/// Merges the partial result in `out` (its view ov, its lse) with itself (out again, to rounding), or
/// with a second part of the fuzzer's shape and lse size, into ov and an lse of the fuzzer's size; a
/// rejected merge leaves out and lse byte-identical.
void merge_fuzzed(FuzzedDataProvider& in, tensor& out, posenc::heads_view<float> ov, std::vector<float>& lse,
                  std::span<const float> sinks) {
    const std::vector<float> part = out.buf->mem, part_lse = lse;
    const posenc::heads_view<const float> pv(part.data(), {ov.tokens(), ov.heads(), ov.head_dim()},
                                             {ov.token_stride(), ov.head_stride()});
    std::vector<float> other, other_lse, own_lse;
    std::optional<posenc::heads_view<const float>> ov2;
    const bool self = in.ConsumeBool();
    if (!self) {  // the second part: out's shape, or one dimension off; lse of one per row, or any size
        const auto off = [&](std::size_t x) { return in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 12) : x; };
        const posenc::heads_shape shape{off(ov.tokens()), off(ov.heads()), off(ov.head_dim())};
        other.resize(shape.tokens * shape.heads * shape.head_dim);
        for (float& x : other) x = in.ConsumeFloatingPointInRange(-4.0f, 4.0f);
        other_lse.resize(in.ConsumeBool() ? shape.tokens * shape.heads : in.ConsumeIntegralInRange<std::size_t>(0, 40));
        for (float& x : other_lse) x = in.ConsumeFloatingPointInRange(-8.0f, 8.0f);
        try {
            ov2.emplace(std::span<const float>(other), shape);
        } catch (const posenc::error&) {
            return;  // the view's own checks (head_dim 0)
        }
    }
    // The merged lse: the part's own, none, or a new one of one per row or any size. With the part's
    // own, the first part is merged in place as a reduction does: its lse is lse itself, and its out
    // sometimes out itself.
    const int lse_kind = in.ConsumeIntegralInRange(0, 2);
    if (lse_kind == 2) own_lse.assign(in.ConsumeBool() ? ov.tokens() * ov.heads() : in.ConsumeIntegralInRange<std::size_t>(0, 40), 5.0f);
    const std::span<float> merged_lse = lse_kind == 0 ? std::span<float>(lse) : lse_kind == 1 ? std::span<float>() : std::span<float>(own_lse);
    const bool in_place = lse_kind == 0;
    const posenc::heads_view<const float> first_out = in_place && in.ConsumeBool() ? posenc::heads_view<const float>(ov) : pv;
    const std::span<const float> first_lse = in_place ? std::span<const float>(lse) : std::span<const float>(part_lse);
    const std::vector<float> before = out.buf->mem, lse_before(merged_lse.begin(), merged_lse.end());
    try {
        if (self)
            posenc::merge_attention_partials({{first_out, first_lse}, {pv, part_lse}}, ov, {.lse = merged_lse, .sinks = sinks});
        else if (in.ConsumeBool())
            posenc::merge_attention_partials({{first_out, first_lse}, {*ov2, other_lse}}, ov, {.lse = merged_lse, .sinks = sinks});
        else
            posenc::merge_attention_partials({{*ov2, other_lse}, {first_out, first_lse}}, ov, {.lse = merged_lse, .sinks = sinks});
    } catch (const posenc::error&) {
        require(std::memcmp(out.buf->mem.data(), before.data(), before.size() * sizeof(float)) == 0);
        require(merged_lse.empty() || std::memcmp(merged_lse.data(), lse_before.data(), merged_lse.size_bytes()) == 0);
        return;
    }
    check_written(out, before, false);
    // Two equal parts without sinks weigh 1 each: a row with a finite lse is the part's row exactly.
    if (self && sinks.empty())
        for (std::size_t t = 0; t < ov.tokens(); ++t)
            for (std::size_t h = 0; h < ov.heads(); ++h)
                if (std::isfinite(part_lse[t * ov.heads() + h]))
                    for (std::size_t d = 0; d < ov.head_dim(); ++d) {
                        const float got = ov.row(t, h)[d], want = pv.row(t, h)[d];
                        require(got == want || (got != got && want != want));
                    }
}

void fuzz_attention(FuzzedDataProvider& in) {
    sane_flag sane;
    const std::size_t hkv = in.ConsumeIntegralInRange<std::size_t>(0, 3);
    const std::size_t g = in.ConsumeIntegralInRange<std::size_t>(1, 4);
    const std::size_t hq = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 9) : hkv * g;
    const std::size_t tq = in.ConsumeIntegralInRange<std::size_t>(0, 10);
    const std::size_t tk = in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange<std::size_t>(60, 140)
                                                                : in.ConsumeIntegralInRange<std::size_t>(0, 20);
    const std::size_t d = in.ConsumeIntegralInRange<std::size_t>(1, 40);
    const std::size_t dv = in.ConsumeBool() ? d : in.ConsumeIntegralInRange<std::size_t>(1, 24);
    const auto odd = [&](std::size_t x) { return in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 12) : x; };
    tensor q(in, {odd(tq), hq, odd(d)}, sane), k(in, {tk, odd(hkv), d}, sane), v(in, {odd(tk), hkv, odd(dv)}, sane);
    tensor out(in, {odd(tq), odd(hq), dv}, sane);
    positions qpos(in, odd(tq), sane), kpos(in, odd(tk), sane);
    const fuzz_mask mask = make_mask(in);
    fuzz_options opts(in, hq, tq, tk, sane);
    const fuzz_scale scale = make_scale(in, sane);
    const int transform = in.ConsumeIntegralInRange(0, 2);
    fuzz_rope rope(in, d);
    std::optional<posenc::heads_view<float>> qv, kv, vv, ov;
    try {
        qv.emplace(q.view());
        kv.emplace(k.view());
        vv.emplace(v.view());
        ov.emplace(out.view());
    } catch (const posenc::error&) {
        return;  // the views' own checks
    }
    const std::vector<float> q0 = q.buf->mem, k0 = k.buf->mem, v0 = v.buf->mem;
    // K and V in float, bf16 or fp16 (the same elements, rounded), or a partial result (out and lse)
    // over float, bf16 or fp16 K and V.
    const int kv_type = in.ConsumeIntegralInRange(0, 5);
    std::vector<posenc::bf16> kb, vb;
    std::vector<posenc::fp16> kh, vh;
    for (float x : k.buf->mem) kb.push_back(posenc::bf16(x)), kh.push_back(posenc::fp16(x));
    for (float x : v.buf->mem) vb.push_back(posenc::bf16(x)), vh.push_back(posenc::fp16(x));
    const posenc::heads_view<posenc::bf16> kbv(kb.data(), {kv->tokens(), kv->heads(), kv->head_dim()}, {kv->token_stride(), kv->head_stride()});
    const posenc::heads_view<posenc::bf16> vbv(vb.data(), {vv->tokens(), vv->heads(), vv->head_dim()}, {vv->token_stride(), vv->head_stride()});
    const posenc::heads_view<posenc::fp16> khv(kh.data(), {kv->tokens(), kv->heads(), kv->head_dim()}, {kv->token_stride(), kv->head_stride()});
    const posenc::heads_view<posenc::fp16> vhv(vh.data(), {vv->tokens(), vv->heads(), vv->head_dim()}, {vv->token_stride(), vv->head_stride()});
    std::vector<float> lse(in.ConsumeBool() ? ov->tokens() * ov->heads() : in.ConsumeIntegralInRange<std::size_t>(0, 40), 3.0f);
    with_bias(in, hq, d, dv, [&](const auto& bias) {
        const bool ok = sane.ok;
        auto call = [&](const auto& enc) {
            if (kv_type == 1)
                posenc::attention(enc, *qv, kbv, vbv, *ov, qpos.ids, kpos.ids, mask, opts.opt);
            else if (kv_type == 2)
                posenc::attention(enc, *qv, khv, vhv, *ov, qpos.ids, kpos.ids, mask, opts.opt);
            else if (kv_type == 3)
                posenc::attention_partial(enc, *qv, *kv, *vv, *ov, lse, qpos.ids, kpos.ids, mask, opts.opt);
            else if (kv_type == 4)
                posenc::attention_partial(enc, *qv, kbv, vbv, *ov, lse, qpos.ids, kpos.ids, mask, opts.opt);
            else if (kv_type == 5)
                posenc::attention_partial(enc, *qv, khv, vhv, *ov, lse, qpos.ids, kpos.ids, mask, opts.opt);
            else
                posenc::attention(enc, *qv, *kv, *vv, *ov, qpos.ids, kpos.ids, mask, opts.opt);
        };
        const std::vector<float> lse0 = lse;
        checked_call(out, ok, [&] {
            try {
                if (transform == 0 || !rope.rope)
                    call(posenc::attention_encoding{posenc::nope{}, bias, scale});
                else if (transform == 1)
                    call(posenc::attention_encoding{*rope.rope, bias, scale});
                else
                    call(posenc::attention_encoding{posenc::table_transform{*rope.rope, *rope.table}, bias, scale});
            } catch (const posenc::error&) {
                require(lse == lse0);  // a rejected partial call writes no lse either
                throw;
            }
        });
        if (kv_type >= 3 && in.ConsumeBool()) merge_fuzzed(in, out, *ov, lse, opts.opt.sinks);
    });
    require(std::memcmp(q.buf->mem.data(), q0.data(), q0.size() * sizeof(float)) == 0);  // inputs are read only
    require(std::memcmp(k.buf->mem.data(), k0.data(), k0.size() * sizeof(float)) == 0);
    require(std::memcmp(v.buf->mem.data(), v0.data(), v0.size() * sizeof(float)) == 0);
}

}  // namespace
}  // namespace posenc_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    posenc::attention_workspace ws;
    posenc_fuzz::input_workspace = &ws;
    for (int call = 0; call < 2 && (call == 0 || in.remaining_bytes() > 0); ++call) {
        try {
            if (in.ConsumeBool())
                posenc_fuzz::fuzz_attention(in);
            else
                posenc_fuzz::fuzz_kv_cache(in);
        } catch (const posenc::range_error&) {
            // position_ids::consecutive with a start that overflows, a heads_view larger than its buffer:
            // rejected by design, before any call
        } catch (const posenc::config_error&) {
            // a heads_view with overlapping rows or head_dim 0: rejected by its constructor
        }
    }
    posenc_fuzz::input_workspace = nullptr;
    return 0;
}
