// Compiled by tests/dangling_views.cmake with clang only (g++ has no lifetimebound): every line
// marked `// dangles` keeps a view of, or a reference into, a temporary that dies at the end of its
// statement and must draw clang's -Wdangling; the rest makes the same calls safely (the temporary
// used within its full expression, named objects, ids that hold no memory) and must draw nothing.
#include <posenc/attention/kv_cache.hpp>
#include <posenc/hf/config.hpp>
#include <posenc/posenc.hpp>

#include <cstdint>
#include <vector>

namespace {
using hs_rotary = posenc::rotary<posenc::half_split>;
std::vector<std::int64_t> numbers() { return {0, 1, 2}; }
hs_rotary rope() { return hs_rotary({.head_dim = 8}, posenc::default_rope{}); }
posenc::any_rotary any_rope() { return {posenc::rope_layout::half_split, {.head_dim = 8}, posenc::default_rope{}}; }
posenc::mrope_rotary<posenc::half_split> mrope() { return {{.head_dim = 8}, posenc::default_rope{}, posenc::mrope{.section = {2, 1, 1}}}; }
posenc::kv_cache<hs_rotary> cache() { return {rope(), {.kv_heads = 1, .head_dim = 8, .capacity = 4}}; }
posenc::mrope_positions prompt() {
    const std::vector<posenc::prompt_segment> p = {posenc::prompt_segment::text(3)};
    return posenc::build_mrope_positions(p, {.model = posenc::mrope_model::qwen2_vl});
}
posenc::patch_positions patches() {
    const std::vector<posenc::patch_grid> g = {{.t = 1, .h = 2, .w = 2}};
    return posenc::qwen_vision_positions(g, 1);
}
posenc::t5_bias t5() { return {posenc::t5_buckets{}, 1, std::vector<float>(32, 0.0f)}; }
posenc::alibi_bias alibi() { return posenc::alibi_bias(posenc::alibi{.heads = 4}); }
posenc::xpos_rotary<posenc::half_split> xpos() { return {{.head_dim = 8}, posenc::xpos{}}; }
posenc::head_rms_norm norm() { return {std::vector<float>(8, 1.0f), 1e-6}; }
posenc::longrope longrope() { return {.short_factor = {1, 1}, .long_factor = {2, 2}, .original_max_position = 16}; }
posenc::config_error error() { return {"key", "value", "why"}; }
posenc::hf::model_config config() { return {}; }
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
    const auto& first = mids.axis(0);
    const auto bias = t5();
    const auto weights = bias.table();
    const auto r = rope();
    const auto& freq = r.frequencies();
    const auto inv_freq = rope().frequencies().inv_freq;  // a copy
    const std::size_t in_one_statement = prompt().ids().size() + patches().ids().size() + rope().table(4).cos(1).size() +
                                         error().key().size() + alibi().slopes().size();
    return use(ids, shared, two, c, keys, mids, first, weights, freq, inv_freq, in_one_statement);
}

std::size_t dangling() {
    const posenc::position_ids ids(numbers());  // dangles
    const posenc::position_ids ids32(std::vector<std::int32_t>{0, 1, 2});  // dangles
    const posenc::axis_positions one(numbers());  // dangles
    const posenc::axis_positions two_0(numbers(), ids);  // dangles
    const posenc::axis_positions two_1(ids, numbers());  // dangles
    const posenc::axis_positions three_0(numbers(), ids, ids);  // dangles
    const posenc::axis_positions three_1(ids, numbers(), ids);  // dangles
    const posenc::axis_positions three_2(ids, ids, numbers());  // dangles
    const auto& axis = prompt().ids().axis(0);  // dangles
    const auto mids = prompt().ids();  // dangles
    const auto pids = patches().ids();  // dangles
    const auto c = rope().table(4).cos(1);  // dangles
    const auto s = rope().table(4).sin(1);  // dangles
    const float* row = rope().table(4).row(1);  // dangles
    const float* all = rope().table(4).data();  // dangles
    const auto& table_freq = rope().table(4).inv_freq();  // dangles
    const auto keys = cache().keys();  // dangles
    const auto values = cache().values();  // dangles
    const auto pos = cache().positions();  // dangles
    const auto k_storage = cache().key_storage();  // dangles
    const auto v_storage = cache().value_storage();  // dangles
    const auto p_storage = cache().position_storage();  // dangles
    const auto& transform = cache().transform();  // dangles
    const auto t = t5().table();  // dangles
    const auto& buckets = t5().buckets();  // dangles
    const auto& dims = rope().dims();  // dangles
    const auto& freq = rope().frequencies();  // dangles
    const auto& ex = rope().slice_executor();  // dangles
    const auto& any_dims = any_rope().dims();  // dangles
    const auto& any_freq = any_rope().frequencies();  // dangles
    const auto& any_ex = any_rope().slice_executor();  // dangles
    const auto& m_dims = mrope().dims();  // dangles
    const auto& m_freq = mrope().frequencies();  // dangles
    const auto& m_pairs = mrope().pair_axis();  // dangles
    const auto& m_params = mrope().params();  // dangles
    const auto& slopes = alibi().slopes();  // dangles
    const auto& a_params = alibi().params();  // dangles
    const auto& x_dims = xpos().dims();  // dangles
    const auto& x_params = xpos().params();  // dangles
    const auto& x_freq = xpos().inv_freq();  // dangles
    const auto& weight = norm().weight();  // dangles
    const auto& rescale = longrope().rescale(4, 32);  // dangles
    const auto& key = error().key();  // dangles
    const auto& value = error().value();  // dangles
    const auto& why = error().why();  // dangles
    const auto& spec = config().rope_for("full_attention");  // dangles
    return use(ids, ids32, one, two_0, two_1, three_0, three_1, three_2, axis, mids, pids, c, s, row, all, table_freq, keys, values, pos,
               k_storage, v_storage, p_storage, transform, t, buckets, dims, freq, ex, any_dims, any_freq, any_ex, m_dims,
               m_freq, m_pairs, m_params, slopes, a_params, x_dims, x_params, x_freq, weight, rescale, key, value, why,
               spec);
}
}  // namespace

int main() { return static_cast<int>(safe() + dangling()); }
