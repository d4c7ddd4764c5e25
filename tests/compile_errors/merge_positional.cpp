// Compiled by tests/expect_compile_error.cmake once per POSENC_CASE: case 0 (lse and sinks named in
// merge_options) must compile cleanly; the other cases pass them by position, as arguments or in
// braces, which lets a vector of sinks bind to the lse output (overwritten, no sinks applied), and
// must not compile.
#include <posenc/attention/partial.hpp>

#include <vector>

void merge_positional() {
    std::vector<float> a(16), b(16), o(16), la(1), lb(1), lse(1), sinks(1);
    const posenc::heads_view<const float> av(a.data(), {1, 1, 16}), bv(b.data(), {1, 1, 16});
    const posenc::heads_view<float> out(o.data(), {1, 1, 16});
#if POSENC_CASE == 0
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {.sinks = sinks});
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {.lse = lse, .sinks = sinks});
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out);
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {});
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {.sinks = std::vector<float>{1.0f}});
#elif POSENC_CASE == 1
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, sinks);  // meant as the sinks
#elif POSENC_CASE == 2
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, lse, sinks);
#elif POSENC_CASE == 3
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {sinks});  // braces by position: lse again
#elif POSENC_CASE == 4
    posenc::merge_attention_partials({{av, la}, {bv, lb}}, out, {lse, sinks});
#endif
    (void)lse, (void)sinks;
}
