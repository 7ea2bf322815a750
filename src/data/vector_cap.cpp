#include "data/vector_cap.hpp"

#include <cstdlib>
#include <string>

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

}  // namespace trainer::data
