#pragma once
// The inputs fuzz_attention builds from the fuzzer's bytes (guarded buffers, tensors, positions,
// masks, scales, options, a runtime rotary) and the property checks of a call, shared by its two
// translation units (fuzz_attention.cpp: attention calls; fuzz_attention_cache.cpp: kv_cache
// sequences), which compile in parallel.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/attention/shaw.hpp>
#include <posenc/attention/workspace.hpp>
#include <posenc/posenc.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace posenc_fuzz {

inline void require(bool ok) {
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

inline std::int64_t any_position(FuzzedDataProvider& in, sane_flag& sane) {
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
    /// (The kernel masks rows of consecutive key positions by this range: the fuzzed positions reach
    /// it at both ends of int64; array positions still take the per-key test.)
    [[nodiscard]] posenc::key_range visible_keys(std::int64_t i) const {
        return visit([&](const auto& m) { return m.visible_keys(i); });
    }
    void validate() const {
        visit([](const auto& m) { m.validate(); });
    }
};
static_assert(posenc::attention_mask<fuzz_mask>);

inline fuzz_mask make_mask(FuzzedDataProvider& in) {
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

inline fuzz_scale make_scale(FuzzedDataProvider& in, sane_flag& sane) {
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
/// The workspace of the input being run (LLVMFuzzerTestOneInput makes a fresh one per input and runs
/// up to two calls on it): a call reuses buffers sized by the input's earlier call, and a crash
/// replays from its own file, whatever ran before it.
inline posenc::attention_workspace* input_workspace = nullptr;
inline posenc::attention_workspace& fuzz_workspace() { return *input_workspace; }

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
        if (in.ConsumeBool()) opt.workspace = &fuzz_workspace();
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
inline void check_written(const tensor& out, const std::vector<float>& before, bool sane) {
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

/// kv_cache append / context_shift / clear / attention sequences (fuzz_attention_cache.cpp).
void fuzz_kv_cache(FuzzedDataProvider& in);

}  // namespace posenc_fuzz
