#include "tensor_parallel/sequence_linear.hpp"

namespace trainer::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The forward and backward shared by the two nodes below (an undefined tensor cannot be an input of
// a C++ autograd node, so a layer without a bias has a node without one).
torch::Tensor gather_linear_forward(AutogradContext* ctx, const torch::Tensor& x_local, const torch::Tensor& weight,
                                    const torch::Tensor& bias, Communicator* comm, int64_t dim) {
  ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
  ctx->saved_data["dim"] = dim;
  ctx->save_for_backward({x_local, weight});                       // the chunk, not the gathered input
  const auto total = comm->all_gather(x_local.contiguous(), dim);  // (.., S, .., in)
  return torch::nn::functional::linear(total, weight, bias);       // autocast applies here as in F.linear
}

// {dx_local, dW, db}: db only when `with_bias`; dW / db undefined when not needed (a frozen layer)
variable_list gather_linear_backward(AutogradContext* ctx, const torch::Tensor& dy, bool with_bias) {
  auto& comm = *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
  const int64_t dim = ctx->saved_data["dim"].toInt();
  const auto saved = ctx->get_saved_variables();
  const auto& x_local = saved[0];
  const auto& weight = saved[1];
  const auto total = comm.all_gather(x_local.contiguous(), dim);  // gathered again, freed after
  const auto out = dy.size(-1), in = total.size(-1);
  const auto dy2 = dy.reshape({-1, out});                         // (.., S, .., out / T) flattened
  const auto dx_partial = torch::matmul(dy, weight.to(dy.scalar_type()));  // this rank's columns' share
  variable_list grads{comm.reduce_scatter(dx_partial.contiguous(), dim).to(x_local.scalar_type()), {}};
  if (ctx->needs_input_grad(1))
    grads[1] = dy2.t().mm(total.reshape({-1, in}).to(dy.scalar_type())).to(weight.scalar_type());
  if (with_bias) grads.push_back(ctx->needs_input_grad(2) ? dy2.sum(0).to(weight.scalar_type()) : torch::Tensor());
  return grads;
}

struct GatherLinearBias : torch::autograd::Function<GatherLinearBias> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_local, const torch::Tensor& weight,
                               const torch::Tensor& bias, Communicator* comm, int64_t dim) {
    return gather_linear_forward(ctx, x_local, weight, bias, comm, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto grads = gather_linear_backward(ctx, g[0], /*with_bias=*/true);
    grads.insert(grads.end(), {torch::Tensor(), torch::Tensor()});  // comm, dim
    return grads;
  }
};

struct GatherLinear : torch::autograd::Function<GatherLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_local, const torch::Tensor& weight,
                               Communicator* comm, int64_t dim) {
    return gather_linear_forward(ctx, x_local, weight, torch::Tensor(), comm, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto grads = gather_linear_backward(ctx, g[0], /*with_bias=*/false);
    grads.insert(grads.end(), {torch::Tensor(), torch::Tensor()});  // comm, dim
    return grads;
  }
};

}  // namespace

torch::Tensor sequence_gather_linear(const torch::Tensor& x_local, const torch::Tensor& weight, const torch::Tensor& bias,
                                     Communicator& comm, int64_t dim) {
  dim = dim < 0 ? dim + x_local.dim() : dim;
  return bias.defined() ? GatherLinearBias::apply(x_local, weight, bias, &comm, dim)
                        : GatherLinear::apply(x_local, weight, &comm, dim);
}

}  // namespace trainer::tensor_parallel
