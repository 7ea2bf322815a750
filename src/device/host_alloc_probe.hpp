// Counts the bytes of CPU tensor storage while installed: it wraps the CPU allocator and tracks the
// live total and its high-water mark. Used by the memory probe of train.batch_size auto and
// `trainer check --memory` (engine/startup/memory_plan) and by the model tests.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace trainer::device {

class HostAllocProbe final : public c10::Allocator {
 public:
  // The one instance; never destroyed, since tensors allocated through it may outlive any scope.
  static HostAllocProbe& instance();
  // Installs the probe as the CPU allocator for its lifetime (then puts the previous one back).
  class Scope {
   public:
    Scope();
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    c10::Allocator* previous_;
  };
  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

  c10::DataPtr allocate(size_t n) override;
  // The context of each block is its data pointer, so code that frees through raw_deleter() works.
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  HostAllocProbe() = default;
  static void release(void* data);
  struct Block {
    c10::DataPtr inner;
    int64_t bytes;
  };
  c10::Allocator* base_ = nullptr;  // the allocator being wrapped (set by Scope)
  std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace trainer::device
