// GPU utilisation through NVML (loaded at run time): bus-id formatting, absence handled without a
// driver, and a real reading where a GPU is present.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <torch/cuda.h>

#include "device/cuda_seam.hpp"
#include "device/nvml.hpp"
#include "skip.hpp"

using namespace trainer::device;

TEST_CASE("NVML bus ids are domain:bus:device.0 in upper-case hex", "[unit]") {
  CHECK(pci_bus_id_text(0, 0x17, 0) == "00000000:17:00.0");
  CHECK(pci_bus_id_text(1, 0xab, 0x1f) == "00000001:AB:1F.0");
}

TEST_CASE("without a usable GPU there is no utilisation figure, and NVML's absence is explained", "[unit]") {
  if (torch::cuda::is_available()) {
    TRAINER_SKIP("this machine has a GPU (see the [gpu] case)");
  }
  CHECK(cuda_pci_bus_id(0).empty());
  CHECK_FALSE(gpu_utilization_percent(0).has_value());
  if (void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(h);
  } else {
    CHECK(nvml_status() == "libnvidia-ml.so.1 not found (no NVIDIA driver)");
  }
}

TEST_CASE("on a GPU, NVML reports a utilisation between 0 and 100 for CUDA device 0", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  INFO("NVML: " << nvml_status());
  REQUIRE(nvml_status().empty());
  CHECK(cuda_pci_bus_id(0).size() == 16);
  auto u = gpu_utilization_percent(0);
  REQUIRE(u.has_value());
  CHECK(*u >= 0);
  CHECK(*u <= 100);
}
