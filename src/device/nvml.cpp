#include "device/nvml.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "device/cuda_seam.hpp"

namespace trainer::device {
namespace {

// The few NVML entry points used, with their C signatures (nvml.h): every call returns an
// nvmlReturn_t, 0 = NVML_SUCCESS; a device handle is an opaque pointer.
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;     // percent of time a kernel was running
  unsigned int memory;  // percent of time device memory was read or written
};
using InitFn = int (*)();
using HandleByBusIdFn = int (*)(const char*, NvmlDevice*);
using UtilizationFn = int (*)(NvmlDevice, NvmlUtilization*);

struct Nvml {
  void* lib = nullptr;
  HandleByBusIdFn handle_by_bus_id = nullptr;
  UtilizationFn utilization = nullptr;
  std::string status = "not loaded";
};

Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    n.lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n.lib) {
      n.status = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
      return;
    }
    auto init = reinterpret_cast<InitFn>(::dlsym(n.lib, "nvmlInit_v2"));
    n.handle_by_bus_id = reinterpret_cast<HandleByBusIdFn>(::dlsym(n.lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.utilization = reinterpret_cast<UtilizationFn>(::dlsym(n.lib, "nvmlDeviceGetUtilizationRates"));
    if (!init || !n.handle_by_bus_id || !n.utilization) {
      n.status = "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2 / nvmlDeviceGetUtilizationRates";
      n.handle_by_bus_id = nullptr;
      return;
    }
    if (int rc = init(); rc != 0) {
      n.status = fmt::format("nvmlInit_v2 failed (NVML error {})", rc);
      n.handle_by_bus_id = nullptr;
      return;
    }
    n.status = "";
  });
  return n;
}

}  // namespace

std::string pci_bus_id_text(int domain, int bus, int device) {
  return fmt::format("{:08X}:{:02X}:{:02X}.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                     static_cast<unsigned>(device));
}

std::optional<double> gpu_utilization_percent(int cuda_index) {
  const std::string bus_id = cuda_pci_bus_id(cuda_index);
  if (bus_id.empty()) return std::nullopt;
  auto& n = nvml();
  if (!n.handle_by_bus_id) return std::nullopt;
  NvmlDevice dev = nullptr;
  if (n.handle_by_bus_id(bus_id.c_str(), &dev) != 0) return std::nullopt;
  NvmlUtilization u{};
  if (n.utilization(dev, &u) != 0) return std::nullopt;
  return static_cast<double>(u.gpu);
}

std::string nvml_status() { return nvml().status; }

}  // namespace trainer::device
