#pragma once
// Umbrella header: every public posenc header that needs only xsimd and the standard library.
// The HF config reader (needs nlohmann-json) is separate: #include <posenc/hf/config.hpp>.

#include "posenc/bias/no_bias.hpp"
#include "posenc/core/concepts.hpp"
#include "posenc/core/errors.hpp"
#include "posenc/core/positions.hpp"
#include "posenc/core/tensor.hpp"
#include "posenc/rope/any_rotary.hpp"
#include "posenc/rope/any_schedule.hpp"
#include "posenc/rope/convert.hpp"
#include "posenc/rope/default.hpp"
#include "posenc/rope/dynamic_ntk.hpp"
#include "posenc/rope/frequencies.hpp"
#include "posenc/rope/layout.hpp"
#include "posenc/rope/linear.hpp"
#include "posenc/rope/llama3.hpp"
#include "posenc/rope/longrope.hpp"
#include "posenc/rope/ntk_aware.hpp"
#include "posenc/rope/ntk_by_parts.hpp"
#include "posenc/rope/rotary.hpp"
#include "posenc/rope/table.hpp"
#include "posenc/rope/yarn.hpp"
