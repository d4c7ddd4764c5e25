// No partial writes: every checked public entry point validates all of its arguments before it
// touches the caller's buffers. Each test fills the buffers with a pattern (views strided, with gaps
// and slack, so that a write outside a view shows too), makes one rejected call per kind of bad
// argument, and requires every buffer byte-identical (memcmp) after each; a last valid call must
// change them (the comparison can fail).
#include <posenc/attention/kv_cache.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/posenc.hpp>

#include <cstring>
#include <limits>

#include "support/catch.hpp"
#include "support/reference.hpp"
#include "support/storage16.hpp"

namespace {

/// Buffers under watch: a snapshot when constructed, compared after every rejected call.
template <class T = float>
struct watched {
    std::vector<std::vector<T>*> buffers;
    std::vector<std::vector<T>> snapshot;
    std::size_t rejected = 0;

    explicit watched(std::vector<std::vector<T>*> b) : buffers(std::move(b)) {
        for (auto* v : buffers) snapshot.push_back(*v);
    }

    [[nodiscard]] bool unchanged() const {
        for (std::size_t i = 0; i < buffers.size(); ++i)
            if (std::memcmp(buffers[i]->data(), snapshot[i].data(), snapshot[i].size() * sizeof(T)) != 0) return false;
        return true;
    }

    /// f must throw E (a posenc error) and leave every buffer as it was.
    template <class E, class F>
    void reject(const char* what, F&& f) {
        INFO(what);
        CHECK_THROWS_AS(f(), E);
        CHECK(unchanged());
        for (std::size_t i = 0; i < buffers.size(); ++i) *buffers[i] = snapshot[i];  // each case on its own
        ++rejected;
    }
};

constexpr std::size_t T = 5, HQ = 4, HK = 2, D = 64, R = 48;  // partial rotary: lanes 48..63 pass through
constexpr std::size_t q_token_stride = HQ * D + 8, k_head_stride = D + 4;  // gaps between rows

struct qk_buffers {
    std::vector<float> q = posenc_test::random_floats(T * q_token_stride + 16, 11);  // + slack
    std::vector<float> k = posenc_test::random_floats(T * HK * k_head_stride + 16, 12);
    posenc::heads_view<float> qv{std::span<float>(q), {T, HQ, D}, {.token = q_token_stride}};
    posenc::heads_view<float> kv{std::span<float>(k), {T, HK, D}, {.head = k_head_stride}};
    // Same memory, wrong shapes.
    posenc::heads_view<float> q_wide{std::span<float>(q), {T, 2, 2 * D}};
    posenc::heads_view<float> k_short{std::span<float>(k), {T - 1, HK, D}, {.head = k_head_stride}};
};

/// Every bad argument a rotary (or any_rotary) can be given, for each call form; buffers unchanged.
template <class Rope>
std::size_t check_rotary_rejections(const Rope& rope, qk_buffers& b) {
    watched w({&b.q, &b.k});
    using CE = posenc::config_error;
    using RE = posenc::range_error;
    const auto table = rope.table(100);
    const posenc::rope_frequencies other_freq = posenc::default_rope{.base = 20000}.frequencies(R);
    const posenc::cos_sin_table other_table(other_freq, 100);
    auto louder = rope.frequencies();
    louder.attention_factor *= 2;
    const posenc::cos_sin_table louder_table(louder, 100);  // same inv_freq, other amplitude
    const std::vector<std::int64_t> ok{0, 1, 2, 3, 99}, too_far{0, 1, 2, 3, 100}, negative{-1, 1, 2, 3, 4},
        huge{0, 1, 2, 3, std::numeric_limits<std::int64_t>::max()};
    const std::vector<std::int32_t> too_far32{0, 1, 2, 3, std::numeric_limits<std::int32_t>::max()};
    const std::vector<std::int64_t> six{0, 1, 2, 3, 4, 5};
    const auto fwd = posenc::rotation::forward, inv = posenc::rotation::inverse;

    for (auto dir : {fwd, inv}) {
        // Shapes: a bad Q, or a good Q with a bad K (Q must not be rotated before K is checked).
        w.template reject<CE>("q head_dim", [&] { rope.apply(b.q_wide, b.kv, ok, dir); });
        w.template reject<CE>("k head_dim", [&] { rope.apply(b.qv, b.q_wide, ok, dir); });
        w.template reject<CE>("k tokens", [&] { rope.apply(b.qv, b.k_short, ok, dir); });
        w.template reject<CE>("q tokens vs positions", [&] { rope.apply(b.qv, b.kv, six, dir); });
        w.template reject<CE>("single view tokens", [&] { rope.apply(b.qv, six, dir); });
        w.template reject<CE>("table: q head_dim", [&] { rope.apply(table, b.q_wide, b.kv, ok, dir); });
        w.template reject<CE>("table: k tokens", [&] { rope.apply(table, b.qv, b.k_short, ok, dir); });
        // Tables: other frequencies, other amplitude, positions outside (last token, first token).
        w.template reject<CE>("table of other frequencies", [&] { rope.apply(other_table, b.qv, b.kv, ok, dir); });
        w.template reject<CE>("table of other amplitude", [&] { rope.apply(louder_table, b.qv, b.kv, ok, dir); });
        w.template reject<RE>("position = table size", [&] { rope.apply(table, b.qv, b.kv, too_far, dir); });
        w.template reject<RE>("negative position", [&] { rope.apply(table, b.qv, b.kv, negative, dir); });
        w.template reject<RE>("int64 max position", [&] { rope.apply(table, b.qv, b.kv, huge, dir); });
        w.template reject<RE>("int32 max position", [&] { rope.apply(table, b.qv, b.kv, too_far32, dir); });
        w.template reject<RE>("consecutive past the end",
                              [&] { rope.apply(table, b.qv, b.kv, posenc::position_ids::consecutive(96, T), dir); });
        w.template reject<RE>("single view past the end", [&] { rope.apply(table, b.kv, too_far, dir); });
        // Both wrong at once: whichever is reported, nothing is written.
        w.template reject<posenc::error>("table and k both wrong", [&] { rope.apply(other_table, b.qv, b.k_short, too_far, dir); });
    }
    w.template reject<CE>("shift: head_dim", [&] { rope.shift(b.q_wide, 3); });
    w.template reject<CE>("table of negative size", [&] { (void)rope.table(-1); });
    // Positive control: a valid call writes.
    rope.apply(table, b.qv, b.kv, ok);
    CHECK_FALSE(w.unchanged());
    return w.rejected;
}

}  // namespace

TEST_CASE("rotary: every rejected call (forward, inverse, table, shift) leaves Q and K byte-identical", "[errors][partial]") {
    {
        qk_buffers b;
        const posenc::rotary<posenc::half_split> rope({.head_dim = D, .rotary_dim = R},
                                                      posenc::yarn{.factor = 4, .original_max_position = 64});
        CHECK(check_rotary_rejections(rope, b) == 2 * 16 + 2);
    }
    {
        qk_buffers b;
        const posenc::rotary<posenc::interleaved> rope({.head_dim = D, .rotary_dim = R}, posenc::linear{.factor = 2});
        CHECK(check_rotary_rejections(rope, b) == 2 * 16 + 2);
    }
}

TEST_CASE("any_rotary: every rejected call leaves Q and K byte-identical", "[errors][partial]") {
    for (auto layout : {posenc::rope_layout::half_split, posenc::rope_layout::interleaved}) {
        qk_buffers b;
        const posenc::any_rotary rope(layout, {.head_dim = D, .rotary_dim = R},
                                      posenc::any_schedule{posenc::longrope{.short_factor = std::vector<double>(R / 2, 1.5),
                                                                            .long_factor = std::vector<double>(R / 2, 3.0),
                                                                            .original_max_position = 4096,
                                                                            .factor = 8}},
                                      8192);
        CHECK(check_rotary_rejections(rope, b) == 2 * 16 + 2);
    }
}

namespace {
template <class Layout>
std::size_t check_xpos_rejections() {
    qk_buffers b;
    watched w({&b.q, &b.k});
    using CE = posenc::config_error;
    using RE = posenc::range_error;
    const posenc::xpos_rotary<Layout> xp({.head_dim = D, .rotary_dim = R}, posenc::xpos{});
    const std::vector<std::int64_t> ok{0, 1, 2, 3, 4}, six{0, 1, 2, 3, 4, 5};
    // Pair 0 has ζ = γ/(1+γ) = 2/7. At p = −35758, (p/512)·ln ζ ≈ 87.49: the query scale e^87.49 ≈ 1e38
    // is a float, the key scale e^−87.49 ≈ 1e−38 is below FLT_MIN, so only K's rows fail, after Q's
    // were computed: Q must still be untouched.
    const std::vector<std::int64_t> key_scale_fails{0, 1, 2, 3, -35758};
    REQUIRE_NOTHROW(xp.rows(key_scale_fails, posenc::xpos_role::query));
    REQUIRE_THROWS_AS(xp.rows(key_scale_fails, posenc::xpos_role::key), RE);
    const std::vector<std::int64_t> both_fail{0, 1, 2, 3, 1'000'000};
    w.template reject<RE>("apply: key scale out of float range", [&] { xp.apply(b.qv, b.kv, key_scale_fails); });
    w.template reject<RE>("apply: both scales out of range", [&] { xp.apply(b.qv, b.kv, both_fail); });
    w.template reject<RE>("apply_keys: scale out of range", [&] { xp.apply_keys(b.kv, key_scale_fails); });
    w.template reject<RE>("apply_queries: scale out of range", [&] { xp.apply_queries(b.qv, both_fail); });
    // Positions and a center near the int64 limits: p − c saturates instead of wrapping, so a bad
    // position between the lowest and the highest is still found by the check at both ends.
    const posenc::xpos_rotary<Layout> far_center({.head_dim = D, .rotary_dim = R},
                                                 posenc::xpos{.center = std::numeric_limits<std::int64_t>::min() + 4});
    const std::vector<std::int64_t> extremes{std::numeric_limits<std::int64_t>::min(), 0, 1, 2,
                                             std::numeric_limits<std::int64_t>::max()};
    w.template reject<RE>("apply: positions at the int64 limits", [&] { far_center.apply(b.qv, b.kv, extremes); });
    w.template reject<RE>("apply_keys: positions at the int64 limits", [&] { far_center.apply_keys(b.kv, extremes); });
    w.template reject<CE>("apply: q head_dim", [&] { xp.apply(b.q_wide, b.kv, ok); });
    w.template reject<CE>("apply: k tokens", [&] { xp.apply(b.qv, b.k_short, ok); });
    w.template reject<CE>("apply: tokens vs positions", [&] { xp.apply(b.qv, b.kv, six); });
    w.template reject<CE>("apply_queries: head_dim", [&] { xp.apply_queries(b.q_wide, ok); });
    w.template reject<CE>("apply_keys: tokens", [&] { xp.apply_keys(b.k_short, ok); });
    xp.apply(b.qv, b.kv, ok);
    CHECK_FALSE(w.unchanged());
    return w.rejected;
}
}  // namespace

TEST_CASE("xpos_rotary: every rejected call leaves Q and K byte-identical", "[errors][partial]") {
    CHECK(check_xpos_rejections<posenc::half_split>() == 11);
    CHECK(check_xpos_rejections<posenc::interleaved>() == 11);
}

TEST_CASE("alibi_bias and t5_bias add_to_scores: rejected calls leave the scores byte-identical", "[errors][partial]") {
    std::vector<float> scores = posenc_test::random_floats(40, 21);
    watched w({&scores});
    const std::span<float> row(scores.data(), 32);  // the rest of the buffer is slack
    const posenc::alibi_bias alibi({.heads = 12});
    const posenc::alibi_bias sym({.heads = 5, .form = posenc::alibi_form::symmetric});
    const auto t5_table = posenc_test::random_floats(32 * 6, 22);
    const posenc::t5_bias t5({.num_buckets = 32, .max_distance = 128}, 6, t5_table);
    const std::vector<std::int64_t> keys31(31, 4), keys33(33, 4);
    using RE = posenc::range_error;
    for (const posenc::alibi_bias* a : {&alibi, &sym}) {
        w.reject<RE>("alibi head = heads", [&] { a->add_to_scores(a->heads(), 40, posenc::position_ids::consecutive(0, 32), row); });
        w.reject<RE>("alibi head huge", [&] { a->add_to_scores(std::size_t(-1), 40, posenc::position_ids::consecutive(0, 32), row); });
        w.reject<RE>("alibi fewer keys", [&] { a->add_to_scores(0, 40, keys31, row); });
        w.reject<RE>("alibi more keys", [&] { a->add_to_scores(0, 40, keys33, row); });
        w.reject<RE>("alibi consecutive keys, wrong count",
                     [&] { a->add_to_scores(0, 40, posenc::position_ids::consecutive(0, 33), row); });
    }
    w.reject<RE>("t5 head = heads", [&] { t5.add_to_scores(6, 40, posenc::position_ids::consecutive(0, 32), row); });
    w.reject<RE>("t5 fewer keys", [&] { t5.add_to_scores(0, 40, keys31, row); });
    w.reject<RE>("t5 consecutive keys, wrong count", [&] { t5.add_to_scores(0, 40, posenc::position_ids::consecutive(0, 31), row); });
    w.reject<RE>("t5 keys for an empty row", [&] { t5.add_to_scores(0, 40, keys31, std::span<float>()); });
    CHECK(w.rejected == 14);
    alibi.add_to_scores(3, 40, posenc::position_ids::consecutive(0, 32), row);
    CHECK_FALSE(w.unchanged());
}

TEST_CASE("sinusoidal add_to and row: rejected calls leave the embeddings byte-identical", "[errors][partial]") {
    std::vector<float> emb = posenc_test::random_floats(4 * 40 + 7, 31);
    watched w({&emb});
    const posenc::sinusoidal pe{.d_model = 32};
    const auto pos4 = posenc::position_ids::consecutive(10, 4), pos5 = posenc::position_ids::consecutive(10, 5);
    using CE = posenc::config_error;
    using RE = posenc::range_error;
    w.reject<CE>("row_stride < d_model", [&] { pe.add_to(emb, pos4, 31); });
    w.reject<RE>("rows do not fit", [&] { pe.add_to(emb, pos5, 40); });
    w.reject<RE>("dense rows do not fit", [&] { pe.add_to(std::span<float>(emb.data(), 4 * 32 - 1), pos4); });
    w.reject<RE>("stride extent overflows", [&] { pe.add_to(emb, pos4, std::numeric_limits<std::size_t>::max() / 2); });
    w.reject<CE>("d_model 0", [&] { posenc::sinusoidal{.d_model = 0}.add_to(emb, pos4); });
    w.reject<CE>("base 1", [&] { posenc::sinusoidal{.d_model = 32, .base = 1.0}.add_to(emb, pos4, 40); });
    w.reject<CE>("base NaN", [&] { posenc::sinusoidal{.d_model = 32, .base = std::nan("")}.add_to(emb, pos4, 40); });
    w.reject<CE>("concatenated d_model 1",
                 [&] { posenc::sinusoidal{.d_model = 1, .form = posenc::sinusoidal_form::concatenated}.add_to(emb, pos4); });
    w.reject<CE>("row: wrong width", [&] { pe.row(5, std::span<float>(emb.data(), 31)); });
    w.reject<CE>("row: invalid base", [&] { posenc::sinusoidal{.d_model = 32, .base = 0.5}.row(5, std::span<float>(emb.data(), 32)); });
    CHECK(w.rejected == 10);
    pe.add_to(emb, pos4, 40);
    CHECK_FALSE(w.unchanged());
}

TEST_CASE("NoPE and temperatures: rejected calls leave Q and the scores byte-identical", "[errors][partial]") {
    qk_buffers b;
    std::vector<float> scores = posenc_test::random_floats(16, 41);
    watched w({&b.q, &b.k, &scores});
    const posenc::llama4_attn_temperature temp{};
    using CE = posenc::config_error;
    const std::vector<std::int64_t> last_negative{0, 1, 2, 3, -1}, six{0, 1, 2, 3, 4, 5};
    w.reject<posenc::range_error>("llama4 temperature: negative position in the last token",
                                  [&] { temp.apply(b.qv, last_negative); });
    w.reject<CE>("llama4 temperature: tokens", [&] { temp.apply(b.qv, six); });
    w.reject<CE>("llama4 temperature: floor_scale 0", [&] { posenc::llama4_attn_temperature{.floor_scale = 0}.apply(b.qv, six); });
    w.reject<CE>("logit temperature: lambda 0", [&] { posenc::logit_temperature{.lambda = 0}.apply(scores); });
    w.reject<CE>("logit temperature: lambda inf",
                 [&] { posenc::logit_temperature{.lambda = std::numeric_limits<double>::infinity()}.apply(scores); });
    w.reject<CE>("nope: k tokens", [&] { posenc::nope{}.apply(b.qv, b.k_short, std::vector<std::int64_t>(T, 0)); });
    CHECK(w.rejected == 6);
    temp.apply(b.qv, std::vector<std::int64_t>{0, 9000, 20000, 3, 4});
    CHECK_FALSE(w.unchanged());
}

TEST_CASE("heads_view and cos_sin_table constructors reject bad shapes without touching the memory", "[errors][partial]") {
    std::vector<float> buf = posenc_test::random_floats(200, 51);
    watched w({&buf});
    using CE = posenc::config_error;
    using RE = posenc::range_error;
    const std::span<float> s(buf);
    w.reject<RE>("view larger than the buffer", [&] { posenc::heads_view<float>(s, {4, 1, 64}); });
    w.reject<RE>("strided view larger than the buffer", [&] { posenc::heads_view<float>(s, {2, 2, 32}, {.token = 150}); });
    w.reject<RE>("token stride overflows", [&] { posenc::heads_view<float>(s, {3, 1, 16}, {.token = std::size_t{1} << 63}); });
    w.reject<CE>("head rows overlap", [&] { posenc::heads_view<float>(s, {1, 3, 32}, {.head = 16}); });
    w.reject<CE>("token rows overlap", [&] { posenc::heads_view<float>(s, {2, 2, 32}, {.token = 40}); });
    w.reject<CE>("head_dim 0", [&] { posenc::heads_view<float>(s, {1, 1, 0}); });
    w.reject<CE>("null data", [&] { posenc::heads_view<float>(nullptr, {1, 1, 4}); });
    const auto f = posenc::default_rope{}.frequencies(8);
    w.reject<CE>("table of -1 positions", [&] { posenc::cos_sin_table(f, -1); });
    w.reject<RE>("table size overflows", [&] { posenc::cos_sin_table(f, std::int64_t{1} << 62); });
    w.reject<CE>("table without pairs", [&] { posenc::cos_sin_table(posenc::rope_frequencies{}, 4); });
    CHECK(w.rejected == 10);
}

TEST_CASE("layout conversion: rejected calls leave the weights byte-identical", "[errors][partial]") {
    std::vector<std::uint16_t> weight(2 * 8 * 3);  // 2 heads × head_dim 8 × 3 columns (bf16 words)
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<std::uint16_t>(0x3f00 + i);
    watched<std::uint16_t> w({&weight});
    using CE = posenc::config_error;
    const std::span<std::uint16_t> s(weight);
    w.reject<CE>("size vs heads × head_dim × cols", [&] { posenc::interleaved_to_half_split(s, 3, {.head_dim = 8}, 3); });
    w.reject<CE>("cols 0", [&] { posenc::half_split_to_interleaved(s, 2, {.head_dim = 8}, 0); });
    w.reject<CE>("odd rotary_dim", [&] { posenc::interleaved_to_half_split(s, 2, {.head_dim = 8, .rotary_dim = 5}, 3); });
    w.reject<CE>("rotary_dim > head_dim", [&] { posenc::interleaved_to_half_split(s, 2, {.head_dim = 8, .rotary_dim = 10}, 3); });
    w.reject<CE>("head_dim 0", [&] { posenc::interleaved_to_half_split(s, 2, {.head_dim = 0}, 3); });
    // heads × head_dim × cols wraps around to the buffer's size ((2^60 + 1) heads × 16 × 3 = 48 mod 2^64):
    // a wrapped product must not pass the size check.
    // (volatile: from run time, as a caller's value would be; a constant lets GCC warn about the
    // loop behind the check.)
    volatile std::size_t wrapping_heads = (std::size_t{1} << 60) + 1;
    w.reject<posenc::range_error>("heads × head_dim × cols overflows",
                                  [&] { posenc::interleaved_to_half_split(s, wrapping_heads, {.head_dim = 16}, 3); });
    CHECK(w.rejected == 6);
    posenc::interleaved_to_half_split(s, 2, {.head_dim = 8}, 3);
    CHECK_FALSE(w.unchanged());
}

namespace {
/// 16-bit K/V (H = bf16 or fp16): attention and attention_partial over views, and both over a 16-bit
/// kv_cache; every rejected call leaves Q, out (strided, with gaps and slack) and lse byte-identical.
template <class H>
std::size_t check_attention16_rejections() {
    constexpr std::size_t Tq = 3, Tk = 6, Hq = 4, Hk = 2, Dh = 16, out_stride = Hq * Dh + 4;
    std::vector<float> q = posenc_test::random_floats(Tq * Hq * Dh, 61);
    const std::vector<H> k = posenc_test::to_storage<H>(posenc_test::random_floats(Tk * Hk * Dh, 62));
    const std::vector<H> v = posenc_test::to_storage<H>(posenc_test::random_floats(Tk * Hk * Dh, 63));
    std::vector<float> out = posenc_test::random_floats(Tq * out_stride + 8, 64);
    std::vector<float> lse = posenc_test::random_floats(Tq * Hq + 4, 65);
    watched w({&q, &out, &lse});
    using CE = posenc::config_error;
    const posenc::heads_view<const float> qv(q.data(), {Tq, Hq, Dh});
    const posenc::heads_view<const H> kv(k.data(), {Tk, Hk, Dh}), vv(v.data(), {Tk, Hk, Dh});
    const posenc::heads_view<const H> k_narrow(k.data(), {Tk, Hk, Dh / 2}), v_short(v.data(), {Tk - 1, Hk, Dh});
    const posenc::heads_view<float> ov{std::span<float>(out), {Tq, Hq, Dh}, {.token = out_stride}};
    const posenc::heads_view<float> o_on_q(q.data(), {Tq, Hq, Dh});  // out over Q's memory
    const std::span<float> lse_ok(lse.data(), Tq * Hq), lse_short(lse.data(), Tq * Hq - 1);
    const std::span<float> lse_on_out(out.data() + out_stride - 2, Tq * Hq);  // from a gap of out into its second row
    const posenc::rotary<posenc::half_split> rope({.head_dim = Dh}, posenc::default_rope{});
    const posenc::attention_encoding enc{rope};
    const auto table = rope.table(Tk + 1);  // positions [0, Tk]: kp_far's last key is past it, every query inside
    const posenc::attention_encoding short_table{posenc::table_transform{rope, table}};
    const auto qp = posenc::position_ids::consecutive(Tk - Tq, Tq), kp = posenc::position_ids::consecutive(0, Tk);
    const auto kp_far = posenc::position_ids::consecutive(2, Tk), kp_long = posenc::position_ids::consecutive(0, Tk + 1);
    const auto qp_short = posenc::position_ids::consecutive(Tk - Tq, Tq - 1);
    const posenc::causal_mask causal{};

    w.template reject<CE>("attention: k head_dim", [&] { posenc::attention(enc, qv, k_narrow, vv, ov, qp, kp, causal); });
    w.template reject<CE>("attention: v tokens", [&] { posenc::attention(enc, qv, kv, v_short, ov, qp, kp, causal); });
    w.template reject<CE>("attention: key positions count", [&] { posenc::attention(enc, qv, kv, vv, ov, qp, kp_long, causal); });
    w.template reject<CE>("attention: query positions count", [&] { posenc::attention(enc, qv, kv, vv, ov, qp_short, kp, causal); });
    w.template reject<CE>("attention: out overlaps q", [&] { posenc::attention(enc, qv, kv, vv, o_on_q, qp, kp, causal); });
    w.template reject<posenc::range_error>("attention: key position past the table",
                                           [&] { posenc::attention(short_table, qv, kv, vv, ov, qp, kp_far, causal); });

    auto partial = [&](const auto& e, auto kk, auto vvv, posenc::heads_view<float> o, std::span<float> l, const posenc::position_ids& q_pos,
                       const posenc::position_ids& k_pos) { posenc::attention_partial(e, qv, kk, vvv, o, l, q_pos, k_pos, causal); };
    w.template reject<CE>("partial: k head_dim", [&] { partial(enc, k_narrow, vv, ov, lse_ok, qp, kp); });
    w.template reject<CE>("partial: v tokens", [&] { partial(enc, kv, v_short, ov, lse_ok, qp, kp); });
    w.template reject<CE>("partial: key positions count", [&] { partial(enc, kv, vv, ov, lse_ok, qp, kp_long); });
    w.template reject<CE>("partial: query positions count", [&] { partial(enc, kv, vv, ov, lse_ok, qp_short, kp); });
    w.template reject<CE>("partial: out overlaps q", [&] { partial(enc, kv, vv, o_on_q, lse_ok, qp, kp); });
    w.template reject<CE>("partial: lse size", [&] { partial(enc, kv, vv, ov, lse_short, qp, kp); });
    w.template reject<CE>("partial: lse overlaps out", [&] { partial(enc, kv, vv, ov, lse_on_out, qp, kp); });
    w.template reject<posenc::range_error>("partial: key position past the table",
                                           [&] { partial(short_table, kv, vv, ov, lse_ok, qp, kp_far); });

    // A 16-bit cache of the same tokens, read with a query transform of another base.
    posenc::kv_cache<posenc::rotary<posenc::half_split>, H> cache(rope, {.kv_heads = Hk, .head_dim = Dh, .capacity = Tk});
    cache.append(kv, vv, kp);
    const posenc::attention_encoding other_base{posenc::rotary<posenc::half_split>({.head_dim = Dh}, posenc::default_rope{.base = 1e6})};
    w.template reject<CE>("attention over the cache: other transform",
                          [&] { posenc::attention(other_base, qv, cache, ov, qp, causal); });
    w.template reject<CE>("partial over the cache: other transform",
                          [&] { posenc::attention_partial(other_base, qv, cache, ov, lse_ok, qp, causal); });
    // Positive control: a valid call writes out and lse.
    posenc::attention_partial(enc, qv, cache, ov, lse_ok, qp, causal);
    CHECK_FALSE(w.unchanged());
    return w.rejected;
}
}  // namespace

TEST_CASE("attention and attention_partial with 16-bit K/V or cache: rejected calls leave Q and out and lse byte-identical", "[errors][partial][attention]") {
    CHECK(check_attention16_rejections<posenc::bf16>() == 16);
    CHECK(check_attention16_rejections<posenc::fp16>() == 16);
}
