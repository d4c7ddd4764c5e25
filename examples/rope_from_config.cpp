// Reads a model's RoPE from its HF config.json and rotates a decode step's Q and K.
//   rope_from_config path/to/config.json [position]
#include <posenc/hf/config.hpp>
#include <posenc/posenc.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) try {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s config.json [position]\n", argv[0]);
        return 2;
    }
    const auto cfg = posenc::hf::load_config(argv[1]);
    const std::int64_t position = argc > 2 ? std::atoll(argv[2]) : 0;
    // seq_len = position + 1 selects dynamic NTK's base and LongRoPE's factors for this length.
    const auto rope = cfg.rope.make_rotary(position + 1);
    const std::size_t d = cfg.rope.dims.head_dim;
    std::vector<float> q(4 * d, 1.0f), k(1 * d, 1.0f);
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 4, d}),
               posenc::heads_view<float>(std::span<float>(k), {1, 1, d}), posenc::position_ids::consecutive(position, 1));
    std::printf("%s: %s rope, %s layout, rotary_dim %zu of %zu, amplitude %.6f; q[0] at position %lld = %.6f\n",
                cfg.model_type.c_str(), std::string(cfg.rope.rope_type()).c_str(),
                std::string(posenc::to_string(cfg.rope.layout)).c_str(), cfg.rope.dims.rotary(), d,
                rope.frequencies().attention_factor, static_cast<long long>(position), q[0]);
} catch (const posenc::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
}
