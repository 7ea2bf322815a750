// A 256-entry float table looked up for every byte of a plane: the normaliser's hot loop
// (data/transforms.hpp, Normalizer::apply), bit for bit the table's values on every path.
#pragma once

#include <array>
#include <cstdint>

namespace trainer::data {

struct ByteTable {
  std::array<float, 256> values{};
  // values' bytes by position: planes[j * 256 + v] is byte j (little-endian) of values[v], the
  // layout the AVX512-VBMI path looks up 64 bytes at a time
  alignas(64) std::array<uint8_t, 1024> planes{};
  explicit ByteTable(const float* v);  // v: 256 values
};

// d[i] = t.values[s[i]] for i < n. Once d is 64-byte aligned the stores stream past the caches: a
// batch of floats is far larger than them, and the step reads it next, not this thread.
void lookup_bytes(const ByteTable& t, const uint8_t* s, float* d, int64_t n);

// The path lookup_bytes takes on this CPU, in words ("AVX512-VBMI permutes", "AVX-512 gathers",
// "scalar"); the first call measures it.
const char* lookup_path_name();

namespace byte_lookup_detail {
// For tests: the path, 3 (AVX512-VBMI byte permutes), 2 (AVX-512 gathers) or 1 (scalar), capped
// by what the CPU has; 0 restores the default, the fastest the CPU has, measured once. Returns the
// path now used.
int level_for_tests(int level);
}  // namespace byte_lookup_detail

}  // namespace trainer::data
