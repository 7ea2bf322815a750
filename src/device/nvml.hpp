// GPU utilisation from NVML. libnvidia-ml.so.1 ships with the NVIDIA driver (not with the CUDA
// toolkit or LibTorch), so it is loaded at run time: a machine without a driver simply has no
// utilisation figure, and the binary never needs the library to start.
#pragma once

#include <optional>
#include <string>

namespace trainer::device {

// NVML's bus id of a device: "DDDDDDDD:BB:DD.0" (domain, bus, device in upper-case hex, function 0).
// CUDA device indices and NVML indices differ under CUDA_VISIBLE_DEVICES; the bus id does not.
std::string pci_bus_id_text(int domain, int bus, int device);

// Percent of the driver's last sample period (1/6 s to 1 s) during which a kernel ran on the GPU
// of CUDA device `cuda_index`; nullopt without NVML, without CUDA, or when the query fails.
std::optional<double> gpu_utilization_percent(int cuda_index);

// "" when NVML loaded and initialised, else why not (for `trainer env` and the logs).
std::string nvml_status();

}  // namespace trainer::device
