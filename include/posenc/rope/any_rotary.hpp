#pragma once
// any_rotary: a rotary whose layout is chosen at run time. Same API as rotary<Layout>; each call
// dispatches once on the layout and then runs the layout's compiled kernel.

#include <variant>

#include "posenc/core/detail/lifetimebound.hpp"
#include "posenc/rope/any_schedule.hpp"
#include "posenc/rope/rotary.hpp"

namespace posenc {

class any_rotary {
public:
    static constexpr bool rejects_only_out_of_range = true;  ///< see attention.hpp (may_throw_inside)
    any_rotary(rope_layout layout, rope_dims dims, rope_frequencies freq) : impl_(make(layout, dims, std::move(freq))) {}

    template <frequency_schedule Schedule>
    any_rotary(rope_layout layout, rope_dims dims, const Schedule& schedule, std::int64_t seq_len = 0)
        : any_rotary(layout, dims, (dims.validate(), schedule.frequencies(dims.rotary(), seq_len))) {}

    any_rotary(rope_layout layout, rope_dims dims, const any_schedule& schedule, std::int64_t seq_len = 0)
        : any_rotary(layout, dims, (dims.validate(), posenc::frequencies(schedule, dims.rotary(), seq_len))) {}

    [[nodiscard]] rope_layout layout() const noexcept {
        return std::holds_alternative<rotary<interleaved>>(impl_) ? rope_layout::interleaved : rope_layout::half_split;
    }
    [[nodiscard]] const rope_dims& dims() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return std::visit([](const auto& r) -> const rope_dims& { return r.dims(); }, impl_);
    }
    [[nodiscard]] const rope_frequencies& frequencies() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return std::visit([](const auto& r) -> const rope_frequencies& { return r.frequencies(); }, impl_);
    }
    [[nodiscard]] cos_sin_table table(std::int64_t positions) const {
        return std::visit([&](const auto& r) { return r.table(positions); }, impl_);
    }

    /// Forwards to rotary<Layout>::apply (all its overloads).
    template <class... Args>
    void apply(Args&&... args) const {
        std::visit([&](const auto& r) { r.apply(std::forward<Args>(args)...); }, impl_);
    }
    template <class... Args>
    void apply_unchecked(Args&&... args) const {
        std::visit([&](const auto& r) { r.apply_unchecked(std::forward<Args>(args)...); }, impl_);
    }
    /// Forwards to rotary<Layout>::apply_into, apply_normed, apply_normed_into (all overloads).
    template <class... Args>
    void apply_into(Args&&... args) const {
        std::visit([&](const auto& r) { r.apply_into(std::forward<Args>(args)...); }, impl_);
    }
    template <class... Args>
    void apply_normed(Args&&... args) const {
        std::visit([&](const auto& r) { r.apply_normed(std::forward<Args>(args)...); }, impl_);
    }
    template <class... Args>
    void apply_normed_into(Args&&... args) const {
        std::visit([&](const auto& r) { r.apply_normed_into(std::forward<Args>(args)...); }, impl_);
    }
    void set_threads(unsigned n) noexcept {
        std::visit([&](auto& r) { r.set_threads(n); }, impl_);
    }
    void set_executor(executor ex) {
        std::visit([&](auto& r) { r.set_executor(ex); }, impl_);
    }
    /// rotary<Layout>::threads and slice_executor.
    [[nodiscard]] unsigned threads() const noexcept {
        return std::visit([](const auto& r) { return r.threads(); }, impl_);
    }
    [[nodiscard]] const executor& slice_executor() const noexcept POSENC_DETAIL_LIFETIMEBOUND {
        return std::visit([](const auto& r) -> const executor& { return r.slice_executor(); }, impl_);
    }
    template <storage_type T>
    void shift(heads_view<T> x, std::int64_t delta) const {
        std::visit([&](const auto& r) { r.shift(x, delta); }, impl_);
    }
    void shift(heads_view<float> x, std::int64_t delta) const { shift<float>(x, delta); }

private:
    using variant = std::variant<rotary<interleaved>, rotary<half_split>>;
    static variant make(rope_layout layout, rope_dims dims, rope_frequencies freq) {
        if (layout == rope_layout::interleaved) return rotary<interleaved>(dims, std::move(freq));
        return rotary<half_split>(dims, std::move(freq));
    }
    variant impl_;
};

}  // namespace posenc
