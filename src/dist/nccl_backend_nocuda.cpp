// Stub for a CPU-only LibTorch: no NCCL (see nccl_backend.hpp).
#include "dist/nccl_backend.hpp"

#include <stdexcept>

namespace trainer::dist {

bool nccl_available() { return false; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                    std::chrono::milliseconds, int) {
  throw std::runtime_error("dist.backend nccl: this trainer was built against a CPU-only LibTorch (no NCCL)");
}

}  // namespace trainer::dist
