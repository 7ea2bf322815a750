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

double perplexity(double loss_nats);  // exp(loss)
// Bits per byte of text: loss / ln 2 / bytes_per_token (1 for byte-level tokens). Only defined when
// the bytes behind a token are known: data.format text, or data.bytes_per_token for token shards.
double bits_per_byte(double loss_nats, double bytes_per_token = 1.0);

struct EvalResult {
  double loss = 0.0;   // mean cross-entropy in nats per sample (images) or per token
  int64_t count = 0;   // samples (images) or tokens scored
  std::optional<double> accuracy, top5;  // classification
  std::optional<double> ppl, bpb;        // tokens (bpb: when the bytes per token are known)
  // train.eval_tta flip: the same images scored by the mean logits of each and its mirror, beside
  // the plain figures above (never instead of them)
  std::optional<double> tta_loss, tta_accuracy, tta_top5;
};

// The value of `metric` ("loss", "accuracy", "top5", "ppl", "bpb") in `r`; std::invalid_argument
// when this evaluation does not report it.
double metric_value(const EvalResult& r, const std::string& metric);

class EvalAccumulator {
 public:
  // bytes_per_token: for bits per byte of token models (0 = unknown: no bpb)
  explicit EvalAccumulator(double bytes_per_token = 0) : bytes_per_token_(bytes_per_token) {}
  void add_classification(const torch::Tensor& logits, const torch::Tensor& target);  // (N, C), (N)
  void add_tokens(const torch::Tensor& logits, const torch::Tensor& target);          // (B, T, V), (B, T)
  EvalResult result() const;  // host sync

 private:
  double bytes_per_token_ = 0;
  bool tokens_ = false;
  int64_t count_ = 0;  // known on the host from the shapes
  torch::Tensor loss_sum_, top1_, top5_;
};

}  // namespace trainer::engine
