// CPU-only LibTorch: the CUDA seam reports that nothing is there.
#include "device/cuda_seam.hpp"

namespace trainer::device {

bool built_with_cuda() { return false; }
std::vector<CudaDeviceInfo> cuda_devices() { return {}; }
std::string cudnn_version() { return ""; }
std::string nccl_version() { return ""; }
std::string cuda_runtime_version() { return ""; }
CudaMemoryStats cuda_memory_stats(int) { return {}; }
void cuda_reset_peak_memory(int) {}
void cuda_empty_cache() {}
std::string cuda_pci_bus_id(int) { return ""; }

}  // namespace trainer::device
