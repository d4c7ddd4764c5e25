#!/usr/bin/env python3
"""Mutation check for posenc's test suite (not run in CI, which runs only --check: ~1.5 h on 2 busy cores).

Plants plausible bugs in the library one at a time, each as an exact text replacement in one
header, in a scratch copy of the working tree (tracked and untracked, not ignored, files copied to
a temporary directory: your checkout and its build/ are never touched), rebuilds posenc-tests
(and the posenc-inspect it runs) and runs the test binary. A mutant is killed when the tests fail,
or when it does not build; it survives when they pass. Prints one line per mutant and a summary;
exits 1 if fewer than --min-kill percent are killed.

  tools/mutation-check.py                 # every mutant
  tools/mutation-check.py --list          # list them
  tools/mutation-check.py --check         # only check that every mutant still applies (CI; no build)
  tools/mutation-check.py --only 3,17     # some of them
  tools/mutation-check.py --keep DIR      # build in DIR (reused between runs: faster)

Speed: a mutant of a header that every test includes would rebuild all test units (~4 CPU-minutes).
So such mutants first run against a smaller binary built from the test files of their area (GROUPS
below; a kill there is a kill of the whole suite), and only their survivors against the whole
suite: a mutant is reported as surviving only when the full posenc-tests passes.

The scratch build uses g++ -O1 -DNDEBUG (compiles ~40% faster than -O3; asserts off, as in
Release; -O0 would make the tests themselves minutes long). Mutants run cheapest first: the SIMD
kernels (4 dispatch units), then the HF reader, then headers every test includes. A full rebuild
takes ~4 CPU-minutes, so a complete run is about an hour on an idle 2-core machine.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

# (file under include/posenc, exact text, replacement, what the bug is). Each text must occur
# exactly once in its file. Grouped by file, so that consecutive mutants rebuild the same units.
MUTANTS = [
    # rotary.hpp: amplitudes, inverse, table checks
    ("rope/rotary.hpp", "job.amplitude = job.inverse ? 1.0 / a : a;", "job.amplitude = a;",
     "inverse on the fly keeps the amplitude instead of dividing it out"),
    ("rope/rotary.hpp", "job.row_scale = job.inverse ? 1.0 / (a * a) : 1.0;", "job.row_scale = job.inverse ? 1.0 / a : 1.0;",
     "inverse through a table scales rows by 1/a instead of 1/a²"),
    ("rope/rotary.hpp", "return inv.size() == freq_.inv_freq.size() && table.amplitude() == freq_.attention_factor &&",
     "return inv.size() == freq_.inv_freq.size() &&", "a table with another amplitude is accepted"),
    ("rope/rotary.hpp", "        job.amplitude = 1.0;\n        execute(job);", "        execute(job);",
     "shift() re-applies the amplitude"),
    ("rope/rotary.hpp", "job.inverse = dir == rotation::inverse;", "job.inverse = false;",
     "rotation::inverse ignored"),
    # table.hpp
    ("rope/table.hpp", "args.amplitude = amplitude_;", "args.amplitude = 1.0;",
     "table rows built without the amplitude (SIMD table path)"),
    ("rope/table.hpp", "detail::cos_sin_row(inv_freq_.data(), n, p, amplitude_, r, r + n);",
     "detail::cos_sin_row(inv_freq_.data(), n, p, 1.0, r, r + n);",
     "table rows built without the amplitude (rotary_dim > 1024 path)"),
    ("rope/table.hpp", "return p >= 0 && p < positions_;", "return p >= 0 && p <= positions_;",
     "table bounds check off by one"),
    # layout.hpp, rotate_scalar.hpp (the scalar backend: rotary_dim > 1024)
    ("rope/layout.hpp", "static constexpr std::size_t first(std::size_t i, std::size_t /*rotary_dim*/) noexcept { return 2 * i; }",
     "static constexpr std::size_t first(std::size_t i, std::size_t /*rotary_dim*/) noexcept { return 2 * i + 1; }",
     "interleaved pair lanes swapped (scalar backend)"),
    ("rope/detail/rotate_scalar.hpp", "const double sign = inverse ? -1.0 : 1.0;", "const double sign = inverse ? 1.0 : -1.0;",
     "scalar backend rotates the wrong way"),
    # thread slices
    ("rope/detail/simd_bridge.hpp", "if (a.pos32) a.pos32 += begin;", "",
     "thread slice: int32 positions not offset"),
    ("rope/detail/simd_bridge.hpp", "if (a.pos64) a.pos64 += begin;", "if (a.pos64) a.pos64 += end - begin;",
     "thread slice: int64 positions offset by the slice length"),
    ("core/detail/parallel.hpp", "auto slice = [&](unsigned k) { f(n * k / threads, n * (k + 1) / threads); };",
     "auto slice = [&](unsigned k) { f(n * k / threads, n * (k + 1) / threads - (k + 1 < threads)); };",
     "thread slice boundary: one token per boundary skipped"),
    # SIMD kernels
    ("simd/rotate_kernels.hpp", "return ops::fnma(x2, s, x1 * c);", "return ops::fma(x2, s, x1 * c);",
     "half_split vector rotation: wrong sign of x2·sin"),
    ("simd/kernels.hpp", "alt[k] = k % 2 ? 1.0f : -1.0f;", "alt[k] = k % 2 ? -1.0f : 1.0f;",
     "interleaved vector rotation: sin signs swapped"),
    ("simd/kernels.hpp", "sv[u] = inverse ? -sn[u] : sn[u];", "sv[u] = sn[u];",
     "one-token column path: the inverse rotates forward"),
    ("simd/kernels.hpp", "v.dst_type != dtype::f32 || v.src != v.dst) return false;", "v.dst_type != dtype::f32) return false;",
     "one-token column path taken out of place: the source left as it was, the destination unwritten"),
    ("simd/kernels.hpp", "if (bytes > column_path_bytes || (lo[0] && lo[1] && lo[0] < hi[1] && lo[1] < hi[0])) return false;",
     "if (bytes > column_path_bytes) return false;",
     "one-token column path over overlapping Q and K: their lanes rotated in another order than the general path's"),
    ("simd/kernels.hpp", "+ i;  // in place\n                const std::size_t heads = v.heads, stride = v.dst_head_stride;",
     "+ i;  // in place\n                const std::size_t heads = v.heads, stride = a.head_dim;",
     "one-token column path: heads taken as dense"),
    ("simd/kernels.hpp", "+ 2 * i;  // in place\n                    const std::size_t heads = v.heads, stride = v.dst_head_stride;",
     "+ 2 * i;  // in place\n                    const std::size_t heads = v.heads, stride = a.head_dim;",
     "one-token column path, interleaved: heads taken as dense"),
    ("simd/kernels.hpp", "sd[1] = xsimd::swizzle(s, dup_high) * alternate;", "sd[1] = xsimd::swizzle(s, dup_high);",
     "interleaved per-lane rows: the second vector's sines without their alternating signs"),
    ("simd/kernels.hpp", "if (!row_base::row_within_reach(a.inv_freq, n, p)) return false;", "",
     "one-token column path: angles beyond the vector reduction not sent to the scalar route"),
    ("simd/lane_io.hpp", "for (std::size_t k = 0; k < m; ++k) y[k] = out[k];",
     "for (std::size_t k = 0; k + 1 < m; ++k) y[k] = out[k];", "tail: the last lane past the full vectors not written"),
    ("simd/lane_io.hpp", "        ops::store(out, v);\n        for (std::size_t k = 0; k < m; ++k) y[k] = out[k];",
     "        ops::store(out, v);\n        if constexpr (std::is_same_v<D, float>) if (m > 1) out[m - 1] = __builtin_nanf(\"\");\n"
     "        for (std::size_t k = 0; k < m; ++k) y[k] = out[k];",
     "tail: NaN written into the last lane of a float tail"),
    ("simd/cos_sin_rows.hpp", "const double b = amp * (reach * inv_freq[i] + 1e-13);", "const double b = amp * 1e-13;",
     "recurrence check: the angles' rounding at large positions left out of its bound"),
    ("simd/cos_sin_rows.hpp", "if (offset == 0 || first) {", "if (offset == 0 || (first && offset > 16)) {",
     "recurrence: first row of a call not seeded"),
    ("simd/cos_sin_rows.hpp", "static constexpr std::int64_t far_position = std::int64_t{1} << 26;",
     "static constexpr std::int64_t far_position = std::int64_t{1} << 40;",
     "vector angle reduction used beyond its exact range"),
    ("simd/arch_ops.hpp", "s = xsimd::select(odd, cos_r, sin_r) ^ (xsimd::bitwise_cast<dbatch>(q << 62) & sign);",
     "s = xsimd::select(odd, cos_r, sin_r) ^ (xsimd::bitwise_cast<dbatch>(q << 63) & sign);",
     "quadrants 1 and 2: wrong sine signs (SSE2, AVX2)"),
    ("simd/arch_ops.hpp", "const __mmask8 s_neg = _mm512_test_epi64_mask(q, _mm512_set1_epi64(2));",
     "const __mmask8 s_neg = _mm512_test_epi64_mask(q, _mm512_set1_epi64(1));",
     "quadrants 1 and 2: wrong sine signs (AVX-512)"),
    ("simd/arch_ops.hpp", "c = xsimd::select(odd, sin_r, cos_r) ^ (xsimd::bitwise_cast<dbatch>((q + ibatch(1)) << 62) & sign);",
     "c = xsimd::select(odd, sin_r, cos_r) ^ (xsimd::bitwise_cast<dbatch>(q << 62) & sign);",
     "quadrants 1 and 3: wrong cosine signs (SSE2, AVX2)"),
    ("simd/cos_sin_rows.hpp", "ops::quadrant(xsimd::bitwise_cast<ibatch>(n + dbatch(0x1.8p52)), cs, sn, c, s);",
     "ops::quadrant(xsimd::bitwise_cast<ibatch>(n + dbatch(0x1p52)), cs, sn, c, s);", "quadrants of negative n off (no bias half)"),
    ("simd/arch_ops.hpp", "xsimd::bitwise_cast<dbatch>((q << 63) | ibatch(0x3ff0000000000000)) < dbatch(0.0);",
     "xsimd::bitwise_cast<dbatch>((q << 62) | ibatch(0x3ff0000000000000)) < dbatch(0.0);",
     "cos and sin swapped in the wrong quadrants (SSE2, AVX2)"),
    ("simd/arch_ops.hpp", "const __mmask8 odd = _mm512_test_epi64_mask(q, _mm512_set1_epi64(1));",
     "const __mmask8 odd = _mm512_test_epi64_mask(q, _mm512_set1_epi64(2));",
     "cos and sin swapped in the wrong quadrants (AVX-512)"),
    ("simd/arch_ops.hpp", "const auto c_neg = static_cast<__mmask8>(s_neg ^ odd);", "const auto c_neg = static_cast<__mmask8>(s_neg);",
     "quadrants 1 and 3: wrong cosine signs (AVX-512)"),
    ("simd/cos_sin_rows.hpp", "if (amplitude == 1.0 ? columns(std::false_type{}) : columns(std::true_type{})) return;",
     "if (columns(std::false_type{})) return;", "a direct float row drops its amplitude"),
    ("simd/cos_sin_rows.hpp", "sn = ops::fma(z, sn, dbatch(-1.0 / 5040.0));", "sn = ops::fma(z, sn, dbatch(-1.0 / 5000.0));",
     "sine Taylor coefficient wrong"),
    ("simd/kernels.hpp", "if (src && a.row_scale == 1.0) {", "if (src) {", "row_scale ignored for table rows"),
    ("simd/kernels.hpp", "for (std::size_t i = 0; i < n; ++i) s[i] = -s[i];", "for (std::size_t i = 1; i < n; ++i) s[i] = -s[i];",
     "inverse: pair 0 not negated"),
    # frequencies and schedules
    ("core/rope_frequencies.hpp", "const auto rotary = static_cast<std::size_t>(static_cast<double>(head_dim) * partial_rotary_factor);",
     "const auto rotary = static_cast<std::size_t>(std::round(static_cast<double>(head_dim) * partial_rotary_factor));",
     "partial rotary: rounds instead of truncating"),
    ("rope/frequencies.hpp", "inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));",
     "inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim - 2));",
     "default inv_freq: exponent over d - 2"),
    ("rope/yarn.hpp", "low = std::floor(low);", "low = std::ceil(low);", "YaRN ramp: low bound ceiled"),
    ("rope/yarn.hpp", "high = std::min(high, d - 1.0);", "high = std::min(high, d / 2 - 1.0);", "YaRN ramp: high clamp"),
    ("rope/yarn.hpp", "return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;",
     "return scale <= 1.0 ? 1.0 : 0.1 * std::log(scale) + 1.0;", "YaRN mscale ignores m (DeepSeek)"),
    ("rope/llama3.hpp", "if (wavelen < high_freq_wavelen)", "if (wavelen < high_freq_wavelen * 1.05)",
     "llama3 band edge moved by 5%"),
    ("rope/llama3.hpp", "w[i] = 1.0 - (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);",
     "w[i] = (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);", "llama3 smooth factor inverted"),
    ("rope/longrope.hpp", "return seq_len > original_max_position; }", "return seq_len >= original_max_position; }",
     "longrope switches at L0 instead of L0 + 1"),
    ("rope/longrope.hpp", "return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max_position)));",
     "return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max_position) * 2));",
     "longrope amplitude formula"),
    ("rope/dynamic_ntk.hpp", "return detail::ntk_base(base, ratio - (factor - 1.0), rotary_dim,",
     "return detail::ntk_base(base, ratio - factor, rotary_dim,", "dynamic NTK formula: - s instead of - (s - 1)"),
    ("rope/dynamic_ntk.hpp",
     "const double ratio = factor * static_cast<double>(seq_len) / static_cast<double>(original_max_position);",
     "const double ratio = factor * static_cast<double>(seq_len - 1) / static_cast<double>(original_max_position);",
     "dynamic NTK: L - 1 instead of L"),
    ("rope/ntk_aware.hpp", "const double b = base * std::pow(scale, d / (d - 2.0));",
     "const double b = base * std::pow(scale, d / (d - 1.0));",
     "NTK base exponent (NTK-aware and dynamic NTK share it)"),
    ("rope/ntk_by_parts.hpp", "w[i] = 1.0 - std::clamp((turns - alpha) / (beta - alpha), 0.0, 1.0);",
     "w[i] = 1.0 - std::clamp((turns - alpha) / (beta + alpha), 0.0, 1.0);", "NTK-by-parts ramp denominator"),
    # biases and other encodings
    ("bias/alibi.hpp", "s[j] = static_cast<float>(s[j] + m * (causal ? rel : -std::abs(rel)));",
     "s[j] = static_cast<float>(s[j] + m * (causal ? rel : -rel));", "ALiBi symmetric: abs dropped (explicit keys)"),
    ("bias/alibi.hpp", "return start * std::pow(start, static_cast<double>(2 * (head - c)));",
     "return start * std::pow(start, static_cast<double>(2 * (head - c) + 1));", "ALiBi extra slopes off by one"),
    ("bias/t5.hpp", "const auto large = max_exact + static_cast<std::int64_t>(scaled);",
     "const auto large = max_exact + static_cast<std::int64_t>(std::lround(scaled));",
     "T5 log bucket rounded instead of truncated"),
    ("bias/t5.hpp", "offset = relative_position > 0 ? per_direction : 0;", "offset = relative_position >= 0 ? per_direction : 0;",
     "T5 bidirectional: r = 0 counted as forward"),
    ("absolute/sinusoidal.hpp", "out[2 * i] = std::sin(a);", "out[2 * i] = std::cos(a);", "sinusoidal: sin/cos swapped"),
    ("xpos/xpos.hpp", "return role == xpos_role::query ? e : -e;", "return role == xpos_role::query ? -e : e;",
     "xPos: decay sign swapped"),
    ("logit/nope.hpp", "return std::log(std::floor((static_cast<double>(pos) + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0;",
     "return std::log(std::floor(static_cast<double>(pos) / floor_scale) + 1.0) * attn_scale + 1.0;",
     "Llama 4 temperature: pos instead of pos + 1"),
    # HF config reader
    ("hf/families.hpp", '{.model_type = "qwen2", .max_position_embeddings = 32768,',
     '{.model_type = "qwen2", .layout = pairing::interleaved, .max_position_embeddings = 32768,', "layout: qwen2 made interleaved"),
    ("hf/families.hpp", '{.model_type = "gptj", .layout = pairing::interleaved,', '{.model_type = "gptj",',
     "layout: GPT-J made half-split"),
    ("hf/families.hpp", '.partial_key = "rotary_pct"', '.partial_key = "rotary_percentage"', "alias misspelt: rotary_pct"),
    ("hf/families.hpp", '.theta_key = "rotary_emb_base"', '.theta_key = "rotary_base"', "alias misspelt: rotary_emb_base"),
    ("hf/families.hpp", '.positions_key = "n_positions"', '.positions_key = "n_position"', "alias misspelt: n_positions"),
    ("hf/families.hpp", '.hidden_key = "n_embd"', '.hidden_key = "n_embed"', "alias misspelt: n_embd"),
    ("hf/config.hpp", "ctx.gptj_rotary_dim = top.integer(fam.rotary_dim_key, 1, limits::head_dim, fam.rotary_dim);",
     "ctx.gptj_rotary_dim = fam.rotary_dim;", "GPT-J rotary_dim ignored"),
    ("hf/detail/rope_reader.hpp", 'return top.boolean("rope_interleave", true) ? rope_layout::interleaved : rope_layout::half_split;',
     "return rope_layout::interleaved;", "DeepSeek rope_interleave ignored"),
    # engine integration: 16-bit storage, the fused norm, out of place, batch invariance
    ("simd/arch_ops.hpp", "_mm512_adds_epu16(low, _mm512_set1_epi16(-2))", "_mm512_adds_epu16(low, _mm512_set1_epi16(-1))",
     "bf16 word pairs (AVX-512): ties rounded up, not to even"),
    ("simd/arch_ops.hpp", "_mm256_adds_epu16(low, _mm256_set1_epi16(-2))", "_mm256_adds_epu16(low, _mm256_set1_epi16(-1))",
     "bf16 word pairs (AVX2): ties rounded up, not to even"),
    ("simd/arch_ops.hpp", "__m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);",
     "__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x8000)), 16);",
     "bf16 per-lane store (AVX-512): round half up"),
    ("simd/arch_ops.hpp", "_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))", "_mm512_castps256_ps512(_mm512_cvtpd_ps(hi))",
     "cos/sin rows (AVX-512): the narrowed vector's low half from the high doubles"),
    ("simd/arch_ops.hpp", "_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
     "_mm512_cvtps_ph(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)", "fp16 store (AVX-512): truncates"),
    ("simd/arch_ops.hpp", "const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));",
     "const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(1));",
     "bf16 word pairs joined back (AVX-512): the second vector's columns from the wrong lanes"),
    ("attention/kernels.hpp", "        return {x.even * s, x.odd * s};", "        return {x.even * s, x.odd};",
     "bf16 PV through word pairs (AVX-512): the odd columns not rescaled"),
    ("simd/kernels.hpp", "if (bf16_views) tr.pairs = !ops::any_nan(tr.c, tr.s, n);", "if (bf16_views) tr.pairs = true;",
     "bf16 word pairs also for rows that hold NaN (outside their precondition)"),
    ("simd/norm_kernels.hpp", "(one / xsimd::sqrt((power_of_two ? sv * inv_d : sv / d) + e)).store_aligned(v);",
     "(one / xsimd::sqrt(power_of_two ? sv * inv_d : sv / d)).store_aligned(v);", "fused norm: eps ignored"),
    ("simd/kernels.hpp", "                                tr.out_of_place);", "                                false);",
     "out of place: lanes past rotary_dim not copied to the destination"),
    ("simd/cos_sin_rows.hpp", "        return unstable == 0;", "        return true;",
     "recurrence rows used without the check that they round like the direct row"),
    ("rope/qk_norm.hpp", "for (float& x : w_) x = 1.0f + x;", "for (float& x : w_) x = 0.0f + x;",
     "Gemma's 1 + weight dropped"),
    # attention and the KV cache
    ("attention/mask.hpp", "return t.k_hi <= t.q_lo ? tile_visibility::all : tile_visibility::partial;",
     "return t.k_lo <= t.q_lo ? tile_visibility::all : tile_visibility::partial;", "causal: a diagonal tile taken as all visible"),
    ("attention/mask.hpp", "return j <= i && distance(i, j) < static_cast<std::uint64_t>(window);",
     "return j <= i && distance(i, j) <= static_cast<std::uint64_t>(window);", "sliding window one key too wide"),
    ("attention/mask.hpp", "return {std::numeric_limits<std::int64_t>::min(), i};", "return {std::numeric_limits<std::int64_t>::min(), i - 1};",
     "causal visible_keys: the query's own position left out"),
    ("attention/mask.hpp", "if (__builtin_sub_overflow(i, window - 1, &lo)) lo", "if (__builtin_sub_overflow(i, window, &lo)) lo",
     "sliding window visible_keys one key too wide"),
    ("attention/mask.hpp", "if (__builtin_sub_overflow(i, window - 1, &lo)) lo = std::numeric_limits<std::int64_t>::min();",
     "lo = static_cast<std::int64_t>(static_cast<std::uint64_t>(i) - static_cast<std::uint64_t>(window - 1));",
     "sliding window visible_keys wraps below int64's bottom"),
    ("attention/mask.hpp", "if (__builtin_mul_overflow(chunk_of(i), chunk, &lo))", "if (__builtin_mul_overflow(i / chunk, chunk, &lo))",
     "chunked visible_keys: the chunk's start by truncating division (negative positions)"),
    ("attention/tile_loop.hpp", "r.hi >= k_hi ? n : static_cast<std::size_t>(r.hi - k_lo) + 1};",
     "r.hi >= k_hi ? n : static_cast<std::size_t>(r.hi - k_lo)};", "keys_within (mask_scores): the last visible key of a cut row masked"),
    ("attention/tile_loop.hpp", "return {r.lo <= k_lo ? 0 : static_cast<std::size_t>(r.lo - k_lo),",
     "return {r.lo <= k_lo ? 0 : static_cast<std::size_t>(r.lo - k_lo) + 1,", "keys_within (mask_scores): the first visible key of a cut row masked"),
    ("attention/kernels_softmax.hpp", "a.l[r] = xsimd::fma(batch(a.l[r]), alpha, batch(hsum(sum))).get(0);",
     "a.l[r] = (batch(a.l[r]) + batch(hsum(sum))).get(0);", "online softmax, one row at a time: the running sum not rescaled"),
    ("attention/kernels_softmax.hpp", "const batch l_new = xsimd::fma(batch::load_aligned(lanes), alpha, row_sums(part));",
     "const batch l_new = batch::load_aligned(lanes) + row_sums(part);",
     "online softmax, rows as lanes: the running sum not rescaled"),
    ("attention/kernels_softmax.hpp", "const batch mx = row_maxes(part);", "const batch mx = part[0];",
     "online softmax, rows as lanes: every row takes the first row's maximum lanes"),
    ("attention/kernels_softmax.hpp", "        float m_new = tile_max > m_old ? tile_max : m_old;", "        float m_new = tile_max;",
     "online softmax, one row at a time: the running maximum not carried over"),
    ("attention/kernels_softmax.hpp", "            return put_factor(a, r, 1.0f);", "            return;",
     "online softmax, one row at a time: a row that sees nothing keeps an earlier tile's rescale factor"),
    ("attention/kernels.hpp", "acc[i] *= batch(a.acc_scale[r0 + i]);", "acc[i] *= batch(a.acc_scale[r0]);",
     "pv step, the last columns: every row of a block takes the first row's rescale factor"),
    ("attention/kernels_math.hpp", "const batch xc = xsimd::max(batch(-87.0f), x);", "const batch xc = xsimd::max(x, batch(-87.0f));",
     "exp: a NaN argument clamped to -87 (a NaN logit not propagated)"),
    ("attention/kernels_softmax.hpp", "        if (m_new == ninf) m_new = settle_unseen(v);\n", "",
     "online softmax, one row at a time: a row of NaN logits only returns zeros"),
    ("attention/kernels_softmax.hpp", "            if (m_row[i] == ninf) m_row[i] = settle_unseen(v);\n", "",
     "online softmax, rows as lanes: a row of NaN logits only returns zeros"),
    ("attention/kernels_softmax.hpp", "if (m != m) return xsimd::select(s == batch(ninf), zero, nan);", "if (m != m) return nan;",
     "online softmax: under a NaN maximum masked keys get p = NaN (NaN gradients on keys the row does not see)"),
    ("attention/kernels_softmax.hpp", "xsimd::select(xsimd::isnan(s), nan, zero));", "zero);",
     "online softmax: under a +inf maximum a NaN logit gets p = 0"),
    ("attention/kernels_convert.hpp", "xsimd::select(pj == zero, zero, x).store_aligned(ds + j);", "x.store_aligned(ds + j);",
     "backward: a masked key's dS is 0·(dP − NaN) under a NaN row"),
    ("attention/tile_loop.hpp", "a = mt == m ? 1.0 : std::exp(double(mt) - m), b = ms == m ? 1.0 : std::exp(double(ms) - m);",
     "a = std::exp(double(mt) - m), b = std::exp(double(ms) - m);", "split-KV fold: two segments with +inf maxima weighed exp(NaN)"),
    ("attention/tile_loop.hpp", "num = m == mf ? 1.0 : std::exp(m - mf);", "num = std::exp(m - mf);",
     "sinks beside a +inf maximum: the row weighed exp(NaN)"),
    ("grad/detail/attention_passes.hpp", "w.rows().lse[r] = l == std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::quiet_NaN() : l;",
     "w.rows().lse[r] = l;", "backward: a +inf lse row gets the gradients of p = 1 on each +inf logit, not NaN"),
    ("attention/partial.hpp", "m = std::isnan(p.lse[r]) ? std::numeric_limits<double>::quiet_NaN() : std::max(",
     "m = false ? std::numeric_limits<double>::quiet_NaN() : std::max(",
     "merge: a NaN part beside parts that saw nothing returns zeros"),
    ("attention/kernels_softmax.hpp", "            if (m_row[i] == ninf) {", "            if (false) {",
     "online softmax, rows as lanes: a row that has seen nothing gets p = exp(s), not 0"),
    ("attention/kernels_softmax.hpp", "return xsimd::select(m_old == m_new, batch(1.0f), exp_nonpositive(m_old - m_new));",
     "return exp_nonpositive(m_old - m_new);", "online softmax: a standing +inf maximum rescales by exp(NaN), not 1"),
    ("attention/kernels_softmax.hpp", "if (store_capped) v[u].store_aligned(s + u * W);", "(void)store_capped;",
     "online softmax, rows as lanes: soft-capped scores not stored back"),
    ("attention/kernels_softmax.hpp", "const __m512 &x = v[transposed4x4(2 * i)], &y = v[transposed4x4(2 * i + 1)];",
     "const __m512 &x = v[2 * i], &y = v[2 * i + 1];", "16-vector reduction: inputs not fed transposed (lane i is not v[i]'s sum)"),
    ("attention/kernels.hpp", "_mm_storeu_ps(s + 2 * BK, _mm512_extractf32x4_ps(v, 2));", "_mm_storeu_ps(s + 2 * BK, _mm512_extractf32x4_ps(v, 3));",
     "decode QK 4x4 block: row r0 + 2 stored from row r0 + 3's lane"),
    ("attention/kernels.hpp", "const batch sc(a.acc_scale[r0 + i]);", "const batch sc(a.acc_scale[r0]);",
     "pv step, whole vectors: every row of a block takes the first row's rescale factor"),
    ("attention/kernels.hpp", "n = row_keys[r + i] > n ? row_keys[r + i] : n;", "n = row_keys[r] > n ? row_keys[r] : n;",
     "row_keys: a block of rows stops at its first row's last key, not its largest"),
    ("attention/kernels.hpp", "const std::size_t nv = (block_keys<R>(a.row_keys, r, BK) + W - 1) / W;",
     "const std::size_t nv = block_keys<R>(a.row_keys, r, BK) / W;", "row_keys: the QK block drops a partly needed last vector"),
    ("attention/kernels.hpp", "        qk_rest<R>(a, r, c, nv - c);", "", "row_keys: the QK block's last vectors (fewer than a chunk) not computed"),
    ("attention/tile_loop.hpp", "keys_within(mask.visible_keys(t.qs[i]), ks.front(), ks.size()).second);",
     "keys_within(mask.visible_keys(t.qs[i]), ks.front(), ks.size()).second - 1);",
     "visible_key_ends: a row's last visible key left out of the products"),
    ("attention/tile_loop.hpp", "if (!ks.is_consecutive() || ks.size() == 0) return nullptr;", "if (ks.size() == 0) return nullptr;",
     "visible_key_ends: key positions with gaps taken as consecutive"),
    ("attention/tile_loop.hpp", "o[d] = static_cast<float>(acc[d] * f) + 0.0f;", "o[d] = static_cast<float>(acc[d] * f);",
     "finish_rows: a zero's sign depends on which masked keys' zero products a tile skipped"),
    ("attention/kv_cache.hpp", "const bool after = i == 0 ? (size_ == 0 || p > pos_[size_ - 1]) : p > pos[i - 1];",
     "const bool after = i == 0 ? (size_ == 0 || p >= pos_[size_ - 1]) : p > pos[i - 1];",
     "kv_cache: a repeated position accepted"),
    ("attention/kv_cache.hpp", "if (n > shape_.capacity - size_)", "if (n > shape_.capacity - size_ + 1)",
     "kv_cache: one token past the capacity accepted"),
    ("attention/workspace.hpp", "if (!covers(ws.shape_, shape) || ws.scratch_.size() < threads) {",
     "if (ws.scratch_.size() < threads) {", "workspace: buffers of another tile shape reused"),
    ("attention/workspace.hpp", "have.tile_tokens >= need.tile_tokens && have.G >= need.G", "have.G >= need.G",
     "workspace: buffers with shorter query tiles (and terms) taken as large enough"),
    ("attention/workspace.hpp", "                ws.busy_.store(false, std::memory_order_release);\n                throw;",
     "                throw;", "workspace: left in use after its buffers failed to grow"),
    # helper-46's audit (stop 56): grad/ and M-RoPE, each killed by a test added for it
    ("grad/detail/attention_passes.hpp", "if (kt.seq_hi < t.seq_lo || kt.seq_lo > t.seq_hi)",
     "if (kt.seq_hi <= t.seq_lo || kt.seq_lo > t.seq_hi)", "backward: a key tile whose last sequence id is the query tile's first skipped"),
    ("grad/detail/attention_passes.hpp", "if (opt.key_sequence[kt.j0 + j] != qid) srow[j] = ninf;",
     "if (opt.key_sequence[j] != qid) srow[j] = ninf;", "backward: key tiles past the first read the first tile's sequence ids"),
    ("grad/detail/transform_transpose.hpp", "            if constexpr (Keys)\n                transform_keys(t, cols",
     "            if constexpr (!Keys)\n                transform_keys(t, cols", "backward: a custom linear transform's query and key maps swapped"),
    ("grad/transform.hpp", "require_table_of(t.table, t.rotary.frequencies(), pos);", "",
     "transform_backward: an M-RoPE table_transform's table not checked"),
    ("grad/attention.hpp", 'require(pg.sinks.size() == Hq, "param_grads.sinks"', 'require(pg.sinks.size() >= Hq, "param_grads.sinks"',
     "attention_backward: a longer param_grads.sinks accepted"),
    ("rope/mrope_positions.hpp", "else\n                    b.grid(g.t, gh, gw, [](std::int64_t k) { return k; });",
     "else\n                    b.grid(g.t, gh, gw, [](std::int64_t) { return std::int64_t{0}; });",
     "Qwen3-VL images of several frames all at temporal id 0"),
    ("rope/mrope_positions.hpp",
     "const float v = (static_cast<float>(k) * static_cast<float>(second_per_grid)) * static_cast<float>(tokens_per_second);",
     "const double v = static_cast<double>(k) * second_per_grid * tokens_per_second;",
     "Qwen2.5-VL temporal ids computed in double instead of HF's float32"),
    ("rope/mrope_positions.hpp", "g.w >= s && g.w <= detail::max_prompt_tokens && g.w % s == 0",
     "g.w >= s && g.w <= detail::max_prompt_tokens", "M-RoPE: a grid width not a multiple of the merge size accepted"),
    ("rope/mrope_positions.hpp", "second_per_grid.empty() ? 1.0 : second_per_grid[video]",
     "second_per_grid.empty() ? 1.0 : second_per_grid[0]", "M-RoPE: every video takes the first video's second_per_grid"),
    ("rope/multi_axis.hpp", "job.row_scale = table && inverse ? 1.0 / (a * a) : 1.0;",
     "job.row_scale = table && inverse ? 1.0 / a : 1.0;", "M-RoPE: the inverse through a table divides by a, not a²"),
    ("rope/multi_axis.hpp", "if (table.inv_freq() != freq_.inv_freq || table.amplitude() != freq_.attention_factor)",
     "if (table.inv_freq() != freq_.inv_freq)", "M-RoPE: a table of another amplitude accepted"),
    ("attention/workspace.hpp", "have.D >= need.D && have.Dv >= need.Dv &&", "have.D >= need.D &&",
     "workspace: buffers for narrower values taken as large enough"),
    ("attention/workspace.hpp", "            shape_ = o.shape_;\n", "",
     "workspace: move assignment keeps the target's old shape with the source's buffers"),
    ("attention/workspace.hpp", "if (ws.busy_.exchange(true, std::memory_order_acquire))", "if (false)",
     "workspace: a second call on a workspace in use not refused"),
    ("attention/workspace.hpp", "~lease() { ws_.busy_.store(false, std::memory_order_release); }", "~lease() {}",
     "workspace: never released after a call"),
    ("attention/workspace.hpp", "if (ws_.split_states_.size() < n) {", "if (ws_.split_states_.empty()) {",
     "workspace: split-KV states kept at their first size"),
    ("attention/layer.hpp", "        o.workspace = opt_.workspace;\n", "",
     "attention_layer: its workspace never reaches attention (every call allocates)"),
    ("attention/layer.hpp", "if (opt_.executor_fn) o.executor = std::cref(opt_.executor_fn);", "o.executor = opt_.executor_fn;",
     "attention_layer: the engine's executor copied into every call's options (an allocation per call)"),
    ("attention/tile_loop.hpp", "acc[d] = static_cast<float>(acc[d] * a + sacc[d] * b);",
     "acc[d] = static_cast<float>(acc[d] + sacc[d] * b);", "key segments folded without rescaling the total"),
    ("attention/tile_loop.hpp", "extra.lse[(t.t0 + i) * sh.Hq + head] = static_cast<float>(m + std::log(l));",
     "extra.lse[(t.t0 + i) * sh.Hq + head] = static_cast<float>(std::log(l));", "partial result: lse without the running max"),
    ("attention/attention.hpp", "        for (std::size_t i = 0; i < n; ++i) {\n            const std::size_t item = (first + i) / sh.segments;",
     "        for (std::size_t j = 0; j < n; ++j) {\n            const std::size_t i = n - 1 - j, item = (first + i) / sh.segments;",
     "split-KV: a wave's segments folded in another order than one thread folds them"),
    ("attention/attention.hpp", "for (std::size_t k = taken.fetch_add(1, std::memory_order_relaxed); k < units;",
     "for (std::size_t k = taken.fetch_add(1, std::memory_order_relaxed); k + 1 < units;", "threads skip one work unit"),
    ("attention/attention.hpp", "if (unit < failed_unit) failed_unit = unit, failure = std::current_exception();",
     "if (!failure) failed_unit = unit, failure = std::current_exception();", "threads rethrow the first exception in time, not the lowest unit's"),
    ("attention/attention.hpp", "inline constexpr bool may_throw_inside =\n    !(", "inline constexpr bool may_throw_inside = false && !(",
     "a custom transform that throws inside writes part of out"),
    ("attention/options.hpp", "std::size_t min_fmas_per_thread = std::size_t{1} << 21;", "std::size_t min_fmas_per_thread = 1;",
     "a one-token decode against a short cache starts threads"),
    ("attention/attention.hpp", "        if (divides(v.heads(), q.heads()) && !divides(k.heads(), q.heads()))", "        if (false)",
     "K's wrong head count blamed on V"),
    ("attention/partial.hpp", "double m = sinks.empty() ? ninf : static_cast<double>(sinks[h]);",
     "const std::span<const float> sinks{}; double m = ninf;",
     "merge: sinks left out of the denominator"),
    ("attention/kv_cache.hpp", "            if (fe.inv_freq[i] != fc.inv_freq[i])", "            if (false)",
     "attention over a cache with a query rotary of other frequencies accepted"),
    ("attention/kernels_convert.hpp", "            for (; i < a.dim; ++i) d[i].bits = narrow_bits<H>(s[i]);",
     "            for (; i < a.dim; ++i) d[i].bits = static_cast<std::uint16_t>(__builtin_bit_cast(std::uint32_t, s[i]) >> 16);",
     "16-bit cache: tail lanes truncated (and fp16 tails written as bf16)"),
    ("attention/kernels_convert.hpp", "        else if (a.type == dtype::fp16)\n            widen_rows<fp16>(a);",
     "        else if (a.type == dtype::fp16)\n            widen_rows<bf16>(a);",
     "fp16 K/V read as bf16"),
    ("attention/kernels_convert.hpp", "f(a.factor ? a.factor[r] : 1.0f);", "f(1.0f);",
     "backward: dS's row factor (the logit scale) dropped"),
    ("attention/tile_loop.hpp", "    return exact;\n}", "    return true;\n}",
     "ALiBi terms added in float also where they are not exact floats"),
    ("attention/tile_loop.hpp", "for (std::size_t g = 0; g < G && exact; ++g)", "for (std::size_t g = 0; g < 1 && exact; ++g)",
     "ALiBi terms in float: only the group's first head checked for exactness"),
    ("attention/kernels_convert.hpp", "for (std::size_t j = 0; j < a.n; ++j) s[j] += tf[j];",
     "for (std::size_t j = 0; j < a.n; ++j) s[j] -= tf[j];", "ALiBi terms in float subtracted"),
    ("xpos/xpos.hpp", "simd::rotate_args a = detail::slice(args, b, e);", "simd::rotate_args a = detail::slice(args, 0, e - b);",
     "xPos: every block of rows rotates the call's first tokens"),
    ("attention/tile_loop.hpp", "if (sh.rows_pad > dot_rows) t.rows_pad", "if (false) t.rows_pad",
     "a short last query tile takes the dot-product QK path (its rows' bits depend on the tiling)"),
    ("attention/kernels.hpp", "return Tr ? a.p[j * BK + r] : a.p[r * BK + j];", "return a.p[r * BK + j];",
     "backward: the key-side pv step reads the block untransposed"),
    ("attention/shaw.hpp", "if (weights.size() != keys.size() || out.size() != dv_)", "if (false)",
     "Shaw's output term: mismatched spans truncated instead of rejected"),
    # the views of a call
    ("rope/detail/rotate_job.hpp", "if (!q.empty() && !k.empty() && q.data() == k.data())", "if (false)",
     "in-place Q and K of the same memory accepted (rotated twice)"),
    ("rope/detail/rotate_job.hpp", "if (!absent(v) && (v.head_dim() != head_dim", "if (!v.empty() && (v.head_dim() != head_dim",
     "an empty view skipped whatever its token count"),
    # a mutation audit of headers no mutant touched (stop 57): the bf16 tie, MPT's order, the lane
    # pass-through and the overflow check were caught by the suite as it was, the others by tests added then
    ('core/dtypes.hpp', 'if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);', 'if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>(u >> 16);',
     'bf16: NaN not quieted (a NaN whose payload is in the low 16 bits becomes inf)'),
    ('core/dtypes.hpp', 'return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));', 'return static_cast<std::uint16_t>(sign | 0x7C00u | ((a >> 13) & 0x3FFu));',
     'fp16: NaN not quieted (a NaN whose payload is in the low 13 bits becomes inf)'),
    ('core/dtypes.hpp', 'if (rem > half || (rem == half && (q & 1u))) ++q;', 'if (rem >= half) ++q;',
     'fp16 subnormals: ties round up instead of to even'),
    ('core/dtypes.hpp', 'return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);', 'return static_cast<std::uint16_t>((u + 0x8000u) >> 16);',
     'bf16: ties round half up instead of to even'),
    ('core/tensor.hpp', 'if (first > shape_.tokens || count > shape_.tokens - first)', 'if (first > shape_.tokens || count > shape_.tokens)',
     'tokens_slice: range check ignores first (a slice past the end is accepted)'),
    ('core/tensor.hpp', 'return heads_view(data_ + first * token_stride_, {count,', 'return heads_view(data_ + first * shape_.heads * shape_.head_dim, {count,',
     'tokens_slice: token stride dropped (start offset computed as if dense)'),
    ('rope/linear.hpp', 'return std::vector<double>(rotary_dim / 2, 1.0);', 'return std::vector<double>(rotary_dim / 2, 0.0);',
     'linear (PI): interpolation weights 0 (every pair reported as extrapolated)'),
    ('rope/vision2d.hpp', 'detail::require(g.w >= 1 && g.w <= (1 << 20) && g.w % s == 0, "grid.w", g.w,', 'detail::require(g.w >= 1 && g.w <= (1 << 20), "grid.w", g.w,',
     'qwen_vision_positions: grid.w not checked to be a multiple of spatial_merge_size'),
    ('hf/encoding.hpp', 'a.order = bias_order::scale_then_add;  // MPT: scores·softmax_scale + attn_bias', 'a.order = bias_order::add_then_scale;  // MPT: scores·softmax_scale + attn_bias',
     'MPT ALiBi: bias added before the scale'),
    ('hf/attention_layer.hpp', '    o.softcap = l.softcap;\n', '',
     "make_attention_layer: the config's softcap not applied"),
    ('hf/layers.hpp', '        if (!(s > 0.0)) throw config_error(top.name("query_pre_attn_scalar"), detail::to_text(s), "must be > 0");\n', '',
     'query_pre_attn_scalar <= 0 accepted (scale inf or NaN)'),
    ('hf/detail/json_reader.hpp', '    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;\n', '',
     'describe(): a long value cut inside a UTF-8 character'),
    ('analysis/alibi_rope.hpp', 'max_phase > 0.0 && max_phase <= std::acos(-1.0) / 2,', 'max_phase > 0.0 && max_phase < std::acos(-1.0) / 2,',
     'alibi_rope_for_window: max_phase = pi/2 rejected'),
    ('rope/any_rotary.hpp', '(dims.validate(), schedule.frequencies(dims.rotary(), seq_len))', '(dims.validate(), schedule.frequencies(dims.rotary()))',
     'any_rotary from a typed schedule: seq_len dropped'),
    ('rope/convert.hpp', 'if (j >= rotary_dim) return j;', 'if (j > rotary_dim) return j;',
     'interleaved_lane_of_half_split: j == rotary_dim not treated as a pass-through lane'),
    ('core/positions.hpp', 'start > std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(count - 1))', 'start > std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(count))',
     'position_ids::consecutive: overflow check off by one (the last representable run rejected)'),
    # the CPU's facts
    ("simd/cpu.hpp", "return decode_cpuid(l1[2], v[1], v[3], v[2]);", "return decode_cpuid(l1[2], v[1], v[2], v[3]);",
     "the vendor string read as EBX, ECX, EDX instead of EBX, EDX, ECX (Intel)"),
    # found surviving by a mutation audit (stop 54); now caught
    ("attention/workspace.hpp", "have.G >= need.G && (have.key_copy || !need.key_copy);", "have.G >= need.G;",
     "a workspace without a key copy taken for a call that rotates keys"),
    ("attention/attention.hpp", "fold_segment(state_at(totals + item * per_state), state_at(states + i * per_state)",
     "fold_segment(state_at(totals + item * per_state), state_at(states + (first + i) * per_state)",
     "split-KV decode: the fold reads the wrong wave's segment states"),
    ("attention/partial.hpp", "double m = sinks.empty() ? ninf : static_cast<double>(sinks[h]);", "double m = ninf;",
     "merge: the running max leaves out the sink (a row no part saw loses its sink; a far sink overflows)"),
    ("attention/kv_cache.hpp", "n_sink > 0 ? pos_[n_sink - 1] + 1 : pos_[0];", "n_sink > 0 ? pos_[n_sink] : pos_[0];",
     "context_shift renumbers from the first dropped position, not the last sink + 1"),
    ("attention/tile_loop.hpp", "l = l * num + std::exp(sink - mf);", "l = l + std::exp(sink - mf);",
     "a sink above the row's max: the keys' sum not rescaled"),
    ("attention/tile_loop.hpp", "total.l[r] = static_cast<float>(total.l[r] * a + seg.l[r] * b);",
     "total.l[r] = static_cast<float>(total.l[r] * a + seg.l[r]);", "split-KV fold: a segment's sum not rescaled"),
    ("attention/tile_loop.hpp", "w.row_scale[r] = r < t.R ? w.scale[r / G] : 0.0f;", "w.row_scale[r] = r < t.R ? w.scale[r % G] : 0.0f;",
     "per-query logit scales indexed by head instead of token"),
    # a second audit (stop 55): killed by the suite as it was, or by the tests it added
    ("attention/kv_cache.hpp", "if (n_sink > size_ || n_recent > size_ - n_sink)", "if (n_sink > size_ || n_recent > size_)",
     "context_shift: n_sink + n_recent > size() accepted (size wraps)"),
    ("attention/kv_cache.hpp", "if (x.tokens() != n || x.heads() != shape_.kv_heads || x.head_dim() != dim)",
     "if (x.tokens() != n || x.heads() != shape_.kv_heads)", "kv_cache append: K/V of another head_dim accepted"),
    ("attention/kv_cache.hpp", "narrow({src.row(t, 0), src.heads(), dim, src.head_stride(),", "narrow({src.row(t, 0), src.heads(), dim, dim,",
     "16-bit cache: a float source's heads taken as packed (a fused projection's head stride ignored)"),
    ("attention/kv_cache.hpp", "transform_.shift(view(k_.data(), from, n_recent, shape_.head_dim), delta);",
     "transform_.shift(view(k_.data(), from, n_recent - 1, shape_.head_dim), delta);", "context_shift: the last kept key not re-rotated"),
    ("attention/partial.hpp", "(v.heads() - 1) * v.head_stride() + v.head_dim();", "(v.heads() - 1) * v.head_stride() + v.head_dim() - 1;",
     "partial/merge overlap checks: a view's last element left out of its byte range"),
    ("attention/partial.hpp", "const bool same_out = p.out.data() == out.data() && p.out.token_stride() == out.token_stride() &&\n                              p.out.head_stride() == out.head_stride();",
     "const bool same_out = p.out.data() == out.data();", "merge: a part at out's address with other strides taken as out itself"),
    ("attention/attention.hpp", "        std::copy(staged_lse.begin(), staged_lse.end(), lse.begin());\n", "",
     "staged call (a custom transform): lse never committed"),
    ("attention/attention.hpp", "    require(!views_overlap(out, v), \"out\", \"view\", \"overlaps v\");\n", "",
     "attention: out overlapping v accepted"),
    ("attention/kernels_softmax.hpp", "v[u] = xsimd::select(v[u] == neg, v[u], c * tanh_(v[u] * inv));", "v[u] = c * tanh_(v[u] * inv);",
     "softcap: masked keys capped to -softcap (they get weight)"),
    ("attention/kernels_softmax.hpp", "for (std::size_t j = a.keys; j < BK; ++j) s[j] = ninf;", "for (std::size_t j = a.keys + 1; j < BK; ++j) s[j] = ninf;",
     "softmax: the first padding score of a short key tile not masked"),
    ("attention/kernels_convert.hpp", "for (; i < a.dim; ++i) d[i] = to_float(s[i]);", "for (; i + 1 < a.dim; ++i) d[i] = to_float(s[i]);",
     "widen: the last tail lane of a row not widened"),
    ("attention/tile_loop.hpp", "else if (!(lo == hi && t.seq_lo == t.seq_hi && lo == t.seq_lo))", "else if (!(lo == hi && lo == t.seq_lo))",
     "packed sequences: a key tile of one sequence taken as all visible to a query tile spanning several"),
    ("attention/tile_loop.hpp", "if (ks.is_consecutive() && n > 0) {", "if (n > 0) {",
     "mask_scores: key positions with gaps taken as consecutive"),
    ("attention/kernels.hpp", "qk_dot_4x4_store(a, k, r0, j + 4 * b, acc);", "qk_dot_4x4_store(a, k, r0, j + 4 * ((b + 1) % blocks), acc);",
     "16-bit decode QK (AVX-512): a parked block's sums stored as the next block's keys"),
    ("attention/kernels.hpp", "_mm512_store_ps(parked[b][r0 / RB] + 16 * i, acc[i]);", "_mm512_store_ps(parked[b][0] + 16 * i, acc[i]);",
     "16-bit decode QK (AVX-512): both row blocks' sums parked in the first's place"),
]


# Test files per area, for the first pass of mutants of headers that every test includes.
GROUPS = {
    "rope": ["test_rope_reference", "test_rope_properties", "test_errors"],
    "schedules": ["test_schedules_golden", "test_rope_properties", "test_rope_reference"],
    "bias": ["test_alibi", "test_t5", "test_encodings_readme"],
    "other": ["test_sinusoidal", "test_xpos", "test_nope", "test_encodings_readme"],
    "hf": ["test_hf_config"],
    "attention": ["test_attention", "test_attention_properties", "test_kv_cache", "test_hardening_attention", "test_attention_workspace",
                  "test_attention_engine_kv", "test_attention_nonfinite", "test_attention_distance_bias"],
    "grad": ["test_grad_attention", "test_grad_attention_cases", "test_grad_transform"],
    "mrope": ["test_mrope", "test_mrope_positions", "test_mrope_hf", "test_mrope_readme", "test_vision2d"],
    "engine": ["test_storage16", "test_out_of_place", "test_batch_invariance", "test_fused_norm", "test_bf16_exact"],
}

# Headers compiled only into the per-architecture kernel units under run-time dispatch (and into
# posenc-inspect, built without it): a mutant there rebuilds just those, so it runs against the whole
# suite at once.
KERNEL_UNITS = ("simd/kernels.hpp", "simd/lane_io.hpp", "simd/cos_sin_rows.hpp", "simd/norm_kernels.hpp",
                "simd/rotate_kernels.hpp", "simd/arch_ops.hpp", "attention/kernels.hpp",
                "attention/kernels_math.hpp", "attention/kernels_convert.hpp", "attention/kernels_softmax.hpp")


def group_of(f):
    if f in KERNEL_UNITS:
        return None  # only the kernel units rebuild: cheap in full
    if f.startswith("attention/"):
        return "attention"
    if f.startswith("grad/"):
        return "grad"
    if f in ("rope/mrope.hpp", "rope/mrope_positions.hpp", "rope/multi_axis.hpp", "rope/vision2d.hpp"):
        return "mrope"
    if f == "rope/qk_norm.hpp":
        return "engine"
    if f.startswith("hf/"):
        return "hf"
    if f.startswith("bias/"):
        return "bias"
    if f.startswith(("absolute/", "xpos/", "logit/")):
        return "other"
    if f.split("/")[-1] in ("frequencies.hpp", "rope_frequencies.hpp", "yarn.hpp", "llama3.hpp", "longrope.hpp", "dynamic_ntk.hpp",
                            "ntk_aware.hpp", "ntk_by_parts.hpp"):
        return "schedules"
    return "rope"


GROUP_CMAKE = """
# --- added by tools/mutation-check.py in its scratch copy only ---
foreach(group {groups})
  list(TRANSFORM posenc_mut_${{group}} PREPEND "${{CMAKE_CURRENT_SOURCE_DIR}}/")
  list(TRANSFORM posenc_mut_${{group}} APPEND ".cpp")
  add_executable(mut-${{group}} ${{posenc_mut_${{group}}}})
  target_link_libraries(mut-${{group}} PRIVATE posenc::hf posenc_warnings Catch2::Catch2WithMain)
  posenc_add_simd_dispatch(mut-${{group}})
  target_include_directories(mut-${{group}} PRIVATE "${{CMAKE_CURRENT_SOURCE_DIR}}")
  target_compile_definitions(mut-${{group}} PRIVATE POSENC_TEST_DATA_DIR="${{CMAKE_CURRENT_SOURCE_DIR}}/data")
endforeach()
"""


# Mutants of one instruction set's code, or of what one vendor's CPUs are told (tagged so in their
# description): the tests run that code, or see the difference, only on such a CPU, so elsewhere they
# are skipped, not counted as survivors. (/proc/cpuinfo's words: its flags and its vendor_id.)
NEEDS = {"(AVX-512)": "avx512bw", "(AVX2)": "avx2", "(Intel)": "GenuineIntel"}


def missing_flag(what):
    """The CPU flag (or vendor) a mutant needs and this CPU lacks, or None."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return None
    return next((flag for tag, flag in NEEDS.items() if tag in what and flag not in flags), None)


def sh(cmd, cwd, log, timeout=None):
    with open(log, "ab") as out:
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def copy_tree(src, dst):
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src, check=True,
                           capture_output=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        rel = f.decode()
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        if not os.path.isfile(s):
            continue
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if not os.path.exists(d) or open(s, "rb").read() != open(d, "rb").read():
            shutil.copyfile(s, d)  # a fresh mtime: make must rebuild what used the old content


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true", help="only check that every mutant's text occurs once (CI)")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", default="", help="scratch directory to use (and keep)")
    ap.add_argument("--jobs", default="2")
    ap.add_argument("--min-kill", type=float, default=90.0)
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds for one test run (default: ten times the unmutated run of the same binary, "
                         "within 60 to 600 s but never under twice that run: a mutant that corrupts the heap can "
                         "hang the tests; an unmutated run may take 1800 s)")
    ap.add_argument("--no-full", action="store_true",
                    help="area binaries only (no full-suite baseline or confirmation): faster, survivors unconfirmed")
    args = ap.parse_args()
    if args.timeout < 0:
        ap.error("--timeout must be > 0 (or 0: ten times the unmutated run)")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (no git needed for --check)

    chosen = [int(x) for x in args.only.split(",") if x] or list(range(1, len(MUTANTS) + 1))
    if any(not 1 <= k <= len(MUTANTS) for k in chosen):
        ap.error(f"--only takes mutant numbers 1 … {len(MUTANTS)}")
    if args.list:
        for k in chosen:
            f, _, _, what = MUTANTS[k - 1]
            print(f"{k:3d}  {f:26s} {what}")
        return 0

    # Every mutant must apply exactly once, before anything is built.
    for k in chosen:
        f, old, _, what = MUTANTS[k - 1]
        n = open(os.path.join(repo, "include/posenc", f)).read().count(old)
        if n != 1 or old == MUTANTS[k - 1][2]:
            print(f"mutant {k} ({what}): its text occurs {n} times in {f}" if n != 1 else f"mutant {k} ({what}) changes nothing",
                  file=sys.stderr)
            return 2
    if args.check:
        print(f"all {len(chosen)} mutants apply")
        return 0

    work = args.keep or tempfile.mkdtemp(prefix="posenc-mutants-")
    os.makedirs(work, exist_ok=True)
    src, build, log = os.path.join(work, "src"), os.path.join(work, "build"), os.path.join(work, "log.txt")
    os.makedirs(src, exist_ok=True)
    copy_tree(repo, src)
    cml = os.path.join(src, "tests", "CMakeLists.txt")
    text = open(cml).read()
    if "added by tools/mutation-check.py" not in text:
        sets = "".join(f"set(posenc_mut_{g} {' '.join(fs)})\n" for g, fs in GROUPS.items())
        open(cml, "a").write("\n" + sets + GROUP_CMAKE.format(groups=" ".join(GROUPS)))
    print(f"scratch tree {src}, log {log}", flush=True)
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    flags = "-O1 -DNDEBUG"
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        rc = sh(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Mutation", f"-DCMAKE_CXX_COMPILER={cxx}",
                 f"-DCMAKE_CXX_FLAGS_MUTATION={flags}", "-DPOSENC_WARNINGS_AS_ERRORS=OFF", "-DPOSENC_BUILD_BENCH=OFF",
                 "-DPOSENC_BUILD_EXAMPLES=OFF"], work, log)
        if rc:
            print("configure failed; see", log)
            return 2
    def build_cmd(target="posenc-tests"):
        return ["cmake", "--build", build, "-j", args.jobs, "--target", target]

    def test_cmd(target="posenc-tests"):
        return [os.path.join(build, "tests", target)]

    baseline = {}  # target: seconds of its unmutated test run

    def passes_unmutated(target):
        if sh(build_cmd(target), work, log):
            return False
        t0 = time.time()
        ok = sh(test_cmd(target), build, log, args.timeout or 1800) == 0
        baseline[target] = time.time() - t0
        return ok

    def timeout(target):
        b = baseline[target]
        return args.timeout or round(max(2 * b, min(600, max(60, 10 * b))))

    start = time.time()
    # The whole suite's baseline: needed for the confirmation runs, and with --no-full for the mutants
    # outside every group (the only ones the whole suite then runs).
    whole_suite = not args.no_full or any(group_of(MUTANTS[k - 1][0]) is None for k in chosen)
    if whole_suite and not passes_unmutated("posenc-tests"):
        print("the unmutated tree does not build or pass its tests; see", log)
        return 2
    used = sorted({group_of(MUTANTS[k - 1][0]) for k in chosen} - {None})
    for g in used:  # the smaller binaries must pass unmutated too, or their kills would mean nothing
        if not passes_unmutated(f"mut-{g}"):
            print(f"the unmutated mut-{g} does not build or pass; see", log)
            return 2
    print(f"baseline builds and passes ({time.time() - start:.0f} s)", flush=True)

    survivors, killed, unbuildable, skipped = [], 0, 0, []
    def cost(k):  # how much a mutant of this file rebuilds
        f = MUTANTS[k - 1][0]
        return (0 if f in KERNEL_UNITS else 1 if f.startswith("hf/") else 2, str(group_of(f)), f, k)

    for k in sorted(chosen, key=cost):
        f, old, new, what = MUTANTS[k - 1]
        flag = missing_flag(what)
        if flag:
            skipped.append(k)
            print(f"{k:3d}  {'skipped (the CPU lacks ' + flag + ')':40s} {f:26s} {what}", flush=True)
            continue
        path = os.path.join(src, "include/posenc", f)
        original = open(path).read()
        t0 = time.time()
        with open(log, "a") as out:
            out.write(f"\n===== mutant {k}: {f}: {what}\n")
        try:
            open(path, "w").write(original.replace(old, new, 1))
            targets = ([f"mut-{group_of(f)}"] if group_of(f) else []) + ([] if args.no_full and group_of(f) else ["posenc-tests"])
            for target in targets:  # the area's tests first; the whole suite only if they pass
                with open(log, "a") as out:
                    out.write(f"----- {target}\n")
                if sh(build_cmd(target), work, log):
                    verdict = "killed (does not build)"
                else:
                    rc = sh(test_cmd(target), build, log, timeout(target))
                    verdict = "SURVIVED" if rc == 0 else (f"killed (timeout, {timeout(target)} s)" if rc == 124 else "killed")
                if verdict != "SURVIVED":
                    verdict += f" [{target}]"
                    break
        finally:
            open(path, "w").write(original)
        if verdict == "SURVIVED" and args.no_full and group_of(f):
            verdict = "SURVIVED (area tests only)"
        if verdict.startswith("SURVIVED"):
            survivors.append(k)
        else:
            killed += 1
            unbuildable += "does not build" in verdict
        print(f"{k:3d}  {verdict:40s} {f:26s} {what}  ({time.time() - t0:.0f} s)", flush=True)

    total = len(chosen) - len(skipped)
    pct = 100.0 * killed / total if total else 100.0
    print(f"\nkilled {killed} of {total} ({pct:.1f}%; {unbuildable} by not building) in {time.time() - start:.0f} s"
          + (f", {len(skipped)} skipped: {', '.join(map(str, skipped))}" if skipped else ""))
    for k in survivors:
        print(f"  survivor {k}: {MUTANTS[k - 1][0]}: {MUTANTS[k - 1][3]}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if pct >= args.min_kill else 1


if __name__ == "__main__":
    sys.exit(main())
