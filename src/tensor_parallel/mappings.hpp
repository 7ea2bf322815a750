// The conjugate operators at the edges of a tensor-parallel region, as autograd functions over a
// Communicator (device-agnostic: they only call its collectives). Each is the identity, with no
// autograd node and no collective, when comm.size() == 1.
//
//   operator                     forward                      backward
//   copy_to_region               identity                     all-reduce (sum)
//   reduce_from_region           all-reduce (sum)             identity
//   scatter_to_region            this rank's chunk, last dim  all-gather, last dim
//   gather_from_region           all-gather, last dim         this rank's chunk, last dim
//   scatter_to_sequence          this rank's chunk of `dim`   all-gather along `dim`
//   gather_from_sequence         all-gather along `dim`       reduce-scatter along `dim` (the
//                                                             gradient is a partial sum per rank)
//   reduce_scatter_to_sequence   reduce-scatter along `dim`   all-gather along `dim`
//
// A region entered with copy_to_region is left with reduce_from_region (tensor parallel); with
// sequence parallel, gather_from_sequence and reduce_scatter_to_sequence take their places, and what
// lies between the regions (LayerNorm, dropout, residual adds) sees 1/T of the sequence.
// The Communicator must outlive the autograd graphs these record (the backward calls it).
#pragma once

#include <torch/torch.h>

#include "tensor_parallel/communicator.hpp"

namespace trainer::tensor_parallel {

torch::Tensor copy_to_region(const torch::Tensor& x, Communicator& comm);
torch::Tensor reduce_from_region(const torch::Tensor& x, Communicator& comm);
torch::Tensor scatter_to_region(const torch::Tensor& x, Communicator& comm);
torch::Tensor gather_from_region(const torch::Tensor& x, Communicator& comm);
torch::Tensor scatter_to_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim);
torch::Tensor gather_from_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim);
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim);

// This rank's chunk of `x` along `dim` (size(dim) divisible by comm.size()), a plain tensor op.
torch::Tensor local_chunk(const torch::Tensor& x, Communicator& comm, int64_t dim);

}  // namespace trainer::tensor_parallel
