// Rotation angles under extrapolation (the YaRN paper's argument for NTK-by-parts, §3.2): head_dim
// 128, base 1e4, trained on 4096 tokens, run at 32768 (factor 8). A pair whose wavelength is below
// 4096 turned through every angle in training; a longer one saw only [0, 4096·θᵢ] and leaves that
// range at 32768 unless the schedule slows it by the full factor. Counts per schedule, and selected
// pairs. Optional CSVs: angles.csv (test angle / trained angle per pair and schedule) and
// wavelength.csv (wavelength per pair, interpolation weight of YaRN, NTK-by-parts and Llama-3).
//
// Usage: rope_extrapolation_angles [csv_dir]
#include <cstdio>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <posenc/analysis/extrapolation.hpp>
#include <posenc/rope/any_schedule.hpp>

namespace an = posenc::analysis;

int main(int argc, char** argv) {
    const std::size_t d = 128;
    const std::int64_t train = 4096, test = 32768;
    const double s = 8;
    struct named {
        const char* name;
        posenc::any_schedule schedule;
    };
    const std::vector<named> schedules{
        {"extrapolate", posenc::default_rope{.base = 1e4}},
        {"pi", posenc::linear{.base = 1e4, .factor = s}},
        {"ntk_aware", posenc::ntk_aware{.base = 1e4, .factor = s}},
        {"ntk_by_parts", posenc::ntk_by_parts{.base = 1e4, .factor = s, .original_max_position = train}},
        {"yarn", posenc::yarn{.base = 1e4, .factor = s, .original_max_position = train}},
        {"llama3", posenc::llama3{.base = 1e4, .factor = s, .original_max_position = train}},
    };
    const auto trained = posenc::default_rope{.base = 1e4}.frequencies(d).inv_freq;
    std::size_t no_full_turn = 0;
    for (const double t : trained) no_full_turn += static_cast<double>(train) * t < 2 * std::numbers::pi;
    std::printf("head_dim %zu, base 1e4, L_train %lld, L_test %lld: %zu of %zu pairs never completed a turn in training\n"
                "(wavelength > %lld, pairs %zu..%zu).\n\n",
                d, static_cast<long long>(train), static_cast<long long>(test), no_full_turn, trained.size(),
                static_cast<long long>(train), trained.size() - no_full_turn, trained.size() - 1);
    std::printf("%-13s %-14s %-22s %-22s\n", "schedule", "out of range", "slowdown of pair 0", "slowdown of pair 63");
    std::vector<std::vector<an::pair_angles>> all;
    for (const auto& n : schedules) {
        const auto a = an::rotation_angles(trained, posenc::frequencies(n.schedule, d).inv_freq, train, test);
        std::printf("%-13s %-14zu %-22.4g %-22.4g\n", n.name, an::out_of_range_pairs(a), a.front().slowdown,
                    a.back().slowdown);
        all.push_back(a);
    }
    std::printf("\nPI keeps every pair in range but slows the fast pairs too (pair 0 by 8: neighbouring tokens\n"
                "become 8x harder to tell apart). NTK-aware slows the slowest pair by exactly 8 and the others\n"
                "by less: most pairs without a full turn still leave their trained range. NTK-by-parts, YaRN\n"
                "and Llama-3 leave the fast pairs alone and interpolate the slow ones fully.\n\n");
    std::printf("pair  wavelength  train angle  test angle (extrapolated / pi / ntk_aware / yarn)\n");
    for (const std::size_t i : {0u, 20u, 40u, 45u, 46u, 50u, 63u})
        std::printf("%-5zu %-11.1f %-12.4f %.4f / %.4f / %.4f / %.4f\n", i, all[0][i].wavelength, all[0][i].train_angle,
                    all[0][i].test_angle, all[1][i].test_angle, all[2][i].test_angle, all[4][i].test_angle);

    if (argc > 1) {
        const std::string dir = argv[1];
        std::ofstream a(dir + "/angles.csv");
        a << "pair";
        for (const auto& n : schedules) a << "," << n.name;
        a << "\n";
        for (std::size_t i = 0; i < trained.size(); ++i) {
            a << i;
            for (const auto& x : all) a << "," << x[i].test_angle / x[i].train_angle;
            a << "\n";
        }
        std::ofstream w(dir + "/wavelength.csv");
        w << "pair,wavelength,yarn,ntk_by_parts,llama3\n";
        const auto wy = *posenc::interpolation(schedules[4].schedule, d);
        const auto wp = *posenc::interpolation(schedules[3].schedule, d);
        const auto wl = *posenc::interpolation(schedules[5].schedule, d);
        for (std::size_t i = 0; i < trained.size(); ++i)
            w << i << "," << 2 * std::numbers::pi / trained[i] << "," << wy[i] << "," << wp[i] << "," << wl[i] << "\n";
        std::printf("wrote %s/angles.csv and %s/wavelength.csv\n", dir.c_str(), dir.c_str());
    }
}
