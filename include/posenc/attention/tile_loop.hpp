#pragma once
// The attention kernel's loop over one work item (a kv head × a tile of query tokens), in detail::.
// attention.hpp checks a call and schedules the items; this file computes them (some 450 lines: the
// loop and the tile buffers it sizes are read together).
//
// Keys are processed in segments of attn_segment_keys: each segment's softmax state (running max m,
// sum l, accumulator acc) starts fresh, tile by tile as FlashAttention-2 does, and the segments are
// folded left to right into the item's total by fold_segment. A decode call with fewer items than
// threads computes the segments of one item on different threads and folds them afterwards in the
// same order with the same function: the same bits as one thread (split-KV, flash-decoding).
//
// 16-bit K and V (bf16, fp16) are widened exactly to float one key tile at a time (the widen step),
// so a 16-bit call computes what the float path computes on the same 16-bit values, bit for bit.

#include <algorithm>
#include <cassert>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <tuple>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "posenc/attention/dispatch.hpp"
#include "posenc/attention/mask.hpp"
#include "posenc/attention/options.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/dtypes.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"

namespace posenc::detail {

/// Keys per segment (16 key tiles): fixed for every architecture and thread count, since the
/// segment boundaries decide the result's last bits.
inline constexpr std::size_t attn_segment_keys = 16 * simd::attn_key_tile;

/// Positions [begin, begin + count) of `p`, without copying.
inline position_ids slice_positions(const position_ids& p, std::size_t begin, std::size_t count) {
    if (const auto* d = p.int64_data()) return std::span<const std::int64_t>(d + begin, count);
    if (const auto* d = p.int32_data()) return std::span<const std::int32_t>(d + begin, count);
    if (count == 0) return position_ids::consecutive(0, 0);
    const std::int64_t start = p.start() + p.step() * static_cast<std::int64_t>(begin);
    return p.step() == 0 ? position_ids::constant(start, count) : position_ids::consecutive(start, count);
}

/// The keys [b, e) of a tile whose n keys lie at consecutive positions from k_lo that a query seeing
/// range r sees (b = e: none); the positions are subtracted only once compared to lie within the tile
/// (no overflow).
inline std::pair<std::size_t, std::size_t> keys_within(const key_range& r, std::int64_t k_lo, std::size_t n) noexcept {
    if (n == 0) return {0, 0};
    const std::int64_t k_hi = k_lo + static_cast<std::int64_t>(n - 1);
    if (r.lo > r.hi || r.hi < k_lo || r.lo > k_hi) return {0, 0};
    return {r.lo <= k_lo ? 0 : static_cast<std::size_t>(r.lo - k_lo),
            r.hi >= k_hi ? n : static_cast<std::size_t>(r.hi - k_lo) + 1};
}

/// srow[j] ← −∞ for the keys at positions ks that the query at position qp does not see. A mask that
/// names its visible keys as one range (visible_keys), over keys at consecutive positions, takes two
/// fills; otherwise one test per key. (Not noexcept: a custom mask may throw.)
template <attention_mask M>
void mask_scores(const M& mask, std::int64_t qp, const position_ids& ks, float* srow) {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    const std::size_t n = ks.size();
    if constexpr (requires { { mask.visible_keys(qp) } -> std::same_as<key_range>; }) {
        if (ks.is_consecutive() && n > 0) {
            const auto [b, e] = keys_within(mask.visible_keys(qp), ks.front(), n);
            // (A range that disagrees with visible() at its ends would hide or show keys it should not.)
            assert(b == e || (mask.visible(qp, ks[b]) && mask.visible(qp, ks[e - 1])));
            assert(b == 0 || !mask.visible(qp, ks[b - 1]));
            assert(e == n || !mask.visible(qp, ks[e]));
            std::fill(srow, srow + b, ninf);
            std::fill(srow + e, srow + n, ninf);
            return;
        }
    }
    for (std::size_t j = 0; j < n; ++j)
        if (!mask.visible(qp, ks[j])) srow[j] = ninf;
}

/// 64-byte aligned storage through the aligned operator new (so that allocation hooks see it).
template <class T>
struct aligned64_allocator {
    using value_type = T;
    aligned64_allocator() = default;
    template <class U>
    aligned64_allocator(const aligned64_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
    friend bool operator==(const aligned64_allocator&, const aligned64_allocator&) noexcept { return true; }
};
using attn_floats = std::vector<float, aligned64_allocator<float>>;

/// For a bias of the distance j − i alone (attention_distance_slope): the terms of heads
/// [hk·G, hk·G + G) over a tile's distances [k_lo − q_hi, k_hi − q_lo] into terms (head g's at
/// g·stride, stride ≥ keys + tile_tokens), computed in double as add_to_scores computes them, so
/// adding them (the add_terms step) gives add_to_scores' bits. False (the bias is then asked per row)
/// for other biases, keys that are not consecutive, queries spread wider than a tile of
/// consecutive ones, or positions so large that a distance is not exact in double.
template <class Bias>
bool distance_terms(const Bias& bias, std::size_t hk, std::size_t G, std::size_t tile_tokens, std::int64_t q_lo,
                    std::int64_t q_hi, const position_ids& ks, double* terms, std::size_t stride) {
    if constexpr (requires(const Bias& b) { attention_distance_slope(b, std::size_t{}); }) {
        constexpr std::int64_t exact = std::int64_t{1} << 50;
        if (ks.size() == 0 || !ks.is_consecutive()) return false;
        const std::int64_t k_lo = ks.front(), k_hi = ks.front() + static_cast<std::int64_t>(ks.size() - 1);
        const auto small = [](std::int64_t x) { return x > -exact && x < exact; };
        if (!small(k_lo) || !small(k_hi) || !small(q_lo) || !small(q_hi)) return false;
        if (q_hi - q_lo >= static_cast<std::int64_t>(tile_tokens)) return false;
        const auto len = static_cast<std::int32_t>(ks.size() + static_cast<std::size_t>(q_hi - q_lo));
        const auto d0 = static_cast<double>(k_lo - q_hi);
        for (std::size_t g = 0; g < G; ++g) {
            const auto [m, symmetric] = attention_distance_slope(bias, hk * G + g);
            double* head_terms = terms + g * stride;
            // (the index as a 32-bit integer: its conversion to double vectorises on every x86-64 level)
            if (symmetric)
                for (std::int32_t x = 0; x < len; ++x) head_terms[x] = -(m * std::abs(d0 + static_cast<double>(x)));
            else
                for (std::int32_t x = 0; x < len; ++x) head_terms[x] = m * (d0 + static_cast<double>(x));
        }
        return true;
    } else {
        (void)bias, (void)hk, (void)G, (void)tile_tokens, (void)q_lo, (void)q_hi, (void)ks, (void)terms, (void)stride;
        return false;
    }
}

/// Whether every term (G heads of len at stride) is exactly a float, as a power-of-two slope times a
/// distance whose odd part is below 2^24 is; out holds the terms as floats only where it returns true.
/// Then s + t in float gives the bits of float(double(s) + t): double rounding is harmless for a sum
/// of two floats, since double has more than 2·24 + 1 significant bits.
inline bool terms_as_floats(const double* terms, std::size_t G, std::size_t stride, std::size_t len, float* out) noexcept {
    bool exact = true;
    for (std::size_t g = 0; g < G && exact; ++g)
        for (std::size_t x = 0; x < len; ++x) {
            const double d = terms[g * stride + x];
            out[g * stride + x] = static_cast<float>(d);
            exact &= static_cast<double>(out[g * stride + x]) == d;
        }
    return exact;
}

/// 64-byte aligned floats left uninitialised (a split call's states: each is written before it is read).
class uninitialized_floats {
public:
    explicit uninitialized_floats(std::size_t n) : p_(aligned64_allocator<float>().allocate(n)) {}
    uninitialized_floats(const uninitialized_floats&) = delete;
    uninitialized_floats& operator=(const uninitialized_floats&) = delete;
    ~uninitialized_floats() { aligned64_allocator<float>().deallocate(p_, 0); }
    [[nodiscard]] float* get() const noexcept { return p_; }

private:
    float* p_;
};

struct attn_shape {
    std::size_t Tq, Tk, Hq, Hkv, G, D, Dv, tile_tokens, rows_pad, acc_stride, segments;
};

/// A softmax state over some keys for the rows of one item: running max m, sum l (both relative to
/// m), accumulator acc[r][0, Dv) = Σ exp(s − m)·v. Points into scratch or a split call's buffers.
struct attn_state {
    float* m;
    float* l;
    float* acc;
};

/// What a thread's scratch is sized by (a workspace keeps buffers while they are large enough for it).
struct attn_scratch_shape {
    std::size_t rows_pad = 0, D = 0, Dv = 0, acc_stride = 0, tile_tokens = 0, G = 0;
    bool key_copy = false;
    attn_scratch_shape() = default;
    attn_scratch_shape(const attn_shape& sh, bool copy_keys)
        : rows_pad(sh.rows_pad), D(sh.D), Dv(sh.Dv), acc_stride(sh.acc_stride), tile_tokens(sh.tile_tokens), G(sh.G),
          key_copy(copy_keys) {}
};

/// One thread's scratch: everything the kernel needs besides the caller's buffers. `krot` holds a
/// key tile when keys are transformed or widened, `vbuf` a widened value tile, `alpha` the softmax
/// step's rescale factors (applied by the pv step as it loads acc), `row_keys` how far into a tile
/// each row sees (visible_key_ends); `total` the item's folded segments.
struct attn_scratch {
    attn_floats q, kt, s, acc, krot, vbuf, total_acc;
    std::vector<float> m, l, alpha, scale, row_scale, total_m, total_l;
    std::vector<std::size_t> row_keys;
    std::size_t terms_stride;  // a distance bias's terms per head: a tile's keys + its query span
    std::vector<double> terms;
    std::vector<float> terms_f;  // the same terms as floats where each is exactly one (terms_as_floats)
    explicit attn_scratch(const attn_scratch_shape& sh)
        : q(sh.rows_pad * sh.D), kt(sh.D * simd::attn_key_tile), s(sh.rows_pad * simd::attn_key_tile),
          acc(sh.rows_pad * sh.acc_stride), krot(sh.key_copy ? simd::attn_key_tile * sh.D : 0),
          vbuf(sh.rows_pad > 2 * simd::attn_row_block ? simd::attn_key_tile * sh.Dv : 0), total_acc(sh.rows_pad * sh.acc_stride), m(sh.rows_pad),
          l(sh.rows_pad), alpha(sh.rows_pad), scale(sh.tile_tokens), row_scale(sh.rows_pad), total_m(sh.rows_pad), total_l(sh.rows_pad),
          row_keys(sh.rows_pad), terms_stride(simd::attn_key_tile + sh.tile_tokens), terms(sh.G * terms_stride),
          terms_f(sh.G * terms_stride) {}
    [[nodiscard]] std::size_t bytes() const noexcept {
        std::size_t n = 0;
        for (const auto* f : {&q, &kt, &s, &acc, &krot, &vbuf, &total_acc}) n += f->size() * sizeof(float);
        for (const auto* f : {&m, &l, &alpha, &scale, &row_scale, &total_m, &total_l, &terms_f}) n += f->size() * sizeof(float);
        return n + row_keys.size() * sizeof(std::size_t) + terms.size() * sizeof(double);
    }
    [[nodiscard]] attn_state segment() noexcept { return {m.data(), l.data(), acc.data()}; }
    [[nodiscard]] attn_state total() noexcept { return {total_m.data(), total_l.data(), total_acc.data()}; }
};

/// The query side of one item: its rows (row t·G + g is token t0 + t, head hk·G + g), positions and
/// the bounds the masks classify tiles with.
struct attn_query_tile {
    std::size_t hk = 0, t0 = 0, nq = 0, R = 0, rows_pad = 0;
    position_ids qs = position_ids::consecutive(0, 0);
    std::int64_t q_lo = 0, q_hi = 0;
    std::int32_t seq_lo = 0, seq_hi = 0;
};

/// One call's inputs as the loop reads them (K and V of element type KV).
template <class Enc, class Mask, class KV>
struct attn_call {
    const simd::attn_kernels& ker;
    const Enc& enc;
    const attn_shape& sh;
    heads_view<const float> q;
    heads_view<const KV> k;
    heads_view<const KV> v;
    const position_ids& qpos;
    const position_ids& kpos;
    const Mask& mask;
    const attention_options& opt;

    using transform_type = std::remove_cvref_t<decltype(enc.transform)>;
    static constexpr bool widen = !std::is_same_v<KV, float>;
    [[nodiscard]] bool rotate_keys() const noexcept { return !is_identity_transform<transform_type> && !opt.keys_transformed; }
    [[nodiscard]] bool key_copy() const noexcept { return rotate_keys(); }

    /// Copies item `item`'s queries into w.q, transforms them at their positions and sets their scales.
    attn_query_tile load_queries(std::size_t item, attn_scratch& w) const {
        attn_query_tile t;
        t.hk = item % sh.Hkv;
        t.t0 = item / sh.Hkv * sh.tile_tokens;
        t.nq = std::min(sh.tile_tokens, sh.Tq - t.t0);
        t.R = t.nq * sh.G;
        t.rows_pad = (t.R + simd::attn_row_block - 1) / simd::attn_row_block * simd::attn_row_block;
        // A call whose tiles take the packed QKᵀ path gives its short last tile zero rows up to that path
        // too (the dot-product path's sums round differently): each row's bits then do not depend on
        // where the call's tiles end (a chunk of more than 8 rows equals the prefill rows).
        constexpr std::size_t dot_rows = 2 * simd::attn_row_block;
        if (sh.rows_pad > dot_rows) t.rows_pad = std::max(t.rows_pad, dot_rows + simd::attn_row_block);
        const std::size_t G = sh.G, D = sh.D;
        std::fill_n(w.q.begin(), t.rows_pad * D, 0.0f);
        for (std::size_t i = 0; i < t.nq; ++i)
            for (std::size_t g = 0; g < G; ++g) std::copy_n(q.row(t.t0 + i, t.hk * G + g), D, w.q.data() + (i * G + g) * D);
        t.qs = slice_positions(qpos, t.t0, t.nq);
        transform_queries(enc.transform, heads_view<float>(w.q.data(), {t.nq, G, D}), t.qs);
        for (std::size_t i = 0; i < t.nq; ++i) w.scale[i] = static_cast<float>(enc.scale.scale(t.qs[i], D));
        for (std::size_t r = 0; r < t.rows_pad; ++r) w.row_scale[r] = r < t.R ? w.scale[r / G] : 0.0f;
        std::tie(t.q_lo, t.q_hi) = t.qs.bounds();
        if (!opt.query_sequence.empty()) {
            const auto ids = opt.query_sequence.subspan(t.t0, t.nq);
            t.seq_lo = *std::min_element(ids.begin(), ids.end());
            t.seq_hi = *std::max_element(ids.begin(), ids.end());
        }
        return t;
    }

    /// ends[r] = the number of the tile's keys up to the last one row r sees, from the mask's
    /// visible_keys over keys at consecutive positions (0 for padding rows): on a tile a causal-like
    /// mask cuts through, the products stop there (the keys past it are masked). nullptr where the
    /// mask cannot say.
    const std::size_t* visible_key_ends(const attn_query_tile& t, const position_ids& ks, std::size_t* ends) const {
        if constexpr (requires { { mask.visible_keys(std::int64_t{}) } -> std::same_as<key_range>; }) {
            if (!ks.is_consecutive() || ks.size() == 0) return nullptr;
            for (std::size_t i = 0; i < t.nq; ++i)
                std::fill_n(ends + i * sh.G, sh.G, keys_within(mask.visible_keys(t.qs[i]), ks.front(), ks.size()).second);
            std::fill(ends + t.R, ends + t.rows_pad, std::size_t{0});
            return ends;
        } else {
            (void)t, (void)ks, (void)ends;
            return nullptr;
        }
    }

    bool fill_distance_terms(const attn_query_tile& t, const position_ids& ks, attn_scratch& w) const {
        return distance_terms(enc.bias, t.hk, sh.G, sh.tile_tokens, t.q_lo, t.q_hi, ks, w.terms.data(), w.terms_stride);
    }

    /// The softmax state of the tile's rows over the keys of segment `seg`, from a fresh start, into st.
    void run_segment(const attn_query_tile& t, std::size_t seg, attn_scratch& w, const attn_state& st) const {
        constexpr float ninf = -std::numeric_limits<float>::infinity();
        constexpr std::size_t BK = simd::attn_key_tile;
        const std::size_t G = sh.G, D = sh.D, R = t.R, hk = t.hk;
        const bool seq = !opt.query_sequence.empty();
        const bool add_then_scale = enc.bias.order() == bias_order::add_then_scale;
        std::fill_n(st.m, R, ninf);
        std::fill_n(st.l, R, 0.0f);
        std::fill_n(st.acc, R * sh.acc_stride, 0.0f);
        const std::size_t end = std::min(sh.Tk, (seg + 1) * attn_segment_keys);
        for (std::size_t j0 = seg * attn_segment_keys; j0 < end; j0 += BK) {
            const std::size_t nk = std::min(BK, end - j0);
            const position_ids ks = slice_positions(kpos, j0, nk);
            const auto [k_lo, k_hi] = ks.bounds();
            tile_visibility vis = mask.classify({t.q_lo, t.q_hi, k_lo, k_hi});
            if (seq && vis != tile_visibility::none) {
                const auto ids = opt.key_sequence.subspan(j0, nk);
                const std::int32_t lo = *std::min_element(ids.begin(), ids.end());
                const std::int32_t hi = *std::max_element(ids.begin(), ids.end());
                if (hi < t.seq_lo || lo > t.seq_hi)
                    vis = tile_visibility::none;
                else if (!(lo == hi && t.seq_lo == t.seq_hi && lo == t.seq_lo))
                    vis = tile_visibility::partial;
            }
            if (vis == tile_visibility::none) continue;

            // K from the caller's rows (16-bit ones widened as the qk step loads them), or from a copy
            // transformed here at the keys' positions.
            const void* kbase = k.row(j0, hk);
            std::size_t kstride = k.token_stride();
            dtype ktype = dtype_of<KV>;
            if (rotate_keys()) {
                ker.widen({k.row(j0, hk), dtype_of<KV>, nk, D, k.token_stride(), w.krot.data(), D});
                transform_keys(enc.transform, heads_view<float>(w.krot.data(), {nk, 1, D}), ks);
                kbase = w.krot.data();
                kstride = D;
                ktype = dtype::f32;
            }
            // scale_then_add: the qk step scales each row as it stores it (the same single rounding).
            // The tile's V rows asked for (into L2) during QKᵀ, the next tile's K rows during PV: a
            // head's rows lie a token stride apart, beyond the hardware prefetcher's reach, and
            // packing them had waited on L3 (decode: as the CPU's attn_decode_prefetch says).
            const bool ask_ahead = t.rows_pad > 2 * simd::attn_row_block || ker.decode_prefetch.other_stream;
            const simd::attn_rows_ahead v_ahead =
                ask_ahead ? simd::attn_rows_ahead{v.row(j0, hk), nk, v.token_stride() * sizeof(KV), sh.Dv * sizeof(KV)} : simd::attn_rows_ahead{};
            // Cut short only where every row is masked below (the same condition: vis partial).
            const std::size_t* row_keys = vis == tile_visibility::partial ? visible_key_ends(t, ks, w.row_keys.data()) : nullptr;
            ker.qk({w.q.data(), t.rows_pad, D, kbase, kstride, nk, w.kt.data(), w.s.data(),
                    add_then_scale ? nullptr : w.row_scale.data(), ktype, v_ahead, row_keys, ker.decode_prefetch.stream_rows});

            const bool by_distance = fill_distance_terms(t, ks, w);
            const bool float_terms =
                by_distance && terms_as_floats(w.terms.data(), G, w.terms_stride, nk + static_cast<std::size_t>(t.q_hi - t.q_lo),
                                               w.terms_f.data());
            for (std::size_t r = 0; r < R; ++r) {
                const std::size_t i = r / G, head = hk * G + r % G;
                const std::int64_t qp = t.qs[i];
                float* srow = w.s.data() + r * BK;
                const std::span<float> row(srow, nk);
                const std::span<const float> qrow(w.q.data() + r * D, D);
                const float sc = w.scale[i];
                if (by_distance) {  // row r's distances start at k_lo − qp, entry q_hi − qp of its head's terms
                    const std::size_t at = (r % G) * w.terms_stride + static_cast<std::size_t>(t.q_hi - qp);
                    ker.add_terms({srow, w.terms.data() + at, nk, float_terms ? w.terms_f.data() + at : nullptr});
                } else {
                    add_bias_to_scores(enc.bias, head, qp, ks, row, qrow);
                }
                if (add_then_scale)
                    for (std::size_t j = 0; j < nk; ++j) srow[j] *= sc;
                if (vis == tile_visibility::partial) {
                    mask_scores(mask, qp, ks, srow);  // (also over what row_keys left uncomputed)
                    assert(!row_keys || std::all_of(srow + row_keys[r], srow + nk, [](float x) { return x == ninf; }));
                    if (seq) {
                        const std::int32_t qid = opt.query_sequence[t.t0 + i];
                        for (std::size_t j = 0; j < nk; ++j)
                            if (opt.key_sequence[j0 + j] != qid) srow[j] = ninf;
                    }
                }
            }
            ker.softmax({w.s.data(), R, nk, st.m, st.l, opt.softcap, w.alpha.data()});
            const std::size_t next = ask_ahead && j0 + BK < end ? std::min(BK, end - j0 - BK) : 0;
            const simd::attn_rows_ahead k_ahead =
                next ? simd::attn_rows_ahead{k.row(j0 + BK, hk), next, k.token_stride() * sizeof(KV), D * sizeof(KV)} : simd::attn_rows_ahead{};
            if (R > 2 * simd::attn_row_block && (widen || v.token_stride() != sh.Dv)) {
                // Packed once per tile (16-bit rows widened): rows a token stride (KiBs) apart share L1
                // sets, and the pv step streams the tile once per block of rows.
                ker.widen({v.row(j0, hk), dtype_of<KV>, nk, sh.Dv, v.token_stride(), w.vbuf.data(), sh.Dv});
                ker.pv({w.s.data(), R, nk, w.vbuf.data(), sh.Dv, sh.Dv, st.acc, sh.acc_stride, dtype::f32, false, k_ahead,
                        w.alpha.data(), row_keys, ker.decode_prefetch.stream_rows});
            } else {  // V read in place (decode, or dense float rows), 16-bit rows widened as they are loaded
                ker.pv({w.s.data(), R, nk, v.row(j0, hk), v.token_stride(), sh.Dv, st.acc, sh.acc_stride, dtype_of<KV>, false,
                        k_ahead, w.alpha.data(), row_keys, ker.decode_prefetch.stream_rows});
            }
            for (std::size_t r = 0; r < R; ++r)
                add_bias_to_output(enc.bias, hk * G + r % G, t.qs[r / G], ks, std::span<const float>(w.s.data() + r * BK, nk),
                                   std::span<float>(st.acc + r * sh.acc_stride, sh.Dv));
        }
    }
};

/// total ← total ⊕ seg for R rows: both states rescaled to their common max (in double, rounded once
/// to float). A row that has seen nothing keeps m = −∞; a total that has seen nothing takes seg's
/// numbers exactly, so a one-segment call gives the bits of an unsegmented one.
inline void fold_segment(const attn_state& total, const attn_state& seg, std::size_t R, std::size_t dv,
                         std::size_t acc_stride) noexcept {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    for (std::size_t r = 0; r < R; ++r) {
        const float ms = seg.m[r];
        if (ms == ninf) continue;
        float* acc = total.acc + r * acc_stride;
        const float* sacc = seg.acc + r * acc_stride;
        const float mt = total.m[r];
        if (mt == ninf) {
            total.m[r] = ms;
            total.l[r] = seg.l[r];
            std::copy_n(sacc, dv, acc);
            continue;
        }
        // (A state at the max is weighed exactly 1: with m = +∞ the difference would be NaN. A NaN m or
        // l makes the row NaN.)
        const double m = std::max(mt, ms);
        const double a = mt == m ? 1.0 : std::exp(double(mt) - m), b = ms == m ? 1.0 : std::exp(double(ms) - m);
        total.m[r] = static_cast<float>(m);
        total.l[r] = static_cast<float>(total.l[r] * a + seg.l[r] * b);
        for (std::size_t d = 0; d < dv; ++d) acc[d] = static_cast<float>(acc[d] * a + sacc[d] * b);
    }
}

/// Starts a total that has seen nothing.
inline void clear_total(const attn_state& total, std::size_t R) noexcept {
    std::fill_n(total.m, R, -std::numeric_limits<float>::infinity());
    std::fill_n(total.l, R, 0.0f);
}

/// Where a finished item's rows go: `out` (normalised; sinks joining the denominator), and for a
/// partial result the log-sum-exp of each row's logits, lse[t·Hq + h] (−∞ where nothing is visible).
struct attn_sink_and_lse {
    std::span<const float> sinks;
    std::span<float> lse;
};

inline void finish_rows(const attn_query_tile& t, const attn_state& total, const attn_shape& sh,
                        const heads_view<float>& out, const attn_sink_and_lse& extra) {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    for (std::size_t r = 0; r < t.R; ++r) {
        const std::size_t i = r / sh.G, head = t.hk * sh.G + r % sh.G;
        float* o = out.row(t.t0 + i, head);
        const float* acc = total.acc + r * sh.acc_stride;
        if (!extra.lse.empty()) extra.lse[(t.t0 + i) * sh.Hq + head] = ninf;
        if (total.m[r] == ninf) {
            std::fill_n(o, sh.Dv, 0.0f);
            continue;
        }
        double m = total.m[r], l = total.l[r], num = 1.0;
        if (!extra.sinks.empty()) {
            const double sink = extra.sinks[head], mf = std::max(m, sink);
            num = m == mf ? 1.0 : std::exp(m - mf);  // (1 for m = +∞ too)
            l = l * num + std::exp(sink - mf);
            m = mf;  // l is now relative to mf
        }
        const double f = num / l;
        // (+ 0: a zero comes out +0, whichever zero products of masked keys a tile skipped.)
        for (std::size_t d = 0; d < sh.Dv; ++d) o[d] = static_cast<float>(acc[d] * f) + 0.0f;
        if (!extra.lse.empty()) extra.lse[(t.t0 + i) * sh.Hq + head] = static_cast<float>(m + std::log(l));
    }
}

}  // namespace posenc::detail
