// The resize's per-axis filter (src/data/resize.cpp), shown to its test: the test holds the scalar
// passes the vectorised ones replaced and runs them on these same weights.
#pragma once

#include <cstdint>
#include <vector>

namespace trainer::data::resize_detail {

// Contribution of each source pixel to each output pixel along one axis.
struct AxisWeights {
  std::vector<int64_t> start, count;
  std::vector<float> weights;  // (out, max_count)
  int64_t max_count = 0;
};

// The window [off, off + len) of an axis of `in` pixels onto `out` pixels (the whole axis: off 0,
// len in); the filter is cut at the window's edges, as if the window were the whole image.
AxisWeights axis_weights(int64_t in, int64_t out, double off, double len);

// For tests: the filter's vector width in floats, 16 (AVX-512), 8 (AVX2) or 4 (SSE2), capped by what
// the CPU has; 0 restores the CPU's best. Returns the width the filter now uses.
int filter_width_for_tests(int floats);

}  // namespace trainer::data::resize_detail
