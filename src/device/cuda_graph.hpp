// CUDA graphs behind the seam (train.cuda_graphs, engine/step/graphed_step.hpp): a captured graph of the
// work one callable enqueues, and a scope that runs work on a side stream (capture needs a stream
// other than the default one). A CPU-only LibTorch links the stubs of cuda_graph_nocuda.cpp, whose
// capture() throws.
#pragma once

#include <functional>
#include <memory>

namespace trainer::device {

// One at::cuda::CUDAGraph with its private memory pool. Tensors allocated during capture live in
// that pool for as long as the graph does; replay() re-runs the captured kernels on the same
// addresses, so inputs must be copied into the tensors the capture read, and outputs read from the
// tensors it wrote.
class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Synchronises the device, then captures what `work` enqueues on the current stream of the
  // current device, which must not be the default stream (see CudaSideStream). Capture mode is
  // thread-local: other threads (data loader workers pinning memory) are not disturbed. Throws
  // std::runtime_error, with CUDA's or ATen's reason, when `work` throws or does something a capture
  // cannot hold (a host synchronisation, a copy from pageable memory); the graph is then empty.
  void capture(const std::function<void()>& work);
  void replay();  // on the current stream; needs a successful capture()
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// While it lives, the current stream of CUDA device `device` is a stream from ATen's (low-priority)
// pool, which the loader's copy streams never come from (cuda_copy.hpp): it starts
// after the work already queued on the previous current stream, which in turn waits for it when the
// scope ends. No-op for device < 0.
class CudaSideStream {
 public:
  explicit CudaSideStream(int device);
  ~CudaSideStream();
  CudaSideStream(const CudaSideStream&) = delete;
  CudaSideStream& operator=(const CudaSideStream&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::device
