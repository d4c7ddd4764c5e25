#pragma once
// any_schedule: a frequency schedule chosen at run time (from a config.json), and the free functions
// that evaluate it like the static ones.

#include <optional>
#include <string_view>
#include <variant>

#include "posenc/core/concepts.hpp"
#include "posenc/rope/default.hpp"
#include "posenc/rope/dynamic_ntk.hpp"
#include "posenc/rope/linear.hpp"
#include "posenc/rope/llama3.hpp"
#include "posenc/rope/longrope.hpp"
#include "posenc/rope/ntk_aware.hpp"
#include "posenc/rope/ntk_by_parts.hpp"
#include "posenc/rope/yarn.hpp"

namespace posenc {

using any_schedule = std::variant<default_rope, linear, ntk_aware, ntk_by_parts, dynamic_ntk, yarn, llama3, longrope>;

[[nodiscard]] inline std::string_view rope_type(const any_schedule& s) {
    return std::visit([](const auto& x) -> std::string_view { return std::decay_t<decltype(x)>::rope_type; }, s);
}

[[nodiscard]] inline rope_frequencies frequencies(const any_schedule& s, std::size_t rotary_dim,
                                                  std::int64_t seq_len = 0) {
    return std::visit([&](const auto& x) { return x.frequencies(rotary_dim, seq_len); }, s);
}

/// Per-pair interpolation weights for the schedules that blend (see blending_schedule).
[[nodiscard]] inline std::optional<std::vector<double>> interpolation(const any_schedule& s, std::size_t rotary_dim) {
    return std::visit(
        [&](const auto& x) -> std::optional<std::vector<double>> {
            if constexpr (blending_schedule<std::decay_t<decltype(x)>>)
                return x.interpolation(rotary_dim);
            else
                return std::nullopt;
        },
        s);
}

}  // namespace posenc
