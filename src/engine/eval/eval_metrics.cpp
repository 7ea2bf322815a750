#include "engine/eval/eval_metrics.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace trainer::engine {

double metric_value(const EvalResult& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "accuracy" && r.accuracy) return *r.accuracy;
  if (metric == "top5" && r.top5) return *r.top5;
  if (metric == "bpb" && r.bpb) return *r.bpb;
  if (metric == "ppl" && r.ppl) return *r.ppl;
  throw std::invalid_argument("metric '" + metric + "' is not reported by this model's evaluation");
}

torch::Tensor topk_correct(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
  k = std::min<int64_t>(k, logits.size(1));
  auto top = std::get<1>(logits.topk(k, /*dim=*/1));        // (N, k)
  return top.eq(target.unsqueeze(1)).any(1).sum();           // ()
}

double perplexity(double loss_nats) { return std::exp(loss_nats); }
double bits_per_byte(double loss_nats, double bytes_per_token) {
  return loss_nats / std::numbers::ln2 / bytes_per_token;
}

namespace {
void accumulate(torch::Tensor& acc, const torch::Tensor& v) { acc = acc.defined() ? acc + v : v; }
}  // namespace

void EvalAccumulator::add_classification(const torch::Tensor& logits, const torch::Tensor& target) {
  auto lf = logits.to(torch::kFloat32);  // (N, C)
  accumulate(loss_sum_, torch::nn::functional::cross_entropy(
                            lf, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
  accumulate(top1_, topk_correct(lf, target, 1));
  accumulate(top5_, topk_correct(lf, target, 5));
  count_ += logits.size(0);
}

void EvalAccumulator::add_tokens(const torch::Tensor& logits, const torch::Tensor& target) {
  tokens_ = true;
  auto lf = logits.to(torch::kFloat32).reshape({-1, logits.size(-1)});  // (B*T, V)
  accumulate(loss_sum_, torch::nn::functional::cross_entropy(
                            lf, target.reshape({-1}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
  count_ += target.numel();
}

EvalResult EvalAccumulator::result() const {
  EvalResult r;
  r.count = count_;
  if (count_ == 0) return r;
  r.loss = loss_sum_.item<double>() / static_cast<double>(count_);
  if (tokens_) {
    r.ppl = perplexity(r.loss);
    if (bytes_per_token_ > 0) r.bpb = bits_per_byte(r.loss, bytes_per_token_);
  } else {
    r.accuracy = static_cast<double>(top1_.item<int64_t>()) / static_cast<double>(count_);
    r.top5 = static_cast<double>(top5_.item<int64_t>()) / static_cast<double>(count_);
  }
  return r;
}

}  // namespace trainer::engine
