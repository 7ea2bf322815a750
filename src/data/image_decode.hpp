// JPEG (libjpeg-turbo) and PNG (libpng) decoding to planar uint8 (C, H, W), C = 1 (grey) or 3
// (RGB), with the pixels PIL gives (torchvision's ImageFolder): the libraries expand palettes and
// bit depths and convert YCbCr and YCCK; CMYK, alpha and colour-to-grey follow PIL
// (data/pixel_rows.hpp). An EXIF orientation is not applied (neither PIL's open nor torchvision's
// loader applies it). A JPEG whose data ends before the pixels it must give is refused, as PIL
// refuses it; corrupt-data warnings are not (PIL decodes through them too).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/crop_jitter.hpp"
#include "data/transforms.hpp"

namespace trainer::data {

// Limits checked before anything is allocated or decoded (the file's header is read first): an image
// may have at most 128 Mi pixels (e.g. 11585 x 11585; PNG_IMAGE_SIZE's 32-bit arithmetic stays exact
// below it), and an image file may be at most 1 GiB.
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 27;
inline constexpr uint64_t kMaxImageFileBytes = uint64_t{1} << 30;

struct DecodedImage {
  int64_t channels = 0, height = 0, width = 0;
  // A JPEG decoded at 1/scale (decode_image's min_side): height x width is ceil(whole / scale); the
  // image itself, whole_height x whole_width, is [0, whole / scale) of those pixels (the last ones
  // cover the edge only in part). scale 1: whole = height x width.
  int64_t scale = 1, whole_height = 0, whole_width = 0;
};

// Decodes `path` (format from the file's magic bytes) into `out` as (channels, H, W). For JPEG,
// `min_side` > 0 lets libjpeg decode at 1/2, 1/4 or 1/8 scale as long as the shorter side stays
// >= min_side (much faster for large photos). Throws DataError naming the file on failure.
DecodedImage decode_image(const std::string& path, int64_t channels, int64_t min_side, std::vector<uint8_t>& out,
                          std::vector<uint8_t>& interleaved);

// RandomResizedCrop's source, decoded only as far as the crop needs (as DALI's ROI decoding does):
// the header's size goes to `choose`, which draws the box (the same box a full decode would get);
// a JPEG is then decoded at the coarsest DCT scale (1/2, 1/4, 1/8) that still leaves the box at
// least out_h x out_w, only the rows the box covers (the ones above skipped, the decode stopped
// after its last) and, through jpeg_crop_scanline, about the columns it covers. `out` gets those
// pixels, planar (C, height, width); `window` is where the box lies in them (fractional at a
// scale below 1: resize it with resize_bilinear_window); `box` is the drawn box in source pixels,
// `scale` the DCT denominator. A PNG decodes whole and the box is cut (scale 1).
struct RegionImage {
  int64_t channels = 0, height = 0, width = 0;
  SourceWindow window;
  CropBox box;
  int64_t scale = 1;
};
RegionImage decode_image_region(const std::string& path, int64_t channels,
                                const std::function<CropBox(int64_t h, int64_t w)>& choose, int64_t out_h,
                                int64_t out_w, std::vector<uint8_t>& out, std::vector<uint8_t>& interleaved);

// Image files by name (the extension, any case): JPEG and PNG, which decode here; and torchvision's
// other image types (its IMG_EXTENSIONS: .bmp .ppm .pgm .tif .tiff .webp), which do not, and which an
// image folder must not leave out silently.
std::string lower_extension(const std::string& path);  // ".jpg" of "a/B.JPG"
bool is_decodable_image_name(const std::string& path);
bool is_other_image_name(const std::string& path);

// Width and height from the file header without decoding the pixels.
DecodedImage probe_image(const std::string& path);

// Writers, for tests and benchmarks: `pixels` interleaved (H, W, C), C = 1 or 3 (and 4 for a JPEG:
// CMYK bytes as Adobe stores them, inverted).
void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                int quality = 90);
// The kinds of JPEG found in the wild, for tests.
struct JpegLayout {
  int quality = 90;
  int luma_h = 2, luma_v = 2;  // luma's sampling factors against chroma's 1 x 1: 2 x 2 is 4:2:0, 2 x 1 4:2:2, 1 x 1 4:4:4
  bool progressive = false;
  bool ycck = false;            // 4 channels stored as YCCK (as Photoshop does), not CMYK
  int exif_orientation = 0;     // > 0: an EXIF block with this orientation (6: rotate 90 degrees to view)
};
void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                const JpegLayout& layout);
void write_png(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels);

}  // namespace trainer::data
