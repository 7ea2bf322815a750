// RegionRng (region_rng.hpp).
#include "tensor_parallel/region_rng.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace trainer::tensor_parallel {

uint64_t RegionRng::region_seed(uint64_t draw, int64_t tp_rank) {
  // splitmix64 of the draw and the rank: nearby draws or ranks give unrelated seeds
  uint64_t z = draw + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(tp_rank + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

RegionRng::RegionRng(const torch::Device& device, const Communicator& comm, bool active) {
  if (!active || comm.size() <= 1) return;
  uint64_t draw = 0;
  {
    auto cpu = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
    std::lock_guard<std::mutex> lock(cpu.mutex());
    draw = at::check_generator<at::CPUGeneratorImpl>(cpu)->random64();  // the same on every tp rank
  }
  gen_ = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen_->mutex());
  saved_ = gen_->get_state();
  gen_->set_current_seed(region_seed(draw, comm.rank()));
}

RegionRng::~RegionRng() {
  if (!gen_) return;
  std::lock_guard<std::mutex> lock(gen_->mutex());
  gen_->set_state(saved_);
}

torch::Tensor region_dropout(const torch::Tensor& x, double p, bool training, const Communicator& comm) {
  RegionRng rng(x.device(), comm, training && p > 0);
  return torch::dropout(x, p, training);
}

}  // namespace trainer::tensor_parallel
