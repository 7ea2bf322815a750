#include "data/image_decode.hpp"

// jpeglib.h needs FILE and size_t declared before it
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>

#include <fmt/format.h>

#include "data/dataset.hpp"
#include "config/file_read.hpp"
#include "data/file_util.hpp"
#include "data/stage_clock.hpp"
#include "data/vector_clones.hpp"

namespace trainer::data {
namespace {

enum class ImageType { Jpeg, Png, Unknown };

std::vector<uint8_t> read_all(const std::string& path) {
  const StageTimer timer(Stage::Read);
  const RegularFile f = RegularFile::open<DataError>(path, kMaxImageFileBytes, "an image file");
  std::vector<uint8_t> out(f.size());
  if (std::string why = f.read_at(out.data(), out.size(), 0); !why.empty()) throw DataError(path + ": " + why);
  return out;
}

// Why a header's size is refused ("" when it is not): more than kMaxImagePixels would be allocated
// for it, and must be refused before anything is.
std::string image_size_problem(const std::string& path, const char* type, uint64_t height, uint64_t width) {
  if (height == 0 || width == 0) return fmt::format("{}: the {} header gives a size of {}x{}", path, type, height, width);
  if (height > kMaxImagePixels || width > kMaxImagePixels || height * width > kMaxImagePixels)
    return fmt::format("{}: the {} header gives {}x{} pixels, more than the limit of {} pixels (a corrupt header or a "
                       "decompression bomb)",
                       path, type, height, width, kMaxImagePixels);
  return "";
}

ImageType sniff(const std::vector<uint8_t>& b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageType::Jpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageType::Png;
  return ImageType::Unknown;
}

// libjpeg reports fatal errors through error_exit, which must not return: longjmp back out.
struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}
void jpeg_silence(j_common_ptr, int) {}  // corrupt-data warnings: the decode result decides

// n RGB pixels into three planes, one pass (the loads of three lanes become vector shuffles: a
// 330-pixel crop's rows 5.6x faster than a pass per channel with a stride-3 read)
TRAINER_VECTOR_CLONES
void split_rgb(const uint8_t* __restrict src, int64_t n, uint8_t* __restrict r, uint8_t* __restrict g,
               uint8_t* __restrict b) {
  for (int64_t i = 0; i < n; ++i) {
    r[i] = src[3 * i];
    g[i] = src[3 * i + 1];
    b[i] = src[3 * i + 2];
  }
}

// Planar (C, H, W) from interleaved (H, W, C).
void deinterleave(const uint8_t* src, int64_t c, int64_t hw, uint8_t* dst) {
  if (c == 1) {
    std::memcpy(dst, src, hw);
    return;
  }
  if (c == 3) {
    split_rgb(src, hw, dst, dst + hw, dst + 2 * hw);
    return;
  }
  for (int64_t i = 0; i < hw; ++i)
    for (int64_t k = 0; k < c; ++k) dst[k * hw + i] = src[i * c + k];
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes, int64_t channels,
                         int64_t min_side, std::vector<uint8_t>& out, std::vector<uint8_t>& inter, bool header_only) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_silence;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(fmt::format("{}: cannot decode JPEG: {}", path, err.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  DecodedImage img{channels, static_cast<int64_t>(cinfo.image_height), static_cast<int64_t>(cinfo.image_width)};
  if (std::string why = image_size_problem(path, "JPEG", cinfo.image_height, cinfo.image_width); !why.empty()) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(why);
  }
  if (header_only) {
    jpeg_destroy_decompress(&cinfo);
    return img;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  if (min_side > 0) {  // DCT-domain downscaling: decode only the resolution we need
    int64_t shorter = std::min(img.height, img.width);
    unsigned denom = 1;
    while (denom < 8 && shorter / (denom * 2) >= min_side) denom *= 2;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
  }
  jpeg_start_decompress(&cinfo);
  img.height = cinfo.output_height;
  img.width = cinfo.output_width;
  const int64_t row = img.width * channels;
  inter.resize(img.height * row);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = inter.data() + cinfo.output_scanline * row;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out.resize(img.height * row);
  deinterleave(inter.data(), channels, img.height * img.width, out.data());
  return img;
}

// The largest DCT scale denominator d in {1, 2, 4, 8} with the box still >= out at 1/d.
unsigned region_scale(const CropBox& box, int64_t out_h, int64_t out_w) {
  unsigned d = 1;
  while (d < 8 && box.height / (2 * d) >= out_h && box.width / (2 * d) >= out_w) d *= 2;
  return d;
}

// jpeg_crop_scanline's chroma upsampling treats the cut's edges as the image's: decode this many
// columns more on each side and keep only the box's, so its pixels are a full decode's.
constexpr int64_t kCropMargin = 16;

RegionImage decode_jpeg_region(const std::string& path, const std::vector<uint8_t>& bytes, int64_t channels,
                               const std::function<CropBox(int64_t, int64_t)>& choose, int64_t out_h, int64_t out_w,
                               std::vector<uint8_t>& out, std::vector<uint8_t>& inter) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_silence;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(fmt::format("{}: cannot decode JPEG: {}", path, err.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (std::string why = image_size_problem(path, "JPEG", cinfo.image_height, cinfo.image_width); !why.empty()) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(why);
  }
  RegionImage img;
  img.channels = channels;
  try {
    img.box = choose(cinfo.image_height, cinfo.image_width);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  const unsigned d = region_scale(img.box, out_h, out_w);
  img.scale = d;
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = d;
  jpeg_start_decompress(&cinfo);
  const auto H = static_cast<int64_t>(cinfo.output_height), W = static_cast<int64_t>(cinfo.output_width);
  // the box at 1/d, and the whole pixels that cover it
  const double dd = static_cast<double>(d);
  const double fy0 = img.box.top / dd, fy1 = (img.box.top + img.box.height) / dd;
  const double fx0 = img.box.left / dd, fx1 = (img.box.left + img.box.width) / dd;
  const int64_t y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(fy0)), 0, H - 1);
  const int64_t y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(fy1)), y0 + 1, H);
  const int64_t x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(fx0)), 0, W - 1);
  const int64_t x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(fx1)), x0 + 1, W);
  // columns: libjpeg widens [x, x + w) to iMCU boundaries and says where it starts
  JDIMENSION cx = static_cast<JDIMENSION>(std::max<int64_t>(0, x0 - kCropMargin));
  JDIMENSION cw = static_cast<JDIMENSION>(std::min<int64_t>(W, x1 + kCropMargin)) - cx;
  if (cw < cinfo.output_width) jpeg_crop_scanline(&cinfo, &cx, &cw);
  const int64_t skip_cols = x0 - static_cast<int64_t>(cx);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  const int64_t rows = y1 - y0, cols = x1 - x0, row = static_cast<int64_t>(cw) * channels;
  inter.resize(static_cast<size_t>(rows * row));
  for (int64_t y = 0; y < rows; ++y) {
    JSAMPROW r = inter.data() + y * row;
    if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) {
      std::snprintf(err.message, sizeof err.message, "the data ends before row %lld", static_cast<long long>(y0 + y));
      longjmp(err.jump, 1);
    }
  }
  jpeg_abort_decompress(&cinfo);  // the rows below the box are never decoded
  jpeg_destroy_decompress(&cinfo);
  img.height = rows;
  img.width = cols;
  img.window = SourceWindow{fy0 - static_cast<double>(y0), fx0 - static_cast<double>(x0), fy1 - fy0, fx1 - fx0};
  out.resize(static_cast<size_t>(channels * rows * cols));
  const int64_t plane = rows * cols;
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = inter.data() + y * row + skip_cols * channels;
    uint8_t* dst = out.data() + y * cols;
    if (channels == 3) split_rgb(src, cols, dst, dst + plane, dst + 2 * plane);
    else std::memcpy(dst, src, static_cast<size_t>(cols));  // grey
  }
  return img;
}

DecodedImage decode_png(const std::string& path, const std::vector<uint8_t>& bytes, int64_t channels,
                        std::vector<uint8_t>& out, std::vector<uint8_t>& inter, bool header_only) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw DataError(fmt::format("{}: cannot decode PNG: {}", path, image.message));
  DecodedImage img{channels, static_cast<int64_t>(image.height), static_cast<int64_t>(image.width)};
  // before PNG_IMAGE_SIZE, whose 32-bit arithmetic would wrap for a huge IHDR
  if (std::string why = image_size_problem(path, "PNG", image.height, image.width); !why.empty()) {
    png_image_free(&image);
    throw DataError(why);
  }
  if (header_only) {
    png_image_free(&image);
    return img;
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  inter.resize(PNG_IMAGE_SIZE(image));
  png_color black{0, 0, 0};  // transparent pixels are composited over black
  if (!png_image_finish_read(&image, &black, inter.data(), 0, nullptr)) {
    std::string msg = image.message;
    png_image_free(&image);
    throw DataError(fmt::format("{}: cannot decode PNG: {}", path, msg));
  }
  out.resize(img.height * img.width * channels);
  deinterleave(inter.data(), channels, img.height * img.width, out.data());
  return img;
}

DecodedImage decode_any(const std::string& path, int64_t channels, int64_t min_side, std::vector<uint8_t>& out,
                        std::vector<uint8_t>& inter, bool header_only) {
  std::vector<uint8_t> bytes = read_all(path);
  switch (sniff(bytes)) {
    case ImageType::Jpeg: return decode_jpeg(path, bytes, channels, min_side, out, inter, header_only);
    case ImageType::Png: return decode_png(path, bytes, channels, out, inter, header_only);
    default: throw DataError(path + ": not a JPEG or PNG file (unknown magic bytes)");
  }
}

}  // namespace

DecodedImage decode_image(const std::string& path, int64_t channels, int64_t min_side, std::vector<uint8_t>& out,
                          std::vector<uint8_t>& interleaved) {
  const StageTimer timer(Stage::Decode);  // the file's read included (Stage::Read tells it apart)
  return decode_any(path, channels, min_side, out, interleaved, false);
}

RegionImage decode_image_region(const std::string& path, int64_t channels,
                                const std::function<CropBox(int64_t, int64_t)>& choose, int64_t out_h, int64_t out_w,
                                std::vector<uint8_t>& out, std::vector<uint8_t>& interleaved) {
  const StageTimer timer(Stage::Decode);  // the file's read included (Stage::Read tells it apart)
  std::vector<uint8_t> bytes = read_all(path);
  if (sniff(bytes) == ImageType::Jpeg) return decode_jpeg_region(path, bytes, channels, choose, out_h, out_w, out, interleaved);
  std::vector<uint8_t> whole;  // PNG (or not an image: the same error as decode_image's)
  const DecodedImage full = decode_any(path, channels, 0, whole, interleaved, false);
  RegionImage img;
  img.channels = channels;
  img.box = choose(full.height, full.width);
  const CropBox& b = img.box;
  img.height = b.height;
  img.width = b.width;
  img.window = SourceWindow{0, 0, static_cast<double>(b.height), static_cast<double>(b.width)};
  out.resize(static_cast<size_t>(channels * b.height * b.width));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < b.height; ++y)
      std::memcpy(out.data() + (c * b.height + y) * b.width, whole.data() + (c * full.height + b.top + y) * full.width + b.left,
                  static_cast<size_t>(b.width));
  return img;
}

DecodedImage probe_image(const std::string& path) {
  std::vector<uint8_t> a, b;
  return decode_any(path, 1, 0, a, b, true);
}

void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                int quality) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw DataError(path + ": cannot create");
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr jerr{};
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = static_cast<int>(channels);
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<JSAMPROW>(pixels + cinfo.next_scanline * width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

void write_png(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, pixels, 0, nullptr))
    throw DataError(fmt::format("{}: cannot write PNG: {}", path, image.message));
}

}  // namespace trainer::data
