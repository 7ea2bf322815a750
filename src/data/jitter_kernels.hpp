// ColorJitter's byte loops (data/crop_jitter.cpp): the blends of brightness, contrast and
// saturation, the greyscale they read, and the hue shift (hue_kernel.cpp). Every path gives the scalar formulas' bytes (float32
// products summed in order, no fused multiply-add, clamped to [0, 255], truncated): AVX-512 where
// the CPU has it and ATEN_CPU_CAPABILITY (data/vector_cap.hpp) does not cap it, else GCC's clones
// (data/vector_clones.hpp: AVX2 or the baseline).
#pragma once

#include <cstdint>

namespace trainer::data::jitter_kernels {

// img[i] = ratio * img[i] + rest_ratio * other[i], or + rest_all when `other` is null.
void blend(uint8_t* img, const uint8_t* other, int64_t n, float ratio, float rest_ratio, float rest_all);
// torchvision's rgb_to_grayscale on uint8 planes: 0.2989 r + 0.587 g + 0.114 b, truncated.
void gray(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int64_t n);
// The exact sum of n bytes.
int64_t sum(const uint8_t* p, int64_t n);
// torchvision's adjust_hue on uint8 planes, in place: RGB -> HSV, the hue shifted by `shift`
// (in [-0.5, 0.5]) on the unit circle, back, then x * 255.999 truncated.
void hue(uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float shift);

// 16: the AVX-512 loops run; 0: the clones.
int width();
// Tests: the same kernels at a given width (16, when the CPU has AVX-512F; 0: the clones).
void blend_at(int width, uint8_t* img, const uint8_t* other, int64_t n, float ratio, float rest_ratio, float rest_all);
void gray_at(int width, const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int64_t n);
bool cpu_has_avx512();
// The hue's own paths: 16 (AVX-512), 8 (AVX2: the CPU has it and ATEN_CPU_CAPABILITY allows it), 0 (scalar).
int hue_width();
void hue_at(int width, uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float shift);
bool cpu_has_avx2();

}  // namespace trainer::data::jitter_kernels
