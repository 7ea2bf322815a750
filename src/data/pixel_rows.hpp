// A decoder's interleaved pixels into the planes the pipeline works on (C, H, W), C = 1 or 3, with
// PIL's conversions where a colour model must change, so an image folder gives the pixels
// torchvision's ImageFolder (PIL, .convert("RGB") or "L") gives.
#pragma once

#include <cstdint>

namespace trainer::data {

enum class PixelKind {
  Grey,       // 1 byte a pixel
  GreyAlpha,  // 2: alpha dropped, as PIL's LA -> L / RGB does (not composited)
  Rgb,        // 3
  Rgba,       // 4: alpha dropped, as PIL's RGBA -> RGB does
  Cmyk,       // 4: Adobe's inverted CMYK (Photoshop's and PIL's JPEGs), PIL's CMYK -> RGB
};

int64_t pixel_bytes(PixelKind kind);

// n pixels of `kind` at src into `channels` (1 or 3) planes: dst, dst + plane, dst + 2 * plane.
// Colour to grey is PIL's ITU-R 601 luma, (19595 R + 38470 G + 7471 B + 2^15) >> 16.
void to_planes(const uint8_t* src, PixelKind kind, int64_t n, int64_t channels, uint8_t* dst, int64_t plane);

}  // namespace trainer::data
