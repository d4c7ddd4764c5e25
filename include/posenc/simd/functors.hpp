#pragma once
// The two operations the SIMD layer offers, as functors templated on the xsimd architecture tag
// (the shape xsimd::dispatch calls). Declared here; defined in kernels.hpp, which only the
// per-architecture translation units (or a build without run-time dispatch) include.

#include "posenc/simd/rotate_args.hpp"

namespace posenc::simd {

struct rotate_functor {
    template <class Arch>
    void operator()(Arch, const rotate_args& args) const noexcept;
};

struct table_functor {
    template <class Arch>
    void operator()(Arch, const table_args& args) const noexcept;
};

}  // namespace posenc::simd
