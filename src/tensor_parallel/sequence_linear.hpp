// Sequence parallel's column-parallel matmul, as Megatron-LM's linear with sequence parallel does it:
// the input arrives as this rank's chunk of the sequence, is all-gathered for the matmul, and only the
// chunk is kept for backward, which gathers it again for the weight's gradient. Autograd around a
// plain gather + linear would keep the gathered input, T times the chunk, for every column layer:
// sequence parallel would then save nothing where it matters most.
#pragma once

#include <torch/torch.h>

#include "tensor_parallel/communicator.hpp"

namespace trainer::tensor_parallel {

// y = all_gather(x_local, dim) W^T + b (b may be undefined); backward: dx_local = reduce_scatter(dy W)
// along dim (each rank's dy covers its own output columns: the partial sums of the whole input's
// gradient), dW = dy^T gathered(x), db = sum(dy). Under autocast the matmul runs in the autocast dtype,
// as F.linear would; the gradients come back in the dtypes of x, W and b. comm.size() > 1.
torch::Tensor sequence_gather_linear(const torch::Tensor& x_local, const torch::Tensor& weight, const torch::Tensor& bias,
                                     Communicator& comm, int64_t dim);

}  // namespace trainer::tensor_parallel
