// Compiled by tests/dangling_views.cmake with clang only (g++ has no lifetimebound): every line
// marked `// dangles` keeps a view made from a temporary that dies at the end of its statement and
// must draw clang's -Wdangling; the rest makes the same calls safely (the temporary used within its
// full expression, views of named objects, ids that hold no memory) and must draw nothing.
#include <posenc/attention/kv_cache.hpp>
#include <posenc/posenc.hpp>

#include <cstdint>
#include <vector>

namespace {
std::vector<std::int64_t> numbers() { return {0, 1, 2}; }
posenc::rotary<posenc::half_split> rope() { return posenc::rotary<posenc::half_split>({.head_dim = 8}, posenc::default_rope{}); }
posenc::kv_cache<posenc::rotary<posenc::half_split>> cache() { return {rope(), {.kv_heads = 1, .head_dim = 8, .capacity = 4}}; }
posenc::mrope_positions prompt() {
    const std::vector<posenc::prompt_segment> p = {posenc::prompt_segment::text(3)};
    return posenc::build_mrope_positions(p, {.model = posenc::mrope_model::qwen2_vl});
}
posenc::patch_positions patches() {
    const std::vector<posenc::patch_grid> g = {{.t = 1, .h = 2, .w = 2}};
    return posenc::qwen_vision_positions(g, 1);
}
posenc::t5_bias t5() { return {posenc::t5_buckets{}, 1, std::vector<float>(32, 0.0f)}; }
template <class... T>
std::size_t use(const T&... v) { return (0 + ... + sizeof(v)); }

std::size_t safe() {
    const std::vector<std::int64_t> kept = numbers();
    const posenc::position_ids ids(kept);
    const posenc::axis_positions shared(posenc::position_ids::consecutive(0, 3));
    const posenc::axis_positions two(ids, ids);
    const auto table = rope().table(4);
    const auto c = table.cos(1);
    const auto kv = cache();
    const auto keys = kv.keys();
    const auto p = prompt();
    const auto mids = p.ids();
    const auto bias = t5();
    const auto weights = bias.table();
    const std::size_t in_one_statement = prompt().ids().size() + patches().ids().size() + rope().table(4).cos(1).size();
    return use(ids, shared, two, c, keys, mids, weights, in_one_statement);
}

std::size_t dangling() {
    const posenc::position_ids ids(numbers());  // dangles
    const posenc::axis_positions one(numbers());  // dangles
    const posenc::axis_positions three(posenc::position_ids::consecutive(0, 3), posenc::position_ids::consecutive(0, 3),
                                       numbers());  // dangles
    const auto mids = prompt().ids();  // dangles
    const auto pids = patches().ids();  // dangles
    const auto c = rope().table(4).cos(1);  // dangles
    const auto s = rope().table(4).sin(1);  // dangles
    const float* row = rope().table(4).row(1);  // dangles
    const float* all = rope().table(4).data();  // dangles
    const auto keys = cache().keys();  // dangles
    const auto values = cache().values();  // dangles
    const auto pos = cache().positions();  // dangles
    const auto storage = cache().key_storage();  // dangles
    const auto t = t5().table();  // dangles
    return use(ids, one, three, mids, pids, c, s, row, all, keys, values, pos, storage, t);
}
}  // namespace

int main() { return static_cast<int>(safe() + dangling()); }
