#include "data/vector_cap.hpp"

#include <cstdlib>
#include <string>

#include "data/byte_lookup.hpp"
#include "data/jitter_kernels.hpp"
#include "data/resize_detail.hpp"

namespace trainer::data {

int vector_cap_floats() {
  static const int cap = [] {
    const char* v = std::getenv("ATEN_CPU_CAPABILITY");
    const std::string s = v ? v : "";
    if (s == "avx2") return 8;
    if (s == "default") return 4;
    return 16;  // unset, avx512, or a value ATen itself would not take
  }();
  return cap;
}

std::string kernel_paths(bool jitter, bool hue) {
  const int w = resize_detail::filter_width();
  const char* resize = w == 16 ? "AVX-512" : w == 8 ? "AVX2" : "baseline";
  std::string paths = std::string("resize ") + resize + ", normaliser " + lookup_path_name();
  if (jitter) paths += std::string(", colour jitter ") + (jitter_kernels::width() == 16 ? "AVX-512" : "clones");
  if (hue)
    paths += std::string(", hue ") +
             (jitter_kernels::hue_width() == 16 ? "AVX-512" : jitter_kernels::hue_width() == 8 ? "AVX2" : "scalar");
  return paths;
}

}  // namespace trainer::data
