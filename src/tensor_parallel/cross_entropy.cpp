// Vocabulary-parallel cross entropy (cross_entropy.hpp) as one autograd function.
#include "tensor_parallel/cross_entropy.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace trainer::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCE : torch::autograd::Function<VocabParallelCE> {
  // logits (N, local), target (N,)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& target,
                               Communicator* comm, VocabShard shard, double eps, int64_t ignore_index) {
    const bool upcast = logits.scalar_type() != torch::kDouble && logits.scalar_type() != torch::kFloat;
    auto z = (upcast ? logits.to(torch::kFloat) : logits).narrow(1, 0, shard.real());  // real columns only
    const int64_t n = z.size(0);
    auto opts = z.options();
    // 1. the max, for a stable exp (a constant of the loss: no gradient through it)
    auto m = shard.real() > 0 ? std::get<0>(z.max(1)) : torch::full({n}, -std::numeric_limits<double>::infinity(), opts);
    if (comm->size() > 1) comm->all_reduce(m, ReduceOp::Max);
    auto e = torch::exp(z - m.unsqueeze(1));
    // 2. sum of exp, the target's logit (held by one rank), the sum of the real logits: one all-reduce
    const auto ignored = target == ignore_index;
    const auto local_t = target - shard.start;
    const auto mine = (local_t >= 0) & (local_t < shard.real()) & ~ignored;
    const auto safe_t = local_t.masked_fill(~mine, 0);
    auto packed = torch::zeros({3, n}, opts);
    packed[0] = e.sum(1);
    if (shard.real() > 0) packed[1] = z.gather(1, safe_t.unsqueeze(1)).squeeze(1).masked_fill(~mine, 0.0);
    packed[2] = z.sum(1);
    if (comm->size() > 1) comm->all_reduce(packed, ReduceOp::Sum);
    const auto lse = torch::log(packed[0]) + m;
    auto loss = lse - (1.0 - eps) * packed[1] - (eps / static_cast<double>(shard.vocab)) * packed[2];
    loss = loss.masked_fill(ignored, 0.0);

    ctx->save_for_backward({e / packed[0].unsqueeze(1), safe_t, mine, ignored});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["vocab"] = shard.vocab;
    ctx->saved_data["local"] = shard.local();
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    // in fp32 from bf16 / fp16 logits, as autocast runs one process's cross entropy (the logged loss
    // and the gradient that flows back are not rounded to the logits' dtype)
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto& softmax = saved[0];
    const auto& safe_t = saved[1];
    const auto& mine = saved[2];
    const auto& ignored = saved[3];
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto vocab = ctx->saved_data["vocab"].toInt();
    const auto local = ctx->saved_data["local"].toInt();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());

    auto grad = softmax - eps / static_cast<double>(vocab);
    if (grad.size(1) > 0)
      grad.scatter_add_(1, safe_t.unsqueeze(1), (-(1.0 - eps) * mine.to(grad.scalar_type())).unsqueeze(1));
    const auto scale = g[0].to(grad.scalar_type()).masked_fill(ignored, 0.0);
    grad = grad * scale.unsqueeze(1);
    if (grad.size(1) < local)  // the padding columns: no gradient
      grad = torch::cat({grad, torch::zeros({grad.size(0), local - grad.size(1)}, grad.options())}, 1);
    return {grad.to(dtype), {}, {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& target,
                                           const VocabShard& shard, Communicator& comm, double label_smoothing,
                                           int64_t ignore_index) {
  if (local_logits.size(-1) != shard.local())
    throw std::invalid_argument("vocab_parallel_cross_entropy: logits have " + std::to_string(local_logits.size(-1)) +
                                " columns, this rank's vocabulary rows are " + std::to_string(shard.local()));
  if (local_logits.sizes().slice(0, local_logits.dim() - 1) != target.sizes())
    throw std::invalid_argument("vocab_parallel_cross_entropy: target shape does not match the logits'");
  if (label_smoothing < 0 || label_smoothing > 1)
    throw std::invalid_argument("vocab_parallel_cross_entropy: label_smoothing must be in [0, 1]");
  auto flat = local_logits.reshape({-1, shard.local()});
  auto loss = VocabParallelCE::apply(flat, target.reshape({-1}), &comm, shard, label_smoothing, ignore_index);
  return loss.view(target.sizes());
}

torch::Tensor mean_over_targets(const torch::Tensor& losses, const torch::Tensor& target, int64_t ignore_index) {
  return losses.sum() / (target != ignore_index).sum().to(losses.scalar_type());
}

torch::Tensor gather_vocab_logits(const torch::Tensor& local_logits, const VocabShard& shard, Communicator& comm) {
  torch::NoGradGuard no_grad;
  if (comm.size() == 1) return local_logits.narrow(-1, 0, shard.vocab);
  auto all = comm.all_gather(local_logits.contiguous(), -1);
  return all.narrow(-1, 0, shard.vocab);
}

}  // namespace trainer::tensor_parallel
