#pragma once
// The study's results and how they are written: a markdown table (mean accuracy with the min–max over
// seeds, mean loss), the step-time breakdown, and an SVG figure of accuracy against length drawn
// directly (no plotting tool needed).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>
#include <tuple>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "model.hpp"

namespace train_tiny {

struct evaluation {
    double loss = 0;
    std::size_t correct = 0, answers = 0;
    [[nodiscard]] double accuracy() const { return answers ? static_cast<double>(correct) / static_cast<double>(answers) : 0.0; }
};

/// Per variant (in the order first added) and length, one evaluation per seed.
struct study_results {
    std::vector<std::size_t> lengths;
    std::vector<std::string> order;
    std::map<std::string, std::map<std::size_t, std::vector<evaluation>>> runs;
    std::vector<std::tuple<std::string, std::size_t, std::size_t, evaluation>> rows;  ///< (variant, length, seed, e)
    std::set<std::size_t> seeds;

    void add(const std::string& variant, std::size_t length, const evaluation& e, std::size_t seed) {
        if (!runs.count(variant)) order.push_back(variant);
        runs[variant][length].push_back(e);
        rows.emplace_back(variant, length, seed, e);
        seeds.insert(seed);
    }
    [[nodiscard]] const std::vector<evaluation>& at(const std::string& variant, std::size_t length) const {
        return runs.at(variant).at(length);
    }
};

inline void write_raw(const std::string& file, const study_results& r) {
    std::ofstream os(file);
    os << "variant,length,seed,loss,correct,answers\n";
    for (const auto& [variant, length, seed, e] : r.rows)
        os << variant << "," << length << "," << seed << "," << e.loss << "," << e.correct << "," << e.answers << "\n";
}

inline void read_raw(const std::string& file, study_results& r) {
    std::ifstream is(file);
    if (!is) throw std::runtime_error("cannot read " + file);
    std::string line;
    std::getline(is, line);  // the header
    while (std::getline(is, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
        if (f.size() != 6) throw std::runtime_error(file + ": bad line " + line);
        const std::size_t length = std::stoul(f[1]);
        if (std::find(r.lengths.begin(), r.lengths.end(), length) == r.lengths.end())
            throw std::runtime_error(file + ": length " + f[1] + " is not one of this run's");
        r.add(f[0], length, evaluation{std::stod(f[3]), std::stoul(f[4]), std::stoul(f[5])}, std::stoul(f[2]));
    }
}

struct spread {
    double mean = 0, lo = 0, hi = 0;
};

template <class F>
spread spread_of(const std::vector<evaluation>& es, F value) {
    spread s{0, 1e300, -1e300};
    for (const auto& e : es) {
        const double v = value(e);
        s.mean += v / static_cast<double>(es.size());
        s.lo = std::min(s.lo, v);
        s.hi = std::max(s.hi, v);
    }
    return s;
}

inline std::string fixed(double v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

inline void write_table(std::ostream& os, const study_results& r, std::size_t L) {
    os << "Exact-answer accuracy, mean over seeds [min–max]; loss (nats, mean) below it.\n\n| variant |";
    for (std::size_t n : r.lengths) os << " " << n << (n == L ? " (L)" : " (" + std::to_string(n / L) + "L)") << " |";
    os << "\n|---|";
    for (std::size_t i = 0; i < r.lengths.size(); ++i) os << "---|";
    os << "\n";
    for (const auto& name : r.order) {
        os << "| " << name << " |";
        for (std::size_t n : r.lengths) {
            const auto& es = r.at(name, n);
            const spread a = spread_of(es, [](const evaluation& e) { return e.accuracy(); });
            const spread l = spread_of(es, [](const evaluation& e) { return e.loss; });
            os << " " << fixed(a.mean, 2);
            if (es.size() > 1) os << " [" << fixed(a.lo, 2) << "–" << fixed(a.hi, 2) << "]";
            os << "<br>" << fixed(l.mean, 2) << " |";
        }
        os << "\n";
    }
    os << "\n";
}

inline void write_step_times(std::ostream& os, const component_times& t, const std::vector<component_times>& per_layer,
                             std::size_t steps) {
    if (steps == 0) return;
    const double ms = 1e3 / static_cast<double>(steps);
    auto pct = [&](double v) { return fixed(100.0 * v / t.total(), 1) + "%"; };
    os << "Step time of the RoPE model (seed 0, one thread): " << fixed(t.total() * ms, 2) << " ms a step.\n\n"
       << "| component | ms / step | share |\n|---|---|---|\n"
       << "| posenc attention forward (attention_partial) | " << fixed(t.attention_forward * ms, 3) << " | " << pct(t.attention_forward) << " |\n"
       << "| posenc attention backward (attention_backward) | " << fixed(t.attention_backward * ms, 3) << " | " << pct(t.attention_backward) << " |\n"
       << "| Q/K/V projections (Eigen) | " << fixed(t.qkv * ms, 3) << " | " << pct(t.qkv) << " |\n"
       << "| output projection (Eigen) | " << fixed(t.out_proj * ms, 3) << " | " << pct(t.out_proj) << " |\n"
       << "| MLP (Eigen) | " << fixed(t.mlp * ms, 3) << " | " << pct(t.mlp) << " |\n"
       << "| RMSNorms | " << fixed(t.norm * ms, 3) << " | " << pct(t.norm) << " |\n"
       << "| embeddings | " << fixed(t.embed * ms, 3) << " | " << pct(t.embed) << " |\n"
       << "| final norm, LM head, loss | " << fixed(t.head_loss * ms, 3) << " | " << pct(t.head_loss) << " |\n"
       << "| AdamW | " << fixed(t.optimizer * ms, 3) << " | " << pct(t.optimizer) << " |\n\n"
       << "| layer | attention fwd + bwd (posenc), ms | dense + norms (Eigen), ms |\n|---|---|---|\n";
    for (std::size_t l = 0; l < per_layer.size(); ++l) {
        const auto& p = per_layer[l];
        os << "| " << l << " | " << fixed((p.attention_forward + p.attention_backward) * ms, 3) << " | "
           << fixed((p.qkv + p.out_proj + p.mlp + p.norm) * ms, 3) << " |\n";
    }
    os << "\n";
}

/// Accuracy against length (log₂ axis), mean with a min–max bar per point: the trained encodings on the
/// left, the RoPE model's inference-time variants and fine-tunes on the right.
inline std::string accuracy_svg(const study_results& r, std::size_t L) {
    const double W = 980, H = 420, pw = 400, ph = 300, top = 50, left0 = 60, left1 = 560;
    const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};
    std::ostringstream s;
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    const double kmax = std::log2(static_cast<double>(r.lengths.back()) / static_cast<double>(L));
    auto x_of = [&](double left, std::size_t n) {
        return left + (kmax > 0 ? std::log2(static_cast<double>(n) / static_cast<double>(L)) / kmax : 0.0) * pw;
    };
    auto y_of = [&](double acc) { return top + (1.0 - acc) * ph; };
    auto panel = [&](double left, const std::string& title, const std::vector<std::string>& names) {
        s << "<text x=\"" << left + pw / 2 << "\" y=\"" << top - 20 << "\" text-anchor=\"middle\" font-size=\"14\">" << title
          << "</text>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
          << "\" fill=\"none\" stroke=\"black\"/>\n";
        for (int i = 0; i <= 4; ++i) {
            const double y = y_of(i / 4.0);
            s << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
              << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
              << fixed(i / 4.0, 2) << "</text>\n";
        }
        for (std::size_t n : r.lengths)
            s << "<text x=\"" << x_of(left, n) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">" << n << "</text>\n";
        s << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 34 << "\" text-anchor=\"middle\">evaluation length (tokens; trained at "
          << L << ")</text>\n";
        for (std::size_t c = 0; c < names.size(); ++c) {
            const char* color = colors[c % 9];
            std::string points;
            for (std::size_t n : r.lengths) {
                const spread a = spread_of(r.at(names[c], n), [](const evaluation& e) { return e.accuracy(); });
                const double x = x_of(left, n);
                points += fixed(x, 1) + "," + fixed(y_of(a.mean), 1) + " ";
                s << "<line x1=\"" << x << "\" y1=\"" << y_of(a.lo) << "\" x2=\"" << x << "\" y2=\"" << y_of(a.hi)
                  << "\" stroke=\"" << color << "\"/>\n";
            }
            s << "<polyline points=\"" << points << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
            const double ly = top + 14 + 15.0 * static_cast<double>(c);
            s << "<line x1=\"" << left + pw - 150 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + pw - 132 << "\" y2=\"" << ly - 4
              << "\" stroke=\"" << color << "\" stroke-width=\"2\"/><text x=\"" << left + pw - 128 << "\" y=\"" << ly << "\">"
              << names[c] << "</text>\n";
        }
    };
    std::vector<std::string> trained, rope;
    for (const auto& n : r.order) (n.rfind("RoPE +", 0) == 0 ? rope : trained).push_back(n);
    rope.insert(rope.begin(), "RoPE");
    panel(left0, "Trained encodings: accuracy vs length", trained);
    panel(left1, "RoPE model: inference-time schedules, fine-tunes", rope);
    s << "</svg>\n";
    return s.str();
}

}  // namespace train_tiny
