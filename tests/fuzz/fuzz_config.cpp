// libFuzzer target: the HF config reader from bytes (hf::position_encoding_from_string and
// hf::config_from_string), then everything a reader's result feeds (rotary, table, ALiBi slopes,
// T5 buckets). Invariants: only posenc::error escapes, its message is one bounded line, and a config
// that is accepted gives finite, usable frequencies and cos/sin.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_config.cpp
//   ./a.out -max_total_time=60 corpus/ tests/data/configs/
#include <posenc/hf/encoding.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

void check_message(const std::exception& e) {
    const std::string_view m = e.what();
    require(m.find('\n') == std::string_view::npos && m.find('\0') == std::string_view::npos);
    require(m.size() < 2000);
}

void exercise(const posenc::hf::rope_spec& spec, std::int64_t seq_len) {
    try {
        const auto rope = spec.make_rotary(seq_len);
        const auto& f = rope.frequencies();
        for (const double v : f.inv_freq) require(std::isnormal(v) && v > 0.0 && v <= posenc::detail::max_inv_freq);
        require(std::isfinite(f.attention_factor) && f.attention_factor > 0.0);
        require(std::isfinite(spec.softmax_scale_multiplier()));
        const auto table = rope.table(3);
        for (std::int64_t p = 0; p < 3; ++p)
            for (const float c : table.cos(p)) require(std::isfinite(c));
        // One token at the largest position: the angle must stay finite.
        std::vector<float> q(spec.dims.head_dim, 1.0f);
        const std::vector<std::int64_t> pos{std::numeric_limits<std::int64_t>::max()};
        rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 1, spec.dims.head_dim}), pos);
        for (const float v : q) require(std::isfinite(v));
    } catch (const posenc::error& e) {
        check_message(e);  // e.g. a dynamic schedule whose base overflows at this seq_len
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // The last byte picks an explicit layout and a sequence length, so both paths are reached.
    const std::uint8_t knob = size ? data[size - 1] : 0;
    const std::optional<posenc::rope_layout> layout =
        knob & 1 ? std::optional(knob & 2 ? posenc::rope_layout::interleaved : posenc::rope_layout::half_split)
                 : std::nullopt;
    const std::int64_t seq_lens[] = {0, 4096, 131072, std::int64_t{1} << 40};
    try {
        const auto enc = posenc::hf::position_encoding_from_string(text, layout);
        if (const auto* cfg = std::get_if<posenc::hf::model_config>(&enc)) {
            exercise(cfg->rope, seq_lens[(knob >> 2) & 3]);
            for (const auto& [type, spec] : cfg->rope_by_layer_type) exercise(spec, seq_lens[(knob >> 2) & 3]);
            for (const auto& t : cfg->layer_types) (void)cfg->rope_for(t);
        } else if (const auto* a = std::get_if<posenc::hf::alibi_model>(&enc)) {
            require(a->params.heads >= 1 && a->params.heads <= posenc::hf::limits::heads);
            for (const double s : a->params.slopes()) require(std::isnormal(s) && s > 0.0);
        } else if (const auto* t = std::get_if<posenc::hf::t5_model>(&enc)) {
            for (const std::int64_t r : {std::numeric_limits<std::int64_t>::min(), std::int64_t{-1000}, std::int64_t{0},
                                         std::int64_t{7}, std::numeric_limits<std::int64_t>::max()}) {
                const auto b = t->encoder.bucket(r);
                require(b >= 0 && b < t->encoder.num_buckets);
            }
        }
    } catch (const posenc::error& e) {
        check_message(e);
    }
    try {
        (void)posenc::hf::config_from_string(text, layout);
    } catch (const posenc::error& e) {
        check_message(e);
    }
    return 0;
}
