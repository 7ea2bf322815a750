// A model built for a pipeline rank (BuildContext::keeps_unit): the family draws every weight's
// initial values in one process's order, but keeps the values of its kept units only. A unit it does
// not keep is released (io::release_weight) right after its construction drew its values, and the
// family's init passes over a released weight draw the same numbers into a scratch tensor that is
// dropped at once. So the kept weights equal a whole build's bit for bit, the default stream ends
// where a whole build leaves it, and the host holds the kept units plus one unit at a time.
#pragma once

#include <torch/torch.h>


namespace trainer::models {

// Every parameter and buffer of `m` (recursively) released.
void release_module(torch::nn::Module& m);

// torch::nn::init::normal_(t, mean, std), or for a released `t` the same draws into a scratch tensor
// of its shape and dtype (the CPU generator's consumption depends on the numel and the dtype only).
void init_normal(torch::Tensor& t, double mean, double std);

// torch::nn::init::zeros_(t), nothing for a released `t` (no draws either way).
void init_zeros(torch::Tensor& t);

}  // namespace trainer::models
