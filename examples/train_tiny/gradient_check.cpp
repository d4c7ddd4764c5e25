// The trainer's hand-written backward against central finite differences of its own loss, for every
// encoding the study trains (NoPE, RoPE, ALiBi, xPos, T5, RNoPE-SWA), on a tiny model.
//
// For a sample of entries of every parameter tensor, (L(w + h) − L(w − h)) / 2h is compared with the
// analytic gradient. The model runs in float (posenc's attention is float), so the difference carries
// the forward's rounding (|ΔL| ≈ 1e-7·L with L ≈ 4, over 2h = 0.02: ≈ 2e-5) and the truncation error
// h²·L'''/6 (≈ 1e-5 here). The check: per entry |fd − analytic| ≤ 1e-4 + 0.01·|analytic|, and over all
// sampled entries ‖fd − analytic‖ ≤ 1e-3·‖fd‖ (measured: ≈ 1e-4). A wrong transpose, a missing term or
// a sign error gives an error of the order of the gradient itself.
//
// Usage: train_tiny_gradient_check   (exit status 0 when every encoding passes)
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model.hpp"

namespace {

using namespace train_tiny;

struct case_result {
    double worst_excess = 0, diff_norm = 0, fd_norm = 0;
    std::size_t checked = 0, failed = 0;
};

case_result check(const std::string& name, std::vector<layer_position> layers) {
    model_config cfg;
    cfg.d_model = 16;
    cfg.heads = 2;
    cfg.head_dim = 8;
    cfg.d_ff = 32;
    cfg.layers = std::move(layers);
    cfg.xpos.scale_base = 16.0;  // a decay that matters over 20 positions
    cfg.t5.num_buckets = 8;  // exact up to 4, log buckets to 16
    cfg.t5.max_distance = 16;
    model m(cfg, 11);
    const recall_task task{};
    std::mt19937_64 rng(5);
    const recall_batch batch = make_recall_batch(task, 2, 20, rng);
    m.zero_grad();
    m.run(batch, true);
    const double h = 1e-2;
    case_result r;
    std::mt19937_64 pick(9);
    for (parameter* p : m.parameters()) {
        for (int s = 0; s < 6; ++s) {
            const auto i = static_cast<Eigen::Index>(std::uniform_int_distribution<long>(0, static_cast<long>(p->w.size()) - 1)(pick));
            const float w0 = p->w.data()[i];
            p->w.data()[i] = static_cast<float>(w0 + h);
            const double up = m.run(batch, false).loss;
            p->w.data()[i] = static_cast<float>(w0 - h);
            const double down = m.run(batch, false).loss;
            p->w.data()[i] = w0;
            const double fd = (up - down) / (2 * h), an = p->grad.data()[i];
            const double err = std::abs(fd - an), allowed = 1e-4 + 0.01 * std::abs(an);
            r.diff_norm += err * err;
            r.fd_norm += fd * fd;
            ++r.checked;
            if (err > allowed) {
                ++r.failed;
                std::printf("  %s: entry %ld: finite difference %.6f, analytic %.6f\n", name.c_str(), static_cast<long>(i), fd, an);
            }
            r.worst_excess = std::max(r.worst_excess, err / allowed);
        }
    }
    r.diff_norm = std::sqrt(r.diff_norm);
    r.fd_norm = std::sqrt(r.fd_norm);
    return r;
}

}  // namespace

int main() {
    const std::vector<std::pair<std::string, std::vector<layer_position>>> cases{
        {"NoPE", {{encoding::nope, 0}, {encoding::nope, 0}}},
        {"RoPE", {{encoding::rope, 0}, {encoding::rope, 0}}},
        {"ALiBi", {{encoding::alibi, 0}, {encoding::alibi, 0}}},
        {"xPos", {{encoding::xpos, 0}, {encoding::xpos, 0}}},
        {"T5", {{encoding::t5, 0}, {encoding::t5, 0}}},
        {"RNoPE-SWA", {{encoding::rope, 4}, {encoding::nope, 0}}},
    };
    int failures = 0;
    for (const auto& [name, layers] : cases) {
        const case_result r = check(name, layers);
        const double rel = r.diff_norm / std::max(r.fd_norm, 1e-30);
        const bool ok = r.failed == 0 && rel <= 1e-3;
        std::printf("%-10s %zu entries: ||fd - analytic|| / ||fd|| = %.2e, worst error / allowed = %.2f  %s\n", name.c_str(),
                    r.checked, rel, r.worst_excess, ok ? "ok" : "FAILED");
        failures += ok ? 0 : 1;
    }
    return failures == 0 ? 0 : 1;
}
