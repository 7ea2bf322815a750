// Partial builds for pipeline ranks (partial_build.hpp).
#include "models/partial_build.hpp"

#include "io/weight_copy.hpp"

namespace trainer::models {

void release_module(torch::nn::Module& m) {
  for (auto& p : m.parameters(/*recurse=*/true)) io::release_weight(p);
  for (auto& b : m.buffers(/*recurse=*/true)) io::release_weight(b);
}

void init_normal(torch::Tensor& t, double mean, double std) {
  torch::NoGradGuard no_grad;
  if (!io::is_released(t)) {
    t.normal_(mean, std);
    return;
  }
  (void)torch::empty(t.sizes(), t.options()).normal_(mean, std);  // the draws alone
}

void init_zeros(torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  if (!io::is_released(t)) t.zero_();
}

}  // namespace trainer::models
