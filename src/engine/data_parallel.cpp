#include "engine/data_parallel.hpp"

#include "dist/grad_sync.hpp"

namespace trainer::engine {
namespace {

class SingleProcess final : public DataParallel {
 public:
  std::string name() const override { return "single process"; }
  void prepare(torch::nn::Module&, const std::vector<torch::Tensor>&) override {}
  void before_backward(bool) override {}
  void after_backward() override {}
};

// Every rank holds the whole model and optimizer state; gradients are averaged by GradSync.
class Replicated final : public DataParallel {
 public:
  Replicated(dist::DistContext& dist, double bucket_mb) : dist_(dist), bucket_mb_(bucket_mb) {}
  std::string name() const override { return "replicated (DDP)"; }
  void prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) override {
    dist_.broadcast_module(model);
    sync_ = std::make_unique<dist::GradSync>(dist_, params, bucket_mb_);
  }
  // gradients sync only on the last micro-batch: earlier ones accumulate locally (no_sync)
  void before_backward(bool last_micro_batch) override { sync_->set_enabled(last_micro_batch); }
  void after_backward() override { sync_->finish(); }  // waits for the buckets launched during backward

 private:
  dist::DistContext& dist_;
  double bucket_mb_;
  std::unique_ptr<dist::GradSync> sync_;
};

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(dist::DistContext& dist, const config::DistConfig& cfg) {
  if (!dist.active()) return std::make_unique<SingleProcess>();
  return std::make_unique<Replicated>(dist, cfg.bucket_mb);
}

}  // namespace trainer::engine
