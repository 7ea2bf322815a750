// CUDA LibTorch: the seam's queries through c10/ATen CUDA APIs. Every call is safe without a GPU.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include "device/cuda_seam.hpp"
#include "device/nvml.hpp"

namespace trainer::device {

bool built_with_cuda() { return true; }

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  if (!torch::cuda::is_available()) return out;
  for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);
    out.push_back(CudaDeviceInfo{i, p->name, static_cast<int64_t>(p->totalGlobalMem), p->major, p->minor,
                                 p->multiProcessorCount});
  }
  return out;
}

std::string cuda_pci_bus_id(int device) {
  if (!torch::cuda::is_available() || device < 0 || device >= static_cast<int>(torch::cuda::device_count())) return "";
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
  return pci_bus_id_text(p->pciDomainID, p->pciBusID, p->pciDeviceID);
}

std::string cudnn_version() {
  if (!at::globalContext().hasCuDNN()) return "";
  long v = at::detail::getCUDAHooks().versionCuDNN();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string nccl_version() {
  // The NCCL library LibTorch loaded (or would load); asking it avoids a link-time NCCL dependency.
  void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) h = dlopen("libnccl.so.2", RTLD_LAZY);
  if (!h) return "";
  using Fn = int (*)(int*);
  auto fn = reinterpret_cast<Fn>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  if (!fn || fn(&v) != 0) return "";
  int major = v >= 10000 ? v / 10000 : v / 1000;
  int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

std::string cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

CudaMemoryStats cuda_memory_stats(int device) {
  if (!torch::cuda::is_available()) return {};
  using c10::CachingAllocator::StatType;
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  return CudaMemoryStats{s.allocated_bytes[agg].current, s.reserved_bytes[agg].current, s.allocated_bytes[agg].peak};
}

void cuda_reset_peak_memory(int device) {
  if (torch::cuda::is_available())
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void cuda_empty_cache() {
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace trainer::device
