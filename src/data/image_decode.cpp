#include "data/image_decode.hpp"

// jpeglib.h needs FILE and size_t declared before it
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <zlib.h>
#include <setjmp.h>

#include <fmt/format.h>

#include "data/dataset.hpp"
#include "config/file_read.hpp"
#include "data/file_util.hpp"
#include "data/pixel_rows.hpp"
#include "data/stage_clock.hpp"

namespace trainer::data {
namespace {

enum class ImageType { Jpeg, Png, Unknown };

// The file's first `limit` bytes (all of it by default); `*whole` says whether that was all of it.
std::vector<uint8_t> read_all(const std::string& path, uint64_t limit = UINT64_MAX, bool* whole = nullptr) {
  const StageTimer timer(Stage::Read);
  const RegularFile f = RegularFile::open<DataError>(path, kMaxImageFileBytes, "an image file");
  if (f.size() == 0) throw DataError(path + ": an empty file (0 bytes), not an image");
  std::vector<uint8_t> out(std::min<uint64_t>(f.size(), limit));
  if (whole) *whole = out.size() == f.size();
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
  bool ended_early = false;  // the data ran out: libjpeg went on with grey
};
void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}
// Corrupt-data warnings (extraneous bytes, a bad Huffman code) are common in real datasets and
// PIL decodes through them, as libjpeg does. The end of the data before the image's is not: libjpeg
// would fill the rest with grey, PIL refuses the file ("image file is truncated"), and so do we.
void jpeg_note(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegError*>(cinfo->err)->ended_early = true;
}
[[noreturn]] void jpeg_fail(JpegError& err, const char* what) {
  std::snprintf(err.message, sizeof err.message, "%s", what);
  longjmp(err.jump, 1);
}
constexpr const char* kTruncated = "the file ends before its image data does (truncated)";

// The colour model libjpeg gives out: CMYK (and YCCK, which libjpeg turns into CMYK) as it is,
// converted here as PIL does; the others as the pipeline's channels.
PixelKind jpeg_output(jpeg_decompress_struct& cinfo, int64_t channels) {
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    cinfo.out_color_space = JCS_CMYK;
    return PixelKind::Cmyk;
  }
  // a colour JPEG for one channel: RGB first, then PIL's luma (to_planes), as convert("L") makes it;
  // libjpeg's JCS_GRAYSCALE would hand out the Y plane, up to 33 grey levels from PIL's at q75
  if (channels == 1 && cinfo.jpeg_color_space == JCS_GRAYSCALE) {
    cinfo.out_color_space = JCS_GRAYSCALE;
    return PixelKind::Grey;
  }
  cinfo.out_color_space = JCS_RGB;
  return PixelKind::Rgb;
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes, int64_t channels,
                         int64_t min_side, std::vector<uint8_t>& out, std::vector<uint8_t>& inter, bool header_only) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_note;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(fmt::format("{}: cannot decode JPEG: {}", path, err.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const auto height = static_cast<int64_t>(cinfo.image_height), width = static_cast<int64_t>(cinfo.image_width);
  DecodedImage img{channels, height, width, 1, height, width};
  if (std::string why = image_size_problem(path, "JPEG", cinfo.image_height, cinfo.image_width); !why.empty()) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(why);
  }
  if (header_only) {
    jpeg_destroy_decompress(&cinfo);
    return img;
  }
  const PixelKind kind = jpeg_output(cinfo, channels);
  if (min_side > 0) {  // DCT-domain downscaling: decode only the resolution we need
    int64_t shorter = std::min(img.height, img.width);
    unsigned denom = 1;
    while (denom < 8 && shorter / (denom * 2) >= min_side) denom *= 2;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
  }
  jpeg_start_decompress(&cinfo);
  img.scale = cinfo.scale_denom;
  img.height = cinfo.output_height;
  img.width = cinfo.output_width;
  const int64_t row = img.width * pixel_bytes(kind);
  inter.resize(img.height * row);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = inter.data() + cinfo.output_scanline * row;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);  // up to the end marker, which PIL also wants
  if (err.ended_early) jpeg_fail(err, kTruncated);
  jpeg_destroy_decompress(&cinfo);
  out.resize(img.height * img.width * channels);
  to_planes(inter.data(), kind, img.height * img.width, channels, out.data(), img.height * img.width);
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
  err.mgr.emit_message = jpeg_note;
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
  const PixelKind kind = jpeg_output(cinfo, channels);
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
  const int64_t px = pixel_bytes(kind);
  const int64_t rows = y1 - y0, cols = x1 - x0, row = static_cast<int64_t>(cw) * px;
  inter.resize(static_cast<size_t>(rows * row));
  for (int64_t y = 0; y < rows; ++y) {
    JSAMPROW r = inter.data() + y * row;
    if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) jpeg_fail(err, kTruncated);
  }
  // the data the box needs was there (the rows below it are never decoded, nor their data read)
  if (err.ended_early) jpeg_fail(err, kTruncated);
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  img.height = rows;
  img.width = cols;
  img.window = SourceWindow{fy0 - static_cast<double>(y0), fx0 - static_cast<double>(x0), fy1 - fy0, fx1 - fx0};
  out.resize(static_cast<size_t>(channels * rows * cols));
  const int64_t plane = rows * cols;
  for (int64_t y = 0; y < rows; ++y)
    to_planes(inter.data() + y * row + skip_cols * px, kind, cols, channels, out.data() + y * cols, plane);
  return img;
}

// PIL and torchvision ignore a PNG's gAMA chunk; libpng's simplified API would correct the pixels by
// it (a gAMA of 1.0 moved grey levels by up to 72). Its name becomes a private ancillary one, which
// libpng skips, with the chunk's CRC made anew. The chunks before IDAT are walked; lengths are
// checked against the bytes (a broken stream is left to libpng's own errors).
void hide_png_gamma(std::vector<uint8_t>& bytes) {
  auto be32 = [&](size_t at) {
    return static_cast<uint32_t>(bytes[at]) << 24 | static_cast<uint32_t>(bytes[at + 1]) << 16 |
           static_cast<uint32_t>(bytes[at + 2]) << 8 | static_cast<uint32_t>(bytes[at + 3]);
  };
  for (size_t at = 8; at + 12 <= bytes.size();) {
    const uint64_t length = be32(at);
    if (length > bytes.size() - at - 12) return;
    uint8_t* type = bytes.data() + at + 4;
    if (std::memcmp(type, "IDAT", 4) == 0 || std::memcmp(type, "IEND", 4) == 0) return;
    if (std::memcmp(type, "gAMA", 4) == 0) {
      std::memcpy(type, "gaMa", 4);  // ancillary, private, safe to copy: unknown to libpng
      const auto crc = static_cast<uint32_t>(crc32(0L, type, static_cast<uInt>(4 + length)));
      uint8_t* c = type + 4 + length;
      c[0] = static_cast<uint8_t>(crc >> 24), c[1] = static_cast<uint8_t>(crc >> 16);
      c[2] = static_cast<uint8_t>(crc >> 8), c[3] = static_cast<uint8_t>(crc);
      return;
    }
    at += 12 + length;
  }
}

DecodedImage decode_png(const std::string& path, std::vector<uint8_t>& bytes, int64_t channels,
                        std::vector<uint8_t>& out, std::vector<uint8_t>& inter, bool header_only) {
  hide_png_gamma(bytes);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw DataError(fmt::format("{}: cannot decode PNG: {}", path, image.message));
  const auto height = static_cast<int64_t>(image.height), width = static_cast<int64_t>(image.width);
  DecodedImage img{channels, height, width, 1, height, width};
  // before PNG_IMAGE_SIZE, whose 32-bit arithmetic would wrap for a huge IHDR
  if (std::string why = image_size_problem(path, "PNG", image.height, image.width); !why.empty()) {
    png_image_free(&image);
    throw DataError(why);
  }
  if (header_only) {
    png_image_free(&image);
    return img;
  }
  // 8-bit, palettes expanded, in the file's own colour model with its alpha (dropped below, as PIL's
  // convert does: transparent pixels keep their colour)
  const bool colour = image.format & PNG_FORMAT_FLAG_COLOR, alpha = image.format & PNG_FORMAT_FLAG_ALPHA;
  image.format = (colour ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0);
  // 16-bit samples without gamma information are sRGB, as 8-bit ones are (libpng would take them as
  // linear light and brighten them): v / 257 rounded. PIL keeps the high byte (v >> 8) of colour,
  // at most 1 apart, and clips 16-bit grey at 255 as it converts (not followed).
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  const PixelKind kind = colour ? (alpha ? PixelKind::Rgba : PixelKind::Rgb) : (alpha ? PixelKind::GreyAlpha : PixelKind::Grey);
  inter.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, inter.data(), 0, nullptr)) {
    std::string msg = image.message;
    png_image_free(&image);
    throw DataError(fmt::format("{}: cannot decode PNG: {}", path, msg));
  }
  out.resize(img.height * img.width * channels);
  to_planes(inter.data(), kind, img.height * img.width, channels, out.data(), img.height * img.width);
  return img;
}

DecodedImage decode_any(const std::string& path, int64_t channels, int64_t min_side, std::vector<uint8_t>& out,
                        std::vector<uint8_t>& inter, bool header_only) {
  // a header is in the first bytes but for large metadata (EXIF, ICC) before it: `trainer check`
  // reads every header of a folder, and ImageNet's files are 110 KB on average
  constexpr uint64_t kHeaderBytes = 64 << 10;
  bool whole = !header_only;
  std::vector<uint8_t> bytes = read_all(path, header_only ? kHeaderBytes : UINT64_MAX, &whole);
  if (!whole) {
    try {
      switch (sniff(bytes)) {
        case ImageType::Jpeg: return decode_jpeg(path, bytes, channels, min_side, out, inter, true);
        case ImageType::Png: return decode_png(path, bytes, channels, out, inter, true);
        default: break;  // the whole file's error below
      }
    } catch (const DataError&) {  // the header is not within the prefix (or is bad): read it all
    }
    bytes = read_all(path);
  }
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

// from the name's last dot, a leading one included: a file named ".jpg" is an image to torchvision's
// ImageFolder (its name ends with the extension), where filesystem::path::extension() gives ""
std::string lower_extension(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const auto dot = name.rfind('.');
  std::string ext = dot == std::string::npos ? std::string() : name.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_decodable_image_name(const std::string& path) {
  const std::string ext = lower_extension(path);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

bool is_other_image_name(const std::string& path) {
  const std::string ext = lower_extension(path);
  return ext == ".bmp" || ext == ".ppm" || ext == ".pgm" || ext == ".tif" || ext == ".tiff" || ext == ".webp";
}

DecodedImage probe_image(const std::string& path) {
  std::vector<uint8_t> a, b;
  return decode_any(path, 1, 0, a, b, true);
}

void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                int quality) {
  JpegLayout layout;
  layout.quality = quality;
  write_jpeg(path, pixels, height, width, channels, layout);
}

void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                const JpegLayout& layout) {
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
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&cinfo);  // CMYK and YCCK get Adobe's marker
  if (channels == 4 && layout.ycck) jpeg_set_colorspace(&cinfo, JCS_YCCK);
  if (channels >= 3) {
    cinfo.comp_info[0].h_samp_factor = layout.luma_h;
    cinfo.comp_info[0].v_samp_factor = layout.luma_v;
    if (channels == 4 && layout.ycck) {  // YCCK: K at the luma's resolution, as Y
      cinfo.comp_info[3].h_samp_factor = layout.luma_h;
      cinfo.comp_info[3].v_samp_factor = layout.luma_v;
    }
  }
  jpeg_set_quality(&cinfo, layout.quality, TRUE);
  if (layout.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  if (layout.exif_orientation > 0) {  // APP1 "Exif", a little-endian TIFF header, IFD0 with one tag
    const uint8_t o = static_cast<uint8_t>(layout.exif_orientation);
    const uint8_t exif[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                            0x12, 0x01, 3, 0, 1, 0, 0, 0, o, 0, 0, 0, 0, 0, 0, 0};
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, exif, sizeof exif);
  }
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
