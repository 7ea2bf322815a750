#include "engine/step/train_step.hpp"

#include <cmath>

#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optim.hpp"
#include "tensor_parallel/cross_entropy.hpp"

namespace trainer::engine {

torch::Tensor mean_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, double label_smoothing) {
  namespace F = torch::nn::functional;
  // label_smoothing 0 is the options' default: the same call as a plain cross_entropy, bit for bit
  const auto opts = F::CrossEntropyFuncOptions().label_smoothing(label_smoothing);
  if (logits.dim() == 3)  // (B*T, V)
    return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}), opts);
  return F::cross_entropy(logits, target, opts);
}

torch::Tensor models_loss(const models::Model& model, const torch::Tensor& logits, const torch::Tensor& target,
                          double label_smoothing) {
  const auto* shard = model.vocab_shard();
  if (!shard) return mean_cross_entropy(logits, target, label_smoothing);
  auto losses = tensor_parallel::vocab_parallel_cross_entropy(logits, target, *shard, model.tp_comm(), label_smoothing);
  return tensor_parallel::mean_over_targets(losses, target);  // () as torch's reduction "mean"
}

ApplyResult apply_gradients(torch::optim::Optimizer& opt, LossScaler& scaler, const std::vector<torch::Tensor>& params,
                            double grad_clip, double lr, bool need_norm, bool skip_nonfinite,
                            DataParallel* parallel) {
  ApplyResult r;
  scaler.unscale(params);  // clipping must see the true gradients
  if (parallel && scaler.enabled()) {
    auto flag = scaler.found_inf();
    parallel->agree_flag(flag);  // a sharded rank sees only its slice: the ranks skip together
  }
  skip_nonfinite = skip_nonfinite && !scaler.enabled();  // the fp16 scaler skips such steps itself
  if (grad_clip > 0 || need_norm || skip_nonfinite)
    r.grad_norm = parallel ? parallel->clip_grad_norm(params, grad_clip) : clip_grad_norm(params, grad_clip);
  if (skip_nonfinite && !std::isfinite(r.grad_norm.item<double>())) {
    r.stepped = false;
    r.nonfinite = true;
    opt.zero_grad(/*set_to_none=*/true);
    return r;
  }
  set_learning_rate(opt, lr);
  r.stepped = scaler.step(opt);
  scaler.update();
  opt.zero_grad(/*set_to_none=*/true);
  return r;
}

}  // namespace trainer::engine
