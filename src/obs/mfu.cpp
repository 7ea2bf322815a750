#include "obs/mfu.hpp"

#include <cstdint>
#include <vector>

namespace trainer::obs {

std::optional<double> known_peak_tflops(const std::string& device_name, config::Precision precision, bool tf32) {
  struct Peak {
    const char* name;
    double half;  // bf16/fp16 dense tensor-core peak
    double tf32;  // TF32 dense peak
    double fp32;  // plain FP32 (CUDA cores): fp32 matmuls with TF32 off
  };
  // vendor datasheets, dense (no sparsity); the first match wins, so longer names come first
  static const std::vector<Peak> kPeaks = {
      {"H200", 989.0, 494.7, 66.9},    {"H100 PCIe", 756.0, 378.0, 51.2}, {"H100", 989.0, 494.7, 66.9},
      {"A100", 312.0, 156.0, 19.5},    {"L40S", 362.0, 183.0, 91.6},      {"L4", 121.0, 60.0, 30.3},
      {"A10G", 70.0, 35.0, 31.2},      {"A10", 125.0, 62.5, 31.2},        {"RTX 4090", 165.2, 82.6, 82.6},
      {"RTX 3090", 71.0, 35.6, 35.6},  {"V100", 125.0, 15.7, 15.7},       {"T4", 65.0, 8.1, 8.1}};
  for (const auto& p : kPeaks)
    if (device_name.find(p.name) != std::string::npos) return precision != config::Precision::Fp32 ? p.half : tf32 ? p.tf32 : p.fp32;
  return std::nullopt;
}

std::optional<double> compute_mfu(double flops_per_sample, double global_samples_per_s, int64_t devices,
                                  double peak_tflops_per_device) {
  if (flops_per_sample <= 0 || peak_tflops_per_device <= 0 || devices <= 0) return std::nullopt;
  return flops_per_sample * global_samples_per_s / (static_cast<double>(devices) * peak_tflops_per_device * 1e12);
}

}  // namespace trainer::obs
