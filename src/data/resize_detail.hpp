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

// The horizontal pass from byte rows (resize_byte_pass.cpp): outputs in blocks of up to kLanes
// whose source pixels lie within kSpan bytes of a row, with each block's per-tap source indices
// (from the block's first byte, lo) and weights; 0 weight past an output's taps.
struct BytePass {
  static constexpr int64_t kLanes = 16, kSpan = 32;
  int64_t taps = 0;               // the filter's max_count; 0: the pass cannot be planned this way
  std::vector<int64_t> lo;        // (block) first source column read
  std::vector<int32_t> lanes;     // (block) outputs, 1..kLanes
  std::vector<int32_t> block_taps;  // (block) taps its outputs have, at most `taps`
  std::vector<int32_t> idx;       // (block, tap, kLanes) source column - lo
  std::vector<float> w;           // (block, tap, kLanes)
  bool usable() const { return taps > 0; }
};
// The blocks for outputs [o0, o1); not usable when the filter is wider than kSpan taps.
BytePass plan_byte_pass(const AxisWeights& a, int64_t o0, int64_t o1);
// out[(r - r0) * n + (o - o0)] for rows [r0, r1) of `plane` (rows src_w bytes long, back to back) and
// the planned outputs. False, nothing written, where the pass is not usable or the CPU lacks AVX-512.
bool byte_pass(const BytePass& p, const uint8_t* plane, int64_t src_w, int64_t r0, int64_t r1, int64_t o0,
               float* out, int64_t n);

// For tests: the filter's vector width in floats, 16 (AVX-512: the horizontal pass from byte rows
// where it applies), 8 (AVX2) or 4 (SSE2), capped by what the CPU has; 0 restores the CPU's best.
// Returns the width the filter now uses.
int filter_width_for_tests(int floats);

}  // namespace trainer::data::resize_detail
