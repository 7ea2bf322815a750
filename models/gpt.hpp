// A decoder-only Transformer language model after nanoGPT: pre-LayerNorm blocks, causal
// self-attention, 4x GELU MLP, learned position embeddings, output head tied to the token embedding.
// Parameter names are nanoGPT's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...).
#pragma once

#include "io/safetensors.hpp"
#include "models/model.hpp"
#include "tensor_parallel/layers.hpp"

namespace trainer::models {

// Causal attention over q, k, v (B, nh, T, hs) -> (B, nh, T, hs): `math` = explicit masked softmax
// (two matmuls), else scaled_dot_product_attention (fused kernels). Dropout p on the weights when
// training. The same result up to rounding; the speed differs by device and dtype (see
// model.attention auto in engine/startup/autotune.hpp, through gpt_spec's attention_probe).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool math,
                               double dropout, bool training);
// Dropout of an activation outside the tensor-parallel regions (gpt_parallel.cpp): replicated over tp
// without sequence parallel (the same mask on every tp rank: the default stream, as torch::dropout),
// a rank's own chunk of the sequence with it (its own mask: tensor_parallel::region_dropout).
torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool training, const tensor_parallel::Communicator& comm,
                               bool sequence_parallel);

// LayerNorm whose bias is optional (nanoGPT's `bias: false`); torch::nn::LayerNorm has both or neither.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t n, bool bias);
  torch::Tensor forward(const torch::Tensor& x);  // (..., n) -> (..., n)
  torch::Tensor weight, bias;                     // bias undefined when bias = false
};
TORCH_MODULE(LayerNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  // dist.tensor_parallel (gpt_parallel.cpp): c_attn split by whole heads, c_proj by the same heads'
  // input columns, registered under the same names; c_attn / c_proj are then null.
  void parallelize(tensor_parallel::Communicator& comm, const tensor_parallel::ParallelOptions& opts);
  tensor_parallel::ColumnParallelLinear tp_attn{nullptr};
  tensor_parallel::RowParallelLinear tp_proj{nullptr};

 private:
  torch::Tensor parallel_forward(const torch::Tensor& x);  // (B, T or T/tp, C) -> the same
  tensor_parallel::Communicator* comm_ = nullptr;
  bool sequence_parallel_ = false;
  int64_t n_head_, n_embd_;
  double dropout_;
  bool math_;  // explicit masked softmax instead of scaled_dot_product_attention ("auto" = sdpa here)
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  // dist.tensor_parallel: c_fc column-parallel, c_proj row-parallel (gpt_parallel.cpp)
  void parallelize(tensor_parallel::Communicator& comm, const tensor_parallel::ParallelOptions& opts);
  tensor_parallel::ColumnParallelLinear tp_fc{nullptr};
  tensor_parallel::RowParallelLinear tp_proj{nullptr};

 private:
  double dropout_;
  tensor_parallel::Communicator* comm_ = nullptr;  // set by parallelize
  bool sequence_parallel_ = false;
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

// nanoGPT's `transformer` ModuleDict.
class TransformerImpl : public torch::nn::Module {
 public:
  // `keep(u)` false: unit u's weights are released once drawn (partial_build.hpp)
  TransformerImpl(const config::ModelConfig& cfg, const std::function<bool(size_t)>& keep);
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  tensor_parallel::VocabParallelEmbedding tp_wte{nullptr};  // dist.tensor_parallel: in wte's place (wte null)
  torch::nn::ModuleList h;
  std::vector<Block> blocks;  // the modules of h, typed
  LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Transformer);

class Gpt : public Model, public io::TiedState {
 public:
  // ctx.tp of T > 1 ranks: the full model is built from the seed as at T = 1, then each parallel
  // layer is swapped for its slice (gpt_parallel.cpp): a shard is a bitwise slice of the T = 1 weight.
  explicit Gpt(const config::ModelConfig& cfg, const BuildContext& ctx = {});
  // (B, T) int64 token ids, T <= block_size -> logits (B, T, vocab_size)
  torch::Tensor forward(const torch::Tensor& idx) override;
  InputKind input_kind() const override { return InputKind::Tokens; }
  std::string arch() const override { return "gpt"; }
  // nanoGPT's estimate: (6 N + 12 n_layer T n_embd) per token, N without the position embedding.
  double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const override;
  std::vector<ModelUnit> units() const override;  // embeddings (with the tied lm_head), h.0.., head
  torch::Tensor unit_forward(size_t i, const torch::Tensor& x) override;  // a pipeline stage's piece
  bool gates_units() const override { return true; }
  bool draws_in_training() const override { return cfg_.dropout > 0; }
  // lm_head.weight is transformer.wte.weight (registered once, so optimizers see it once)
  std::vector<std::pair<std::string, std::string>> tied_names() const override {
    return {{"lm_head.weight", "transformer.wte.weight"}};
  }
  Transformer transformer{nullptr};

  // tensor parallel (model.hpp): the layers' specs, plus with sequence parallel the LayerNorms and
  // wpe as partial_grad (each rank's gradient is its sequence chunk's share)
  tensor_parallel::NamedSpecs shard_specs() const override;
  const tensor_parallel::VocabShard* vocab_shard() const override;
  torch::Tensor full_logits(const torch::Tensor& logits) const override;
  tensor_parallel::Communicator& tp_comm() const override { return *tp_; }

 private:
  void parallelize();  // swaps in the tensor-parallel layers (gpt_parallel.cpp)
  torch::Tensor embed(const torch::Tensor& idx);       // (B, T) -> (B, T, C), (B, T/tp, C) with sequence parallel
  torch::Tensor lm_logits(const torch::Tensor& x);     // -> (B, T, V), or (B, T, V_padded/tp) at T > 1
  int64_t global_parameters() const;                   // of the T = 1 model (FLOPs), tied ones once
  int64_t global_num_parameters() const override { return global_parameters(); }  // the vocabulary's padding not
  config::ModelConfig cfg_;
  tensor_parallel::Communicator* tp_ = &tensor_parallel::solo();
  tensor_parallel::ParallelOptions popts_;
};

// dist.tensor_parallel T's rules for GPT (config load): heads and MLP width divide by T, and the
// sequence with dist.sequence_parallel.
void gpt_parallel_rules(const config::RunConfig& c, const config::ErrFn& err);

ModelSpec gpt_spec();

}  // namespace trainer::models
