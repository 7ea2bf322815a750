// airbench's whitening first layer (Keller Jordan's CIFAR-10 speedruns), computed from the data: the
// k x k patches of the training images are decorrelated by a fixed convolution whose filters are the
// eigenvectors of the patches' covariance, each scaled by 1 / sqrt(eigenvalue + eps). Each filter comes
// with its negation, so a GELU after it passes both signs of every component. The first layer then
// starts where SGD would take many steps to get, and it costs nothing to train (it is frozen).
//
// Computed in plain double loops (no BLAS, no LAPACK): the same binary gives the same filters on any CPU,
// so every rank of a multi-node run computes identical weights without a broadcast.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace trainer::models {

// Covariance (D, D) double of the k x k patches (D = C k^2, channel-major like a conv weight) of `images`
// (N, C, H, W) float, uncentred (airbench's). At most about 4 million patches are read: larger images are
// sampled on a regular grid of patch positions. Throws std::invalid_argument when k exceeds H or W.
torch::Tensor patch_covariance(const torch::Tensor& images, int64_t k);

// Eigen-decomposition of a symmetric (D, D) double matrix by cyclic Jacobi rotations: eigenvalues
// (D) in descending order and the eigenvectors as the rows of (D, D), each signed so that its largest
// component (the first of equal magnitude) is positive.
std::pair<torch::Tensor, torch::Tensor> symmetric_eigen(const torch::Tensor& a);

// The whitening stem's weight (2 D, C, k, k) float: rows v_i / sqrt(lambda_i + eps) in descending
// eigenvalue order, then their negations.
torch::Tensor whitening_weight(const torch::Tensor& images, int64_t k, double eps = 5e-4);

}  // namespace trainer::models
