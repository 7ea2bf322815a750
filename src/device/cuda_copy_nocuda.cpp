// CPU-only LibTorch: batches stay on the host (the loader never asks for a device copy).
#include <stdexcept>

#include "device/cuda_copy.hpp"

namespace trainer::device {

std::vector<torch::Tensor> copy_to_device_async(const std::vector<torch::Tensor>&, int, std::shared_ptr<CopyFence>&,
                                                const std::function<void(std::vector<torch::Tensor>&)>&) {
  throw std::runtime_error("copies to a CUDA device need a CUDA build of LibTorch");
}

void wait_for_copy(const CopyFence&, const std::vector<torch::Tensor>&) {}

}  // namespace trainer::device
