// The tensor-parallel layers of layers.hpp.
#include "tensor_parallel/layers.hpp"

#include <stdexcept>

#include "tensor_parallel/mappings.hpp"
#include "tensor_parallel/sequence_linear.hpp"

namespace trainer::tensor_parallel {
namespace {

// A parameter holding an exact copy of `t` (its own storage; `t` is not tracked); a released `t` stays
// released (take_ranges).
torch::Tensor copied(const torch::Tensor& t) {
  if (released_form(t)) return torch::zeros({1}, t.options()).expand(t.sizes());
  return t.detach().clone().contiguous();
}

torch::Tensor enter_region(const torch::Tensor& x, Communicator& comm, const ParallelOptions& o) {
  return o.sequence_parallel ? gather_from_sequence(x, comm, o.seq_dim) : copy_to_region(x, comm);
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                                   std::vector<Range> rows, Communicator& comm, ParallelOptions opts,
                                                   bool gather_output)
    : comm_(&comm), opts_(opts), gather_output_(gather_output) {
  if (full_weight.dim() != 2) throw std::invalid_argument("ColumnParallelLinear: the weight must be [out, in]");
  if (gather_output && opts.sequence_parallel)
    throw std::invalid_argument("ColumnParallelLinear: gather_output with sequence parallel (the next layer is row-parallel)");
  weight = register_parameter("weight", copied(take_ranges(full_weight, 0, rows)));
  wspec_ = spec_of(full_weight, 0, rows);
  if (full_bias.defined()) {
    bias = register_parameter("bias", copied(take_ranges(full_bias, 0, rows)));
    bspec_ = spec_of(full_bias, 0, rows);
  }
}

torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     Communicator& comm, const ParallelOptions& opts) {
  if (opts.sequence_parallel && comm.size() > 1)  // keeps only the sequence chunk for backward
    return sequence_gather_linear(x, weight, bias, comm, opts.seq_dim);
  return torch::nn::functional::linear(enter_region(x, comm, opts), weight, bias);
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  auto y = column_parallel_linear(x, weight, bias, *comm_, opts_);
  return gather_output_ ? gather_from_region(y, *comm_) : y;
}

NamedSpecs ColumnParallelLinearImpl::shard_specs() const {
  NamedSpecs out{{"weight", wspec_}};
  if (bias.defined()) out.push_back({"bias", bspec_});
  return out;
}

ColumnParallelLinear column_parallel(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                     Communicator& comm, ParallelOptions opts, bool gather_output) {
  return ColumnParallelLinear(full_weight, full_bias, std::vector<Range>{chunk_range(full_weight.size(0), comm.rank(), comm.size())},
                              comm, opts, gather_output);
}

ColumnParallelLinear qkv_column_parallel(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                         int64_t n_head, Communicator& comm, ParallelOptions opts) {
  const int64_t c = full_weight.size(1);
  if (full_weight.size(0) != 3 * c) throw std::invalid_argument("qkv_column_parallel: the weight must be [3C, C]");
  return ColumnParallelLinear(full_weight, full_bias, qkv_head_ranges(c, n_head, comm.rank(), comm.size()), comm, opts);
}

RowParallelLinearImpl::RowParallelLinearImpl(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                             Communicator& comm, ParallelOptions opts, bool input_is_parallel)
    : comm_(&comm), opts_(opts), input_is_parallel_(input_is_parallel) {
  if (full_weight.dim() != 2) throw std::invalid_argument("RowParallelLinear: the weight must be [out, in]");
  if (!input_is_parallel && opts.sequence_parallel)
    throw std::invalid_argument("RowParallelLinear: sequence parallel needs an input that is already parallel");
  const std::vector<Range> cols{chunk_range(full_weight.size(1), comm.rank(), comm.size())};
  weight = register_parameter("weight", copied(take_ranges(full_weight, 1, cols)));
  wspec_ = spec_of(full_weight, 1, cols);
  if (full_bias.defined()) {
    bias = register_parameter("bias", copied(full_bias));
    // added after the reduce-scatter, to this rank's part of the sequence only
    bspec_ = spec_of(full_bias, -1, {}, opts.sequence_parallel && comm.size() > 1);
  }
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  auto in = input_is_parallel_ ? x : scatter_to_region(x, *comm_);
  auto partial = torch::nn::functional::linear(in, weight);
  auto y = opts_.sequence_parallel ? reduce_scatter_to_sequence(partial, *comm_, opts_.seq_dim)
                                   : reduce_from_region(partial, *comm_);
  return bias.defined() ? y + bias : y;
}

NamedSpecs RowParallelLinearImpl::shard_specs() const {
  NamedSpecs out{{"weight", wspec_}};
  if (bias.defined()) out.push_back({"bias", bspec_});
  return out;
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const torch::Tensor& full_weight, Communicator& comm,
                                                       ParallelOptions opts)
    : comm_(&comm), opts_(opts), shard_(vocab_shard(full_weight.size(0), comm.rank(), comm.size())) {
  if (full_weight.dim() != 2) throw std::invalid_argument("VocabParallelEmbedding: the weight must be [vocab, C]");
  if (released_form(full_weight)) {  // a pipeline rank's other stage: released, as its source
    weight = register_parameter("weight", torch::zeros({1}, full_weight.options()).expand({shard_.local(), full_weight.size(1)}));
    return;
  }
  auto local = torch::zeros({shard_.local(), full_weight.size(1)}, full_weight.options());
  if (shard_.real() > 0) local.narrow(0, 0, shard_.real()).copy_(full_weight.narrow(0, shard_.start, shard_.real()).detach());
  weight = register_parameter("weight", local);
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  torch::Tensor y;
  if (comm_->size() == 1) {
    y = torch::embedding(weight, ids);
  } else {
    const auto outside = (ids < shard_.start) | (ids >= shard_.end);
    const auto local_ids = (ids - shard_.start).masked_fill(outside, 0);
    y = torch::embedding(weight, local_ids).masked_fill(outside.unsqueeze(-1), 0.0);
  }
  return opts_.sequence_parallel ? reduce_scatter_to_sequence(y, *comm_, opts_.seq_dim) : reduce_from_region(y, *comm_);
}

NamedSpecs VocabParallelEmbeddingImpl::shard_specs() const {
  ShardSpec s;
  s.dim = 0;
  s.global_shape = {shard_.padded, weight.size(1)};
  s.ranges = {{shard_.start, shard_.end}};
  s.real = shard_.vocab;
  return {{"weight", s}};
}

NamedSpecs layer_shard_specs(const torch::nn::Module& root) {
  NamedSpecs out;
  auto add = [&out](const std::string& prefix, const NamedSpecs& specs) {
    for (const auto& [name, spec] : specs) out.emplace_back(prefix + "." + name, spec);
  };
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    const auto& m = item.value();
    if (const auto* c = m->as<ColumnParallelLinearImpl>()) add(item.key(), c->shard_specs());
    else if (const auto* r = m->as<RowParallelLinearImpl>()) add(item.key(), r->shard_specs());
    else if (const auto* e = m->as<VocabParallelEmbeddingImpl>()) add(item.key(), e->shard_specs());
  }
  return out;
}

torch::Tensor parallel_lm_logits(const torch::Tensor& x, const torch::Tensor& local_weight, Communicator& comm,
                                 ParallelOptions opts) {
  if (opts.sequence_parallel && comm.size() > 1)  // keeps only the sequence chunk for backward
    return sequence_gather_linear(x, local_weight, torch::Tensor(), comm, opts.seq_dim);
  return torch::matmul(enter_region(x, comm, opts), local_weight.t());
}

}  // namespace trainer::tensor_parallel
