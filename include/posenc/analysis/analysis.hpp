#pragma once
// Umbrella header for posenc's analyses of the seed articles: the RoPE base bound (Men et al.
// 2024), RoFormer's long-range decay, ALiBi emulated by a RoPE pair, rotation angles under
// extrapolation (YaRN §3.2). Standard library only; they take inverse frequencies from any schedule.

#include "posenc/analysis/alibi_rope.hpp"
#include "posenc/analysis/base_bound.hpp"
#include "posenc/analysis/decay.hpp"
#include "posenc/analysis/extrapolation.hpp"
