// libFuzzer target: posenc::attention and kv_cache driven by random (small, bounded) shapes,
// strides, buffer sizes, positions (out of range, negative, duplicates, int32/int64/consecutive/
// constant), masks, encodings (NoPE, any_rotary in both layouts, a cos/sin table; no bias, ALiBi in
// both orders, T5, Shaw) and options (softcap, sinks, sequence ids, keys_transformed, threads), and by
// kv_cache append / context_shift / clear / attention sequences against its capacity.
// Property: a call either throws posenc::error and leaves every byte of the output buffer (and of the
// cache) as it was, or it returns having written only the lanes of `out`'s view (guard floats after
// the buffer, stride gaps unchanged) and, when the inputs are finite and in the documented ranges,
// only finite values.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_attention.cpp
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/posenc.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

constexpr std::size_t guard = 16;
constexpr float sentinel = -12345.5f;
constexpr std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max();

/// Whether the values the fuzzer gave are finite and in the ranges where attention promises finite
/// output (|positions| ≤ 2^31, λ in [2^-20, 2^20]); cleared by any call that leaves them.
struct sane_flag {
    bool ok = true;
};

/// `n` floats from the fuzzer (finite in [-4, 4], or now and then Inf/NaN) followed by `guard` sentinels.
struct guarded {
    std::vector<float> mem;
    std::size_t n;
    guarded(FuzzedDataProvider& in, std::size_t size, sane_flag& sane) : mem(size + guard, sentinel), n(size) {
        const bool specials = in.ConsumeIntegralInRange(0, 15) == 0;
        for (std::size_t i = 0; i < n; ++i) {
            mem[i] = in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
            if (specials && in.ConsumeIntegralInRange(0, 7) == 0) {
                mem[i] = in.ConsumeBool() ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
                sane.ok = false;
            }
        }
    }
    std::span<float> span() { return {mem.data(), n}; }
    std::span<const float> cspan() const { return {mem.data(), n}; }
    bool intact() const {
        for (std::size_t i = n; i < mem.size(); ++i)
            if (mem[i] != sentinel) return false;
        return true;
    }
};

std::int64_t any_position(FuzzedDataProvider& in, sane_flag& sane) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
        case 0: {
            const std::int64_t p = in.ConsumeIntegral<std::int64_t>();
            if (p < -(std::int64_t{1} << 31) || p > (std::int64_t{1} << 31)) sane.ok = false;
            return p;
        }
        case 1: sane.ok = false; return in.PickValueInArray({i64min, i64max, i64min + 1, i64max - 1,
                                                             std::int64_t{1} << 62, -(std::int64_t{1} << 62),
                                                             (std::int64_t{1} << 62) - 1, 1 - (std::int64_t{1} << 62)});
        case 2: return in.ConsumeIntegralInRange<std::int64_t>(-5, 5);
        default: return in.ConsumeIntegralInRange<std::int64_t>(-40, 300);
    }
}

/// Positions: an int64 or int32 list (duplicates, any order, negative, out of range), consecutive()
/// or constant().
struct positions {
    std::vector<std::int64_t> p64;
    std::vector<std::int32_t> p32;
    posenc::position_ids ids = posenc::position_ids(std::span<const std::int64_t>());
    positions(FuzzedDataProvider& in, std::size_t count, sane_flag& sane) {
        switch (in.ConsumeIntegralInRange(0, 4)) {
            case 0:
            case 1: {
                const bool sorted = in.ConsumeBool();  // increasing (what kv_cache accepts) or any order
                for (std::size_t i = 0; i < count; ++i) {
                    std::int64_t p = any_position(in, sane);
                    if (sorted && i > 0 && p <= p64.back() && p64.back() < i64max) p = p64.back() + (in.ConsumeBool() ? 1 : 0);
                    p64.push_back(p);
                }
                ids = posenc::position_ids(p64);
                break;
            }
            case 2:
                for (std::size_t i = 0; i < count; ++i)
                    p32.push_back(static_cast<std::int32_t>(std::clamp<std::int64_t>(any_position(in, sane), INT32_MIN, INT32_MAX)));
                ids = posenc::position_ids(p32);
                break;
            case 3: {
                const std::int64_t start = any_position(in, sane);
                ids = posenc::position_ids::consecutive(start, count);  // range_error if it overflows
                if (count > 0 && start > (std::int64_t{1} << 31) - static_cast<std::int64_t>(count)) sane.ok = false;
                break;
            }
            default: ids = posenc::position_ids::constant(any_position(in, sane), count); break;
        }
    }
};

/// A [tokens, heads, dim] view over a guarded buffer: dense or with padded strides; the buffer is
/// exactly the view's extent, or (now and then) a size of the fuzzer's choice.
struct tensor {
    posenc::heads_shape shape;
    posenc::heads_strides strides;
    std::optional<guarded> buf;
    std::size_t extent = 0;
    tensor(FuzzedDataProvider& in, posenc::heads_shape s, sane_flag& sane) : shape(s) {
        if (in.ConsumeIntegralInRange(0, 3) == 0) {
            strides.head = s.head_dim + in.ConsumeIntegralInRange<std::size_t>(0, 5);
            strides.token = s.heads * strides.head + in.ConsumeIntegralInRange<std::size_t>(0, 7);
            if (in.ConsumeIntegralInRange(0, 7) == 0) std::swap(strides.head, strides.token);  // heads outer (rare)
        }
        const std::size_t hs = strides.head ? strides.head : s.head_dim;
        const std::size_t ts = strides.token ? strides.token : s.heads * hs;
        extent = (s.tokens == 0 || s.heads == 0) ? 0 : (s.tokens - 1) * ts + (s.heads - 1) * hs + s.head_dim;
        const std::size_t size = in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, extent + 8) : extent;
        buf.emplace(in, size, sane);
    }
    /// Throws posenc::error when the view is invalid (the views' own checks).
    posenc::heads_view<float> view() { return posenc::heads_view<float>(buf->span(), shape, strides); }
    /// Whether element i of the buffer is a lane of the view.
    bool in_view(std::size_t i) const {
        const std::size_t hs = strides.head ? strides.head : shape.head_dim;
        const std::size_t ts = strides.token ? strides.token : shape.heads * hs;
        for (std::size_t t = 0; t < shape.tokens; ++t)
            for (std::size_t h = 0; h < shape.heads; ++h) {
                const std::size_t at = t * ts + h * hs;
                if (i >= at && i < at + shape.head_dim) return true;
            }
        return false;
    }
};

/// One of posenc's masks chosen at run time (each call delegates to the real mask, so its code runs).
struct fuzz_mask {
    static constexpr std::string_view name = "fuzz";
    int kind = 0;
    posenc::sliding_window_mask window;
    posenc::chunked_mask chunked;
    template <class F>
    decltype(auto) visit(F&& f) const {
        switch (kind) {
            case 0: return f(posenc::no_mask{});
            case 1: return f(posenc::causal_mask{});
            case 2: return f(window);
            default: return f(chunked);
        }
    }
    [[nodiscard]] bool visible(std::int64_t i, std::int64_t j) const {
        return visit([&](const auto& m) { return m.visible(i, j); });
    }
    [[nodiscard]] posenc::tile_visibility classify(posenc::tile_bounds t) const {
        return visit([&](const auto& m) { return m.classify(t); });
    }
    void validate() const {
        visit([](const auto& m) { m.validate(); });
    }
};
static_assert(posenc::attention_mask<fuzz_mask>);

fuzz_mask make_mask(FuzzedDataProvider& in) {
    fuzz_mask m;
    m.kind = in.ConsumeIntegralInRange(0, 3);
    const auto width = [&] {
        return in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<std::int64_t>() : in.ConsumeIntegralInRange<std::int64_t>(-1, 80);
    };
    m.window.window = width();
    m.chunked.chunk = width();
    return m;
}

/// One of posenc's logit scales chosen at run time.
struct fuzz_scale {
    int kind = 0;
    posenc::fixed_scale fixed;
    posenc::temperature_scale temperature;
    [[nodiscard]] double scale(std::int64_t pos, std::size_t head_dim) const {
        switch (kind) {
            case 0: return posenc::inverse_sqrt_scale{}.scale(pos, head_dim);
            case 1: return fixed.scale(pos, head_dim);
            default: return temperature.scale(pos, head_dim);
        }
    }
};

fuzz_scale make_scale(FuzzedDataProvider& in, sane_flag& sane) {
    fuzz_scale s;
    s.kind = in.ConsumeIntegralInRange(0, 2);
    if (in.ConsumeBool()) {
        s.fixed.lambda = in.ConsumeFloatingPointInRange(0.01, 4.0);
    } else {
        s.fixed.lambda = in.ConsumeFloatingPoint<double>();
        if (s.kind == 1 && !(s.fixed.lambda >= 0x1p-20 && s.fixed.lambda <= 0x1p20)) sane.ok = false;
    }
    s.temperature.temperature.floor_scale = in.ConsumeBool() ? 8.0 : in.ConsumeFloatingPoint<double>();
    s.temperature.temperature.attn_scale = in.ConsumeBool() ? 0.1 : in.ConsumeFloatingPoint<double>();
    if (s.kind == 2 && !(s.temperature.temperature.floor_scale >= 1.0 && s.temperature.temperature.floor_scale < 1e9 &&
                         s.temperature.temperature.attn_scale <= 16.0))
        sane.ok = false;
    return s;
}

/// Options of a call: softcap, sinks, sequence ids, threads (the vectors outlive the spans).
struct fuzz_options {
    std::vector<float> sinks;
    std::vector<std::int32_t> qseq, kseq;
    posenc::attention_options opt;
    fuzz_options(FuzzedDataProvider& in, std::size_t hq, std::size_t tq, std::size_t tk, sane_flag& sane) {
        if (in.ConsumeBool()) opt.softcap = in.ConsumeBool() ? in.ConsumeFloatingPointInRange(0.0f, 60.0f) : in.ConsumeFloatingPoint<float>();
        if (in.ConsumeBool()) {
            sinks.resize(in.ConsumeBool() ? hq : in.ConsumeIntegralInRange<std::size_t>(0, 12));
            for (float& s : sinks) s = in.ConsumeBool() ? in.ConsumeFloatingPointInRange(-8.0f, 8.0f) : in.ConsumeFloatingPoint<float>();
            for (float s : sinks)
                if (!(std::abs(s) <= 80.0f)) sane.ok = false;  // exp(sink) in double: finite up to ~700, but keep to model-like values
            opt.sinks = sinks;
        }
        if (in.ConsumeBool()) {
            qseq.resize(in.ConsumeBool() ? tq : in.ConsumeIntegralInRange<std::size_t>(0, 12));
            kseq.resize(in.ConsumeBool() ? tk : in.ConsumeIntegralInRange<std::size_t>(0, 90));
            for (auto& s : qseq) s = in.ConsumeIntegralInRange<std::int32_t>(-1, 3);
            for (auto& s : kseq) s = in.ConsumeIntegralInRange<std::int32_t>(-1, 3);
            opt.query_sequence = qseq;
            if (in.ConsumeIntegralInRange(0, 7) != 0) opt.key_sequence = kseq;  // sometimes one without the other
        }
        opt.keys_transformed = in.ConsumeBool();
        opt.threads = in.ConsumeIntegralInRange(0u, 3u);
    }
};

/// The runtime rotary of a call (or none), and a table of it.
struct fuzz_rope {
    std::optional<posenc::any_rotary> rope;
    std::optional<posenc::cos_sin_table> table;
    fuzz_rope(FuzzedDataProvider& in, std::size_t head_dim) {
        const auto layout = in.ConsumeBool() ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split;
        const std::size_t rd = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(0, head_dim + 2);
        const double base = in.ConsumeBool() ? 10000.0 : in.ConsumeFloatingPointInRange(1.5, 1e7);
        try {
            if (in.ConsumeBool())
                rope.emplace(layout, posenc::rope_dims{head_dim, rd}, posenc::default_rope{.base = base});
            else
                rope.emplace(layout, posenc::rope_dims{head_dim, rd},
                             posenc::any_schedule{posenc::yarn{.base = base, .factor = in.ConsumeFloatingPointInRange(1.0, 64.0),
                                                               .original_max_position = 64}});
            rope->set_threads(in.ConsumeIntegralInRange(1u, 2u));
            table.emplace(rope->table(in.ConsumeIntegralInRange<std::int64_t>(1, 400)));
        } catch (const posenc::error&) {
            rope.reset();
        }
    }
};

/// Every lane of `out` outside its view and after its buffer is as it was; inside, finite when `sane`.
void check_written(const tensor& out, const std::vector<float>& before, bool sane) {
    require(out.buf->intact());
    const auto& mem = out.buf->mem;
    for (std::size_t i = 0; i < out.buf->n; ++i) {
        if (out.in_view(i)) {
            if (sane) require(std::isfinite(mem[i]));
        } else {
            require(std::memcmp(&mem[i], &before[i], sizeof(float)) == 0);
        }
    }
}

/// Runs one attention call; on posenc::error the output must be byte-identical.
template <class Call>
void checked_call(tensor& out, bool sane, Call&& call) {
    const std::vector<float> before = out.buf->mem;
    try {
        call();
    } catch (const posenc::error&) {
        require(std::memcmp(out.buf->mem.data(), before.data(), before.size() * sizeof(float)) == 0);
        return;
    }
    check_written(out, before, sane);
}

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
    // K and V in float, bf16 or fp16 (the same elements, rounded), or a partial result (out and lse).
    const int kv_type = in.ConsumeIntegralInRange(0, 3);
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
        if (kv_type == 3 && in.ConsumeBool()) {  // merge the part with itself: out again, to rounding
            const std::vector<float> before = out.buf->mem;
            try {
                const std::vector<float> part = out.buf->mem, part_lse = lse;
                const posenc::heads_view<const float> pv(part.data(), {ov->tokens(), ov->heads(), ov->head_dim()},
                                                         {ov->token_stride(), ov->head_stride()});
                posenc::merge_attention_partials({{pv, part_lse}, {pv, part_lse}}, *ov, lse, opts.opt.sinks);
            } catch (const posenc::error&) {
                require(std::memcmp(out.buf->mem.data(), before.data(), before.size() * sizeof(float)) == 0);
            }
        }
    });
    require(std::memcmp(q.buf->mem.data(), q0.data(), q0.size() * sizeof(float)) == 0);  // inputs are read only
    require(std::memcmp(k.buf->mem.data(), k0.data(), k0.size() * sizeof(float)) == 0);
    require(std::memcmp(v.buf->mem.data(), v0.data(), v0.size() * sizeof(float)) == 0);
}

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    try {
        if (in.ConsumeBool())
            fuzz_attention(in);
        else
            fuzz_kv_cache(in);
    } catch (const posenc::range_error&) {
        // position_ids::consecutive with a start that overflows, a heads_view larger than its buffer:
        // rejected by design, before any call
    } catch (const posenc::config_error&) {
        // a heads_view with overlapping rows or head_dim 0: rejected by its constructor
    }
    return 0;
}
