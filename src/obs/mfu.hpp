// Model FLOPs utilisation: achieved training FLOP/s over the hardware's peak.
#pragma once

#include <optional>
#include <string>

#include "config/enums.hpp"

namespace trainer::obs {

// Dense peak TFLOP/s of a known CUDA device for the given precision ("bf16"/"fp16" tensor cores;
// "fp32" runs as TF32 when `tf32` (train.tf32) is on, else on the plain FP32 units), matched on the
// device name; nullopt when unknown (CPUs included).
std::optional<double> known_peak_tflops(const std::string& device_name, config::Precision precision, bool tf32 = true);

// flops_per_sample * samples_per_s / (devices * peak); nullopt without a peak or FLOP count.
std::optional<double> compute_mfu(double flops_per_sample, double global_samples_per_s, int64_t devices,
                                  double peak_tflops_per_device);

}  // namespace trainer::obs
