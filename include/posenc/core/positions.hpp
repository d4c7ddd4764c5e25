#pragma once
// position_ids: the integer position of each token, borrowed from the caller (int64 or int32, as
// engines store them) or an arithmetic run start, start+1, … that needs no memory. It is a view, like
// std::span: passing a temporary vector straight to a call is fine, keeping a position_ids made from
// one is not (clang warns, -Wdangling). Positions are integers on purpose: a float position loses
// exactness past 2^24 (and fp16 past 2048). Angles are formed as double(position)·θ, exact in the
// position up to 2^53.

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "posenc/core/errors.hpp"
#include "posenc/core/detail/lifetimebound.hpp"

namespace posenc {

class position_ids {
public:
    position_ids(std::span<const std::int64_t> p) : p64_(p.data()), size_(p.size()) {}  // NOLINT
    position_ids(std::span<const std::int32_t> p) : p32_(p.data()), size_(p.size()) {}  // NOLINT
    position_ids(const std::vector<std::int64_t>& p POSENC_DETAIL_LIFETIMEBOUND)  // NOLINT
        : position_ids(std::span<const std::int64_t>(p)) {}
    position_ids(const std::vector<std::int32_t>& p POSENC_DETAIL_LIFETIMEBOUND)  // NOLINT
        : position_ids(std::span<const std::int32_t>(p)) {}

    /// start, start+1, …, start+count-1 (prefill from an offset; decode with count = 1).
    [[nodiscard]] static position_ids consecutive(std::int64_t start, std::size_t count) {
        if (count > 0 && start > std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(count - 1))
            throw range_error("posenc: position_ids::consecutive(" + detail::to_text(start) + ", " +
                              detail::to_text(count) + ") overflows int64");
        return position_ids(start, 1, count);
    }

    /// `count` copies of `value` (rotate every token by the same offset).
    [[nodiscard]] static position_ids constant(std::int64_t value, std::size_t count) {
        return position_ids(value, 0, count);
    }

    [[nodiscard]] std::size_t size() const noexcept { return size_; }

    [[nodiscard]] std::int64_t operator[](std::size_t i) const noexcept {
        assert(i < size_);
        if (p64_) return p64_[i];
        if (p32_) return p32_[i];
        return start_ + step_ * static_cast<std::int64_t>(i);
    }

    /// True for ids made by consecutive() (and for at most one id): then position j is front() + j, and a
    /// consumer may run a straight, vectorizable loop instead of reading ids one by one.
    [[nodiscard]] bool is_consecutive() const noexcept { return (!p64_ && !p32_ && step_ == 1) || size_ <= 1; }

    /// The first position. Precondition: size() > 0.
    [[nodiscard]] std::int64_t front() const noexcept { return (*this)[0]; }

    /// The storage, for kernels that read positions without calling into this class: exactly one of
    /// int64_data / int32_data is non-null, or both are null and position i is start + step·i.
    [[nodiscard]] const std::int64_t* int64_data() const noexcept { return p64_; }
    [[nodiscard]] const std::int32_t* int32_data() const noexcept { return p32_; }
    [[nodiscard]] std::int64_t start() const noexcept { return start_; }
    [[nodiscard]] std::int64_t step() const noexcept { return step_; }

    /// Smallest and largest position (for range checks); {0, -1} when empty.
    [[nodiscard]] std::pair<std::int64_t, std::int64_t> bounds() const noexcept {
        if (size_ == 0) return {0, -1};
        if (!p64_ && !p32_) return {start_, start_ + step_ * static_cast<std::int64_t>(size_ - 1)};
        std::int64_t lo = (*this)[0], hi = lo;
        for (std::size_t i = 1; i < size_; ++i) {
            const std::int64_t p = (*this)[i];
            lo = p < lo ? p : lo;
            hi = p > hi ? p : hi;
        }
        return {lo, hi};
    }

private:
    position_ids(std::int64_t start, std::int64_t step, std::size_t count) : start_(start), step_(step), size_(count) {}

    const std::int64_t* p64_ = nullptr;
    const std::int32_t* p32_ = nullptr;
    std::int64_t start_ = 0;
    std::int64_t step_ = 1;
    std::size_t size_ = 0;
};

}  // namespace posenc
