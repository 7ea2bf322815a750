// The two halves of an optimizer step, shared by the Trainer and the tests:
//   forward_backward() once per micro-batch, then apply_gradients() once per step.
#pragma once

#include <torch/torch.h>

#include <type_traits>
#include <vector>

#include "engine/parallel/data_parallel.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// Mean cross-entropy: logits (B, C) vs targets (B), or logits (B, T, V) vs targets (B, T), or logits
// (B, C) vs soft targets (B, C) of class probabilities (mixup/cutmix, engine/step/batch_mix.hpp).
// label_smoothing v: the target distribution becomes (1 - v) target + v / C, as torch's
// cross_entropy(label_smoothing=v) (which is this call); 0 is today's plain cross-entropy. Under
// autocast the op runs in fp32 (autocast's fp32 list, CPU and CUDA).
torch::Tensor mean_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, double label_smoothing = 0.0);

// The training loss of `model`'s logits: mean_cross_entropy, or for a model whose logits are
// vocabulary-parallel (Model::vocab_shard(), tensor parallel) the vocab-parallel cross entropy over
// its tp group, mean over the targets: the full logits are never gathered. The same value.
torch::Tensor models_loss(const models::Model& model, const torch::Tensor& logits, const torch::Tensor& target,
                          double label_smoothing = 0.0);
template <class M>
torch::Tensor model_loss(const M& model, const torch::Tensor& logits, const torch::Tensor& target,
                         double label_smoothing = 0.0) {
  if constexpr (std::is_base_of_v<models::Model, M>) return models_loss(model, logits, target, label_smoothing);
  else return mean_cross_entropy(logits, target, label_smoothing);  // a plain module (tests): whole logits
}

// Forward under autocast, loss / accum (the step's mean is the mean of its micro-batch means),
// times the loss scale, backward: gradients accumulate into .grad. Returns the unscaled micro-batch
// loss, detached, in fp32, on the device (no host sync).
template <class Model>
torch::Tensor forward_backward(Model& model, const torch::Tensor& input, const torch::Tensor& target, int64_t accum,
                               Precision precision, const torch::Device& device, const LossScaler& scaler,
                               double label_smoothing = 0.0) {
  torch::Tensor loss;
  {
    AutocastScope autocast(precision, device);
    auto logits = model.forward(input);  // (B, C) or (B, T, V)
    loss = model_loss(model, logits, target, label_smoothing);
  }
  scaler.scale_loss(loss / static_cast<double>(accum)).backward();
  return loss.detach().to(torch::kFloat32);
}

struct ApplyResult {
  torch::Tensor grad_norm;  // before clipping; undefined when neither clipping nor need_norm asked for it
  bool stepped = true;      // false: the step was skipped (inf/NaN gradients)
  bool nonfinite = false;   // skipped by `skip_nonfinite` (outside the fp16 scaler's own skipping)
};

// Unscale (fp16), clip to grad_clip (0 = off), set the learning rate, step unless the gradients are
// non-finite, update the loss scale, zero_grad(set_to_none). Gradients must already be averaged
// over ranks. skip_nonfinite (train.nonfinite skip|rollback, no fp16 scaler): the gradient norm is
// checked on the host (one sync) and a non-finite one skips the step, which `nonfinite` reports.
// `parallel` (null: one replica): the global norm and the fp16 overflow agreement of a sharded run;
// `params` are then its step_params().
ApplyResult apply_gradients(torch::optim::Optimizer& opt, LossScaler& scaler, const std::vector<torch::Tensor>& params,
                            double grad_clip, double lr, bool need_norm, bool skip_nonfinite = false,
                            DataParallel* parallel = nullptr);

}  // namespace trainer::engine
