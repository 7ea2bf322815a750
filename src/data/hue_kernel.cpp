// ColorJitter's hue (jitter_kernels.hpp): torchvision's _rgb2hsv, the shift, _hsv2rgb, and the
// float -> uint8 conversion, per pixel: AVX-512 and AVX2 loops (fp-contract off), the scalar loop for
// the rest. Each formula is the scalar one's, in its order (IEEE division, no FMA), so every path
// gives its bytes (tests/engine/test_crop_jitter.cpp checks every colour against the branchy code
// this replaced). What makes the vector loops branch-free:
//  - fmod(h / 6 + 1, 1): the argument lies in [5/6, 11/6) (h in [-1, 5]), so it is `a - 1` where
//    a >= 1 (exact: Sterbenz), else a;
//  - (h + shift) - floor(h + shift): with the shift in [-0.5, 0.5] the sum lies in [-0.5, 1.5), so
//    floor is -1, 0 or 1, both tests taken on the sum before either is applied (x + 1 may round to 1.0,
//    which the scalar code keeps too);
//  - floor(h * 6) of a value in [0, 6] is its truncation; the sector is that mod 6 (6 only from h = 1.0).
// The two loops are one formula spelled twice in intrinsics: written once over GCC's vector types
// (resize.cpp's way) it gave the same bytes but ran 5x slower at 16 lanes (0.296 against 0.058 ms a
// 224x224 image, Zen 5) and 1.7x slower at 8.
#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRAINER_HUE_AVX512 1
#endif

#include "data/jitter_kernels.hpp"
#include "data/vector_cap.hpp"

namespace trainer::data::jitter_kernels {
namespace {

inline float hk_clamp01(float v) { return std::min(std::max(v, 0.0f), 1.0f); }
inline uint8_t hk_byte(float v) { return static_cast<uint8_t>(static_cast<int32_t>(std::min(v * 255.999f, 255.0f))); }

// GCC leaves this loop scalar (its selects merge into PHIs it does not if-convert): the
// baseline's path and the vector loops' tails; AVX2 and AVX-512 have loops of their own below.
void hue_scalar(uint8_t* __restrict rp, uint8_t* __restrict gp, uint8_t* __restrict bp, int64_t n, float shift) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = rp[i] / 255.0f, g = gp[i] / 255.0f, b = bp[i] / 255.0f;
    const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    const float hr = bc - gc, hg = 2.0f + rc - bc, hb = 4.0f + gc - rc;
    const float h = maxc == r ? hr : maxc == g ? hg : hb;
    const float a = h / 6.0f + 1.0f;
    const float x = (a >= 1.0f ? a - 1.0f : a) + shift;
    const float hv = x < 0.0f ? x - -1.0f : x >= 1.0f ? x - 1.0f : x;
    const float h6 = hv * 6.0f;
    const int32_t whole = static_cast<int32_t>(h6);
    const float f = h6 - static_cast<float>(whole);
    const int32_t sector = whole == 6 ? 0 : whole;
    const float v = maxc;
    const float p = hk_clamp01(v * (1.0f - s)), q = hk_clamp01(v * (1.0f - s * f)),
                t = hk_clamp01(v * (1.0f - s * (1.0f - f)));
    // sectors 0..5: (v, t, p) (q, v, p) (p, v, t) (p, q, v) (t, p, v) (v, p, q)
    const float ro = sector == 0 || sector == 5 ? v : sector == 1 ? q : sector == 4 ? t : p;
    const float go = sector == 1 || sector == 2 ? v : sector == 0 ? t : sector == 3 ? q : p;
    const float bo = sector == 3 || sector == 4 ? v : sector == 2 ? t : sector == 5 ? q : p;
    rp[i] = hk_byte(ro);
    gp[i] = hk_byte(go);
    bp[i] = hk_byte(bo);
  }
}

#ifdef TRAINER_HUE_AVX512
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // as jitter_kernels.cpp: GCC 12 on its own intrinsics
#define HK_TARGET __attribute__((target("avx512f")))
HK_TARGET inline __m512 hk_load(const uint8_t* p) {
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  return _mm512_div_ps(v, _mm512_set1_ps(255.0f));
}
HK_TARGET inline __m512 hk_clamp01_v(__m512 v) {
  return _mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
}
HK_TARGET inline void hk_store(uint8_t* p, __m512 v) {
  v = _mm512_min_ps(_mm512_mul_ps(v, _mm512_set1_ps(255.999f)), _mm512_set1_ps(255.0f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

HK_TARGET void hue_avx512(uint8_t* rp, uint8_t* gp, uint8_t* bp, int64_t n, float shift) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f),
               sh = _mm512_set1_ps(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = hk_load(rp + i), g = hk_load(gp + i), b = hk_load(bp + i);
    const __m512 maxc = _mm512_max_ps(_mm512_max_ps(r, g), b), minc = _mm512_min_ps(_mm512_min_ps(r, g), b);
    const __mmask16 eqc = _mm512_cmp_ps_mask(maxc, minc, _CMP_EQ_OQ);
    const __m512 cr = _mm512_sub_ps(maxc, minc);
    const __m512 s = _mm512_div_ps(cr, _mm512_mask_blend_ps(eqc, maxc, one));
    const __m512 div = _mm512_mask_blend_ps(eqc, cr, one);
    const __m512 rc = _mm512_div_ps(_mm512_sub_ps(maxc, r), div), gc = _mm512_div_ps(_mm512_sub_ps(maxc, g), div),
                 bc = _mm512_div_ps(_mm512_sub_ps(maxc, b), div);
    const __m512 hr = _mm512_sub_ps(bc, gc), hg = _mm512_sub_ps(_mm512_add_ps(_mm512_set1_ps(2.0f), rc), bc),
                 hb = _mm512_sub_ps(_mm512_add_ps(_mm512_set1_ps(4.0f), gc), rc);
    const __mmask16 is_r = _mm512_cmp_ps_mask(maxc, r, _CMP_EQ_OQ), is_g = _mm512_cmp_ps_mask(maxc, g, _CMP_EQ_OQ);
    const __m512 h = _mm512_mask_blend_ps(is_r, _mm512_mask_blend_ps(is_g, hb, hg), hr);
    const __m512 a = _mm512_add_ps(_mm512_div_ps(h, six), one);
    const __m512 x = _mm512_add_ps(_mm512_mask_sub_ps(a, _mm512_cmp_ps_mask(a, one, _CMP_GE_OQ), a, one), sh);
    __m512 hv = _mm512_mask_sub_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, _mm512_set1_ps(-1.0f));
    hv = _mm512_mask_sub_ps(hv, _mm512_cmp_ps_mask(x, one, _CMP_GE_OQ), x, one);
    const __m512 h6 = _mm512_mul_ps(hv, six);
    const __m512i whole = _mm512_cvttps_epi32(h6);
    const __m512 f = _mm512_sub_ps(h6, _mm512_cvtepi32_ps(whole));
    const __m512i sector = _mm512_mask_mov_epi32(whole, _mm512_cmpeq_epi32_mask(whole, _mm512_set1_epi32(6)),
                                                 _mm512_setzero_si512());
    const __m512 v = maxc;
    const __m512 p = hk_clamp01_v(_mm512_mul_ps(v, _mm512_sub_ps(one, s))),
                 q = hk_clamp01_v(_mm512_mul_ps(v, _mm512_sub_ps(one, _mm512_mul_ps(s, f)))),
                 t = hk_clamp01_v(_mm512_mul_ps(v, _mm512_sub_ps(one, _mm512_mul_ps(s, _mm512_sub_ps(one, f)))));
    __mmask16 k[6];
    for (int j = 0; j < 6; ++j) k[j] = _mm512_cmpeq_epi32_mask(sector, _mm512_set1_epi32(j));
    __m512 ro = p, go = p, bo = p;  // then the sectors' other picks, as the clones' selects
    ro = _mm512_mask_mov_ps(ro, k[0] | k[5], v);
    ro = _mm512_mask_mov_ps(ro, k[1], q);
    ro = _mm512_mask_mov_ps(ro, k[4], t);
    go = _mm512_mask_mov_ps(go, k[1] | k[2], v);
    go = _mm512_mask_mov_ps(go, k[0], t);
    go = _mm512_mask_mov_ps(go, k[3], q);
    bo = _mm512_mask_mov_ps(bo, k[3] | k[4], v);
    bo = _mm512_mask_mov_ps(bo, k[2], t);
    bo = _mm512_mask_mov_ps(bo, k[5], q);
    hk_store(rp + i, ro);
    hk_store(gp + i, go);
    hk_store(bp + i, bo);
  }
  hue_scalar(rp + i, gp + i, bp + i, n - i, shift);
}
#undef HK_TARGET

#define HK2_TARGET __attribute__((target("avx2")))
HK2_TARGET inline __m256 hk2_load(const uint8_t* p) {
  const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  return _mm256_div_ps(v, _mm256_set1_ps(255.0f));
}
HK2_TARGET inline __m256 hk2_clamp01(__m256 v) {
  return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}
// x * 255.999, capped at 255, truncated, 8 bytes
HK2_TARGET inline void hk2_store(uint8_t* p, __m256 v) {
  v = _mm256_min_ps(_mm256_mul_ps(v, _mm256_set1_ps(255.999f)), _mm256_set1_ps(255.0f));
  const __m256i w = _mm256_cvttps_epi32(v);                          // 8 x int32 in [0, 255]
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(w, w), _mm256_packus_epi32(w, w));  // each 128-bit half: its 4 bytes first
  const uint32_t lo = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(b)));
  const uint32_t hi = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1)));
  std::memcpy(p, &lo, 4);
  std::memcpy(p + 4, &hi, 4);
}
HK2_TARGET inline __m256 hk2_pick(__m256 src, __m256 mask, __m256 v) { return _mm256_blendv_ps(src, v, mask); }

HK2_TARGET void hue_avx2(uint8_t* rp, uint8_t* gp, uint8_t* bp, int64_t n, float shift) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f),
               sh = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = hk2_load(rp + i), g = hk2_load(gp + i), b = hk2_load(bp + i);
    const __m256 maxc = _mm256_max_ps(_mm256_max_ps(r, g), b), minc = _mm256_min_ps(_mm256_min_ps(r, g), b);
    const __m256 eqc = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
    const __m256 cr = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(cr, hk2_pick(maxc, eqc, one));
    const __m256 div = hk2_pick(cr, eqc, one);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, r), div), gc = _mm256_div_ps(_mm256_sub_ps(maxc, g), div),
                 bc = _mm256_div_ps(_mm256_sub_ps(maxc, b), div);
    const __m256 hr = _mm256_sub_ps(bc, gc), hg = _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps(2.0f), rc), bc),
                 hb = _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps(4.0f), gc), rc);
    const __m256 h = hk2_pick(hk2_pick(hb, _mm256_cmp_ps(maxc, g, _CMP_EQ_OQ), hg), _mm256_cmp_ps(maxc, r, _CMP_EQ_OQ), hr);
    const __m256 a = _mm256_add_ps(_mm256_div_ps(h, six), one);
    const __m256 x = _mm256_add_ps(hk2_pick(a, _mm256_cmp_ps(a, one, _CMP_GE_OQ), _mm256_sub_ps(a, one)), sh);
    __m256 hv = hk2_pick(x, _mm256_cmp_ps(x, zero, _CMP_LT_OQ), _mm256_sub_ps(x, _mm256_set1_ps(-1.0f)));
    hv = hk2_pick(hv, _mm256_cmp_ps(x, one, _CMP_GE_OQ), _mm256_sub_ps(x, one));
    const __m256 h6 = _mm256_mul_ps(hv, six);
    const __m256i whole = _mm256_cvttps_epi32(h6);
    const __m256 f = _mm256_sub_ps(h6, _mm256_cvtepi32_ps(whole));
    const __m256i sector = _mm256_andnot_si256(_mm256_cmpeq_epi32(whole, _mm256_set1_epi32(6)), whole);
    const __m256 v = maxc;
    const __m256 p = hk2_clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, s))),
                 q = hk2_clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f)))),
                 t = hk2_clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))));
    __m256 k[6];
    for (int j = 0; j < 6; ++j) k[j] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(sector, _mm256_set1_epi32(j)));
    __m256 ro = p, go = p, bo = p;  // then the sectors' other picks, as the scalar table's
    ro = hk2_pick(hk2_pick(hk2_pick(ro, _mm256_or_ps(k[0], k[5]), v), k[1], q), k[4], t);
    go = hk2_pick(hk2_pick(hk2_pick(go, _mm256_or_ps(k[1], k[2]), v), k[0], t), k[3], q);
    bo = hk2_pick(hk2_pick(hk2_pick(bo, _mm256_or_ps(k[3], k[4]), v), k[2], t), k[5], q);
    hk2_store(rp + i, ro);
    hk2_store(gp + i, go);
    hk2_store(bp + i, bo);
  }
  hue_scalar(rp + i, gp + i, bp + i, n - i, shift);
}
#undef HK2_TARGET
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

bool cpu_has_avx2() {
#ifdef TRAINER_HUE_AVX512
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

int hue_width() {
  static const int w = width() == 16 ? 16 : cpu_has_avx2() && vector_cap_floats() >= 8 ? 8 : 0;
  return w;
}

void hue_at(int w, uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float shift) {
#ifdef TRAINER_HUE_AVX512
  if (w == 16 && cpu_has_avx512()) return hue_avx512(r, g, b, n, shift);
  if (w == 8 && cpu_has_avx2()) return hue_avx2(r, g, b, n, shift);
#endif
  hue_scalar(r, g, b, n, shift);
}

void hue(uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float shift) { hue_at(hue_width(), r, g, b, n, shift); }

}  // namespace trainer::data::jitter_kernels
