// The CUDA seam: everything that needs CUDA headers. cuda_seam_cuda.cpp implements it against a
// CUDA LibTorch; cuda_seam_nocuda.cpp is the stub a CPU-only LibTorch links (same interface).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::device {

struct CudaMemoryStats {
  int64_t allocated = 0;       // bytes held by live tensors (caching allocator)
  int64_t reserved = 0;        // bytes reserved from the driver
  int64_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int64_t total_memory = 0;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
};

bool built_with_cuda();
std::vector<CudaDeviceInfo> cuda_devices();  // empty without a usable GPU
std::string cudnn_version();                 // "" when unavailable
std::string nccl_version();                  // "" when unavailable
std::string cuda_runtime_version();          // "" when unavailable
CudaMemoryStats cuda_memory_stats(int device);
// NVML's bus id of CUDA device `device` (see nvml.hpp); "" without CUDA.
std::string cuda_pci_bus_id(int device);
void cuda_reset_peak_memory(int device);
// Returns the caching allocator's unused cached blocks to the driver (after an out-of-memory probe).
void cuda_empty_cache();

}  // namespace trainer::device
