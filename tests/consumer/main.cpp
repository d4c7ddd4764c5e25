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
    // Pair 0 = lanes (0, 64) in half_split, θ₀ = 1 under every schedule; pair 63 = lanes (63, 127),
    // wavelength 2π·500000^(126/128) ≈ 2.6e6 > 8192: Llama-3.1 divides its frequency by 8.
    std::vector<float> q(128, 0.0f);
    q[0] = 1.0f;
    q[63] = 1.0f;
    const double p = 3000.0, theta63 = std::pow(500000.0, -126.0 / 128.0) / 8.0;
    rope.apply(posenc::heads_view<float>(std::span<float>(q), {1, 1, 128}), posenc::position_ids::consecutive(3000, 1));
    const bool ok = std::abs(q[0] - std::cos(p)) < 1e-6 && std::abs(q[64] - std::sin(p)) < 1e-6 &&
                    std::abs(q[63] - std::cos(p * theta63)) < 1e-6 && std::abs(q[127] - std::sin(p * theta63)) < 1e-6;
    std::printf("consumer (kernels: %s): %s\n", posenc::simd::active_arch_name(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
