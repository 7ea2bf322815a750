// How Catch prints a stage's unit range in a failed comparison.
#pragma once

#include <ostream>

#include "config/stage_list.hpp"

namespace trainer::config {
inline std::ostream& operator<<(std::ostream& os, const UnitRange& r) { return os << "[" << r.first << ", " << r.last << "]"; }
}  // namespace trainer::config
