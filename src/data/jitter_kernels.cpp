#include "data/jitter_kernels.hpp"

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRAINER_JITTER_AVX512 1
#endif

#include "data/vector_cap.hpp"
#include "data/vector_clones.hpp"

namespace trainer::data::jitter_kernels {
namespace {

// No fused multiply-add on any path: the clones' targets have no FMA (vector_clones.hpp), and the
// AVX-512 loops below turn contraction off (GCC contracts intrinsics' multiplies and adds too).
// (The clones stay outside that pragma: a function whose optimize options differ from its callee's
// does not inline it, and the clones' loops then call jk_byte per byte, scalar.)
inline uint8_t jk_byte(float v) { return static_cast<uint8_t>(static_cast<int32_t>(std::min(std::max(v, 0.0f), 255.0f))); }

TRAINER_VECTOR_CLONES
void blend_clones(uint8_t* __restrict img, const uint8_t* __restrict other, int64_t n, float ratio, float rest_ratio,
                  float rest_all) {
  if (other) {
    for (int64_t i = 0; i < n; ++i) img[i] = jk_byte(ratio * img[i] + rest_ratio * other[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) img[i] = jk_byte(ratio * img[i] + rest_all);
  }
}

TRAINER_VECTOR_CLONES
void gray_clones(const uint8_t* __restrict r, const uint8_t* __restrict g, const uint8_t* __restrict b,
                 uint8_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(0.2989f * r[i] + 0.587f * g[i] + 0.114f * b[i]));
}

TRAINER_VECTOR_CLONES
int64_t sum_clones(const uint8_t* p, int64_t n) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

#ifdef TRAINER_JITTER_AVX512
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic push
// GCC 12 flags the undefined part its own conversion intrinsics start from (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline __m512 jk_floats(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// clamp, truncate, narrow: 16 bytes
__attribute__((target("avx512f"))) inline void jk_store(uint8_t* p, __m512 v) {
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

__attribute__((target("avx512f"))) void blend_avx512(uint8_t* img, const uint8_t* other, int64_t n, float ratio,
                                                     float rest_ratio, float rest_all) {
  const __m512 r = _mm512_set1_ps(ratio), rr = _mm512_set1_ps(rest_ratio), ra = _mm512_set1_ps(rest_all);
  int64_t i = 0;
  if (other) {
    for (; i + 16 <= n; i += 16)
      jk_store(img + i, _mm512_add_ps(_mm512_mul_ps(r, jk_floats(img + i)), _mm512_mul_ps(rr, jk_floats(other + i))));
  } else {
    for (; i + 16 <= n; i += 16) jk_store(img + i, _mm512_add_ps(_mm512_mul_ps(r, jk_floats(img + i)), ra));
  }
  blend_clones(img + i, other ? other + i : nullptr, n - i, ratio, rest_ratio, rest_all);
}

__attribute__((target("avx512f"))) void gray_avx512(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out,
                                                    int64_t n) {
  const __m512 wr = _mm512_set1_ps(0.2989f), wg = _mm512_set1_ps(0.587f), wb = _mm512_set1_ps(0.114f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(wr, jk_floats(r + i)), _mm512_mul_ps(wg, jk_floats(g + i))),
                                   _mm512_mul_ps(wb, jk_floats(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
  }
  gray_clones(r + i, g + i, b + i, out + i, n - i);
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

bool cpu_has_avx512() {
#ifdef TRAINER_JITTER_AVX512
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

int width() {
  static const int w = cpu_has_avx512() && vector_cap_floats() >= 16 ? 16 : 0;
  return w;
}

void blend_at(int w, uint8_t* img, const uint8_t* other, int64_t n, float ratio, float rest_ratio, float rest_all) {
#ifdef TRAINER_JITTER_AVX512
  if (w == 16 && cpu_has_avx512()) return blend_avx512(img, other, n, ratio, rest_ratio, rest_all);
#endif
  blend_clones(img, other, n, ratio, rest_ratio, rest_all);
}

void gray_at(int w, const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int64_t n) {
#ifdef TRAINER_JITTER_AVX512
  if (w == 16 && cpu_has_avx512()) return gray_avx512(r, g, b, out, n);
#endif
  gray_clones(r, g, b, out, n);
}

void blend(uint8_t* img, const uint8_t* other, int64_t n, float ratio, float rest_ratio, float rest_all) {
  blend_at(width(), img, other, n, ratio, rest_ratio, rest_all);
}

void gray(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int64_t n) { gray_at(width(), r, g, b, out, n); }

int64_t sum(const uint8_t* p, int64_t n) { return sum_clones(p, n); }

}  // namespace trainer::data::jitter_kernels
