// A decode loop with a KV cache and YaRN, read from a HF config.json (default: the bundled Qwen2.5-7B
// with rope_scaling {yarn, factor 4}): prefill a prompt, decode token by token, and each time the cache
// is full drop its oldest tokens and re-rotate the kept keys down to the freed positions (llama.cpp's
// context shift with no sink tokens), then keep decoding at the shifted positions.
//
// YaRN scales cos/sin by its attention factor 0.1·ln(s) + 1 (HF folds it into the rotary embedding, so
// q·k carries it squared); the cache's keys carry it once from append, and context_shift re-rotates
// them without it. What it prints, checkable against the text above:
//   1. the YaRN parameters from the config and the attention factor against 0.1·ln(factor) + 1;
//   2. max |decode − full prefill| over the steps before the first shift (float rounding only);
//   3. max |decode − fresh prefill of the kept raw keys at the shifted positions| after every shift
//      (keys rotated at p then by −Δ equal keys rotated at p − Δ to float rounding; an amplitude applied
//      twice would be far above that).
// Exits non-zero when a difference exceeds 1e-5 (the outputs are O(1)).
//
// Usage: yarn_decode [config.json]
#include <posenc/attention/attention.hpp>
#include <posenc/attention/kv_cache.hpp>
#include <posenc/hf/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using matrix = std::vector<float>;

matrix random_matrix(std::size_t n, std::mt19937& gen) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    matrix m(n);
    for (float& x : m) x = dist(gen);
    return m;
}

/// The larger of m and d, NaN once either is (std::max(m, NaN) is m: a NaN would pass the check).
double worse(double m, double d) { return d > m || d != d ? d : m; }

double max_diff(const float* a, const float* b, std::size_t n) {
    double d = 0;
    for (std::size_t i = 0; i < n; ++i) d = worse(d, static_cast<double>(std::abs(a[i] - b[i])));
    return d;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : POSENC_EXAMPLE_CONFIG_DIR "/qwen2.5-7b-yarn.json";
    const auto cfg = posenc::hf::load_config(path);
    const auto* y = std::get_if<posenc::yarn>(&cfg.rope.schedule);
    if (!y) {
        std::fprintf(stderr, "%s: rope_type is %s, not yarn\n", path.c_str(), std::string(cfg.rope.rope_type()).c_str());
        return 2;
    }
    const posenc::any_rotary rope = cfg.rope.make_rotary();
    const std::size_t D = cfg.rope.dims.head_dim;
    const double amplitude = rope.frequencies().attention_factor;
    std::printf("%s: model_type %s, head_dim %zu, YaRN factor %g over %lld original positions, base %g\n", path.c_str(),
                cfg.model_type.c_str(), D, y->factor, static_cast<long long>(y->original_max_position), y->base);
    std::printf("  attention factor (cos/sin amplitude) %.6f; 0.1*ln(factor) + 1 = %.6f (equal unless the config sets\n"
                "  attention_factor or mscale); softmax scale multiplier %g\n",
                amplitude, 0.1 * std::log(y->factor) + 1.0, cfg.rope.softmax_scale_multiplier());

    // Small head counts keep the example fast; the rotary is the model's own.
    constexpr std::size_t Hq = 4, Hkv = 2, prompt = 48, capacity = 64, drop = 16, steps = 80, total = prompt + steps;
    std::mt19937 gen(11);
    const matrix q = random_matrix(total * Hq * D, gen), k = random_matrix(total * Hkv * D, gen),
                 v = random_matrix(total * Hkv * D, gen);
    using cview = posenc::heads_view<const float>;
    auto q_of = [&](std::size_t t0, std::size_t n) { return cview(q.data() + t0 * Hq * D, {n, Hq, D}); };
    auto k_of = [&](std::size_t t0, std::size_t n) { return cview(k.data() + t0 * Hkv * D, {n, Hkv, D}); };
    auto v_of = [&](std::size_t t0, std::size_t n) { return cview(v.data() + t0 * Hkv * D, {n, Hkv, D}); };
    const posenc::attention_encoding enc{rope, posenc::no_bias{},
                                         posenc::fixed_scale::yarn(cfg.rope.softmax_scale_multiplier(), D)};

    // The reference before any shift: one causal prefill of everything the cache can hold.
    matrix full(capacity * Hq * D);
    const auto consecutive = posenc::position_ids::consecutive(0, capacity);
    posenc::attention(enc, q_of(0, capacity), k_of(0, capacity), v_of(0, capacity),
                      posenc::heads_view<float>(full.data(), {capacity, Hq, D}), consecutive, consecutive,
                      posenc::causal_mask{});

    posenc::kv_cache cache(rope, {.kv_heads = Hkv, .head_dim = D, .capacity = capacity});
    std::vector<std::size_t> token_of;  // which input token each cache slot holds (for the fresh prefill)
    matrix out(capacity * Hq * D);
    cache.append(k_of(0, prompt), v_of(0, prompt), posenc::position_ids::consecutive(0, prompt));
    for (std::size_t t = 0; t < prompt; ++t) token_of.push_back(t);
    posenc::attention(enc, q_of(0, prompt), cache, posenc::heads_view<float>(out.data(), {prompt, Hq, D}),
                      posenc::position_ids::consecutive(0, prompt), posenc::causal_mask{});
    double before = max_diff(out.data(), full.data(), prompt * Hq * D), after = 0;
    std::size_t shifts = 0, steps_after = 0;
    for (std::size_t t = prompt; t < total; ++t) {
        if (cache.size() == capacity) {  // full: drop the oldest `drop`, re-rotate the rest down by `drop`
            cache.context_shift(0, capacity - drop);
            token_of.erase(token_of.begin(), token_of.begin() + drop);
            ++shifts;
        }
        const auto pos = posenc::position_ids::consecutive(cache.next_position(), 1);
        cache.append(k_of(t, 1), v_of(t, 1), pos);
        token_of.push_back(t);
        posenc::attention(enc, q_of(t, 1), cache, posenc::heads_view<float>(out.data(), {1, Hq, D}), pos,
                          posenc::causal_mask{});
        if (shifts == 0) {
            before = worse(before, max_diff(out.data(), full.data() + t * Hq * D, Hq * D));
            continue;
        }
        // Fresh prefill: the kept tokens' raw K/V, rotated inside attention at the cache's positions.
        matrix kr(cache.size() * Hkv * D), vr(cache.size() * Hkv * D), ref(Hq * D);
        for (std::size_t s = 0; s < cache.size(); ++s) {
            std::copy_n(k.data() + token_of[s] * Hkv * D, Hkv * D, kr.data() + s * Hkv * D);
            std::copy_n(v.data() + token_of[s] * Hkv * D, Hkv * D, vr.data() + s * Hkv * D);
        }
        posenc::attention(enc, q_of(t, 1), cview(kr.data(), {cache.size(), Hkv, D}), cview(vr.data(), {cache.size(), Hkv, D}),
                          posenc::heads_view<float>(ref.data(), {1, Hq, D}), pos, cache.positions(), posenc::causal_mask{});
        after = worse(after, max_diff(out.data(), ref.data(), Hq * D));
        ++steps_after;
    }
    std::printf("decode: prompt %zu + %zu steps, cache of %zu, %zu context shifts of %zu tokens; last position %lld\n",
                prompt, steps, capacity, shifts, drop, static_cast<long long>(cache.next_position() - 1));
    std::printf("  before the first shift: max |decode - full prefill| = %.3g\n", before);
    std::printf("  after the shifts (%zu steps): max |decode - fresh prefill at the shifted positions| = %.3g\n",
                steps_after, after);
    // The closed form holds when the config sets no attention_factor / mscale (Qwen's, not DeepSeek's).
    const bool plain_yarn = !y->attention_factor && !y->mscale && !y->mscale_all_dim;
    const bool ok = before <= 1e-5 && after <= 1e-5 && shifts > 0 && steps_after > 0 &&
                    (!plain_yarn || std::abs(amplitude - (0.1 * std::log(y->factor) + 1.0)) <= 1e-12 * amplitude);
    std::printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
