// The length-extrapolation study: train the tiny transformer of model.hpp once per positional encoding
// at length L on associative recall (task.hpp), then measure loss and exact-answer accuracy at L, 2L,
// 4L, 8L and 16L. The RoPE model is also evaluated, without retraining, under the context-extension
// schedules (PI, NTK-aware, Dynamic NTK, NTK-by-parts, YaRN with its attention factor, a log-length
// logit temperature), and after a short fine-tune at 2L–4L (plain, and with PI at factor 4).
//
//   train_extrapolation [--quick] [--seeds N] [--first-seed S] [--steps N] [--train-length L] [--docs DIR]
//                       [--min-accuracy A] [--raw FILE] [--merge FILE...]
//
// --raw FILE writes every evaluation (variant, length, seed, loss, correct, answers) as CSV; --merge
// reads such files (e.g. one run per seed, run side by side) and writes the table and figure from all
// of them without training.
// --quick (CI): one seed, L = 32, fewer steps and evaluation sequences. --train-length L sets the
// training length (64 by default). --docs DIR writes DIR/extrapolation-table.md and
// DIR/figures/extrapolation-accuracy.svg. --min-accuracy A: exit status 1 unless every trained
// encoding reaches accuracy A at the training length (the ctest's check).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <posenc/rope/dynamic_ntk.hpp>
#include <posenc/rope/linear.hpp>
#include <posenc/rope/ntk_aware.hpp>
#include <posenc/rope/ntk_by_parts.hpp>
#include <posenc/rope/yarn.hpp>

#include "model.hpp"
#include "study_report.hpp"

namespace {

using namespace train_tiny;

struct study_settings {
    bool quick = false;
    std::size_t seeds = 3, steps = 6000, finetune_steps = 200, batch = 8, eval_sequences = 64;
    std::size_t train_length = 64;
    std::vector<std::size_t> multiples{1, 2, 4, 8, 16};
    std::string docs;
    double min_accuracy = -1;
    float lr = 3e-3f;
    std::size_t first_seed = 0;
    std::string raw;
    std::vector<std::string> merge;
    bool verbose = false;  ///< the training loss every 100 steps
    std::string only;  ///< train only this encoding (a quick look at one)
};

struct trained_encoding {
    std::string name;
    std::vector<layer_position> layers;
};

// Two layers; RNoPE-SWA alternates a RoPE layer with a sliding window and a NoPE layer with full
// causal attention (Yang et al. 2025, "Rope to Nope and Back Again"), the window a quarter of L here.
std::vector<trained_encoding> encodings(std::size_t L) {
    auto all = [](encoding e) { return std::vector<layer_position>(2, {e, 0}); };
    const auto window = static_cast<std::int64_t>(L / 4);
    return {{"NoPE", all(encoding::nope)},   {"RoPE", all(encoding::rope)}, {"ALiBi", all(encoding::alibi)},
            {"xPos", all(encoding::xpos)},   {"T5", all(encoding::t5)},
            {"RNoPE-SWA", {{encoding::rope, window}, {encoding::nope, 0}}}};
}

/// Trains `m` for `steps` AdamW steps on lengths drawn from [min_len, max_len]; linear warm-up then cosine.
void train(model& m, const study_settings& s, std::size_t steps, std::size_t min_len, std::size_t max_len, std::uint64_t seed,
           float lr, const std::function<rope_inference(std::size_t)>& inference_for, component_times* times,
           std::vector<component_times>* per_layer) {
    adamw opt;
    std::mt19937_64 rng(seed);
    const recall_task task{};
    const auto params = m.parameters();
    const std::size_t warmup = std::max<std::size_t>(1, steps / 10);
    for (std::size_t step = 0; step < steps; ++step) {
        const std::size_t len = std::uniform_int_distribution<std::size_t>(min_len, max_len)(rng);
        // The same number of tokens per step at any length.
        const std::size_t batch = std::max<std::size_t>(1, s.batch * s.train_length / len);
        const recall_batch b = make_recall_batch(task, batch, len, rng);
        m.zero_grad();
        const auto r = m.run(b, true, inference_for(len), times, per_layer);
        if (s.verbose && step % 100 == 0)
            {
            std::printf("  step %zu: loss %.3f, accuracy %.2f\n", step, r.loss, static_cast<double>(r.correct) / static_cast<double>(r.answers));
            std::fflush(stdout);
        }
        const double progress = static_cast<double>(step) / static_cast<double>(steps);
        const float scale = step < warmup ? static_cast<float>(step + 1) / static_cast<float>(warmup)
                                          : static_cast<float>(0.5 * (1.0 + std::cos(3.141592653589793 * progress)));
        double untimed = 0;
        scoped_timer t(times ? times->optimizer : untimed);
        opt.update(params, lr * scale);
    }
}

evaluation evaluate(model& m, const study_settings& s, std::size_t length, const rope_inference& inference) {
    std::mt19937_64 rng(1000 + length);  // the same evaluation sequences for every model
    const recall_task task{};
    evaluation e;
    std::size_t done = 0;
    double loss = 0;
    while (done < s.eval_sequences) {
        const std::size_t batch = std::min<std::size_t>(s.eval_sequences - done, std::max<std::size_t>(1, 4096 / length));
        const recall_batch b = make_recall_batch(task, batch, length, rng);
        const auto r = m.run(b, false, inference);
        loss += r.loss * static_cast<double>(r.answers);
        e.correct += r.correct;
        e.answers += r.answers;
        done += batch;
    }
    e.loss = loss / static_cast<double>(e.answers);
    return e;
}

/// The RoPE model's inference-time variants at evaluation length n (training length L, head_dim D).
std::vector<std::pair<std::string, std::function<rope_inference(std::size_t)>>> rope_variants(std::size_t L, std::size_t D,
                                                                                              double base) {
    auto s_of = [L](std::size_t n) { return std::max(1.0, static_cast<double>(n) / static_cast<double>(L)); };
    const auto L0 = static_cast<std::int64_t>(L);
    auto freq = [D](const auto& schedule, std::int64_t seq_len) { return schedule.frequencies(D, seq_len); };
    return {
        {"RoPE + PI", [=](std::size_t n) { return rope_inference{freq(posenc::linear{base, s_of(n)}, 0), 1.0}; }},
        {"RoPE + NTK-aware", [=](std::size_t n) { return rope_inference{freq(posenc::ntk_aware{base, s_of(n)}, 0), 1.0}; }},
        {"RoPE + Dynamic NTK",
         [=](std::size_t n) {
             return rope_inference{freq(posenc::dynamic_ntk{base, 2.0, L0}, static_cast<std::int64_t>(n)), 1.0};
         }},
        {"RoPE + NTK-by-parts",
         [=](std::size_t n) { return rope_inference{freq(posenc::ntk_by_parts{base, s_of(n), L0, 1.0, 32.0}, 0), 1.0}; }},
        {"RoPE + YaRN", [=](std::size_t n) {
             posenc::yarn y;
             y.base = base;
             y.factor = s_of(n);
             y.original_max_position = L0;
             return rope_inference{freq(y, 0), 1.0};
         }},
        {"RoPE + log-length temperature",
         [=](std::size_t n) {
             return rope_inference{std::nullopt, std::max(1.0, std::log(static_cast<double>(n)) / std::log(static_cast<double>(L)))};
         }},
    };
}

/// A count argument: a whole number in [lo, hi] (std::stoul alone takes "-1" and wraps it).
std::size_t count_arg(const std::string& name, const std::string& value, std::size_t lo, std::size_t hi) {
    std::size_t used = 0;
    unsigned long long x = 0;
    if (!value.empty() && value[0] >= '0' && value[0] <= '9') {
        try {
            x = std::stoull(value, &used);
        } catch (const std::out_of_range&) {
            used = 0;  // rejected below
        }
    }
    if (used != value.size() || used == 0 || x < lo || x > hi)
        throw std::invalid_argument(name + " " + value + ": expected a whole number in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
    return static_cast<std::size_t>(x);
}

study_settings parse(int argc, char** argv) {
    study_settings s;
    for (int i = 1; i < argc; ++i)  // --quick's settings first, so that other arguments override them
        if (std::string(argv[i]) == "--quick") {
            s.quick = true;
            s.seeds = 1;
            s.train_length = 32;  // (at L = 64 the recall circuit forms only after ~3000 steps)
            s.steps = 1500;
            s.finetune_steps = 60;
            s.eval_sequences = 32;
            s.multiples = {1, 2, 4, 8};
        }
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--quick") continue;
        else if (a == "--seeds") s.seeds = count_arg(a, next(), 1, 1000);
        else if (a == "--steps") s.steps = count_arg(a, next(), 1, 10'000'000);
        else if (a == "--docs") s.docs = next();
        else if (a == "--verbose") s.verbose = true;
        else if (a == "--first-seed") s.first_seed = count_arg(a, next(), 0, 1'000'000'000);
        else if (a == "--raw") s.raw = next();
        else if (a == "--merge") {
            while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) s.merge.push_back(argv[++i]);
        }
        else if (a == "--lr") s.lr = std::stof(next());
        else if (a == "--train-length") s.train_length = count_arg(a, next(), recall_task{}.min_length(), 4096);
        else if (a == "--only") s.only = next();
        else if (a == "--min-accuracy") s.min_accuracy = std::stod(next());
        else throw std::invalid_argument("unknown argument " + a);
    }
    return s;
}

}  // namespace

int main(int argc, char** argv) try {
    Eigen::setNbThreads(1);  // one thread: the step-time shares then compare like with like
    const study_settings s = parse(argc, argv);
    const std::size_t L = s.train_length;
    std::vector<std::size_t> lengths;
    for (std::size_t k : s.multiples) lengths.push_back(k * L);
    study_results results;
    results.lengths = lengths;
    model_config base_cfg;
    const auto wall_start = std::chrono::steady_clock::now();
    component_times rope_times;
    std::vector<component_times> rope_per_layer;
    std::size_t rope_steps = 0, params = model(base_cfg, 0).parameter_count();  // (T5 adds its tables)
    auto no_override = [](std::size_t) { return rope_inference{}; };

    for (const std::string& file : s.merge) read_raw(file, results);
    for (std::size_t seed = s.first_seed; s.merge.empty() && seed < s.first_seed + s.seeds; ++seed) {
        for (const auto& enc : encodings(L)) {
            if (!s.only.empty() && enc.name != s.only) continue;
            model_config cfg = base_cfg;
            cfg.layers = enc.layers;
            model m(cfg, 100 + seed);
            const bool timed = enc.name == "RoPE" && seed == s.first_seed;
            train(m, s, s.steps, L, L, 7 + seed, s.lr, no_override, timed ? &rope_times : nullptr,
                  timed ? &rope_per_layer : nullptr);
            if (timed) rope_steps = s.steps;
            for (std::size_t n : lengths) results.add(enc.name, n, evaluate(m, s, n, {}), seed);
            std::printf("seed %zu %-10s acc@L %.3f acc@%zuL %.3f  (%.0f s)\n", seed, enc.name.c_str(),
                        results.at(enc.name, L).back().accuracy(), s.multiples.back(),
                        results.at(enc.name, lengths.back()).back().accuracy(),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
            std::fflush(stdout);
            if (enc.name != "RoPE") continue;
            for (const auto& [name, inference] : rope_variants(L, cfg.head_dim, cfg.rope_base))
                for (std::size_t n : lengths) results.add(name, n, evaluate(m, s, n, inference(n)), seed);
            // Short fine-tunes at 2L–4L from the trained RoPE model: plain, and with PI at factor 4.
            const posenc::rope_frequencies pi4 = posenc::linear{cfg.rope_base, 4.0}.frequencies(cfg.head_dim);
            auto with_pi4 = [&](std::size_t) { return rope_inference{pi4, 1.0}; };
            for (int variant = 0; variant < 2; ++variant) {
                model ft = m;
                const auto inference = variant == 0 ? std::function<rope_inference(std::size_t)>(no_override)
                                                    : std::function<rope_inference(std::size_t)>(with_pi4);
                train(ft, s, s.finetune_steps, 2 * L, 4 * L, 900 + seed, 1e-3f, inference, nullptr, nullptr);
                const std::string name = variant == 0 ? "RoPE + fine-tune 2L-4L" : "RoPE + PI(4) + fine-tune 2L-4L";
                for (std::size_t n : lengths) results.add(name, n, evaluate(ft, s, n, inference(n)), seed);
            }
        }
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

    if (!s.raw.empty()) write_raw(s.raw, results);
    std::ostringstream report;
    report << "Training length L = " << L << ", " << results.seeds.size() << " seed(s), " << s.steps << " steps of " << s.batch
           << " sequences, " << s.eval_sequences << " evaluation sequences (" << s.eval_sequences * recall_task{}.pairs
           << " answers) per length; " << params << " parameters";
    if (s.merge.empty()) report << "; wall time " << static_cast<long>(wall) << " s";
    report << ".\n\n";
    write_table(report, results, L);
    write_step_times(report, rope_times, rope_per_layer, rope_steps);
    std::printf("\n%s", report.str().c_str());
    if (!s.docs.empty()) {
        std::ofstream(s.docs + "/extrapolation-table.md") << report.str();
        std::ofstream(s.docs + "/figures/extrapolation-accuracy.svg") << accuracy_svg(results, L);
        std::printf("wrote %s/extrapolation-table.md and %s/figures/extrapolation-accuracy.svg\n", s.docs.c_str(), s.docs.c_str());
    }
    if (s.min_accuracy >= 0) {
        int below = 0;
        for (const auto& enc : encodings(L))
            for (const evaluation& e : s.only.empty() || s.only == enc.name ? results.at(enc.name, L) : std::vector<evaluation>{})
                if (e.accuracy() < s.min_accuracy) {
                    std::printf("FAILED: %s reaches accuracy %.3f at L, below %.3f\n", enc.name.c_str(), e.accuracy(), s.min_accuracy);
                    ++below;
                }
        return below == 0 ? 0 : 1;
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "train_extrapolation: %s\n", e.what());
    return 2;
}
