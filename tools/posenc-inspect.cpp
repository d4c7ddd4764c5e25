// posenc-inspect: prints the RoPE a HuggingFace config.json implies — per rotary pair the inverse
// frequency, the wavelength in tokens and whether the pair is extrapolated, interpolated or blended —
// and the cos/sin posenc uses at chosen positions. `--json` prints one machine-readable object.
#include <posenc/hf/config.hpp>
#include <posenc/posenc.hpp>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr const char* usage =
    "usage: posenc-inspect CONFIG.json [--seq-len N] [--positions p1,p2,...]\n"
    "                      [--layout interleaved|half_split] [--layer-type T] [--json]\n"
    "  --seq-len N     current sequence length: picks dynamic NTK's base and LongRoPE's factors\n"
    "                  (without it: the default table and the short factors)\n"
    "  --positions     positions whose cos/sin to print (default: 0,1 and max_position_embeddings-1)\n"
    "  --layout        override the model family's layout\n"
    "  --layer-type    for configs with per-layer-type RoPE (Gemma-3): full_attention, sliding_attention\n"
    "  --json          one JSON object on stdout\n";

struct options {
    std::string config;
    std::int64_t seq_len = 0;
    std::vector<std::int64_t> positions;
    std::optional<posenc::rope_layout> layout;
    std::string layer_type;
    bool json = false;
};

std::int64_t parse_int(std::string_view text, std::string_view what) {
    std::int64_t v = 0;
    const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size())
        throw posenc::config_error(std::string(what), std::string(text), "must be an integer");
    return v;
}

options parse_args(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&]() -> std::string_view {
            if (i + 1 >= argc) throw posenc::config_error(std::string(a), "missing", "needs a value");
            return argv[++i];
        };
        if (a == "--json") {
            o.json = true;
        } else if (a == "--seq-len") {
            o.seq_len = parse_int(value(), "--seq-len");
            posenc::detail::require(o.seq_len >= 0, "--seq-len", o.seq_len, "must be >= 0");
        } else if (a == "--positions") {
            std::string_view list = value();
            while (!list.empty()) {
                const auto comma = list.find(',');
                o.positions.push_back(parse_int(list.substr(0, comma), "--positions"));
                list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            }
        } else if (a == "--layout") {
            o.layout = posenc::parse_layout(value());
        } else if (a == "--layer-type") {
            o.layer_type = value();
        } else if (a == "--help" || a == "-h") {
            std::cout << usage;
            std::exit(0);
        } else if (!a.empty() && a[0] == '-') {
            throw posenc::config_error("option", std::string(a), "unknown option");
        } else if (o.config.empty()) {
            o.config = a;
        } else {
            throw posenc::config_error("argument", std::string(a), "only one CONFIG.json is accepted");
        }
    }
    if (o.config.empty()) throw posenc::config_error("CONFIG.json", "missing", "give the path of a config.json");
    return o;
}

std::string num(double v, int digits) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return buf;
}

/// The schedule's parameters as "key value" text, for the human-readable header.
std::string describe(const posenc::any_schedule& s, std::size_t rotary_dim, std::int64_t seq_len) {
    std::ostringstream o;
    std::visit(
        [&](const auto& x) {
            using S = std::decay_t<decltype(x)>;
            o << "base " << num(x.base, 10);
            if constexpr (!std::is_same_v<S, posenc::default_rope>) o << ", factor " << num(x.factor, 10);
            if constexpr (requires { x.original_max_position; })
                o << ", original_max_position " << x.original_max_position;
            if constexpr (std::is_same_v<S, posenc::yarn>) {
                o << ", beta_fast " << num(x.beta_fast, 6) << ", beta_slow " << num(x.beta_slow, 6)
                  << ", truncate " << (x.truncate ? "true" : "false");
                if (x.mscale) o << ", mscale " << num(*x.mscale, 6);
                if (x.mscale_all_dim) o << ", mscale_all_dim " << num(*x.mscale_all_dim, 6);
                o << ", softmax_scale_multiplier " << num(x.softmax_scale_multiplier(), 10);
            }
            if constexpr (std::is_same_v<S, posenc::llama3>)
                o << ", low_freq_factor " << num(x.low_freq_factor, 6) << ", high_freq_factor "
                  << num(x.high_freq_factor, 6);
            if constexpr (std::is_same_v<S, posenc::ntk_aware>)
                o << ", effective base " << num(x.effective_base(rotary_dim), 10);
            if constexpr (std::is_same_v<S, posenc::dynamic_ntk>)
                o << ", effective base at seq_len " << seq_len << ": " << num(x.effective_base(rotary_dim, seq_len), 10);
            if constexpr (std::is_same_v<S, posenc::longrope>)
                o << ", seq_len " << seq_len << " uses " << (x.uses_long_factor(seq_len) ? "long" : "short")
                  << "_factor";
        },
        s);
    return o.str();
}

/// Per pair: "extrapolated", "interpolated", "blended (w)" or, for LongRoPE, the rescale factor.
std::vector<std::string> regimes(const posenc::any_schedule& s, std::size_t rotary_dim, std::int64_t seq_len) {
    std::vector<std::string> out(rotary_dim / 2);
    if (const auto* l = std::get_if<posenc::longrope>(&s)) {
        const auto& ext = l->rescale(rotary_dim, seq_len);
        // LongRoPE divides pair i's frequency by ext[i]: 1 leaves it alone, ≥ factor interpolates it
        // at least as much as PI would, anything between is a partial interpolation.
        for (std::size_t i = 0; i < out.size(); ++i)
            out[i] = ext[i] == 1.0          ? "extrapolated"
                     : ext[i] >= l->factor ? "interpolated (rescale " + num(ext[i], 6) + ")"
                                           : "blended (rescale " + num(ext[i], 6) + ")";
        return out;
    }
    const auto w = posenc::interpolation(s, rotary_dim);
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!w) out[i] = "-";
        else if ((*w)[i] == 0.0) out[i] = "extrapolated";
        else if ((*w)[i] == 1.0) out[i] = "interpolated";
        else out[i] = "blended (" + num((*w)[i], 3) + " interpolated)";
    }
    return out;
}

void print_json_list(std::ostream& os, const std::vector<double>& v, int digits) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << num(v[i], digits);
    os << ']';
}

int run(const options& o) {
    const auto cfg = posenc::hf::load_config(o.config);
    const auto& spec = o.layer_type.empty() ? cfg.rope : cfg.rope_for(o.layer_type);
    const auto layout = o.layout.value_or(spec.layout);
    const std::size_t rotary_dim = spec.dims.rotary();
    const auto freq = posenc::frequencies(spec.schedule, rotary_dim, o.seq_len);
    std::vector<std::int64_t> positions = o.positions;
    if (positions.empty()) {
        positions = {0, 1};
        if (cfg.max_position_embeddings > 1) positions.push_back(cfg.max_position_embeddings - 1);
    }
    // The un-amplified cos/sin posenc uses: angle in double, reduced, rounded once to float.
    const std::size_t pairs = freq.inv_freq.size();
    std::vector<std::vector<double>> cos_rows, sin_rows;
    for (const std::int64_t p : positions) {
        std::vector<float> c(pairs), s(pairs);
        posenc::detail::cos_sin_row(freq.inv_freq.data(), pairs, p, 1.0, c.data(), s.data());
        cos_rows.emplace_back(c.begin(), c.end());
        sin_rows.emplace_back(s.begin(), s.end());
    }

    if (o.json) {
        std::ostream& os = std::cout;
        os << "{\"rope_type\": \"" << spec.rope_type() << "\", \"head_dim\": " << spec.dims.head_dim
           << ", \"rotary_dim\": " << rotary_dim << ", \"layout\": \"" << posenc::to_string(layout)
           << "\", \"attention_factor\": " << num(freq.attention_factor, 17) << ", \"inv_freq\": ";
        print_json_list(os, freq.inv_freq, 17);
        os << ", \"positions\": [";
        for (std::size_t i = 0; i < positions.size(); ++i) os << (i ? ", " : "") << positions[i];
        os << "], \"cos\": [";
        for (std::size_t i = 0; i < cos_rows.size(); ++i) print_json_list(os << (i ? ", " : ""), cos_rows[i], 9);
        os << "], \"sin\": [";
        for (std::size_t i = 0; i < sin_rows.size(); ++i) print_json_list(os << (i ? ", " : ""), sin_rows[i], 9);
        os << "]}\n";
        return 0;
    }

    std::ostream& os = std::cout;
    os << "config            " << o.config << '\n'
       << "model_type        " << (cfg.model_type.empty() ? "(none)" : cfg.model_type) << '\n';
    if (!cfg.rope_by_layer_type.empty()) {
        os << "layer types       ";
        for (const auto& [t, r] : cfg.rope_by_layer_type) os << t << " (" << r.rope_type() << ") ";
        os << "\n                  showing " << (o.layer_type.empty() ? "full_attention" : o.layer_type)
           << "; choose with --layer-type\n";
    }
    os << "rope_type         " << spec.rope_type() << " (" << describe(spec.schedule, rotary_dim, o.seq_len) << ")\n"
       << "layout            " << posenc::to_string(layout) << (o.layout ? " (from --layout)" : "") << '\n'
       << "head_dim          " << spec.dims.head_dim << ", rotary_dim " << rotary_dim
       << (rotary_dim < spec.dims.head_dim ? " (partial: the other lanes pass through)" : "") << '\n'
       << "attention_factor  " << num(freq.attention_factor, 17) << " (cos/sin amplitude)\n\n";
    const auto reg = regimes(spec.schedule, rotary_dim, o.seq_len);
    std::printf("%5s  %-24s  %-16s  %s\n", "pair", "inv_freq", "wavelength", "regime");
    for (std::size_t i = 0; i < pairs; ++i)
        std::printf("%5zu  %-24.17g  %-16.6g  %s\n", i, freq.inv_freq[i], posenc::detail::wavelength(freq.inv_freq[i]),
                    reg[i].c_str());
    std::fflush(stdout);
    for (std::size_t k = 0; k < positions.size(); ++k) {
        os << "\nposition " << positions[k] << " (un-amplified cos / sin, first pairs):\n";
        for (std::size_t i = 0; i < std::min<std::size_t>(pairs, 4); ++i)
            os << "  pair " << i << ": " << num(cos_rows[k][i], 9) << " / " << num(sin_rows[k][i], 9) << '\n';
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_args(argc, argv));
    } catch (const std::exception& e) {
        std::string msg = e.what();
        for (char& c : msg)
            if (c == '\n') c = ' ';
        std::cerr << "posenc-inspect: " << msg << '\n';
        return 1;
    }
}
