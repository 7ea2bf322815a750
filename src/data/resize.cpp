// The antialiased bilinear resize (data/transforms.hpp): separable, rows then columns, each output
// value summed in a fixed order (k ascending, float, no fused multiply-add) so every machine and
// every instruction set gives the same bytes. The passes are laid out so the inner loops run over
// contiguous memory. With AVX-512 or AVX2 the horizontal pass reads the byte rows themselves, picking
// each tap's pixels by permutes (resize_byte_pass.cpp); otherwise it works on the source window
// transposed (its columns become rows) and its result is transposed back. The vertical pass runs
// along the rows. The hot loops are compiled for the widest vectors the CPU has and picked at run
// time. Only the source rows and columns the output needs are read, and only the output pixels
// asked for are made (a centre crop of a resize computes the crop alone, with the filter of the
// whole resize).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "data/resize_detail.hpp"
#include "data/transforms.hpp"
#include "data/vector_cap.hpp"
#include "data/vector_clones.hpp"

namespace trainer::data {
namespace resize_detail {

AxisWeights axis_weights(int64_t in, int64_t out, double off, double len) {
  AxisWeights a;
  double scale = len / static_cast<double>(out);
  const int64_t first = std::max<int64_t>(0, static_cast<int64_t>(std::floor(off)));
  const int64_t end = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(off + len)));
  double support = std::max(scale, 1.0);  // the triangle widens when shrinking: antialiasing
  a.max_count = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.start.resize(out);
  a.count.resize(out);
  a.weights.assign(out * a.max_count, 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    double center = (i + 0.5) * scale + off;
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), first);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), end);
    double total = 0.0;
    float* w = &a.weights[i * a.max_count];
    for (int64_t j = lo; j < hi && j - lo < a.max_count; ++j) {
      double t = std::abs((j - center + 0.5) / support);
      double v = t < 1.0 ? 1.0 - t : 0.0;
      w[j - lo] = static_cast<float>(v);
      total += v;
    }
    int64_t n = std::min(hi - lo, a.max_count);
    if (total > 0)
      for (int64_t k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
    a.start[i] = lo;
    a.count[i] = std::max<int64_t>(n, 0);
  }
  return a;
}

// The source span [lo, hi) that outputs [o0, o1) read.
std::pair<int64_t, int64_t> span(const AxisWeights& a, int64_t o0, int64_t o1) {
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t o = o0; o < o1; ++o) {
    if (a.count[o] == 0) continue;
    lo = std::min(lo, a.start[o]);
    hi = std::max(hi, a.start[o] + a.count[o]);
  }
  return lo > hi ? std::pair<int64_t, int64_t>{0, 0} : std::pair<int64_t, int64_t>{lo, hi};
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TRAINER_AVX2_TRANSPOSE 1
// An 8 x 8 block of floats transposed in registers: rows r[0..7] in, columns out (the usual unpack,
// shuffle, lane-permute sequence).
__attribute__((target("avx2"))) inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The whole 8 x 8 blocks of the transposes below; the caller does the edges. Only moves and exact
// uint8 -> float conversions: the same values as the scalar loops.
__attribute__((target("avx2"))) void transpose_bytes_avx2(const uint8_t* src, int64_t stride, int64_t rows, int64_t cols,
                                                          float* dst) {
  for (int64_t r0 = 0; r0 + 8 <= rows; r0 += 8)
    for (int64_t c0 = 0; c0 + 8 <= cols; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + (r0 + i) * stride + c0))));
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (c0 + j) * rows + r0, r[j]);
    }
}

__attribute__((target("avx2"))) void transpose_floats_avx2(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r0 = 0; r0 + 8 <= rows; r0 += 8)
    for (int64_t c0 = 0; c0 + 8 <= cols; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (r0 + i) * cols + c0);
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (c0 + j) * rows + r0, r[j]);
    }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// dst[c * rows + r] = src[r * stride + c] as float, rows x cols to cols x rows, for the part of the
// matrix outside its first done_r x done_c block, in cache-sized blocks.
template <class T>
void transpose_rest(const T* src, int64_t stride, int64_t rows, int64_t cols, float* dst, int64_t done_r,
                    int64_t done_c) {
  auto blocks = [&](int64_t ra, int64_t rb, int64_t ca, int64_t cb) {
    constexpr int64_t kB = 16;
    for (int64_t r0 = ra; r0 < rb; r0 += kB)
      for (int64_t c0 = ca; c0 < cb; c0 += kB) {
        const int64_t r1 = std::min(rb, r0 + kB), c1 = std::min(cb, c0 + kB);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = static_cast<float>(src[r * stride + c]);
      }
  };
  blocks(done_r, rows, 0, cols);     // the last rows, every column
  blocks(0, done_r, done_c, cols);   // the last columns of the other rows
}

// Bytes (a plane's window, row stride `stride`) or floats (rows x cols) transposed into floats: whole
// 8 x 8 blocks in AVX2 registers where the CPU has it, the rest (or all) by transpose_rest.
void transpose_bytes(const uint8_t* src, int64_t stride, int64_t rows, int64_t cols, float* dst) {
  int64_t done_r = 0, done_c = 0;
#ifdef TRAINER_AVX2_TRANSPOSE
  if (have_avx2()) {
    transpose_bytes_avx2(src, stride, rows, cols, dst);
    done_r = rows / 8 * 8, done_c = cols / 8 * 8;
  }
#endif
  transpose_rest(src, stride, rows, cols, dst, done_r, done_c);
}

void transpose_floats(const float* src, int64_t rows, int64_t cols, float* dst) {
  int64_t done_r = 0, done_c = 0;
#ifdef TRAINER_AVX2_TRANSPOSE
  if (have_avx2()) {
    transpose_floats_avx2(src, rows, cols, dst);
    done_r = rows / 8 * 8, done_c = cols / 8 * 8;
  }
#endif
  transpose_rest(src, cols, rows, cols, dst, done_r, done_c);
}

// One output row of a pass: acc[i] = w[0] * rows[0][i] + w[1] * rows[1][i] + ... (k ascending; the
// first term written, not added to zeros: 0 + x is x, as the weights and pixels are >= 0 no -0
// appears). V is a vector of floats: each block of 4 vectors of `acc` stays in registers over all
// k, so a tap costs a load, a multiply and an add, not also a load and a store of acc. The lanes
// round as the scalar tail does (no fused multiply-add), so every vector width gives the same bytes.
// No contraction of a multiply and an add into a fused one (C++'s default in GCC is to contract
// where the target has FMA, and AVX-512F has it): the same bytes on every CPU.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // the lambda's vector return: always inlined, never a call
template <class V>
[[gnu::always_inline]] inline void filter_one(const float* w, int64_t count, const float* first, int64_t n, float* acc) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const auto load = [](const float* p) [[gnu::always_inline]] {  // unaligned
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    V a0 = w[0] * load(first + i), a1 = w[0] * load(first + i + L);
    V a2 = w[0] * load(first + i + 2 * L), a3 = w[0] * load(first + i + 3 * L);
    for (int64_t k = 1; k < count; ++k) {
      const float* r = first + k * n + i;
      a0 += w[k] * load(r), a1 += w[k] * load(r + L), a2 += w[k] * load(r + 2 * L), a3 += w[k] * load(r + 3 * L);
    }
    std::memcpy(acc + i, &a0, sizeof a0), std::memcpy(acc + i + L, &a1, sizeof a1);
    std::memcpy(acc + i + 2 * L, &a2, sizeof a2), std::memcpy(acc + i + 3 * L, &a3, sizeof a3);
  }
  for (; i + L <= n; i += L) {
    V a = w[0] * load(first + i);
    for (int64_t k = 1; k < count; ++k) a += w[k] * load(first + k * n + i);
    std::memcpy(acc + i, &a, sizeof a);
  }
  for (; i < n; ++i) {
    float a = w[0] * first[i];
    for (int64_t k = 1; k < count; ++k) a += w[k] * first[k * n + i];
    acc[i] = a;
  }
}
#pragma GCC diagnostic pop

// out[o][i] = sum_k w[o][k] * in[start[o] - base + k][i] for outputs [o0, o1), rows of `n` floats.
template <class V>
[[gnu::always_inline]] inline void filter_rows_with(const AxisWeights& a, int64_t o0, int64_t o1, int64_t base,
                                                    const float* in, int64_t n, float* out) {
  for (int64_t o = o0; o < o1; ++o) {
    float* acc = out + (o - o0) * n;
    if (a.count[o] == 0) std::fill(acc, acc + n, 0.0f);
    else filter_one<V>(&a.weights[o * a.max_count], a.count[o], in + (a.start[o] - base) * n, n, acc);
  }
}

using Floats4 = float __attribute__((vector_size(16)));
using Floats8 = float __attribute__((vector_size(32)));
using Floats16 = float __attribute__((vector_size(64)));

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void filter_rows_avx512(const AxisWeights& a, int64_t o0, int64_t o1, int64_t base,
                                                           const float* in, int64_t n, float* out) {
  filter_rows_with<Floats16>(a, o0, o1, base, in, n, out);
}
__attribute__((target("avx2"))) void filter_rows_avx2(const AxisWeights& a, int64_t o0, int64_t o1, int64_t base,
                                                      const float* in, int64_t n, float* out) {
  filter_rows_with<Floats8>(a, o0, o1, base, in, n, out);
}
bool have_avx512f() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

std::atomic<int> g_filter_width{0};  // the test's cap (filter_width_for_tests), 0: none

// The filter's width in floats: the widest the CPU has, within ATEN_CPU_CAPABILITY's cap and the
// test's.
int filter_width() {
  const int test_cap = g_filter_width.load(std::memory_order_relaxed);
  const int cap = std::min(test_cap == 0 ? 16 : test_cap, vector_cap_floats());
#ifdef TRAINER_AVX2_TRANSPOSE
  if (cap >= 16 && have_avx512f()) return 16;
  if (cap >= 8 && have_avx2()) return 8;
#endif
  return 4;
}

void filter_rows(const AxisWeights& a, int64_t o0, int64_t o1, int64_t base, const float* in, int64_t n, float* out) {
  switch (filter_width()) {
#ifdef TRAINER_AVX2_TRANSPOSE
    case 16: return filter_rows_avx512(a, o0, o1, base, in, n, out);
    case 8: return filter_rows_avx2(a, o0, o1, base, in, n, out);
#endif
    default: return filter_rows_with<Floats4>(a, o0, o1, base, in, n, out);  // SSE2, the x86-64 baseline
  }
}
#pragma GCC pop_options

// lround, clamped to a byte: the integer part plus one from a fraction of a half (exact in float;
// the filter's weights are not negative, so a value is in [0, 255] give or take a rounding). The
// clamp is on the integers: float compares with a branch-free select do not vectorise here.
TRAINER_VECTOR_CLONES
void to_bytes_clones(const float* in, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const int32_t t = static_cast<int32_t>(v);
    int32_t r = t + static_cast<int32_t>(v - static_cast<float>(t) >= 0.5f);
    r = std::min(std::max(r, 0), 255);
    out[i] = static_cast<uint8_t>(r);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
// GCC 12 flags the undefined part its own conversion intrinsics start from (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same rounding 16 lanes at a time: truncate, add one where the fraction is >= 0.5, clamp, narrow.
__attribute__((target("avx512f"))) void to_bytes_avx512(const float* in, int64_t n, uint8_t* out) {
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + i);
    const __m512i t = _mm512_cvttps_epi32(v);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(v, _mm512_cvtepi32_ps(t)), half, _CMP_GE_OQ);
    const __m512i r = _mm512_min_epi32(_mm512_max_epi32(_mm512_mask_add_epi32(t, up, t, one), zero), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(r));
  }
  to_bytes_clones(in + i, n - i, out + i);
}
#pragma GCC diagnostic pop
#endif

void to_bytes(const float* in, int64_t n, uint8_t* out, int width) {
#ifdef TRAINER_AVX2_TRANSPOSE
  if (width == 16) return to_bytes_avx512(in, n, out);
#endif
  to_bytes_clones(in, n, out);
}

// Outputs [oy0, oy1) x [ox0, ox1) of one plane, written with row stride `out_stride`. `px`: the
// horizontal pass planned from byte rows for [ox0, ox1) at the filter's width (where it is not
// usable, the transposing path runs).
void resize_plane(const uint8_t* plane, int64_t src_w, const AxisWeights& wx, const AxisWeights& wy, const BytePass& px,
                  int64_t oy0, int64_t oy1, int64_t ox0, int64_t ox1, uint8_t* out, int64_t out_stride,
                  std::vector<float>& scratch) {
  const auto [ry0, ry1] = span(wy, oy0, oy1);
  const int64_t rows = ry1 - ry0, nx = ox1 - ox0, ny = oy1 - oy0;
  // scratch: the horizontal pass (rows x nx), the vertical pass (ny x nx)
  scratch.resize(static_cast<size_t>(rows * nx + ny * nx));
  if (!byte_pass(px, plane, src_w, ry0, ry1, scratch.data(), nx)) {
    // then also: the window transposed (cols x rows), its horizontal pass (nx x rows), that
    // transposed is the horizontal pass
    const auto [cx0, cx1] = span(wx, ox0, ox1);
    const int64_t cols = cx1 - cx0;
    scratch.resize(static_cast<size_t>(rows * nx + ny * nx + cols * rows + nx * rows));
    float* t = scratch.data() + rows * nx + ny * nx;
    float* h = t + cols * rows;
    transpose_bytes(plane + ry0 * src_w + cx0, src_w, rows, cols, t);
    filter_rows(wx, ox0, ox1, cx0, t, rows, h);
    transpose_floats(h, nx, rows, scratch.data());
  }
  const float* ht = scratch.data();
  float* v = scratch.data() + rows * nx;
  filter_rows(wy, oy0, oy1, ry0, ht, nx, v);
  const int width = filter_width();
  for (int64_t y = 0; y < ny; ++y) to_bytes(v + y * nx, nx, out + y * out_stride, width);
}

int filter_width_for_tests(int floats) {
  g_filter_width.store(floats, std::memory_order_relaxed);
  return filter_width();
}

}  // namespace resize_detail

using resize_detail::axis_weights;
using resize_detail::filter_width;
using resize_detail::plan_byte_pass;
using resize_detail::resize_plane;

void resize_bilinear(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                     int64_t dst_h, int64_t dst_w, std::vector<float>& scratch) {
  if (src_h == dst_h && src_w == dst_w) {
    std::memcpy(dst, src, channels * src_h * src_w);
    return;
  }
  resize_bilinear_window(src, channels, src_h, src_w, SourceWindow{0, 0, static_cast<double>(src_h), static_cast<double>(src_w)},
                         dst, dst_h, dst_w, scratch);
}

void resize_bilinear_window(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, const SourceWindow& win,
                            uint8_t* dst, int64_t dst_h, int64_t dst_w, std::vector<float>& scratch) {
  const auto wx = axis_weights(src_w, dst_w, win.left, win.width), wy = axis_weights(src_h, dst_h, win.top, win.height);
  const auto px = plan_byte_pass(wx, 0, dst_w, filter_width());
  for (int64_t c = 0; c < channels; ++c)
    resize_plane(src + c * src_h * src_w, src_w, wx, wy, px, 0, dst_h, 0, dst_w, dst + c * dst_h * dst_w, dst_w,
                 scratch);
}

ShortSideCrop short_side_crop(int64_t src_h, int64_t src_w, int64_t short_side, int64_t size) {
  // torchvision's _compute_resized_output_size: int(new_short * long / short), a double's quotient
  // of exact integers (correctly rounded, as Python's true division) truncated
  auto longer = [&](int64_t lng, int64_t shrt) {
    return static_cast<int64_t>(static_cast<double>(short_side * lng) / static_cast<double>(shrt));
  };
  ShortSideCrop g;
  g.height = src_w <= src_h ? longer(src_h, src_w) : short_side;
  g.width = src_w <= src_h ? short_side : longer(src_w, src_h);
  // CenterCrop: int(round((resized - size) / 2.0)); an odd margin's half rounds to the even neighbour
  auto centre = [](int64_t margin) { return margin / 2 + (margin % 2 == 1 && (margin / 2) % 2 == 1 ? 1 : 0); };
  g.top = centre(g.height - size);
  g.left = centre(g.width - size);
  return g;
}

void resize_short_center_crop(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                              int64_t short_side, int64_t size, std::vector<float>& scratch,
                              const ScaledDecode& scaled) {
  const bool dct = scaled.scale > 1;
  const auto g = dct ? short_side_crop(scaled.whole_h, scaled.whole_w, short_side, size)
                     : short_side_crop(src_h, src_w, short_side, size);
  const int64_t h = g.height, w = g.width, top = g.top, left = g.left;
  if (!dct && h == src_h && w == src_w) {
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < size; ++y)
        std::memcpy(dst + (c * size + y) * size, src + (c * h + top + y) * w + left, size);
    return;
  }
  // the crop's pixels of the whole resize: its filter, only its outputs
  const double extent_w = dct ? static_cast<double>(scaled.whole_w) / static_cast<double>(scaled.scale)
                              : static_cast<double>(src_w);
  const double extent_h = dct ? static_cast<double>(scaled.whole_h) / static_cast<double>(scaled.scale)
                              : static_cast<double>(src_h);
  const auto wx = axis_weights(src_w, w, 0, extent_w);
  const auto wy = axis_weights(src_h, h, 0, extent_h);
  const auto px = plan_byte_pass(wx, left, left + size, filter_width());
  for (int64_t c = 0; c < channels; ++c)
    resize_plane(src + c * src_h * src_w, src_w, wx, wy, px, top, top + size, left, left + size,
                 dst + c * size * size, size, scratch);
}

}  // namespace trainer::data
