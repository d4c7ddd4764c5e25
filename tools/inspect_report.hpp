#pragma once
// posenc-inspect's reports, one per mode (RoPE from a config, ALiBi slopes, T5 buckets, sinusoidal
// rows, the family table), each written into a stream as text or JSON.

#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <posenc/hf/encoding.hpp>
#include <posenc/posenc.hpp>

#include "family_table.hpp"
#include "inspect_args.hpp"

namespace posenc_inspect {

/// printf into a stream (the report is built in memory, see inspect()).
template <class... Args>
void print(std::ostream& os, const char* format, Args... args) {
    char buf[512];
    const int n = std::snprintf(buf, sizeof buf, format, args...);
    os.write(buf, n < 0 ? 0 : std::min<std::streamsize>(n, sizeof buf - 1));
}

inline std::string num(double v, int digits) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return buf;
}

/// The schedule's parameters as "key value" text, for the human-readable header.
inline std::string describe(const posenc::any_schedule& s, std::size_t rotary_dim, std::int64_t seq_len) {
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
inline std::vector<std::string> regimes(const posenc::any_schedule& s, std::size_t rotary_dim, std::int64_t seq_len) {
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

/// A JSON list of numbers. A non-finite value (which no validated schedule produces) is an error,
/// never an `inf` or `nan` token that would make the output invalid JSON.
inline void print_json_list(std::ostream& os, const std::vector<double>& v, int digits) {
    for (const double x : v)
        if (!std::isfinite(x)) throw posenc::error("posenc-inspect: internal error: non-finite value " + num(x, 17));
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << num(v[i], digits);
    os << ']';
}

/// `s` as a JSON string (quotes, backslashes and control characters escaped).
inline void json_string(std::ostream& os, const std::string& s) {
    os << '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') os << '\\' << ch;
        else if (c < 0x20) print(os, "\\u%04x", static_cast<unsigned>(c));
        else os << ch;
    }
    os << '"';
}

inline int run_rope(std::ostream& os, const options& o, const posenc::hf::model_config& cfg) {
    const auto& spec = o.layer_type.empty() ? cfg.rope : cfg.rope_for(o.layer_type);
    const auto layout = o.layout.value_or(spec.layout);
    const std::size_t rotary_dim = spec.dims.rotary();
    const auto freq = posenc::frequencies(spec.schedule, rotary_dim, o.seq_len);
    std::vector<std::int64_t> positions = o.positions;
    std::vector<std::array<std::int64_t, 3>> components = o.components;
    std::vector<bool> split = o.split;
    if (positions.empty()) {
        positions = {0, 1};
        if (cfg.max_position_embeddings > 1) positions.push_back(cfg.max_position_embeddings - 1);
        for (const std::int64_t p : positions) components.push_back({p, p, p});
        split.assign(positions.size(), false);
    }
    for (std::size_t i = 0; i < split.size(); ++i)
        if (split[i] && !spec.is_mrope())
            throw posenc::config_error("--positions", posenc::detail::to_text(components[i][0]) + ":" +
                                                          posenc::detail::to_text(components[i][1]) + ":" +
                                                          posenc::detail::to_text(components[i][2]),
                                       "t:h:w components need an M-RoPE config (mrope_section)");
    if (positions.size() > tool_limits::values / std::max<std::size_t>(freq.inv_freq.size(), 1))
        throw posenc::config_error("--positions", "list of " + posenc::detail::to_text(positions.size()),
                                   "asks for more than " + posenc::detail::to_text(tool_limits::values) +
                                       " cos/sin values (positions × rotary pairs)");
    // The un-amplified cos/sin posenc uses: angle in double, reduced, rounded once to float.
    // M-RoPE: pair j takes its angle from component axis[j] (t, h, w) of the position.
    const std::size_t pairs = freq.inv_freq.size();
    const std::vector<std::uint8_t> axis =
        spec.is_mrope() ? spec.mrope_params().pair_axes(pairs) : std::vector<std::uint8_t>(pairs, 0);
    std::vector<std::vector<double>> cos_rows, sin_rows;
    for (const auto& p : components) {
        std::vector<float> c(pairs), s(pairs);
        for (std::size_t j = 0; j < pairs; ++j)
            posenc::detail::cos_sin_row(&freq.inv_freq[j], 1, p[axis[j]], 1.0, &c[j], &s[j]);
        cos_rows.emplace_back(c.begin(), c.end());
        sin_rows.emplace_back(s.begin(), s.end());
    }
    auto position_text = [&](std::size_t i) {
        if (!split[i]) return posenc::detail::to_text(positions[i]);
        return "[" + posenc::detail::to_text(components[i][0]) + ", " + posenc::detail::to_text(components[i][1]) + ", " +
               posenc::detail::to_text(components[i][2]) + "]";
    };

    if (o.json) {
        os << "{\"rope_type\": \"" << spec.rope_type() << "\", \"head_dim\": " << spec.dims.head_dim
           << ", \"rotary_dim\": " << rotary_dim << ", \"layout\": \"" << posenc::to_string(layout)
           << "\", \"attention_factor\": " << num(freq.attention_factor, 17)
           << ", \"max_position_embeddings\": " << cfg.max_position_embeddings << ", \"max_position_embeddings_source\": ";
        json_string(os, cfg.max_position_embeddings_source);
        os << ", \"notes\": [";
        for (std::size_t i = 0; i < cfg.notes.size(); ++i) json_string(os << (i ? ", " : ""), cfg.notes[i]);
        os << "]";
        if (spec.is_mrope()) {  // M-RoPE: text tokens only are the 1-D rows below
            os << ", \"mrope_section\": [";
            for (std::size_t i = 0; i < spec.mrope_section.size(); ++i) os << (i ? ", " : "") << spec.mrope_section[i];
            os << "], \"mrope_interleaved\": " << (spec.mrope_interleaved ? "true" : "false");
        }
        os << ", \"inv_freq\": ";
        print_json_list(os, freq.inv_freq, 17);
        os << ", \"positions\": [";
        for (std::size_t i = 0; i < positions.size(); ++i) os << (i ? ", " : "") << position_text(i);
        os << "], \"cos\": [";
        for (std::size_t i = 0; i < cos_rows.size(); ++i) print_json_list(os << (i ? ", " : ""), cos_rows[i], 9);
        os << "], \"sin\": [";
        for (std::size_t i = 0; i < sin_rows.size(); ++i) print_json_list(os << (i ? ", " : ""), sin_rows[i], 9);
        os << "]}\n";
        return 0;
    }

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
       << "attention_factor  " << num(freq.attention_factor, 17) << " (cos/sin amplitude)\n"
       << "max_positions     " << cfg.max_position_embeddings << " ("
       << (cfg.max_position_embeddings_source.empty() ? "absent" : cfg.max_position_embeddings_source) << ")\n";
    if (!spec.mrope_section.empty()) {
        os << "mrope_section     ";
        for (std::size_t i = 0; i < spec.mrope_section.size(); ++i) os << (i ? "," : "") << spec.mrope_section[i];
        os << " pairs (t, h, w)" << (spec.mrope_interleaved ? ", interleaved" : "") << '\n';
    }
    for (const auto& n : cfg.notes) os << "note              " << n << '\n';
    os << '\n';
    const auto reg = regimes(spec.schedule, rotary_dim, o.seq_len);
    print(os, "%5s  %-24s  %-16s  %s\n", "pair", "inv_freq", "wavelength", "regime");
    for (std::size_t i = 0; i < pairs; ++i)
        print(os, "%5zu  %-24.17g  %-16.6g  %s\n", i, freq.inv_freq[i], posenc::detail::wavelength(freq.inv_freq[i]),
              reg[i].c_str());
    for (std::size_t k = 0; k < positions.size(); ++k) {
        os << "\nposition " << (split[k] ? position_text(k) + " (t, h, w)" : position_text(k))
           << " (un-amplified cos / sin, first pairs):\n";
        for (std::size_t i = 0; i < std::min<std::size_t>(pairs, 4); ++i)
            os << "  pair " << i << ": " << num(cos_rows[k][i], 9) << " / " << num(sin_rows[k][i], 9) << '\n';
    }
    return 0;
}

inline void print_int_list(std::ostream& os, const std::vector<std::int64_t>& v) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
}

inline int run_alibi(std::ostream& os, const options& o, const posenc::alibi& params, const std::string& model_type) {
    const auto slopes = params.slopes();
    if (o.json) {
        os << "{\"encoding\": \"alibi\", \"n_heads\": " << params.heads << ", \"slopes\": ";
        print_json_list(os, slopes, 17);
        os << "}\n";
        return 0;
    }
    if (!model_type.empty()) os << "model_type        " << model_type << '\n';
    os << "encoding          alibi (bias -m_h * (i - j) added to the logit of query i, key j)\n"
       << "n_heads           " << params.heads << "\nmax_bias          " << num(params.max_bias, 10)
       << "\norder             "
       << (params.order == posenc::bias_order::scale_then_add ? "scale_then_add (q.k/sqrt(d) + bias)"
                                                                      : "add_then_scale ((q.k + bias)/sqrt(d))")
       << "\n\n head  slope\n";
    for (std::size_t h = 0; h < slopes.size(); ++h) print(os, "%5zu  %.17g\n", h, slopes[h]);
    return 0;
}

inline int run_t5(std::ostream& os, const options& o, const posenc::t5_buckets& b, const std::string& model_type,
                  std::size_t heads) {
    b.validate();
    const auto [first, last] = o.relative_range.value_or(std::pair{-b.max_distance, b.max_distance});
    // The count in unsigned arithmetic (last − first may exceed int64), and a loop over the count,
    // never `r <= last; ++r` (which overflows at INT64_MAX).
    const std::uint64_t span = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);
    if (span >= tool_limits::relative_positions)
        throw posenc::config_error(o.relative_range ? "--relative-range" : "max_distance",
                                   posenc::detail::to_text(first) + ":" + posenc::detail::to_text(last),
                                   "lists more than " + posenc::detail::to_text(tool_limits::relative_positions) +
                                       " relative positions; give a shorter --relative-range");
    std::vector<std::int64_t> rel, buckets;
    for (std::uint64_t i = 0; i <= span; ++i) {
        const auto r = static_cast<std::int64_t>(static_cast<std::uint64_t>(first) + i);
        rel.push_back(r);
        buckets.push_back(b.bucket_unchecked(r));
    }
    if (o.json) {
        os << "{\"encoding\": \"t5\", \"num_buckets\": " << b.num_buckets << ", \"max_distance\": " << b.max_distance
           << ", \"bidirectional\": " << (b.bidirectional ? "true" : "false") << ", \"relative_positions\": ";
        print_int_list(os, rel);
        os << ", \"buckets\": ";
        print_int_list(os, buckets);
        os << "}\n";
        return 0;
    }
    if (!model_type.empty()) os << "model_type        " << model_type << '\n';
    os << "encoding          t5 relative buckets (relative position = key - query)\n"
       << "num_buckets       " << b.num_buckets << "\nmax_distance      " << b.max_distance
       << "\nbidirectional     " << (b.bidirectional ? "true" : "false") << "\nexact range       |r| < "
       << b.exact_range() << '\n';
    if (heads) os << "table shape       [" << b.num_buckets << ", " << heads << "] (num_buckets, heads)\n";
    os << "\n relative positions  bucket\n";
    for (std::size_t i = 0; i < rel.size();) {  // runs of equal buckets, one line each
        std::size_t j = i;
        while (j + 1 < rel.size() && buckets[j + 1] == buckets[i]) ++j;
        print(os, "  %8lld..%-8lld  %lld\n", static_cast<long long>(rel[i]), static_cast<long long>(rel[j]),
                    static_cast<long long>(buckets[i]));
        i = j + 1;
    }
    return 0;
}

inline int run_sinusoidal(std::ostream& os, const options& o) {
    if (o.positions.size() > tool_limits::values / *o.sinusoidal_d)
        throw posenc::config_error("--positions", "list of " + posenc::detail::to_text(o.positions.size()),
                                   "asks for more than " + posenc::detail::to_text(tool_limits::values) +
                                       " values (positions × d_model)");
    const posenc::sinusoidal pe{.d_model = *o.sinusoidal_d, .form = *o.variant};
    const auto table = pe.table(posenc::position_ids(o.positions));
    const std::size_t d = *o.sinusoidal_d;
    if (o.json) {
        os << "{\"encoding\": \"sinusoidal\", \"variant\": \""
           << (*o.variant == posenc::sinusoidal_form::interleaved ? "interleaved" : "concat")
           << "\", \"d_model\": " << d << ", \"positions\": ";
        print_int_list(os, o.positions);
        os << ", \"table\": [";
        for (std::size_t k = 0; k < o.positions.size(); ++k)
            print_json_list(os << (k ? ", " : ""),
                            std::vector<double>(table.begin() + static_cast<std::ptrdiff_t>(k * d),
                                                table.begin() + static_cast<std::ptrdiff_t>((k + 1) * d)),
                            9);
        os << "]}\n";
        return 0;
    }
    os << "encoding          sinusoidal (" << posenc::to_string(*o.variant) << "), d_model " << d << '\n';
    for (std::size_t k = 0; k < o.positions.size(); ++k) {
        os << "position " << o.positions[k] << ":";
        for (std::size_t i = 0; i < std::min<std::size_t>(d, 8); ++i) os << ' ' << num(table[k * d + i], 9);
        os << (d > 8 ? " ...\n" : "\n");
    }
    return 0;
}

inline int run(std::ostream& os, const options& o) {
    if (o.family_table) {
        os << family_table_markdown();
        return 0;
    }
    if (o.alibi_heads) return run_alibi(os, o, posenc::alibi{.heads = *o.alibi_heads, .max_bias = o.max_bias}, "");
    if (o.t5)
        return run_t5(os, o, posenc::t5_buckets{.num_buckets = *o.num_buckets, .max_distance = *o.max_distance,
                                                .bidirectional = *o.bidirectional},
                      "", 0);
    if (o.sinusoidal_d) return run_sinusoidal(os, o);
    const auto enc = posenc::hf::load_position_encoding(o.config, o.layout);
    if (const auto* a = std::get_if<posenc::hf::alibi_model>(&enc)) return run_alibi(os, o, a->params, a->model_type);
    if (const auto* t = std::get_if<posenc::hf::t5_model>(&enc)) {
        posenc::t5_buckets b = t->encoder;
        if (o.bidirectional) b.bidirectional = *o.bidirectional;  // --unidirectional: the decoder's
        return run_t5(os, o, b, t->model_type, t->heads);
    }
    return run_rope(os, o, std::get<posenc::hf::model_config>(enc));
}

}  // namespace posenc_inspect
