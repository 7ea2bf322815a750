// DataLoader: batches of a Dataset in the Sampler's order (sampler.hpp), prepared by worker threads
// into a bounded, ordered prefetch buffer.
//  - Order and content are independent of the number of workers: batch k is a pure function of
//    (seed, position), whichever thread builds it, and batches are delivered in sequence order.
//  - Workers run no intra-op-parallel ATen ops (they only allocate tensors and run plain loops),
//    so they never compete with the training thread's intra-op pool. They do not call
//    at::set_num_threads: in ATen that setting is process-wide and would throttle the trainer too.
//  - A worker's exception is delivered by next() at that batch's turn, as a DataError naming the
//    file and sample index; after it the loader stays failed (next() rethrows).
//  - Before the first batch of each epoch (and the first after a restore) is handed over, the
//    dataset's files are checked for change (Dataset::check_unchanged, data/file_watch.hpp): a
//    change is next()'s DataChanged instead of that batch (sticky, as a worker's error), so no
//    batch of a new epoch comes from files that changed before it was delivered.
//  - The destructor and restore() stop and join the workers: a worker is either waiting (and
//    wakes on the stop flag) or building one batch, so joining is bounded.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/buffer_pool.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "device/cuda_copy.hpp"

namespace trainer::data {

struct LoaderOptions {
  int64_t batch_size = 32;
  int64_t workers = 2;   // 0: batches are built on the calling thread inside next()
  int64_t prefetch = 4;  // finished batches buffered ahead (at least 1), besides the one each worker builds
  int64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t accumulation = 1;  // train: batches per optimizer step; an epoch is whole steps (data/sampler.hpp)
  bool train = true;        // true: shuffle, augment, drop the ragged tail, roll over epochs forever
                            // false: one sequential pass, sharded, last batch may be short, then end
  bool pin_memory = false;  // true when training on CUDA (ignored without CUDA)
  // >= 0 (with pin_memory): the thread that builds a batch also copies it to this CUDA device, on its
  // own stream (device/cuda_copy.hpp), so that the copy overlaps the running step; next() makes the
  // caller's current stream wait for it. -1: batches stay on the host.
  int device_index = -1;
  // With a device copy: datasets that can (Dataset::finishes_anywhere: images) cross as raw uint8 in
  // pinned memory and are normalised on the device, on the copy stream (the same floats, a quarter
  // of the bytes, no normalisation on the workers); false: finished on the host, copied as float.
  bool finish_on_device = true;
  bool channels_last = false;  // device-finished images in channels-last memory format (model.channels_last)
  // train = false: the pass covers only the first `eval_samples` samples of the split (0 = all), shared
  // among the ranks as a whole split is, so that every world size scores the same samples (train.eval_steps)
  int64_t eval_samples = 0;
  // false: the files are not looked at before an epoch's first batch; the caller looks instead, at
  // the steps check_due() names (a multi-rank run's boundary vote: a change the loader found inside a
  // step could not be agreed on by the ranks). A replaced file then reads its old contents, a
  // truncated one faults into the guarded copy (DataChanged from the read), until the caller's look.
  bool look_at_epoch_start = true;
};

struct Batch {
  torch::Tensor input, target;  // images: (B, C, H, W) float + (B) int64; tokens: (B, T) + (B, T) int64
  int64_t epoch = 0;
  std::shared_ptr<device::CopyFence> copied;  // set while a device copy may still be in flight
};

struct LoaderState {
  int64_t epoch = 0;
  int64_t samples_consumed = 0;  // global samples consumed within `epoch` (all ranks together)
  bool operator==(const LoaderState&) const = default;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, LoaderOptions opts);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  std::optional<Batch> next();  // nullopt only at the end of an eval pass; rethrows worker errors
  LoaderState state() const;    // position after the last batch returned
  void restore(const LoaderState& s);  // the next batches are exactly those that would have followed
  int64_t batches_per_epoch() const;   // per rank
  // Whether one of the next `n` batches is checked against the files before it is handed over (the
  // first of an epoch, or the first after a restore): a multi-rank run agrees on the files' state
  // before such a step (engine/loop/world_recovery.hpp), as ranks cannot agree on a change found
  // inside a step. The same answer on every rank (a pure function of the global position).
  bool check_due(int64_t n) const;
  const Dataset& dataset() const { return *dataset_; }
  int64_t live_workers() const;        // threads currently running (for tests)
  // Batches built and waiting to be handed over (bench-data: those were not built while it timed).
  int64_t ready_batches() const;
  // Batches handed to workers and not yet delivered, at most: workers + prefetch, so that every
  // worker has a batch to build while `prefetch` finished ones wait for the step.
  int64_t in_flight_limit() const { return opts_.workers + opts_.prefetch; }

 private:
  struct Slot {
    std::optional<Batch> batch;  // empty: the end of an eval pass
    std::exception_ptr error;
    SamplerPosition after;
  };
  Batch build(const BatchPlan& plan) const;
  static std::optional<Batch> handed_over(std::optional<Batch> batch);
  void check_files(const Batch& batch);  // under mu_: the first batch of its epoch
  Slot build_slot(const std::optional<BatchPlan>& plan) const;
  void start_workers();
  void stop_workers();
  void worker_loop();

  std::shared_ptr<Dataset> dataset_;
  LoaderOptions opts_;
  Sampler sampler_;
  mutable BufferPool raw_pool_;  // the batches' raw bytes / tokens, reused (build() runs on the workers)
  int64_t sample_bytes_, target_numel_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::map<int64_t, Slot> ready_;  // built batches by sequence number
  SamplerPosition plan_pos_;       // the position after the last batch handed to a worker
  bool plan_end_ = false;          // eval: the end was planned
  int64_t checked_epoch_ = -1;     // the epoch whose files were last checked
  int64_t next_assign_ = 0, next_deliver_ = 0;
  SamplerPosition delivered_;      // state()
  bool ended_ = false;
  std::exception_ptr error_;       // sticky once delivered
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace trainer::data
