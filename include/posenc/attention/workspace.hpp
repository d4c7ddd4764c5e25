#pragma once
// attention_workspace: the per-thread tile buffers of attention calls (packed keys, scores,
// accumulators, softmax state), kept between calls. Without one, every call allocates and zeroes
// them (~17 blocks per thread); a decode step against a short cache spends a noticeable part of its
// time there. With one (attention_options::workspace), a call reuses the buffers when they are large
// enough for its tile shape and thread count, and otherwise replaces them with buffers large enough
// for both its shape and the previous ones (so alternating shapes, 1-token and 3-token steps, stop
// allocating after the first of each).
//
//   posenc::attention_workspace ws;                 // one per thread that calls attention
//   posenc::attention_options opt{.workspace = &ws};
//   for (...) posenc::attention(enc, q, cache, out, q_pos, posenc::causal_mask{}, opt);  // decode steps
//
// The result is bit-identical with or without a workspace (every buffer a call reads it wrote first
// in that call). It also keeps the softmax states of a decode split over key segments on several
// threads. What still allocates per call: the staged output of a policy that may throw inside a call,
// the threads themselves (without an executor), a check's probe row when head_dim > 512.
// attention_backward does not use a workspace.
//
// A workspace serves one call at a time: a call that finds it in use (another thread's call, or a
// call made from inside a policy of the call using it) throws config_error (key options.workspace)
// before it computes anything. Options copied to other threads carry the same workspace pointer: give
// each calling thread its own workspace.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <utility>
#include <vector>

#include "posenc/attention/tile_loop.hpp"
#include "posenc/core/errors.hpp"

namespace posenc {
namespace detail {
struct workspace_access;
}

class attention_workspace {
public:
    attention_workspace() = default;
    attention_workspace(const attention_workspace&) = delete;
    attention_workspace& operator=(const attention_workspace&) = delete;
    /// Moves the buffers (neither workspace may be in use by a call).
    attention_workspace(attention_workspace&& o) noexcept
        : scratch_(std::move(o.scratch_)), shape_(o.shape_), split_states_(std::move(o.split_states_)) {
        o.clear();
    }
    attention_workspace& operator=(attention_workspace&& o) noexcept {
        if (this != &o) {
            scratch_ = std::move(o.scratch_);
            shape_ = o.shape_;
            split_states_ = std::move(o.split_states_);
            o.clear();
        }
        return *this;
    }

    /// The bytes of buffers it holds (0 before its first call); read it between calls.
    [[nodiscard]] std::size_t bytes() const noexcept {
        std::size_t n = split_states_.size() * sizeof(float);
        for (const detail::attn_scratch& s : scratch_) n += s.bytes();
        return n;
    }
    /// Frees the buffers (not while a call uses it); the next call allocates them again.
    void clear() noexcept {
        scratch_ = {};
        shape_ = {};
        split_states_ = {};
    }

private:
    friend struct detail::workspace_access;
    std::vector<detail::attn_scratch> scratch_;
    detail::attn_scratch_shape shape_{};
    detail::attn_floats split_states_;
    std::atomic<bool> busy_{false};
};

namespace detail {

// bytes() names attn_scratch's members one by one: a member added there must be counted there too.
static_assert(sizeof(attn_scratch) == 7 * sizeof(attn_floats) + 7 * sizeof(std::vector<float>) + sizeof(std::vector<std::size_t>) +
                                          sizeof(std::size_t) + sizeof(std::vector<double>) + sizeof(std::vector<float>),
              "attn_scratch::bytes() counts each member of attn_scratch");

/// What attention_items does with a workspace: takes it for the call (released by the destructor)
/// and hands out `threads` buffers shaped for `shape`.
struct workspace_access {
    /// Whether buffers sized for `have` hold a call of shape `need` (every index uses the call's own
    /// sizes, or the scratch's terms_stride throughout).
    static bool covers(const attn_scratch_shape& have, const attn_scratch_shape& need) noexcept {
        return have.rows_pad >= need.rows_pad && have.D >= need.D && have.Dv >= need.Dv && have.acc_stride >= need.acc_stride &&
               have.tile_tokens >= need.tile_tokens && have.G >= need.G && (have.key_copy || !need.key_copy);
    }
    /// The smallest shape that covers both.
    static attn_scratch_shape joined(const attn_scratch_shape& a, const attn_scratch_shape& b) noexcept {
        attn_scratch_shape j = a;
        j.rows_pad = std::max(a.rows_pad, b.rows_pad), j.D = std::max(a.D, b.D), j.Dv = std::max(a.Dv, b.Dv);
        j.acc_stride = std::max(a.acc_stride, b.acc_stride), j.tile_tokens = std::max(a.tile_tokens, b.tile_tokens);
        j.G = std::max(a.G, b.G), j.key_copy = a.key_copy || b.key_copy;
        return j;
    }

    class lease {
    public:
        lease(attention_workspace& ws, const attn_scratch_shape& shape, unsigned threads) : ws_(ws) {
            if (ws.busy_.exchange(true, std::memory_order_acquire))
                throw config_error("options.workspace", "in use",
                                   "a workspace serves one attention call at a time: give each calling thread its own "
                                   "(attention_layer: set_workspace)");
            try {
                if (!covers(ws.shape_, shape) || ws.scratch_.size() < threads) {
                    // Built aside and swapped in: an allocation that fails leaves the old buffers as they were.
                    const attn_scratch_shape grown = joined(ws.shape_, shape);  // an empty workspace's shape_ is all zeros
                    const std::size_t n = threads > ws.scratch_.size() ? threads : ws.scratch_.size();
                    std::vector<attn_scratch> fresh;
                    fresh.reserve(n);
                    for (std::size_t i = 0; i < n; ++i) fresh.emplace_back(grown);
                    ws.scratch_.swap(fresh);
                    ws.shape_ = grown;
                }
            } catch (...) {
                ws.busy_.store(false, std::memory_order_release);
                throw;
            }
        }
        ~lease() { ws_.busy_.store(false, std::memory_order_release); }
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        [[nodiscard]] std::vector<attn_scratch>& scratch() const noexcept { return ws_.scratch_; }
        /// At least n floats for a split call's softmax states (grown, contents not kept, when shorter).
        [[nodiscard]] float* split_states(std::size_t n) const {
            if (ws_.split_states_.size() < n) {
                detail::attn_floats grown(n);  // a failed allocation keeps the old buffer
                ws_.split_states_.swap(grown);
            }
            return ws_.split_states_.data();
        }

    private:
        attention_workspace& ws_;
    };
};

}  // namespace detail
}  // namespace posenc
