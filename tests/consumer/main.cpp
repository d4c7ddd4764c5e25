// Rotates one head with Llama-3.1's RoPE read from its config.json and checks it against the
// closed form: exits 0 when posenc works from this consumer's build.
#include <posenc/hf/config.hpp>
#include <posenc/posenc.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const auto cfg = posenc::hf::load_config(argv[1]);
    const auto rope = cfg.rope.make_rotary();
    std::vector<float> q(128, 0.0f);
    q[0] = 1.0f;  // pair 0 = lanes (0, 64) in half_split
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 1, 128}), posenc::position_ids::consecutive(3, 1));
    const bool ok = std::abs(q[0] - std::cos(3.0)) < 1e-6 && std::abs(q[64] - std::sin(3.0)) < 1e-6;
    std::printf("consumer (kernels: %s): %s\n", posenc::simd::active_arch_name(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
