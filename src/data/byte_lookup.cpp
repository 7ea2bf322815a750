#include "data/byte_lookup.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "data/vector_cap.hpp"

namespace trainer::data {

ByteTable::ByteTable(const float* v) {
  std::memcpy(values.data(), v, sizeof values);
  for (int i = 0; i < 256; ++i) {
    uint32_t u;
    std::memcpy(&u, &values[static_cast<size_t>(i)], sizeof u);
    for (int j = 0; j < 4; ++j) planes[static_cast<size_t>(j * 256 + i)] = static_cast<uint8_t>(u >> (8 * j));
  }
}

namespace {

void lookup_scalar(const ByteTable& t, const uint8_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = t.values[s[i]];
}

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's avx512fintrin.h starts its conversions from _mm512_undefined_* values, which
// -Wmaybe-uninitialized reports where they inline (a false positive: every lane is written)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 16 bytes a gather (a 224 x 224 plane: 68 -> 33 us on an Intel Xeon, family 6 model 207, against
// the scalar loop with plain stores).
__attribute__((target("avx512f"))) void lookup_gather(const ByteTable& t, const uint8_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) d[i] = t.values[s[i]];
  for (; i + 16 <= n; i += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm512_stream_ps(d + i, _mm512_i32gather_ps(idx, t.values.data(), 4));
  }
  for (; i < n; ++i) d[i] = t.values[s[i]];
  _mm_sfence();  // the streamed stores are ordered before whatever hands the batch on
}

// 64 bytes at a time, no gathers: each of a float's 4 bytes is looked up for all 64 indices by two
// 128-entry byte permutes (vpermt2b) and a blend on the index's top bit, and the 4 byte vectors are
// interleaved into 64 floats by unpacks. The unpacks work within 128-bit lanes, so the indices are
// first permuted so that the floats come out in order. A 224 x 224 x 3 image: 45 -> 16 us on an
// AMD EPYC (family 26 model 2), where the gathers set the pace and this runs at the stores' rate.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lookup_vbmi(const ByteTable& t, const uint8_t* s, float* d,
                                                                        int64_t n) {
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(d + i) & 63) != 0; ++i) d[i] = t.values[s[i]];
  if (i + 64 <= n) {
    __m512i table[4][4];  // [byte j][quarter q]: byte j of values[64 q .. 64 q + 63]
    for (int j = 0; j < 4; ++j)
      for (int q = 0; q < 4; ++q) table[j][q] = _mm512_load_si512(t.planes.data() + 256 * j + 64 * q);
    // after the unpacks, 128-bit lane L of output g holds positions 16 L + 4 g .. + 3 of the
    // permuted indices: put there source bytes 16 g + 4 L .. + 3
    alignas(64) uint8_t order[64];
    for (int L = 0; L < 4; ++L)
      for (int g = 0; g < 4; ++g)
        for (int k = 0; k < 4; ++k) order[16 * L + 4 * g + k] = static_cast<uint8_t>(16 * g + 4 * L + k);
    const __m512i reorder = _mm512_load_si512(order);
    for (; i + 64 <= n; i += 64) {
      const __m512i v = _mm512_permutexvar_epi8(reorder, _mm512_loadu_si512(s + i));
      const __mmask64 high = _mm512_movepi8_mask(v);  // index >= 128: the table's second half
      __m512i b[4];
      for (int j = 0; j < 4; ++j)
        b[j] = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(table[j][0], v, table[j][1]),
                                      _mm512_permutex2var_epi8(table[j][2], v, table[j][3]));
      const __m512i b01lo = _mm512_unpacklo_epi8(b[0], b[1]), b01hi = _mm512_unpackhi_epi8(b[0], b[1]);
      const __m512i b23lo = _mm512_unpacklo_epi8(b[2], b[3]), b23hi = _mm512_unpackhi_epi8(b[2], b[3]);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_unpacklo_epi16(b01lo, b23lo));
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 16), _mm512_unpackhi_epi16(b01lo, b23lo));
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 32), _mm512_unpacklo_epi16(b01hi, b23hi));
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 48), _mm512_unpackhi_epi16(b01hi, b23hi));
    }
  }
  lookup_gather(t, s + i, d + i, n - i);  // the tail (and its sfence)
}
#pragma GCC diagnostic pop
#endif

std::atomic<int> g_cap{0};  // the test's cap (level_for_tests), 0: none

void run_level(int level, const ByteTable& t, const uint8_t* s, float* d, int64_t n) {
  switch (level) {
#if defined(__x86_64__) && defined(__GNUC__)
    case 3: return lookup_vbmi(t, s, d, n);
    case 2: return lookup_gather(t, s, d, n);
#endif
    default: return lookup_scalar(t, s, d, n);
  }
}

int widest_level() {
  if (vector_cap_floats() < 16) return 1;  // ATEN_CPU_CAPABILITY=avx2 or default: no AVX-512
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (vbmi && avx512) return 3;
  if (avx512) return 2;
#endif
  return 1;
}

// The fastest path this CPU has, measured once per process (about 2 ms): which one wins depends on
// the CPU, not on its instruction sets. On an AMD EPYC (family 26 model 2) the AVX-512 gathers took
// 45 us an image and the scalar loop 27 us; on an Intel Xeon (family 6 model 207) the gathers had
// halved the scalar loop's time. Every path gives the same floats, so the choice changes only the
// speed. 4 MB of output per try, past the L2 caches, as a batch's planes are.
int measured_level() {
  static const int best = [] {
    const int widest = widest_level();
    if (widest == 1) return 1;
    constexpr int64_t n = int64_t{1} << 20;
    std::vector<uint8_t> src(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) src[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    std::vector<float> values(256);
    for (int v = 0; v < 256; ++v) values[static_cast<size_t>(v)] = static_cast<float>(v) * 0.5f - 3.0f;
    const ByteTable table(values.data());
    std::vector<float> dst(static_cast<size_t>(n + 16));
    float* d = dst.data() + (16 - (reinterpret_cast<uintptr_t>(dst.data()) & 63) / 4) % 16;  // 64-byte aligned
    std::vector<double> best_s(static_cast<size_t>(widest + 1), 1e30);
    for (int round = 0; round < 3; ++round)
      for (int level = 1; level <= widest; ++level) {
        const auto t0 = std::chrono::steady_clock::now();
        run_level(level, table, src.data(), d, n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best_s[static_cast<size_t>(level)] = std::min(best_s[static_cast<size_t>(level)], s);
      }
    int pick = widest;
    for (int level = 1; level <= widest; ++level)
      if (best_s[static_cast<size_t>(level)] < best_s[static_cast<size_t>(pick)]) pick = level;
    return pick;
  }();
  return best;
}

// The path: the measured best, or with a test's cap, the widest the CPU has within it (every path
// the CPU runs can then be tested).
int level() {
  const int cap = g_cap.load(std::memory_order_relaxed);
  return cap == 0 ? measured_level() : std::min(cap, widest_level());
}

}  // namespace

void lookup_bytes(const ByteTable& t, const uint8_t* s, float* d, int64_t n) { run_level(level(), t, s, d, n); }

const char* lookup_path_name() {
  switch (level()) {
    case 3: return "AVX512-VBMI permutes";
    case 2: return "AVX-512 gathers";
    default: return "scalar";
  }
}

int byte_lookup_detail::level_for_tests(int cap) {
  g_cap.store(cap, std::memory_order_relaxed);
  return level();
}

}  // namespace trainer::data
