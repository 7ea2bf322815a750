#include "data/pixel_rows.hpp"

#include <cstring>

#include "data/vector_clones.hpp"

namespace trainer::data {
namespace {

// n interleaved pixels of `stride` bytes, their first three into three planes, one pass (the loads
// of three lanes become vector shuffles: a 330-pixel crop's rows 5.6x faster than a pass per
// channel with a stride-3 read)
TRAINER_VECTOR_CLONES
void split3(const uint8_t* __restrict src, int64_t n, uint8_t* __restrict r, uint8_t* __restrict g,
            uint8_t* __restrict b) {
  for (int64_t i = 0; i < n; ++i) {
    r[i] = src[3 * i];
    g[i] = src[3 * i + 1];
    b[i] = src[3 * i + 2];
  }
}

void split_strided(const uint8_t* src, int64_t stride, int64_t n, int64_t channels, uint8_t* dst, int64_t plane) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < n; ++i) dst[c * plane + i] = src[i * stride + c];
}

uint8_t luma(int r, int g, int b) { return static_cast<uint8_t>((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16); }

// PIL's cmyk2rgb after its "CMYK;I" read: the stored bytes are 255 - ink, so with nk = 255 - K (the
// stored k), R = nk - nk * C / 255 rounded as PIL's MULDIV255 does.
uint8_t cmyk_channel(int stored_ink, int stored_k) {
  const int t = (255 - stored_ink) * stored_k + 128;
  const int v = stored_k - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v);
}

}  // namespace

int64_t pixel_bytes(PixelKind kind) {
  switch (kind) {
    case PixelKind::Grey: return 1;
    case PixelKind::GreyAlpha: return 2;
    case PixelKind::Rgb: return 3;
    default: return 4;  // Rgba, Cmyk
  }
}

void to_planes(const uint8_t* src, PixelKind kind, int64_t n, int64_t channels, uint8_t* dst, int64_t plane) {
  const int64_t stride = pixel_bytes(kind);
  if (kind == PixelKind::Cmyk) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = src + 4 * i;
      const uint8_t r = cmyk_channel(p[0], p[3]), g = cmyk_channel(p[1], p[3]), b = cmyk_channel(p[2], p[3]);
      if (channels == 1) {
        dst[i] = luma(r, g, b);
      } else {
        dst[i] = r, dst[plane + i] = g, dst[2 * plane + i] = b;
      }
    }
    return;
  }
  const bool colour = kind == PixelKind::Rgb || kind == PixelKind::Rgba;
  if (channels == 1 && colour) {
    for (int64_t i = 0; i < n; ++i) dst[i] = luma(src[i * stride], src[i * stride + 1], src[i * stride + 2]);
  } else if (channels == 1 || !colour) {  // grey into each plane asked for
    for (int64_t c = 0; c < channels; ++c) {
      if (stride == 1) std::memcpy(dst + c * plane, src, static_cast<size_t>(n));
      else split_strided(src, stride, n, 1, dst + c * plane, plane);
    }
  } else if (stride == 3) {
    split3(src, n, dst, dst + plane, dst + 2 * plane);
  } else {
    split_strided(src, stride, n, 3, dst, plane);
  }
}

}  // namespace trainer::data
