#pragma once
// attention_layer: one transformer layer's attention as a run-time object, for engines whose layers
// are data (a config.json's layer_types, no_rope_layers, windows, temperatures), not types.
//
//   posenc::attention_layer layer(rope,                                   // any_rotary, or std::nullopt: NoPE
//                                 posenc::sliding_window_mask{.window = 4096},  // any_mask
//                                 posenc::fixed_scale{0.0625},             // any_scale
//                                 {.heads = 32, .kv_heads = 8, .head_dim = 128, .capacity = 8192});
//   layer.prefill(q, k, v, positions, out);   // K/V into the layer's cache, then the queries against it
//   layer.attend(q1, next, out1);             // a decode step after layer.append(k1, v1, next)
//   layer.context_shift(4, 2044);
//   layer.set_workspace(&ws);                 // an attention_workspace: attend allocates no tile buffers
//
// From a config: posenc/hf/attention_layer.hpp (hf::make_attention_layers).
//
// The typed templates (attention<Transform, Bias, Scale, Mask>, kv_cache<Transform>) instantiate the
// kernel once per combination; a model whose layers differ needs a variant and visitors over all of
// them. Here the mask (any_mask) and the scale (any_scale) are values that switch per call on their
// kind and run the typed policy's own code, and the transform is any_rotary (layout at run time) or
// nope, so a unit using attention_layer instantiates the attention kernel exactly twice whatever the
// model (g++ 12 -O3: 10 s for a decode loop over a config's layers, against 17 s for the same loop over
// a variant of 3 typed caches × 3 masks × 2 scales, 18 instantiations; 7 s of both is the HF reader).
// Results are bit-identical to the typed call with the same policies.
//
// The bias is no_bias (every model hf::load_layers describes is RoPE or NoPE); ALiBi / T5 layers stay
// on the typed templates. Every check runs before anything is written: prefill checks the query side
// before the cache's append (which checks its own side before it writes).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/attention/mask.hpp"
#include "posenc/attention/options.hpp"
#include "posenc/attention/workspace.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/logit/nope.hpp"
#include "posenc/rope/any_rotary.hpp"

namespace posenc {

/// A mask whose kind (none, causal, sliding window, chunked) and parameter are chosen at run time.
/// Each call switches on the kind and runs that typed mask's visible / classify.
class any_mask {
    // A switch rather than std::visit: visible() runs per score of a partly masked tile.
    template <class F>
    decltype(auto) with(F&& f) const {
        switch (m_.index()) {
            case 1: return f(*std::get_if<1>(&m_));
            case 2: return f(*std::get_if<2>(&m_));
            case 3: return f(*std::get_if<3>(&m_));
            default: return f(*std::get_if<0>(&m_));
        }
    }

public:
    static constexpr std::string_view name = "any";

    any_mask() = default;  ///< no_mask, as attention's default
    any_mask(no_mask m) noexcept : m_(m) {}                 // NOLINT(google-explicit-constructor)
    any_mask(causal_mask m) noexcept : m_(m) {}             // NOLINT(google-explicit-constructor)
    any_mask(sliding_window_mask m) noexcept : m_(m) {}     // NOLINT(google-explicit-constructor)
    any_mask(chunked_mask m) noexcept : m_(m) {}            // NOLINT(google-explicit-constructor)

    /// The typed mask's name: "none", "causal", "sliding_window", "chunked".
    [[nodiscard]] std::string_view kind() const noexcept {
        return with([](const auto& m) { return std::string_view(std::remove_cvref_t<decltype(m)>::name); });
    }
    /// The typed mask, or nullptr when the kind differs.
    template <attention_mask M>
    [[nodiscard]] const M* get_if() const noexcept {
        return std::get_if<M>(&m_);
    }

    [[nodiscard]] bool visible(std::int64_t i, std::int64_t j) const noexcept {
        return with([&](const auto& m) { return m.visible(i, j); });
    }
    [[nodiscard]] tile_visibility classify(tile_bounds t) const noexcept {
        return with([&](const auto& m) { return m.classify(t); });
    }
    [[nodiscard]] key_range visible_keys(std::int64_t i) const noexcept {
        return with([&](const auto& m) { return m.visible_keys(i); });
    }
    void validate() const {
        with([](const auto& m) { m.validate(); });
    }

private:
    std::variant<no_mask, causal_mask, sliding_window_mask, chunked_mask> m_;
};

/// A logit scale chosen at run time: 1/√D, a fixed λ, or Llama 4's temperature; each call runs the
/// typed scale's own scale().
class any_scale {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< as the typed scales (attention.hpp)
    any_scale() = default;  ///< inverse_sqrt_scale
    any_scale(inverse_sqrt_scale s) noexcept : s_(s) {}  // NOLINT(google-explicit-constructor)
    any_scale(fixed_scale s) noexcept : s_(s) {}         // NOLINT(google-explicit-constructor)
    any_scale(temperature_scale s) noexcept : s_(s) {}   // NOLINT(google-explicit-constructor)

    template <logit_scale S>
    [[nodiscard]] const S* get_if() const noexcept {
        return std::get_if<S>(&s_);
    }

    [[nodiscard]] double scale(std::int64_t query_pos, std::size_t head_dim) const {
        return std::visit([&](const auto& s) { return s.scale(query_pos, head_dim); }, s_);
    }
    /// λ finite and > 0 (key "lambda"); the temperature's floor_scale and attn_scale.
    void validate() const {
        if (const auto* f = std::get_if<fixed_scale>(&s_)) (void)f->scale(0, 1);
        if (const auto* t = std::get_if<temperature_scale>(&s_)) t->temperature.validate();
    }

private:
    std::variant<inverse_sqrt_scale, fixed_scale, temperature_scale> s_;
};

static_assert(attention_mask<any_mask> && logit_scale<any_scale>);

struct attention_layer_shape {
    std::size_t heads = 0;      ///< query heads (num_attention_heads)
    std::size_t kv_heads = 0;   ///< num_key_value_heads; divides heads
    std::size_t head_dim = 0;   ///< of Q and K (the rotary's head_dim)
    std::size_t value_dim = 0;  ///< of V and out; 0 means head_dim
    std::size_t capacity = 0;   ///< tokens the layer's cache holds
};

struct attention_layer_options {
    float softcap = 0.0f;       ///< Gemma-2's attn_logit_softcapping; 0 = off
    std::vector<float> sinks{}; ///< one learned sink logit per query head (gpt-oss), or empty
    bool needs_sinks = false;   ///< the model has sinks: attend throws until they are given
    unsigned threads = 1;       ///< attention's threads and the cache append's (bit-identical for any count)
    executor executor_fn{};     ///< runs those threads on the engine's pool (attention_options::executor)
    std::size_t min_fmas_per_thread = std::size_t{1} << 21;  ///< attention_options::min_fmas_per_thread
    /// The calling thread's tile buffers (attention_options::workspace), not owned: one can serve every
    /// layer that thread runs; layers attended from several threads at once need one each (set_workspace).
    /// It must outlive the layers' calls at a fixed address (a copied layer shares it).
    attention_workspace* workspace = nullptr;
};

/// The layer with K/V cached as Storage (float, bf16 or fp16: kv_cache<Transform, Storage>); an
/// engine picks one for all its layers. attention_layer is the float one.
template <storage_type Storage = float>
class basic_attention_layer {
    template <class Transform>
    struct state;
    template <class F>
    decltype(auto) with(F&& f) {
        return std::visit(std::forward<F>(f), state_);
    }
    template <class F>
    decltype(auto) with(F&& f) const {
        return std::visit(std::forward<F>(f), state_);
    }

public:
    template <class Transform>
    using cache_type = kv_cache<Transform, Storage>;

    /// `rope` empty: a NoPE layer. Every argument is checked here (config_error naming the field).
    basic_attention_layer(std::optional<any_rotary> rope, any_mask mask, any_scale scale, attention_layer_shape shape,
                          attention_layer_options options = {})
        : mask_(mask), scale_(scale), shape_(shape), opt_(std::move(options)), state_(make_state(std::move(rope))) {}

    [[nodiscard]] bool is_nope() const noexcept { return std::holds_alternative<state<nope>>(state_); }
    /// The layer's rotary (the one its cached keys were rotated with), nullptr for NoPE.
    [[nodiscard]] const any_rotary* rope() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        const auto* s = std::get_if<state<any_rotary>>(&state_);
        return s ? &s->cache.transform() : nullptr;
    }
    [[nodiscard]] const any_mask& mask() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return mask_; }
    [[nodiscard]] const any_scale& scale() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return scale_; }
    [[nodiscard]] const attention_layer_shape& shape() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return shape_; }
    [[nodiscard]] float softcap() const noexcept { return opt_.softcap; }
    [[nodiscard]] std::span<const float> sinks() const noexcept POSENC_DETAIL_LIFETIMEBOUND { return opt_.sinks; }
    /// Whether the model has learned sinks (attend throws until set_sinks gives them).
    [[nodiscard]] bool needs_sinks() const noexcept { return opt_.needs_sinks; }
    [[nodiscard]] unsigned threads() const noexcept { return opt_.threads; }
    [[nodiscard]] attention_workspace* workspace() const noexcept { return opt_.workspace; }

    /// One finite logit per query head (copied); empty removes them.
    void set_sinks(std::span<const float> sinks) {
        check_sinks(sinks);
        opt_.sinks.assign(sinks.begin(), sinks.end());
    }
    void set_softcap(float softcap) {
        check_softcap(softcap);
        opt_.softcap = softcap;
    }
    void set_threads(unsigned n) noexcept {
        opt_.threads = n ? n : 1;
        with([&](auto& s) {
            if constexpr (requires { s.cache.set_threads(n); }) s.cache.set_threads(opt_.threads);
        });
    }
    /// Runs attention's and the cache append's threads on the engine's pool; empty: posenc's own.
    void set_executor(executor ex) {
        opt_.executor_fn = std::move(ex);
        with([&](auto& s) {
            if constexpr (requires { s.cache.set_executor(opt_.executor_fn); }) s.cache.set_executor(opt_.executor_fn);
        });
    }

    /// The workspace attend and prefill pass to attention (nullptr: each call allocates its buffers).
    void set_workspace(attention_workspace* ws) noexcept { opt_.workspace = ws; }

    // ---- the cache ---------------------------------------------------------------------------------
    [[nodiscard]] std::size_t size() const noexcept { return with([](const auto& s) { return s.cache.size(); }); }
    [[nodiscard]] std::size_t capacity() const noexcept { return shape_.capacity; }
    [[nodiscard]] std::int64_t next_position() const noexcept {
        return with([](const auto& s) { return s.cache.next_position(); });
    }
    /// Views over the cache (keys already rotated), valid until the next append / shift / clear.
    [[nodiscard]] position_ids positions() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return with([](const auto& s) { return s.cache.positions(); });
    }
    [[nodiscard]] heads_view<const Storage> keys() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return with([](const auto& s) { return s.cache.keys(); });
    }
    [[nodiscard]] heads_view<const Storage> values() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return with([](const auto& s) { return s.cache.values(); });
    }

    /// K [n, kv_heads, head_dim] rotated at `positions` into the cache, V [n, kv_heads, value_dim]
    /// copied (kv_cache::append: positions strictly increasing past the cached ones).
    void append(heads_view<const float> k, heads_view<const float> v, const position_ids& positions) {
        with([&](auto& s) { s.cache.append(k, v, positions); });
    }

    /// out [n, heads, value_dim] = the queries q [n, heads, head_dim] at `q_positions` against every
    /// cached key, with the layer's mask, scale, softcap and sinks. With a workspace, not at the same
    /// time as another call using that workspace (config_error, key options.workspace, nothing written).
    void attend(heads_view<const float> q, const position_ids& q_positions, heads_view<float> out) const {
        check_queries(q);
        with([&](const auto& s) {
            posenc::attention(s.enc, q, s.cache, out, q_positions, mask_, options());
        });
    }

    /// append(k, v, positions), then attend(q, positions, out): a prompt, or a decode step of one
    /// token. The queries and out are checked before the cache is touched.
    void prefill(heads_view<const float> q, heads_view<const float> k, heads_view<const float> v,
                 const position_ids& positions, heads_view<float> out) {
        check_queries(q);
        with([&](auto& s) {
            const heads_view<const float> none_k(nullptr, {0, shape_.kv_heads, shape_.head_dim});
            const heads_view<const float> none_v(nullptr, {0, shape_.kv_heads, value_dim()});
            attention_options opt = options();
            opt.keys_transformed = true;
            detail::check_attention(s.enc, q, none_k, none_v, out, positions, position_ids::consecutive(0, 0), mask_, opt);
            s.cache.append(k, v, positions);
            posenc::attention(s.enc, q, s.cache, out, positions, mask_, opt);
        });
    }

    /// kv_cache::context_shift: keeps n_sink + n_recent tokens, re-rotates the recent keys.
    std::size_t context_shift(std::size_t n_sink, std::size_t n_recent) {
        return with([&](auto& s) { return s.cache.context_shift(n_sink, n_recent); });
    }
    void clear() noexcept {
        with([](auto& s) { s.cache.clear(); });
    }

private:
    template <class Transform>
    struct state {
        attention_encoding<Transform, no_bias, any_scale> enc;  // its own copy: attention runs it single-threaded per tile
        cache_type<Transform> cache;
    };
    using states = std::variant<state<any_rotary>, state<nope>>;

    [[nodiscard]] std::size_t value_dim() const noexcept { return shape_.value_dim ? shape_.value_dim : shape_.head_dim; }

    void check_sinks(std::span<const float> sinks) const {
        detail::require(sinks.empty() || sinks.size() == shape_.heads, "sinks",
                        [&] { return "of " + detail::to_text(sinks.size()) + " values"; },
                        [&] { return "needs one per query head = " + detail::to_text(shape_.heads); });
        for (float s : sinks) detail::require(std::isfinite(s), "sinks", s, "must be finite");
    }
    static void check_softcap(float softcap) {
        detail::require(std::isfinite(softcap) && softcap >= 0.0f, "softcap", softcap, "must be finite and >= 0");
    }

    // What the layer knows beyond attention's own checks: its head count and whether it needs sinks.
    void check_queries(const heads_view<const float>& q) const {
        detail::require(q.heads() == shape_.heads, "q.heads", q.heads(),
                        [&] { return "must equal the layer's heads = " + detail::to_text(shape_.heads); });
        detail::require(q.head_dim() == shape_.head_dim, "q.head_dim", q.head_dim(),
                        [&] { return "must equal the layer's head_dim = " + detail::to_text(shape_.head_dim); });
        if (opt_.needs_sinks && opt_.sinks.empty())
            throw config_error("sinks", "none", "this layer has learned sink logits: set_sinks with one per query head = " +
                                                    detail::to_text(shape_.heads));
    }

    [[nodiscard]] attention_options options() const {
        attention_options o{.softcap = opt_.softcap, .sinks = opt_.sinks, .threads = opt_.threads,
                            .min_fmas_per_thread = opt_.min_fmas_per_thread};
        // By reference: a std::function of a reference_wrapper never allocates, a copy of the
        // engine's executor may (a lambda holding its pool by shared_ptr), on every call.
        if (opt_.executor_fn) o.executor = std::cref(opt_.executor_fn);
        o.workspace = opt_.workspace;
        return o;
    }

    states make_state(std::optional<any_rotary> rope) {
        detail::require(shape_.heads > 0, "heads", shape_.heads, "must be > 0");
        detail::require(shape_.kv_heads > 0, "kv_heads", shape_.kv_heads, "must be > 0");
        detail::require(shape_.heads % shape_.kv_heads == 0, "kv_heads", shape_.kv_heads,
                        [&] { return "must divide heads = " + detail::to_text(shape_.heads); });
        detail::require(shape_.head_dim > 0, "head_dim", shape_.head_dim, "must be > 0");
        detail::require(shape_.capacity > 0, "capacity", shape_.capacity, "must be > 0");
        mask_.validate();
        scale_.validate();
        check_softcap(opt_.softcap);
        check_sinks(opt_.sinks);
        opt_.threads = opt_.threads ? opt_.threads : 1;
        const kv_cache_shape cs{.kv_heads = shape_.kv_heads, .head_dim = shape_.head_dim, .value_dim = shape_.value_dim,
                                .capacity = shape_.capacity};
        if (!rope) return state<nope>{attention_encoding<nope, no_bias, any_scale>(nope{}, no_bias{}, scale_), {nope{}, cs}};
        state<any_rotary> s{attention_encoding<any_rotary, no_bias, any_scale>(*rope, no_bias{}, scale_), {*rope, cs}};
        s.cache.set_threads(opt_.threads);
        if (opt_.executor_fn) s.cache.set_executor(opt_.executor_fn);
        return s;
    }

    any_mask mask_;
    any_scale scale_;
    attention_layer_shape shape_;
    attention_layer_options opt_;
    states state_;
};

using attention_layer = basic_attention_layer<float>;

}  // namespace posenc
