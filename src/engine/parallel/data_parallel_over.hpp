// A strategy layered over the data-parallel one (tensor parallel: engine/loop/tp_run.cpp; pipeline
// parallel: pipeline_parallel.cpp): every hook goes to the inner strategy, with the inner's contract
// (data_parallel.hpp), unless the layer overrides it to add what its own dimension needs (a sum over
// tp or over the pipeline's tied ends, a norm over the mesh, a world-wide fp16 vote, its checkpoint
// part). name() and what the layer adds are the layer's.
#pragma once

#include <memory>
#include <utility>

#include "engine/parallel/data_parallel.hpp"

namespace trainer::engine {

// The checkpoint part of such a layer: the inner strategy's part (asked for at each use: a sharded
// strategy makes its part in prepare) for everything the layer does not override.
class CheckpointPartOver : public CheckpointPart {
 public:
  explicit CheckpointPartOver(const DataParallel& inner) : inner_(inner) {}
  bool sharded_state() const override { return in().sharded_state(); }
  std::string shard_group() const override { return in().shard_group(); }
  io::NamedTensors shard_tensors(const torch::optim::Optimizer& opt, const torch::nn::Module& model) const override {
    return in().shard_tensors(opt, model);
  }
  nlohmann::json shard_layout(const torch::nn::Module& model) const override { return in().shard_layout(model); }
  std::pair<int64_t, int64_t> shard_of() const override { return in().shard_of(); }
  io::NamedTensors whole_optimizer_state(const torch::optim::Optimizer& opt, const torch::nn::Module& model) const override {
    return in().whole_optimizer_state(opt, model);
  }
  bool writes_tp_part() const override { return in().writes_tp_part(); }
  int64_t pipeline_rank() const override { return in().pipeline_rank(); }
  int64_t pipeline_size() const override { return in().pipeline_size(); }
  bool owns(const std::string& name) const override { return in().owns(name); }
  void load_optimizer(torch::optim::Optimizer& opt, const torch::nn::Module& model,
                      const io::NamedTensors& full) const override {
    in().load_optimizer(opt, model, full);
  }

 protected:
  const CheckpointPart& in() const { return inner_.checkpoint_part(); }
  const DataParallel& inner_;
};

class DataParallelOver : public DataParallel {
 public:
  explicit DataParallelOver(std::unique_ptr<DataParallel> inner) : inner_(std::move(inner)) {}

  void prepare(torch::nn::Module& module, const std::vector<torch::Tensor>& params) override {
    inner_->prepare(module, params);
  }
  void align_pieces(const std::vector<torch::Tensor>& params) override { inner_->align_pieces(params); }
  void before_backward(bool last_micro_batch) override { inner_->before_backward(last_micro_batch); }
  void after_backward() override { inner_->after_backward(); }
  void commit(int64_t step) override { inner_->commit(step); }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& cfg,
                                                          const torch::nn::Module& model) override {
    return inner_->make_optimizer(cfg, model);
  }
  const std::vector<torch::Tensor>& step_params(const std::vector<torch::Tensor>& params) const override {
    return inner_->step_params(params);
  }
  std::vector<torch::Tensor> step_param_sources(const std::vector<torch::Tensor>& params) const override {
    return inner_->step_param_sources(params);
  }
  bool shards_gradients() const override { return inner_->shards_gradients(); }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) override {
    return inner_->clip_grad_norm(step_params, max_norm);
  }
  void agree_flag(torch::Tensor& flag) override { inner_->agree_flag(flag); }
  void after_step() override { inner_->after_step(); }
  void hold_full_params() const override { inner_->hold_full_params(); }
  void release_full_params(bool written) const override { inner_->release_full_params(written); }
  HeldBytes held_bytes(const std::vector<torch::Tensor>& params, const torch::optim::Optimizer& opt) const override {
    return inner_->held_bytes(params, opt);
  }
  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return inner_->memory_plan(model, optim);
  }
  const CheckpointPart& checkpoint_part() const override { return inner_->checkpoint_part(); }

 protected:
  std::unique_ptr<DataParallel> inner_;
};

}  // namespace trainer::engine
