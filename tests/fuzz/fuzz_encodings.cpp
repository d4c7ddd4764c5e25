// libFuzzer target: the public entry points driven by random shapes, strides, buffer sizes and
// positions — rotary (both layouts, with and without a table, any_rotary, shift), ALiBi, T5 and
// sinusoidal. Each buffer is exactly as large as the fuzzer says, followed by guard floats: a call
// either throws posenc::error before writing or stays inside the span (AddressSanitizer and the
// guards check), and a rejected call leaves the buffer unchanged.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_encodings.cpp
#include <posenc/posenc.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

constexpr std::size_t guard = 16;
constexpr float sentinel = -12345.5f;

/// `n` floats from the fuzzer followed by `guard` sentinels.
struct guarded {
    std::vector<float> mem;
    std::size_t n;
    guarded(FuzzedDataProvider& in, std::size_t size) : mem(size + guard, sentinel), n(size) {
        for (std::size_t i = 0; i < n; ++i) mem[i] = in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
    }
    std::span<float> span() { return {mem.data(), n}; }
    bool intact() const {
        for (std::size_t i = n; i < mem.size(); ++i)
            if (mem[i] != sentinel) return false;
        return true;
    }
};

/// Positions: a vector (int64 or int32 values from the fuzzer) or consecutive()/constant().
struct positions {
    std::vector<std::int64_t> p64;
    std::vector<std::int32_t> p32;
    posenc::position_ids ids = posenc::position_ids(std::span<const std::int64_t>());
    positions(FuzzedDataProvider& in, std::size_t count, std::int64_t lo, std::int64_t hi) {
        switch (in.ConsumeIntegralInRange(0, 3)) {
            case 0:
                for (std::size_t i = 0; i < count; ++i) p64.push_back(in.ConsumeIntegralInRange(lo, hi));
                ids = posenc::position_ids(p64);
                break;
            case 1:
                for (std::size_t i = 0; i < count; ++i)
                    p32.push_back(static_cast<std::int32_t>(in.ConsumeIntegralInRange<std::int64_t>(
                        std::max<std::int64_t>(lo, INT32_MIN), std::min<std::int64_t>(hi, INT32_MAX))));
                ids = posenc::position_ids(p32);
                break;
            case 2: ids = posenc::position_ids::consecutive(in.ConsumeIntegralInRange(lo, hi), count); break;
            default: ids = posenc::position_ids::constant(in.ConsumeIntegralInRange(lo, hi), count); break;
        }
    }
};

std::int64_t any_position(FuzzedDataProvider& in) {
    return in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(-4, 5000) : in.ConsumeIntegral<std::int64_t>();
}

posenc::any_schedule schedule(FuzzedDataProvider& in) {
    const double base = in.ConsumeBool() ? 10000.0 : in.ConsumeFloatingPoint<double>();
    const double factor = in.ConsumeBool() ? in.ConsumeFloatingPointInRange(0.5, 64.0) : in.ConsumeFloatingPoint<double>();
    const std::int64_t original = in.ConsumeBool() ? 4096 : in.ConsumeIntegral<std::int64_t>();
    switch (in.ConsumeIntegralInRange(0, 7)) {
        case 0: return posenc::default_rope{.base = base};
        case 1: return posenc::linear{.base = base, .factor = factor};
        case 2: return posenc::ntk_aware{.base = base, .factor = factor};
        case 3: return posenc::dynamic_ntk{.base = base, .factor = factor, .original_max_position = original};
        case 4: return posenc::ntk_by_parts{.base = base, .factor = factor, .original_max_position = original};
        case 5: {
            posenc::yarn y{.base = base, .factor = factor, .original_max_position = original};
            if (in.ConsumeBool()) y.mscale = in.ConsumeFloatingPoint<double>();
            if (in.ConsumeBool()) y.mscale_all_dim = in.ConsumeFloatingPoint<double>();
            if (in.ConsumeBool()) y.attention_factor = in.ConsumeFloatingPoint<double>();
            return y;
        }
        case 6:
            return posenc::llama3{.base = base, .factor = factor, .low_freq_factor = in.ConsumeFloatingPoint<double>(),
                                  .high_freq_factor = in.ConsumeFloatingPoint<double>(), .original_max_position = original};
        default: {
            posenc::longrope l{.base = base, .original_max_position = original, .factor = factor};
            const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 40);
            for (std::size_t i = 0; i < n; ++i) l.short_factor.push_back(in.ConsumeFloatingPoint<double>());
            l.long_factor = in.ConsumeBool() ? l.short_factor : std::vector<double>(n, 2.0);
            return l;
        }
    }
}

void fuzz_rotary(FuzzedDataProvider& in) {
    const std::size_t head_dim = in.ConsumeIntegralInRange<std::size_t>(0, 160);
    const std::size_t rotary_dim = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(0, 170);
    const auto layout = in.ConsumeBool() ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split;
    const auto sched = schedule(in);
    const std::int64_t seq_len = in.ConsumeBool() ? 0 : in.ConsumeIntegral<std::int64_t>();
    std::optional<posenc::any_rotary> rope;
    try {
        rope.emplace(layout, posenc::rope_dims{head_dim, rotary_dim}, sched, seq_len);
    } catch (const posenc::error&) {
        return;
    }
    for (const double f : rope->frequencies().inv_freq) require(std::isnormal(f) && f <= posenc::detail::max_inv_freq);
    rope->set_threads(in.ConsumeIntegralInRange(1u, 3u));

    const std::size_t tokens = in.ConsumeIntegralInRange<std::size_t>(0, 12);
    const std::size_t heads = in.ConsumeIntegralInRange<std::size_t>(0, 4);
    const posenc::heads_shape shape{tokens, heads, in.ConsumeBool() ? head_dim : in.ConsumeIntegralInRange<std::size_t>(0, 160)};
    const posenc::heads_strides qs{in.ConsumeIntegralInRange<std::size_t>(0, 700), in.ConsumeIntegralInRange<std::size_t>(0, 200)};
    const posenc::heads_strides ks{in.ConsumeIntegralInRange<std::size_t>(0, 700), in.ConsumeIntegralInRange<std::size_t>(0, 200)};
    guarded q(in, in.ConsumeIntegralInRange<std::size_t>(0, 4000));
    guarded k(in, in.ConsumeIntegralInRange<std::size_t>(0, 4000));
    const std::size_t npos = in.ConsumeBool() ? tokens : in.ConsumeIntegralInRange<std::size_t>(0, 12);
    positions pos(in, npos, in.ConsumeBool() ? -2 : std::numeric_limits<std::int64_t>::min(),
                  in.ConsumeBool() ? 5000 : std::numeric_limits<std::int64_t>::max());
    const auto dir = in.ConsumeBool() ? posenc::rotation::forward : posenc::rotation::inverse;
    const std::vector<float> q0 = q.mem, k0 = k.mem;
    try {
        const posenc::heads_view<float> qv(q.span(), shape, qs);
        const posenc::heads_view<float> kv(k.span(), shape, ks);
        switch (in.ConsumeIntegralInRange(0, 3)) {
            case 0: rope->apply(qv, kv, pos.ids, dir); break;
            case 1: rope->apply(qv, pos.ids, dir); break;
            case 2: {
                const auto table = rope->table(in.ConsumeIntegralInRange<std::int64_t>(-1, 64));
                rope->apply(table, qv, kv, pos.ids, dir);
                break;
            }
            default: rope->shift(qv, any_position(in)); break;
        }
    } catch (const posenc::error&) {
        require(q.mem == q0 && k.mem == k0);  // rejected before anything was written
    }
    require(q.intact() && k.intact());
}

void fuzz_alibi(FuzzedDataProvider& in) {
    posenc::alibi a{.heads = in.ConsumeIntegralInRange<std::size_t>(0, 80),
                    .max_bias = in.ConsumeBool() ? 8.0 : in.ConsumeFloatingPoint<double>()};
    a.form = in.ConsumeBool() ? posenc::alibi_form::causal : posenc::alibi_form::symmetric;
    std::optional<posenc::alibi_bias> bias;
    try {
        bias.emplace(a);
    } catch (const posenc::error&) {
        return;
    }
    for (const double s : bias->slopes()) require(std::isnormal(s) && s > 0.0);
    guarded scores(in, in.ConsumeIntegralInRange<std::size_t>(0, 300));
    positions keys(in, in.ConsumeBool() ? scores.n : in.ConsumeIntegralInRange<std::size_t>(0, 300), -100000, 100000);
    const std::vector<float> s0 = scores.mem;
    try {
        bias->add_to_scores(in.ConsumeIntegralInRange<std::size_t>(0, 90), in.ConsumeIntegralInRange(-100000, 100000),
                            keys.ids, scores.span());
    } catch (const posenc::error&) {
        require(scores.mem == s0);
    }
    require(scores.intact());
}

void fuzz_t5(FuzzedDataProvider& in) {
    const posenc::t5_buckets b{.num_buckets = in.ConsumeIntegralInRange<std::int64_t>(-2, 70),
                               .max_distance = in.ConsumeIntegralInRange<std::int64_t>(-2, 3000),
                               .bidirectional = in.ConsumeBool()};
    try {
        const auto r = in.ConsumeIntegral<std::int64_t>();
        const auto bucket = b.bucket(r);
        require(bucket >= 0 && bucket < b.num_buckets);
    } catch (const posenc::error&) {
        return;
    }
    const std::size_t heads = in.ConsumeIntegralInRange<std::size_t>(0, 6);
    std::vector<float> table(in.ConsumeBool() ? static_cast<std::size_t>(b.num_buckets) * heads
                                              : in.ConsumeIntegralInRange<std::size_t>(0, 500));
    for (float& t : table) t = in.ConsumeFloatingPointInRange<float>(-8.0f, 8.0f);
    std::optional<posenc::t5_bias> bias;
    try {
        bias.emplace(b, heads, table);
    } catch (const posenc::error&) {
        return;
    }
    guarded scores(in, in.ConsumeIntegralInRange<std::size_t>(0, 300));
    positions keys(in, in.ConsumeBool() ? scores.n : in.ConsumeIntegralInRange<std::size_t>(0, 300),
                   std::numeric_limits<std::int64_t>::min() / 4, std::numeric_limits<std::int64_t>::max() / 4);
    const std::vector<float> s0 = scores.mem;
    try {
        bias->add_to_scores(in.ConsumeIntegralInRange<std::size_t>(0, 8),
                            in.ConsumeIntegralInRange(std::numeric_limits<std::int64_t>::min() / 4,
                                                      std::numeric_limits<std::int64_t>::max() / 4),
                            keys.ids, scores.span());
    } catch (const posenc::error&) {
        require(scores.mem == s0);
    }
    require(scores.intact());
}

void fuzz_sinusoidal(FuzzedDataProvider& in) {
    const posenc::sinusoidal pe{.d_model = in.ConsumeIntegralInRange<std::size_t>(0, 200),
                                .form = in.ConsumeBool() ? posenc::sinusoidal_form::interleaved
                                                         : posenc::sinusoidal_form::concatenated,
                                .base = in.ConsumeBool() ? 10000.0 : in.ConsumeFloatingPoint<double>()};
    guarded out(in, in.ConsumeIntegralInRange<std::size_t>(0, 3000));
    const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 20);
    positions pos(in, n, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    const std::vector<float> o0 = out.mem;
    try {
        switch (in.ConsumeIntegralInRange(0, 2)) {
            case 0: pe.row(any_position(in), out.span()); break;
            case 1: pe.add_to(out.span(), pos.ids, in.ConsumeIntegralInRange<std::size_t>(0, 400)); break;
            default:
                for (const float v : pe.table(pos.ids)) require(std::isfinite(v));
                break;
        }
    } catch (const posenc::error&) {
        require(out.mem == o0);
    }
    require(out.intact());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    try {
        switch (in.ConsumeIntegralInRange(0, 3)) {
            case 0: fuzz_rotary(in); break;
            case 1: fuzz_alibi(in); break;
            case 2: fuzz_t5(in); break;
            default: fuzz_sinusoidal(in); break;
        }
    } catch (const posenc::range_error&) {
        // position_ids::consecutive with a start that overflows: rejected by design
    }
    return 0;
}
