// Evaluation metrics: mean cross-entropy, top-1/top-5 accuracy (classification), perplexity and bits
// per byte (language models). Sums stay on the device until result(), the one host sync of an eval.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

namespace trainer::engine {

// Number of rows of `logits` (N, C) whose target (N) is among the k largest logits (k capped at C):
// a 0-dim int64 tensor on the logits' device.
torch::Tensor topk_correct(const torch::Tensor& logits, const torch::Tensor& target, int64_t k);

double perplexity(double loss_nats);     // exp(loss)
double bits_per_byte(double loss_nats);  // loss / ln 2: for byte-level tokens one token is one byte

struct EvalResult {
  double loss = 0.0;   // mean cross-entropy in nats per sample (images) or per token
  int64_t count = 0;   // samples (images) or tokens scored
  std::optional<double> accuracy, top5;  // classification
  std::optional<double> ppl, bpb;        // tokens
};

// The value of `metric` ("loss", "accuracy", "top5", "ppl", "bpb") in `r`; std::invalid_argument
// when this evaluation does not report it.
double metric_value(const EvalResult& r, const std::string& metric);

class EvalAccumulator {
 public:
  void add_classification(const torch::Tensor& logits, const torch::Tensor& target);  // (N, C), (N)
  void add_tokens(const torch::Tensor& logits, const torch::Tensor& target);          // (B, T, V), (B, T)
  EvalResult result() const;  // host sync

 private:
  bool tokens_ = false;
  int64_t count_ = 0;  // known on the host from the shapes
  torch::Tensor loss_sum_, top1_, top5_;
};

}  // namespace trainer::engine
