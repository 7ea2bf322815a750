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

// The horizontal pass from byte rows (resize_byte_pass.cpp): outputs in blocks of up to lanes_max
// (16 for AVX-512, 8 for AVX2) whose source pixels lie within 2 x lanes_max bytes of a row, with
// each block's per-tap source indices (from the block's first byte, lo) and weights; 0 weight past
// an output's taps.
struct BytePass {
  int64_t lanes_max = 0;
  int64_t taps = 0;                 // the filter's max_count; 0: the pass cannot be planned this way
  std::vector<int64_t> lo;          // (block) first source column read
  std::vector<int32_t> lanes;       // (block) outputs, 1..lanes_max
  std::vector<int32_t> block_taps;  // (block) taps its outputs have, at most `taps`
  std::vector<int32_t> idx;         // (block, tap, lanes_max) source column - lo
  std::vector<float> w;             // (block, tap, lanes_max)
  bool usable() const { return taps > 0; }
};
// The blocks for outputs [o0, o1) at lanes_max 16 or 8; not usable when the filter is wider than
// 2 x lanes_max taps (or lanes_max is another value).
BytePass plan_byte_pass(const AxisWeights& a, int64_t o0, int64_t o1, int64_t lanes_max);
// out[(r - r0) * n + (o - o0)] for rows [r0, r1) of `plane` (rows src_w bytes long, back to back) and
// the planned outputs [o0, o1). False, nothing written, where the pass is not usable or the CPU
// lacks the instructions of its width.
bool byte_pass(const BytePass& p, const uint8_t* plane, int64_t src_w, int64_t r0, int64_t r1, float* out,
               int64_t n);

// The filter's vector width in floats now: 16, 8 or 4 (the CPU's widest within ATEN_CPU_CAPABILITY
// and the test's cap).
int filter_width();

// For tests: the filter's vector width in floats, 16 (AVX-512) or 8 (AVX2), each with the horizontal
// pass from byte rows where it applies, or 4 (SSE2), capped by what the CPU has; 0 restores the CPU's best.
// Returns the width the filter now uses.
int filter_width_for_tests(int floats);

}  // namespace trainer::data::resize_detail
