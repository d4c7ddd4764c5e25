// The RoPE base lower bound (Men et al. 2024, "Base of RoPE Bounds Context Length", Table/Fig. 1):
// for head_dim 128 and each context length, the first base on the 2-significant-digit grid whose
// B(m, θ) = Σ cos(m·θᵢ) stays ≥ 0 for every m ≤ L, printed beside the paper's published value and
// that value's own L_θ. Optional: a CSV of B(m, θ) for several bases (docs/figures/base_bound.svg).
//
// Usage: rope_base_bound [max_length=1048576] [csv_dir]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <posenc/analysis/base_bound.hpp>
#include <posenc/rope/default.hpp>

namespace an = posenc::analysis;

int main(int argc, char** argv) {
    const long long max_length = argc > 1 ? std::atoll(argv[1]) : 1048576;
    struct row {
        long long length;
        const char* label;
        double paper;
    };
    const row rows[] = {{1024, "1k", 4.3e3},     {2048, "2k", 1.6e4},     {4096, "4k", 2.7e4},   {8192, "8k", 8.4e4},
                        {16384, "16k", 3.1e5},   {32768, "32k", 6.4e5},   {65536, "64k", 2.1e6}, {131072, "128k", 7.8e6},
                        {262144, "256k", 3.6e7}, {524288, "512k", 6.4e7}, {1048576, "1M", 5.1e8}};
    std::printf("head_dim 128, theta_i = base^(-2i/128); L_theta = sup{L : B(m) >= 0 for all integer 0 <= m <= L}\n");
    std::printf("posenc: first base b on the grid 1.0e1, 1.1e1, ..., 9.9e1, 1.0e2, ... with L_theta(b) >= length\n\n");
    std::printf("%-6s %-9s %-10s %-20s %-10s %-8s %s\n", "length", "tokens", "paper", "L_theta(paper base)", "posenc",
                "tried", "seconds");
    for (const row& r : rows) {
        if (r.length > max_length) break;
        const auto t0 = std::chrono::steady_clock::now();
        const auto found = an::smallest_base_for_length(128, r.length);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const auto inv = posenc::default_rope{r.paper}.frequencies(128).inv_freq;
        const long long l_paper = an::context_length_bound(inv, 4 * r.length);
        std::printf("%-6s %-9lld %-10.2g %-9lld %-10s %-10.2g %-8zu %.2f\n", r.label, r.length, r.paper, l_paper,
                    l_paper >= r.length ? "(reaches)" : "(short)", found.base, found.bases_tried, secs);
    }
    std::printf("\nA paper base marked (short) does not reach the length under the definition above; posenc's base\n"
                "is the first grid point that does. L_theta is not monotone in the base, so a base between the\n"
                "two columns, or above posenc's, may fail (d = 128, 4096 tokens: 2.9e4 reaches, 2.91e4..3.92e4 do not).\n");

    if (argc > 2) {
        std::ofstream csv(std::string(argv[2]) + "/base_bound.csv");
        const double bases[] = {1e4, 5e5, 1e6, 1e7};
        csv << "m,base_1e4,base_5e5,base_1e6,base_1e7\n";
        std::vector<std::vector<double>> curves;
        for (const double b : bases) curves.push_back(an::cos_sum_curve(posenc::default_rope{b}.frequencies(128).inv_freq, 200000));
        for (std::size_t m = 0; m <= 200000; m += (m < 2000 ? 5 : 200)) {
            csv << m;
            for (const auto& c : curves) csv << "," << c[m];
            csv << "\n";
        }
        std::printf("wrote %s/base_bound.csv\n", argv[2]);
    }
}
