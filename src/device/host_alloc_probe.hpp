// Counts the bytes of CPU tensor storage while installed: it wraps the CPU allocator and tracks the
// live total and its high-water mark. Used by the memory probe of train.batch_size auto and
// `trainer check --memory` (engine/startup/memory_plan) and by the model tests.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace trainer::device {

class HostAllocProbe final : public c10::Allocator {
 public:
  // The one instance; never destroyed, since tensors allocated through it may outlive any scope.
  static HostAllocProbe& instance();
  // Installs the probe as the CPU allocator for its lifetime (then puts the previous one back).
  // this_thread_only: only the calling thread's allocations are counted (the others pass through
  // to the wrapped allocator untouched: a data loader's workers stay out of the figures).
  class Scope {
   public:
    explicit Scope(bool this_thread_only = false);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    c10::Allocator* previous_;
    bool filtered_;
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
  std::atomic<bool> filtered_{false};  // count only the threads a Scope(true) was made on
};

// The bytes of tensors held on `device` above what was held when the meter was made, sampled at
// each sample(): on CUDA the caching allocator's allocated bytes; on the CPU the storage this thread
// allocates while the meter lives (the probe installed with this_thread_only). peak() is the largest
// sample (0 when every sample was at or below the start). Samples, not every allocation: what a
// computation holds between the points it samples at, not its transient peak inside them.
class HeldBytesMeter {
 public:
  explicit HeldBytesMeter(const c10::Device& device);
  HeldBytesMeter(const HeldBytesMeter&) = delete;
  HeldBytesMeter& operator=(const HeldBytesMeter&) = delete;
  void sample();
  int64_t peak() const { return peak_; }

 private:
  int64_t held() const;
  c10::Device device_;
  std::optional<HostAllocProbe::Scope> scope_;
  int64_t base_ = 0, peak_ = 0;
};

}  // namespace trainer::device
