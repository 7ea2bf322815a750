// CUDA LibTorch: CudaGraph over at::cuda::CUDAGraph, CudaSideStream over ATen's stream pool.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "device/cuda_graph.hpp"

namespace trainer::device {

// A named namespace, not an anonymous one: CudaGraph::Impl (external linkage) holds a Graph, and a
// member whose type has internal linkage is GCC's -Wsubobject-linkage.
namespace cuda_graph_detail {

// An at::cuda::CUDAGraph whose failed capture can be cleaned up. When capture_end() throws (CUDA
// invalidated the capture), ATen leaves the caching allocators routing to the graph's private pool
// and holding back frees of blocks used on several streams (the loader's batches are), and the
// CUDA generator counting offsets as inside a capture; its reset() says as much. abandon() puts
// those back and releases the pool, so that the eager steps that follow run as in a process that
// never captured. It reaches into CUDAGraph's protected members (LibTorch 2.11's layout).
struct Graph : at::cuda::CUDAGraph {
  void abandon() {
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
    } catch (const std::exception&) {  // capture_end() got that far already
    }
    try {
      at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_);
    } catch (const std::exception&) {
    }
    // reset() releases the private pool only after a capture that ended: blocks allocated during
    // this one (the gradients backward made) go back to the device once their tensors are freed
    try {
      c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_);
    } catch (const std::exception&) {
    }
    try {
      at::getHostAllocator(at::kCUDA)->release_pool(mempool_id_);
    } catch (const std::exception&) {
    }
    // The generator's capture bookkeeping (CUDAGeneratorState, not exported) is set back by the
    // only public way: a small capture that ends normally (prologue, then epilogue).
    try {
      at::cuda::CUDAGraph tidy;
      tidy.capture_begin(at::cuda::MempoolId_t{0, 0}, cudaStreamCaptureModeThreadLocal);
      torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, capture_dev_));
      tidy.capture_end();
    } catch (const std::exception&) {
      (void)cudaGetLastError();
    }
  }
};

}  // namespace cuda_graph_detail
using cuda_graph_detail::Graph;

struct CudaGraph::Impl {
  std::unique_ptr<Graph> graph;
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
  auto graph = std::make_unique<Graph>();
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
      graph->abandon();
    }
    (void)cudaGetLastError();  // the capture error is not sticky: clear it for the eager steps that follow
    throw std::runtime_error(failure);
  }
  try {
    graph->capture_end();  // also instantiates the executable graph
  } catch (const std::exception& e) {
    graph->abandon();
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
  std::optional<c10::cuda::CUDAStreamGuard> guard;  // its original_stream() is the previous current stream
};

CudaSideStream::CudaSideStream(int device) : impl_(std::make_unique<Impl>()) {
  if (device < 0) return;
  const auto index = static_cast<c10::DeviceIndex>(device);
  auto previous = c10::cuda::getCurrentCUDAStream(index);
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  at::cuda::CUDAEvent ready;
  ready.record(previous);
  ready.block(side);
  impl_->guard.emplace(side);
}

CudaSideStream::~CudaSideStream() {
  if (!impl_->guard) return;
  const auto side = impl_->guard->current_stream();
  const auto previous = impl_->guard->original_stream();
  impl_->guard.reset();
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(previous);
}

}  // namespace trainer::device
