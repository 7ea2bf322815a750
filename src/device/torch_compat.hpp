// Differences between LibTorch 2.x minor versions, in one place, keyed on TORCH_VERSION_MAJOR/MINOR.
// The pinned wheel (2.11) and the GPU machines' PyTorch (2.11) need none of the fallbacks today;
// each entry says from which version the modern spelling exists.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace trainer::compat {

constexpr bool kTorchAtLeast(int major, int minor) {
  return TORCH_VERSION_MAJOR > major || (TORCH_VERSION_MAJOR == major && TORCH_VERSION_MINOR >= minor);
}

static_assert(kTorchAtLeast(2, 4), "trainer needs LibTorch 2.4 or newer (device-generic autocast API)");

// Autocast per device type: at::autocast::{set_autocast_enabled,set_autocast_dtype}(DeviceType, ...)
// exist since 2.4; older releases had per-backend functions (set_enabled / set_cpu_enabled).
inline void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device, dtype);
}
inline bool autocast_enabled(at::DeviceType device) { return at::autocast::is_autocast_enabled(device); }

}  // namespace trainer::compat
