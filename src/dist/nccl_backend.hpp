// The CUDA seam of src/dist: ProcessGroupNCCL is built only against a CUDA LibTorch
// (nccl_backend_cuda.cpp); a CPU-only LibTorch links the stub in nccl_backend_nocuda.cpp.
// Private to src/dist: only dist_context.cpp includes it.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace trainer::dist {

bool nccl_available();  // false in a CPU-only LibTorch build

// A NCCL process group for `rank` of `size`, on CUDA device `device_index`. Throws
// std::runtime_error where NCCL is not compiled in.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    int device_index);

}  // namespace trainer::dist
