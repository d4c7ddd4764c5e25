// RoFormer's long-range decay (§3.4.3, Fig. 2): the relative upper bound (1/(d/2))·Σⱼ|Sⱼ|,
// Sⱼ = Σ_{k<j} e^{i·r·θₖ}, against the distance r, for head_dim 128 and base 10000 under each
// context-extension schedule (factor 4 over 4096 tokens). PI stretches the curve by the factor
// (bound_PI(r) = bound(r/4), exactly); NTK, YaRN and Llama-3 stretch only its slow part.
//
// Usage: rope_decay [csv_dir]   (writes decay.csv: one column per schedule, distances 0..65536)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <posenc/analysis/decay.hpp>
#include <posenc/rope/any_schedule.hpp>

namespace an = posenc::analysis;

int main(int argc, char** argv) {
    const std::size_t d = 128;
    struct named {
        const char* name;
        posenc::any_schedule schedule;
    };
    const std::vector<named> schedules{
        {"default", posenc::default_rope{.base = 1e4}},
        {"pi_x4", posenc::linear{.base = 1e4, .factor = 4}},
        {"ntk_aware_x4", posenc::ntk_aware{.base = 1e4, .factor = 4}},
        {"yarn_x4", posenc::yarn{.base = 1e4, .factor = 4, .original_max_position = 4096}},
        {"llama3_x4", posenc::llama3{.base = 1e4, .factor = 4, .original_max_position = 4096}},
    };
    std::vector<std::vector<double>> inv;
    for (const auto& s : schedules) inv.push_back(posenc::frequencies(s.schedule, d).inv_freq);

    std::printf("RoFormer relative upper bound, head_dim %zu, base 1e4 (r = 0 gives (d/2 + 1)/2 = %.1f)\n", d, (d / 2 + 1) / 2.0);
    std::printf("%-8s", "r");
    for (const auto& s : schedules) std::printf(" %-13s", s.name);
    std::printf("\n");
    for (const double r : {0.0, 1.0, 10.0, 100.0, 1000.0, 4096.0, 16384.0, 65536.0}) {
        std::printf("%-8.0f", r);
        for (const auto& f : inv) std::printf(" %-13.4f", an::relative_upper_bound(f, r));
        std::printf("\n");
    }
    std::printf("check: pi_x4 at r = 4000 is %.6f, default at r = 1000 is %.6f (equal: PI divides every theta by 4)\n",
                an::relative_upper_bound(inv[1], 4000), an::relative_upper_bound(inv[0], 1000));

    if (argc > 1) {
        std::ofstream csv(std::string(argv[1]) + "/decay.csv");
        csv << "distance";
        for (const auto& s : schedules) csv << "," << s.name;
        csv << "\n";
        // Log-spaced distances 1..65536 (the figure's x axis is logarithmic).
        for (double r = 1; r <= 65536; r *= 1.02) {
            csv << r;
            for (const auto& f : inv) csv << "," << an::relative_upper_bound(f, r);
            csv << "\n";
        }
        std::printf("wrote %s/decay.csv\n", argv[1]);
    }
    const double diff = an::relative_upper_bound(inv[1], 4000) - an::relative_upper_bound(inv[0], 1000);
    return std::abs(diff) < 1e-9 ? 0 : 1;
}
