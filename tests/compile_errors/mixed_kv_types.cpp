// Compiled by tests/expect_compile_error.cmake once per POSENC_CASE: case 0 (one element type) must
// compile cleanly; each other case mixes K and V element types and must stop at the static_assert
// that says so, not at an overload-resolution error listing every candidate.
#include <posenc/attention/attention.hpp>
#include <posenc/attention/partial.hpp>
#include <posenc/grad/attention.hpp>
#include <posenc/logit/nope.hpp>

#include <vector>

void mixed_kv_types() {
    std::vector<float> qf(64), kf(64), vf(64), of(64), lse(4), dq(64), dk(64), dv(64);
    std::vector<posenc::bf16> kb(64), vb(64);
    std::vector<posenc::fp16> kh(64);
    const posenc::heads_view<const float> q(qf.data(), {4, 1, 16});
    const posenc::heads_view<float> out(of.data(), {4, 1, 16});
    const posenc::heads_view<float> k32(kf.data(), {4, 1, 16}), v32(vf.data(), {4, 1, 16});
    const posenc::heads_view<posenc::bf16> k16(kb.data(), {4, 1, 16}), v16(vb.data(), {4, 1, 16});
    const posenc::heads_view<const posenc::fp16> kfp16(kh.data(), {4, 1, 16});
    const posenc::heads_view<float> dqv(dq.data(), {4, 1, 16}), dkv(dk.data(), {4, 1, 16}), dvv(dv.data(), {4, 1, 16});
    const posenc::attention_encoding enc{posenc::nope{}};
    const auto pos = posenc::position_ids::consecutive(0, 4);
#if POSENC_CASE == 0
    posenc::attention(enc, q, k16, v16, out, pos, pos);
    posenc::attention(enc, q, k32, v32, out, pos, pos);
    posenc::attention_partial(enc, q, k16, v16, out, lse, pos, pos);
    posenc::attention_backward(enc, q, k16, v16, out, lse, q, dqv, dkv, dvv, pos, pos);
#elif POSENC_CASE == 1
    posenc::attention(enc, q, k32, v16, out, pos, pos);  // float K, bf16 V
#elif POSENC_CASE == 2
    posenc::attention(enc, q, kfp16, v16, out, pos, pos);  // fp16 K, bf16 V
#elif POSENC_CASE == 3
    posenc::attention_partial(enc, q, k16, v32, out, lse, pos, pos);  // bf16 K, float V
#elif POSENC_CASE == 4
    posenc::attention_backward(enc, q, k32, v16, out, lse, q, dqv, dkv, dvv, pos, pos);  // float K, bf16 V
#endif
    (void)dqv, (void)dkv, (void)dvv;
    (void)k32, (void)v32, (void)k16, (void)v16, (void)kfp16, (void)lse;
}
