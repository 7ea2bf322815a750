// Dropout streams by unit (unit_rng.hpp).
#include "models/unit_rng.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace trainer::models {

namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t unit_stream_seed(uint64_t step_key, int64_t micro, int64_t unit) {
  return splitmix64(splitmix64(splitmix64(step_key) ^ static_cast<uint64_t>(micro)) ^ static_cast<uint64_t>(unit));
}

uint64_t draw_step_key() {
  auto cpu = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  std::lock_guard<std::mutex> lock(cpu.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(cpu)->random64();
}

UnitRngScope::UnitRngScope(const torch::Device& device, uint64_t seed) {
  gens_.push_back(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (device.is_cuda()) gens_.push_back(at::globalContext().defaultGenerator(device));
  for (auto& g : gens_) {
    std::lock_guard<std::mutex> lock(g.mutex());
    saved_.push_back(g.get_state());
    g.set_current_seed(seed);
  }
}

UnitRngScope::~UnitRngScope() {
  for (size_t i = 0; i < gens_.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens_[i].mutex());
    gens_[i].set_state(saved_[i]);
  }
}

}  // namespace trainer::models
