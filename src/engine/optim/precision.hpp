// Numeric precision of a run: fp32, bf16 autocast (CPU and CUDA) or fp16 autocast (CUDA only).
// Parameters and optimizer state stay fp32 in every mode; autocast only changes the dtype of the
// ops run inside an AutocastScope.
#pragma once

#include <torch/types.h>

#include <string>

#include "config/enums.hpp"

namespace trainer::engine {

using Precision = config::Precision;  // parsed at config load (train.precision)

// "fp32" | "bf16" | "fp16"; anything else is std::invalid_argument naming the known ones.
Precision parse_precision(const std::string& name);
std::string precision_name(Precision p);

// Throws std::invalid_argument when `p` cannot run on `device` (fp16 on CPU: no loss-scaled
// fp16 kernels there, bf16 keeps fp32's exponent range and needs no scaler).
void check_precision_supported(Precision p, const torch::Device& device);

// True when /proc/cpuinfo lists avx512_bf16 or amx_bf16: CPUs without them emulate bf16 matmuls,
// usually slower than fp32 (the trainer warns, it does not refuse).
bool cpu_has_native_bf16();

// Autocast for the ops run while it lives (forward and loss; backward follows the forward's dtypes).
// Restores the previous autocast state of the device type on destruction, so scopes nest.
class AutocastScope {
 public:
  AutocastScope(Precision p, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

}  // namespace trainer::engine
