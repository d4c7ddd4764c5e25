// posenc-inspect: prints the positional encoding a HuggingFace config.json implies. For RoPE, per
// rotary pair the inverse frequency, the wavelength in tokens and whether the pair is extrapolated,
// interpolated or blended, and the cos/sin posenc uses at chosen positions; for ALiBi models (BLOOM,
// MPT, Falcon-ALiBi) the slopes; for T5 the bucket parameters. Without a config it prints ALiBi slopes,
// T5 buckets or sinusoidal rows for given parameters. `--json` prints one machine-readable object.
#include <posenc/hf/encoding.hpp>
#include <posenc/posenc.hpp>

#include <charconv>
#include <cstdlib>
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
    "       posenc-inspect --alibi N [--max-bias B] [--json]\n"
    "       posenc-inspect --t5 --num-buckets NB --max-distance MD (--bidirectional|--unidirectional)\n"
    "                      [--relative-range A:B] [--json]\n"
    "       posenc-inspect --sinusoidal D --variant interleaved|concat --positions p1,... [--json]\n"
    "  --seq-len N     current sequence length: picks dynamic NTK's base and LongRoPE's factors\n"
    "                  (without it: the default table and the short factors)\n"
    "  --positions     positions whose cos/sin (or sinusoidal rows) to print\n"
    "                  (RoPE default: 0,1 and max_position_embeddings-1)\n"
    "  --layout        override the model family's layout\n"
    "  --layer-type    for configs with per-layer-type RoPE (Gemma-3): full_attention, sliding_attention\n"
    "  --relative-range A:B   T5 relative positions (key - query) to list (default -max_distance:max_distance)\n"
    "  --json          one JSON object on stdout\n";

struct options {
    std::string config;
    std::optional<std::size_t> alibi_heads;
    double max_bias = 8.0;
    bool t5 = false;
    std::optional<std::int64_t> num_buckets, max_distance;
    std::optional<bool> bidirectional;
    std::optional<std::pair<std::int64_t, std::int64_t>> relative_range;
    std::optional<std::size_t> sinusoidal_d;
    std::optional<posenc::sinusoidal_form> variant;
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
        } else if (a == "--alibi") {
            const auto n = parse_int(value(), "--alibi");
            posenc::detail::require(n > 0, "--alibi", n, "must be > 0 heads");
            o.alibi_heads = static_cast<std::size_t>(n);
        } else if (a == "--max-bias") {
            const std::string v(value());
            char* end = nullptr;
            o.max_bias = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0') throw posenc::config_error("--max-bias", v, "must be a number");
        } else if (a == "--t5") {
            o.t5 = true;
        } else if (a == "--num-buckets") {
            o.num_buckets = parse_int(value(), "--num-buckets");
        } else if (a == "--max-distance") {
            o.max_distance = parse_int(value(), "--max-distance");
        } else if (a == "--bidirectional" || a == "--unidirectional") {
            o.bidirectional = a == "--bidirectional";
        } else if (a == "--relative-range") {
            const std::string_view v = value();
            const auto colon = v.find(':', 1);
            if (colon == std::string_view::npos) throw posenc::config_error("--relative-range", std::string(v), "must be A:B");
            o.relative_range = {parse_int(v.substr(0, colon), "--relative-range"), parse_int(v.substr(colon + 1), "--relative-range")};
            posenc::detail::require(o.relative_range->first <= o.relative_range->second, "--relative-range", std::string(v),
                                    "needs A <= B");
        } else if (a == "--sinusoidal") {
            const auto d = parse_int(value(), "--sinusoidal");
            posenc::detail::require(d > 0, "--sinusoidal", d, "must be > 0 (d_model)");
            o.sinusoidal_d = static_cast<std::size_t>(d);
        } else if (a == "--variant") {
            const std::string_view v = value();
            if (v == "interleaved") o.variant = posenc::sinusoidal_form::interleaved;
            else if (v == "concat") o.variant = posenc::sinusoidal_form::concatenated;
            else throw posenc::config_error("--variant", std::string(v), "must be interleaved or concat");
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
    const int modes = !o.config.empty() + o.alibi_heads.has_value() + o.t5 + o.sinusoidal_d.has_value();
    if (modes == 0) throw posenc::config_error("CONFIG.json", "missing", "give a config.json, --alibi, --t5 or --sinusoidal");
    if (modes > 1) throw posenc::config_error("arguments", "several modes", "give one of CONFIG.json, --alibi, --t5, --sinusoidal");
    if (o.t5 && (!o.num_buckets || !o.max_distance || !o.bidirectional))
        throw posenc::config_error("--t5", "incomplete", "needs --num-buckets, --max-distance and --bidirectional or --unidirectional");
    if (o.sinusoidal_d && (!o.variant || o.positions.empty()))
        throw posenc::config_error("--sinusoidal", "incomplete", "needs --variant and --positions");
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

int run_rope(const options& o, const posenc::hf::model_config& cfg) {
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

void print_int_list(std::ostream& os, const std::vector<std::int64_t>& v) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
}

int run_alibi(const options& o, const posenc::alibi& params, const std::string& model_type) {
    const auto slopes = params.slopes();
    if (o.json) {
        std::cout << "{\"encoding\": \"alibi\", \"n_heads\": " << params.heads << ", \"slopes\": ";
        print_json_list(std::cout, slopes, 17);
        std::cout << "}\n";
        return 0;
    }
    if (!model_type.empty()) std::cout << "model_type        " << model_type << '\n';
    std::cout << "encoding          alibi (bias -m_h * (i - j) added to the logit of query i, key j)\n"
              << "n_heads           " << params.heads << "\nmax_bias          " << num(params.max_bias, 10)
              << "\norder             "
              << (params.order == posenc::bias_order::scale_then_add ? "scale_then_add (q.k/sqrt(d) + bias)"
                                                                    : "add_then_scale ((q.k + bias)/sqrt(d))")
              << "\n\n head  slope\n";
    for (std::size_t h = 0; h < slopes.size(); ++h) std::printf("%5zu  %.17g\n", h, slopes[h]);
    return 0;
}

int run_t5(const options& o, const posenc::t5_buckets& b, const std::string& model_type, std::size_t heads) {
    b.validate();
    const auto [first, last] = o.relative_range.value_or(std::pair{-b.max_distance, b.max_distance});
    std::vector<std::int64_t> rel, buckets;
    for (std::int64_t r = first; r <= last; ++r) {
        rel.push_back(r);
        buckets.push_back(b.bucket(r));
    }
    if (o.json) {
        std::cout << "{\"encoding\": \"t5\", \"num_buckets\": " << b.num_buckets << ", \"max_distance\": " << b.max_distance
                  << ", \"bidirectional\": " << (b.bidirectional ? "true" : "false") << ", \"relative_positions\": ";
        print_int_list(std::cout, rel);
        std::cout << ", \"buckets\": ";
        print_int_list(std::cout, buckets);
        std::cout << "}\n";
        return 0;
    }
    if (!model_type.empty()) std::cout << "model_type        " << model_type << '\n';
    std::cout << "encoding          t5 relative buckets (relative position = key - query)\n"
              << "num_buckets       " << b.num_buckets << "\nmax_distance      " << b.max_distance
              << "\nbidirectional     " << (b.bidirectional ? "true" : "false") << "\nexact range       |r| < "
              << b.exact_range() << '\n';
    if (heads) std::cout << "table shape       [" << b.num_buckets << ", " << heads << "] (num_buckets, heads)\n";
    std::cout << "\n relative positions  bucket\n";
    for (std::size_t i = 0; i < rel.size();) {  // runs of equal buckets, one line each
        std::size_t j = i;
        while (j + 1 < rel.size() && buckets[j + 1] == buckets[i]) ++j;
        std::printf("  %8lld..%-8lld  %lld\n", static_cast<long long>(rel[i]), static_cast<long long>(rel[j]),
                    static_cast<long long>(buckets[i]));
        i = j + 1;
    }
    return 0;
}

int run_sinusoidal(const options& o) {
    const posenc::sinusoidal pe{.d_model = *o.sinusoidal_d, .form = *o.variant};
    const auto table = pe.table(posenc::position_ids(o.positions));
    const std::size_t d = *o.sinusoidal_d;
    if (o.json) {
        std::cout << "{\"encoding\": \"sinusoidal\", \"variant\": \""
                  << (*o.variant == posenc::sinusoidal_form::interleaved ? "interleaved" : "concat")
                  << "\", \"d_model\": " << d << ", \"positions\": ";
        print_int_list(std::cout, o.positions);
        std::cout << ", \"table\": [";
        for (std::size_t k = 0; k < o.positions.size(); ++k)
            print_json_list(std::cout << (k ? ", " : ""),
                            std::vector<double>(table.begin() + static_cast<std::ptrdiff_t>(k * d),
                                                table.begin() + static_cast<std::ptrdiff_t>((k + 1) * d)),
                            9);
        std::cout << "]}\n";
        return 0;
    }
    std::cout << "encoding          sinusoidal (" << posenc::to_string(*o.variant) << "), d_model " << d << '\n';
    for (std::size_t k = 0; k < o.positions.size(); ++k) {
        std::cout << "position " << o.positions[k] << ":";
        for (std::size_t i = 0; i < std::min<std::size_t>(d, 8); ++i) std::cout << ' ' << num(table[k * d + i], 9);
        std::cout << (d > 8 ? " ...\n" : "\n");
    }
    return 0;
}

int run(const options& o) {
    if (o.alibi_heads) return run_alibi(o, posenc::alibi{.heads = *o.alibi_heads, .max_bias = o.max_bias}, "");
    if (o.t5)
        return run_t5(o, posenc::t5_buckets{.num_buckets = *o.num_buckets, .max_distance = *o.max_distance,
                                            .bidirectional = *o.bidirectional},
                      "", 0);
    if (o.sinusoidal_d) return run_sinusoidal(o);
    const auto enc = posenc::hf::load_position_encoding(o.config, o.layout);
    if (const auto* a = std::get_if<posenc::hf::alibi_model>(&enc)) return run_alibi(o, a->params, a->model_type);
    if (const auto* t = std::get_if<posenc::hf::t5_model>(&enc)) {
        posenc::t5_buckets b = t->encoder;
        if (o.bidirectional) b.bidirectional = *o.bidirectional;  // --unidirectional: the decoder's
        return run_t5(o, b, t->model_type, t->heads);
    }
    return run_rope(o, std::get<posenc::hf::model_config>(enc));
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
