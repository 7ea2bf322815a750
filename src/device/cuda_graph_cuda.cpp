// CUDA LibTorch: CudaGraph over at::cuda::CUDAGraph, CudaSideStream over ATen's stream pool.
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "device/cuda_graph.hpp"

namespace trainer::device {

struct CudaGraph::Impl {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;

bool CudaGraph::captured() const { return impl_->graph != nullptr; }

void CudaGraph::capture(const std::function<void()>& work) {
  if (impl_->graph) throw std::logic_error("CudaGraph::capture: already captured");
  if (!torch::cuda::is_available()) throw std::runtime_error("CUDA graphs need a CUDA device");
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (stream == c10::cuda::getDefaultCUDAStream(stream.device_index()))
    throw std::logic_error("CudaGraph::capture: the current stream is the default stream (use CudaSideStream)");
  // the work queued so far must not be in flight while the allocator switches to the graph's pool
  torch::cuda::synchronize(stream.device_index());
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  graph->capture_begin(at::cuda::MempoolId_t{0, 0}, cudaStreamCaptureModeThreadLocal);
  std::string failure;
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty()) {
    // end the capture (CUDA reports it invalidated) so that the stream is usable again
    try {
      graph->capture_end();
    } catch (const std::exception&) {
    }
    (void)cudaGetLastError();  // the capture error is not sticky: clear it for the eager steps that follow
    throw std::runtime_error(failure);
  }
  try {
    graph->capture_end();  // also instantiates the executable graph
  } catch (const std::exception& e) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string("ending the capture failed: ") + e.what());
  }
  impl_->graph = std::move(graph);
}

void CudaGraph::replay() {
  if (!impl_->graph) throw std::logic_error("CudaGraph::replay: nothing captured");
  impl_->graph->replay();
}

struct CudaSideStream::Impl {
  std::optional<c10::cuda::CUDAStream> previous;
  std::optional<c10::cuda::CUDAStreamGuard> guard;
};

CudaSideStream::CudaSideStream(int device) : impl_(std::make_unique<Impl>()) {
  if (device < 0) return;
  const auto index = static_cast<c10::DeviceIndex>(device);
  auto previous = c10::cuda::getCurrentCUDAStream(index);
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  at::cuda::CUDAEvent ready;
  ready.record(previous);
  ready.block(side);
  impl_->previous = previous;
  impl_->guard.emplace(side);
}

CudaSideStream::~CudaSideStream() {
  if (!impl_->guard) return;
  auto side = impl_->guard->current_stream();
  impl_->guard.reset();
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(*impl_->previous);
}

}  // namespace trainer::device
