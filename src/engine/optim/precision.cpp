#include "engine/optim/precision.hpp"

#include <ATen/autocast_mode.h>

#include <stdexcept>
#include <string>

#include "device/device.hpp"

namespace trainer::engine {

Precision parse_precision(const std::string& name) { return config::parse_enum<Precision>(name, "precision"); }

std::string precision_name(Precision p) { return config::name_of(p); }

void check_precision_supported(Precision p, const torch::Device& device) {
  if (p == Precision::Auto)
    throw std::logic_error("train.precision auto reached the step unresolved (engine/startup/precision_auto.hpp)");
  if (p == Precision::Fp16 && !device.is_cuda())
    throw std::invalid_argument("precision fp16 needs a CUDA device (dynamic loss scaling on GPU); on " +
                                device.str() + " use bf16 or fp32");
}

bool cpu_has_native_bf16() { return !device::cpu_bf16_flags().empty(); }

AutocastScope::AutocastScope(Precision p, const torch::Device& device) {
  if (p == Precision::Fp32) return;
  if (p == Precision::Auto) throw std::logic_error("AutocastScope: train.precision auto was not resolved");
  active_ = true;
  device_type_ = device.type();
  prev_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, p == Precision::Bf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // the cast cache holds low-precision copies of the weights; it must not outlive the outermost scope
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
}

}  // namespace trainer::engine
