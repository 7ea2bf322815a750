// The resize's horizontal pass read straight from a plane's byte rows, with no transposes. The
// source pixels that a block of up to L neighbouring outputs reads lie within 2L consecutive bytes
// of a row: they are loaded once, as two vectors of L floats, and each tap k picks its L pixels out
// of them with permutes and multiplies them by its L weights. AVX-512: L = 16, one two-register
// permute (vpermt2ps) a tap; AVX2: L = 8, two one-register permutes (vpermps) and a blend. The sums
// are the scalar loops' (k ascending, the first term written, no fused multiply-add), so the bytes
// are the same as on every other path (tests/data/test_resize.cpp). Where a block's pixels would
// span more than 2L bytes (a shrink of more than about 2x) it takes fewer outputs; a filter of more
// than 2L taps is left to the transposing path.
#include <algorithm>
#include <climits>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "data/resize_detail.hpp"

namespace trainer::data::resize_detail {

BytePass plan_byte_pass(const AxisWeights& a, int64_t o0, int64_t o1, int64_t lanes_max) {
  BytePass p;
  p.lanes_max = lanes_max;
  const int64_t span = 2 * lanes_max;
  if ((lanes_max != 16 && lanes_max != 8) || a.max_count < 1 || a.max_count > span || o1 <= o0) return p;
  p.taps = a.max_count;
  for (int64_t o = o0; o < o1;) {
    int64_t lo = INT64_MAX, hi = 0, lanes = 0;
    while (o + lanes < o1 && lanes < lanes_max) {  // grow the block while its pixels fit the span
      const int64_t q = o + lanes;
      if (a.count[q] > 0) {
        const int64_t nlo = std::min(lo, a.start[q]), nhi = std::max(hi, a.start[q] + a.count[q]);
        if (nhi - nlo > span) break;
        lo = nlo, hi = nhi;
      }
      ++lanes;
    }
    if (lo == INT64_MAX) lo = 0;  // outputs without pixels: weights 0, sums 0 (as the scalar fill)
    p.lo.push_back(lo);
    p.lanes.push_back(static_cast<int32_t>(lanes));
    int64_t taps = 1;  // the block's widest output (past it every lane's weight is 0)
    for (int64_t l = 0; l < lanes; ++l) taps = std::max(taps, a.count[o + l]);
    p.block_taps.push_back(static_cast<int32_t>(taps));
    const size_t at = p.idx.size();
    p.idx.resize(at + static_cast<size_t>(p.taps * lanes_max), 0);
    p.w.resize(p.idx.size(), 0.0f);
    for (int64_t k = 0; k < p.taps; ++k)
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t q = o + l;
        if (k >= a.count[q]) continue;  // weight 0 times a pixel adds +0: the sum is unchanged
        p.idx[at + static_cast<size_t>(k * lanes_max + l)] = static_cast<int32_t>(a.start[q] + k - lo);
        p.w[at + static_cast<size_t>(k * lanes_max + l)] = a.weights[q * a.max_count + k];
      }
    o += lanes;
  }
  return p;
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")  // separate multiplies and adds: the scalar loops' rounding
#pragma GCC diagnostic push
// GCC 12 flags the undefined upper part its own widening intrinsics start from (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Block b of R rows: the 32 bytes at each row's block start (rows[r]), the block's outputs to outs[r].
template <int R>
__attribute__((target("avx512f"), always_inline)) inline void block_rows_16(const BytePass& p, size_t b,
                                                                            const uint8_t* const* rows,
                                                                            float* const* outs) {
  const int32_t* idx = &p.idx[b * static_cast<size_t>(p.taps * 16)];
  const float* w = &p.w[b * static_cast<size_t>(p.taps * 16)];
  __m512 lo[R], hi[R], acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    lo[r] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r]))));
    hi[r] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + 16))));
  }
  {
    const __m512i i0 = _mm512_loadu_si512(idx);
    const __m512 w0 = _mm512_loadu_ps(w);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_mul_ps(w0, _mm512_permutex2var_ps(lo[r], i0, hi[r]));
  }
  for (int64_t k = 1; k < p.block_taps[b]; ++k) {
    const __m512i ik = _mm512_loadu_si512(idx + k * 16);
    const __m512 wk = _mm512_loadu_ps(w + k * 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(wk, _mm512_permutex2var_ps(lo[r], ik, hi[r])));
  }
  const __mmask16 m = static_cast<__mmask16>((1u << p.lanes[b]) - 1);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(outs[r], m, acc[r]);
}

// Block b of R rows, 8 outputs wide: the 16 bytes at each row's block start. A tap's pixel sits in
// the first vector (index < 8) or the second: both are permuted and the index's bit 3 picks one.
template <int R>
__attribute__((target("avx2"), always_inline)) inline void block_rows_8(const BytePass& p, size_t b,
                                                                        const uint8_t* const* rows, float* const* outs) {
  const int32_t* idx = &p.idx[b * static_cast<size_t>(p.taps * 8)];
  const float* w = &p.w[b * static_cast<size_t>(p.taps * 8)];
  __m256 lo[R], hi[R], acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    lo[r] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[r]))));
    hi[r] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[r] + 8))));
  }
  for (int64_t k = 0; k < p.block_taps[b]; ++k) {
    const __m256i ik = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + k * 8));
    const __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(ik, 28));  // bit 3 to the sign: blendv's select
    const __m256 wk = _mm256_loadu_ps(w + k * 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo[r], ik), _mm256_permutevar8x32_ps(hi[r], ik), second);
      const __m256 term = _mm256_mul_ps(wk, x);
      acc[r] = k == 0 ? term : _mm256_add_ps(acc[r], term);
    }
  }
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(p.lanes[b]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) _mm256_maskstore_ps(outs[r], m, acc[r]);
}

// Rows [r0, r1) of the plane (row stride and length src_w), R at a time: each block's weights and
// indices are loaded once for R rows. Here, where block b of rows r.. r + R - 1 reads from: its 2L bytes in
// each row, or a zero-padded copy of them where they would run past the row's end (the indices
// never reach the padding; the load must not leave the plane).
template <int R, int L>
[[gnu::always_inline]] inline void block_sources(const BytePass& p, size_t b, const uint8_t* plane, int64_t src_w,
                                                 int64_t r, uint8_t (&pad)[R][2 * L], const uint8_t* (&rows)[R]) {
  const int64_t lo = p.lo[b];
  for (int i = 0; i < R; ++i) {
    const uint8_t* row = plane + (r + i) * src_w;
    if (lo + 2 * L <= src_w) {
      rows[i] = row + lo;
    } else {
      std::memset(pad[i], 0, sizeof pad[i]);
      std::memcpy(pad[i], row + lo, static_cast<size_t>(std::max<int64_t>(0, src_w - lo)));
      rows[i] = pad[i];
    }
  }
}

// Rows r.. r + R - 1 through every block, for each instruction set: two copies of one loop, as GCC
// inlines the target-specific block code only into a function of the same target (a shared loop
// calling the blocks measured 10-15 % slower).
template <int R>
__attribute__((target("avx512f"))) void rows_avx512(const BytePass& p, const uint8_t* plane, int64_t src_w, int64_t r,
                                                    float* out, int64_t n) {
  alignas(64) uint8_t pad[R][32];
  const uint8_t* rows[R];
  float* outs[R];
  for (size_t b = 0, o = 0; b < p.lo.size(); o += static_cast<size_t>(p.lanes[b]), ++b) {
    block_sources<R, 16>(p, b, plane, src_w, r, pad, rows);
    for (int i = 0; i < R; ++i) outs[i] = out + i * n + static_cast<int64_t>(o);
    block_rows_16<R>(p, b, rows, outs);
  }
}

template <int R>
__attribute__((target("avx2"))) void rows_avx2(const BytePass& p, const uint8_t* plane, int64_t src_w, int64_t r,
                                               float* out, int64_t n) {
  alignas(32) uint8_t pad[R][16];
  const uint8_t* rows[R];
  float* outs[R];
  for (size_t b = 0, o = 0; b < p.lo.size(); o += static_cast<size_t>(p.lanes[b]), ++b) {
    block_sources<R, 8>(p, b, plane, src_w, r, pad, rows);
    for (int i = 0; i < R; ++i) outs[i] = out + i * n + static_cast<int64_t>(o);
    block_rows_8<R>(p, b, rows, outs);
  }
}

bool have_avx512f_bytes() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
bool have_avx2_bytes() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

bool byte_pass(const BytePass& p, const uint8_t* plane, int64_t src_w, int64_t r0, int64_t r1, float* out,
               int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!p.usable()) return false;
  int64_t r = r0;
  if (p.lanes_max == 16 && have_avx512f_bytes()) {
    for (; r + 4 <= r1; r += 4) rows_avx512<4>(p, plane, src_w, r, out + (r - r0) * n, n);
    for (; r < r1; ++r) rows_avx512<1>(p, plane, src_w, r, out + (r - r0) * n, n);
    return true;
  }
  if (p.lanes_max == 8 && have_avx2_bytes()) {
    for (; r + 2 <= r1; r += 2) rows_avx2<2>(p, plane, src_w, r, out + (r - r0) * n, n);  // 16 registers: 2 rows
    for (; r < r1; ++r) rows_avx2<1>(p, plane, src_w, r, out + (r - r0) * n, n);
    return true;
  }
  return false;
#else
  (void)p, (void)plane, (void)src_w, (void)r0, (void)r1, (void)out, (void)n;
  return false;
#endif
}

}  // namespace trainer::data::resize_detail
