// GPT's tensor-parallel layout (dist.tensor_parallel, docs/TENSOR_PARALLEL.md), Megatron-style: the
// full model is built from the seed as at T = 1, then each parallel layer is replaced by its slice of
// the full weight under the same name, so parameter names stay nanoGPT's and a shard is a bitwise
// slice of the T = 1 weight:
//   attn.c_attn  column-parallel by whole heads (q, k, v rows of rank r's heads)
//   attn.c_proj  row-parallel (the input columns of the same heads)
//   mlp.c_fc     column-parallel, mlp.c_proj row-parallel
//   wte          vocab-parallel (padded to a multiple of T); the tied lm_head its parallel_lm_logits
// wpe, the LayerNorms and the row layers' biases stay replicated.
#include <map>
#include <string>

#include "models/gpt.hpp"
#include "tensor_parallel/cross_entropy.hpp"
#include "tensor_parallel/region_rng.hpp"

namespace trainer::models {
namespace tpl = tensor_parallel;

torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool training, const tpl::Communicator& comm,
                               bool sequence_parallel) {
  if (sequence_parallel && comm.size() > 1) return tpl::region_dropout(x, p, training, comm);
  return torch::dropout(x, p, training);
}

void CausalSelfAttentionImpl::parallelize(tpl::Communicator& comm, const tpl::ParallelOptions& opts) {
  comm_ = &comm;
  sequence_parallel_ = opts.sequence_parallel;
  tp_attn = replace_module("c_attn", tpl::qkv_column_parallel(c_attn->weight, c_attn->bias, n_head_, comm, opts));
  tp_proj = replace_module("c_proj", tpl::RowParallelLinear(c_proj->weight, c_proj->bias, comm, opts));
  c_attn = nullptr;
  c_proj = nullptr;
}

// The local heads' attention: n_head / tp heads, the same code as at T = 1 on C / tp channels.
torch::Tensor CausalSelfAttentionImpl::parallel_forward(const torch::Tensor& x) {
  auto qkv = tp_attn(x);  // (B, T, 3C/tp): the whole sequence (gathered with sequence parallel)
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const int64_t nh = n_head_ / comm_->size(), hs = n_embd_ / n_head_;
  auto parts = qkv.split(C, 2);                               // 3 x (B, T, C/tp)
  auto q = parts[0].view({B, T, nh, hs}).transpose(1, 2);     // (B, nh/tp, T, hs)
  auto k = parts[1].view({B, T, nh, hs}).transpose(1, 2);     // (B, nh/tp, T, hs)
  auto v = parts[2].view({B, T, nh, hs}).transpose(1, 2);     // (B, nh/tp, T, hs)
  torch::Tensor y;
  {  // the local heads' attention-probability dropout: this tp rank's own stream (region_rng.hpp)
    tpl::RegionRng rng(q.device(), *comm_, is_training() && dropout_ > 0);
    y = causal_attention(q, k, v, math_, dropout_, is_training());  // (B, nh/tp, T, hs)
  }
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // (B, T, C/tp)
  // (B, T, C), (B, T/tp, C) with sequence parallel
  return residual_dropout(tp_proj(y), dropout_, is_training(), *comm_, sequence_parallel_);
}

void MlpImpl::parallelize(tpl::Communicator& comm, const tpl::ParallelOptions& opts) {
  comm_ = &comm;
  sequence_parallel_ = opts.sequence_parallel;
  tp_fc = replace_module("c_fc", tpl::column_parallel(c_fc->weight, c_fc->bias, comm, opts));
  tp_proj = replace_module("c_proj", tpl::RowParallelLinear(c_proj->weight, c_proj->bias, comm, opts));
  c_fc = nullptr;
  c_proj = nullptr;
}

void Gpt::parallelize() {
  torch::NoGradGuard no_grad;
  auto& t = *transformer;
  t.tp_wte = t.replace_module("wte", tpl::VocabParallelEmbedding(t.wte->weight, *tp_, popts_));
  t.wte = nullptr;
  for (auto& b : t.blocks) {
    b->attn->parallelize(*tp_, popts_);
    b->mlp->parallelize(*tp_, popts_);
  }
}

tpl::NamedSpecs Gpt::shard_specs() const {
  if (tp_->size() == 1) return {};
  tpl::NamedSpecs out = tpl::layer_shard_specs(*this);
  if (!popts_.sequence_parallel) return out;
  // on its rank's chunk of the sequence only: each rank's gradient is a share of the sum
  for (const auto& p : named_parameters(/*recurse=*/true)) {
    const bool norm = p.key().find(".ln_") != std::string::npos;
    if (norm || p.key() == "transformer.wpe.weight")
      out.emplace_back(p.key(), tpl::spec_of(p.value(), -1, {}, /*partial_grad=*/true));
  }
  return out;
}

const tpl::VocabShard* Gpt::vocab_shard() const {
  return transformer->tp_wte ? &transformer->tp_wte->shard() : nullptr;
}

torch::Tensor Gpt::full_logits(const torch::Tensor& logits) const {
  if (!transformer->tp_wte) return logits;
  return tpl::gather_vocab_logits(logits, transformer->tp_wte->shard(), *tp_);  // (B, T, V)
}

int64_t Gpt::global_parameters() const {
  if (tp_->size() == 1) return num_parameters();
  int64_t n = 0;
  std::map<std::string, tpl::ShardSpec> specs;
  for (const auto& [name, spec] : shard_specs()) specs[name] = spec;
  for (const auto& p : named_parameters(/*recurse=*/true)) {
    auto it = specs.find(p.key());
    if (it == specs.end() || it->second.replicated()) {
      n += p.value().numel();
      continue;
    }
    auto shape = it->second.global_shape;
    if (p.key() == "transformer.wte.weight") shape[0] = cfg_.vocab_size;  // the padding is no parameter
    int64_t g = 1;
    for (auto d : shape) g *= d;
    n += g;
  }
  return n;
}

void gpt_parallel_rules(const config::RunConfig& c, const config::ErrFn& err) {
  const int64_t t = c.dist.tensor_parallel;
  if (t <= 1) return;
  const std::string ts = std::to_string(t);
  tp_width_rules(c, c.model.n_head, "model.n_head", 4 * c.model.n_embd, "4 x model.n_embd", err);
  if (c.dist.sequence_parallel && c.model.block_size % t != 0)
    err("dist.sequence_parallel", "model.block_size " + std::to_string(c.model.block_size) + " does not divide by "
                                      "dist.tensor_parallel " + ts + " (each rank holds 1/T of the sequence)");
}

}  // namespace trainer::models
