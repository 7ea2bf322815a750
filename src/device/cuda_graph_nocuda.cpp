// CPU-only LibTorch: no graphs. The engine never captures without a CUDA device (graph_blocker).
#include <stdexcept>

#include "device/cuda_graph.hpp"

namespace trainer::device {

struct CudaGraph::Impl {};
CudaGraph::CudaGraph() = default;
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(const std::function<void()>&) {
  throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch");
}
void CudaGraph::replay() { throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch"); }
bool CudaGraph::captured() const { return false; }

struct CudaSideStream::Impl {};
CudaSideStream::CudaSideStream(int) {}
CudaSideStream::~CudaSideStream() = default;

}  // namespace trainer::device
