// ProcessGroupNCCL behind the CUDA seam (see nccl_backend.hpp).
#include "dist/nccl_backend.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace trainer::dist {

bool nccl_available() { return true; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    int device_index) {
  // NCCL binds its communicator to the current device: each rank owns GPU LOCAL_RANK
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;  // the NCCL watchdog aborts a collective that runs longer than this
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(pg);
}

}  // namespace trainer::dist
