// The region operators of mappings.hpp. The Communicator travels to the backward as its address in
// the node's saved data: the graph holds no tensor of its own for it.
#include "tensor_parallel/mappings.hpp"

#include <stdexcept>
#include <string>

namespace trainer::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void keep_comm(AutogradContext* ctx, Communicator* comm, int64_t dim) {
  ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
  ctx->saved_data["dim"] = dim;
}
Communicator& comm_of(AutogradContext* ctx) { return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt()); }
int64_t dim_of(AutogradContext* ctx) { return ctx->saved_data["dim"].toInt(); }

torch::Tensor summed(const torch::Tensor& x, Communicator& comm) {
  auto y = x.clone(at::MemoryFormat::Contiguous);  // never the caller's tensor: it is reduced in place
  comm.all_reduce(y, ReduceOp::Sum);
  return y;
}

int64_t norm_dim(const torch::Tensor& x, int64_t dim) { return dim < 0 ? dim + x.dim() : dim; }

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm) {
    keep_comm(ctx, comm, 0);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) { return {summed(g[0], comm_of(ctx)), {}}; }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, Communicator* comm) { return summed(x, *comm); }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], {}}; }
};

struct ScatterAlong : torch::autograd::Function<ScatterAlong> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm, int64_t dim) {
    keep_comm(ctx, comm, dim);
    return local_chunk(x, *comm, dim).contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {comm_of(ctx).all_gather(g[0].contiguous(), dim_of(ctx)), {}, {}};
  }
};

struct GatherAlong : torch::autograd::Function<GatherAlong> {
  // partial_grad: each rank's gradient is its share of the sum (the consumer was a column-parallel
  // layer): reduce-scatter it; else every rank holds the whole gradient: keep this rank's chunk
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm, int64_t dim,
                               bool partial_grad) {
    keep_comm(ctx, comm, dim);
    ctx->saved_data["partial"] = partial_grad;
    return comm->all_gather(x.contiguous(), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto& comm = comm_of(ctx);
    const auto dim = dim_of(ctx);
    auto gx = ctx->saved_data["partial"].toBool() ? comm.reduce_scatter(g[0].contiguous(), dim)
                                                  : local_chunk(g[0], comm, dim).contiguous();
    return {gx, {}, {}, {}};
  }
};

struct ReduceScatterAlong : torch::autograd::Function<ReduceScatterAlong> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm, int64_t dim) {
    keep_comm(ctx, comm, dim);
    return comm->reduce_scatter(x.contiguous(), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {comm_of(ctx).all_gather(g[0].contiguous(), dim_of(ctx)), {}, {}};
  }
};

}  // namespace

torch::Tensor local_chunk(const torch::Tensor& x, Communicator& comm, int64_t dim) {
  dim = norm_dim(x, dim);
  const int64_t n = x.size(dim), t = comm.size();
  if (n % t != 0)
    throw std::invalid_argument("tensor parallel: size " + std::to_string(n) + " of dim " + std::to_string(dim) +
                                " does not divide by " + std::to_string(t) + " ranks");
  return x.narrow(dim, comm.rank() * (n / t), n / t);
}

torch::Tensor copy_to_region(const torch::Tensor& x, Communicator& comm) {
  return comm.size() == 1 ? x : CopyToRegion::apply(x, &comm);
}
torch::Tensor reduce_from_region(const torch::Tensor& x, Communicator& comm) {
  return comm.size() == 1 ? x : ReduceFromRegion::apply(x, &comm);
}
torch::Tensor scatter_to_region(const torch::Tensor& x, Communicator& comm) {
  return comm.size() == 1 ? x : ScatterAlong::apply(x, &comm, x.dim() - 1);
}
torch::Tensor gather_from_region(const torch::Tensor& x, Communicator& comm) {
  return comm.size() == 1 ? x : GatherAlong::apply(x, &comm, x.dim() - 1, false);
}
torch::Tensor scatter_to_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim) {
  return comm.size() == 1 ? x : ScatterAlong::apply(x, &comm, norm_dim(x, dim));
}
torch::Tensor gather_from_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim) {
  return comm.size() == 1 ? x : GatherAlong::apply(x, &comm, norm_dim(x, dim), true);
}
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, Communicator& comm, int64_t dim) {
  return comm.size() == 1 ? x : ReduceScatterAlong::apply(x, &comm, norm_dim(x, dim));
}

}  // namespace trainer::tensor_parallel
