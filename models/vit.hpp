// Vision Transformer (Dosovitskiy et al.) as torchvision's VisionTransformer builds it: a patch-size,
// patch-stride convolution cuts the image into tokens, a learned class token is prepended, a learned
// position embedding added, then pre-LayerNorm encoder blocks (eps 1e-6, exact GELU) and a linear head
// on the class token. Parameter names and initialisation are torchvision's (conv_proj.weight,
// encoder.layers.encoder_layer_0.self_attention.in_proj_weight, heads.head.weight, ...), so a
// VisionTransformer (vit_b_16 with the defaults) loads the exported file with strict=True. torchvision
// hard-wires 3 input channels; model.in_channels changes only conv_proj's input width.
// dist.tensor_parallel T > 1 (docs/TENSOR_PARALLEL.md): the full model is built from the seed, then each
// block keeps its slices under the same names: in_proj_weight / in_proj_bias the q, k, v rows of its
// num_heads / T heads (column parallel), out_proj the same heads' input columns (row parallel), mlp.0
// column parallel, mlp.3 row parallel. conv_proj, class_token, pos_embedding, the LayerNorms and
// heads.head stay replicated: the logits are whole and the loss is the plain cross entropy.
#pragma once

#include "models/model.hpp"

namespace trainer::models {

// nn.MultiheadAttention's parameters under its names (in_proj_weight/in_proj_bias hold q, k, v of all
// heads, out_proj), without masks: every token attends to every token. `attention` is model.attention:
// sdpa (scaled_dot_product_attention), math (explicit softmax, two matmuls) or auto (see use_math).
class VitAttentionImpl : public torch::nn::Module {
 public:
  VitAttentionImpl(int64_t dim, int64_t heads, double dropout, config::Attention attention);
  torch::Tensor forward(const torch::Tensor& x);  // (B, S, D) -> (B, S, D)
  torch::Tensor in_proj_weight, in_proj_bias;     // (3D, D), (3D); (3D/T, D), (3D/T) at T > 1
  torch::nn::Linear out_proj{nullptr};
  // tensor parallel: in_proj_* become this rank's heads' rows (qkv_column_parallel's, adopted under
  // nn.MultiheadAttention's names), out_proj a RowParallelLinear under its name (out_proj is then null)
  void parallelize(tensor_parallel::Communicator& comm, const tensor_parallel::ParallelOptions& opts);
  tensor_parallel::RowParallelLinear tp_out{nullptr};
  // in_proj_weight's and in_proj_bias's specs (names relative to this module); empty at T = 1
  const tensor_parallel::NamedSpecs& in_proj_specs() const { return in_proj_specs_; }

 private:
  bool use_math(const torch::Tensor& x) const;
  tensor_parallel::Communicator* comm_ = nullptr;  // set by parallelize
  tensor_parallel::ParallelOptions popts_;
  tensor_parallel::NamedSpecs in_proj_specs_;
  int64_t heads_;
  double dropout_;
  config::Attention attention_;
};
TORCH_MODULE(VitAttention);

// torchvision's EncoderBlock: x + attn(ln_1(x)), then + mlp(ln_2(.)); mlp is the Sequential
// (Linear, GELU, Dropout, Linear, Dropout), so its Linears are children "0" and "3".
class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, S, D) -> (B, S, D)
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  VitAttention self_attention{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};  // mlp.0, mlp.3
  // tensor parallel: the attention's parallelize, mlp.0 column parallel and mlp.3 row parallel under
  // the same names (fc1 / fc2 are then null)
  void parallelize(tensor_parallel::Communicator& comm, const tensor_parallel::ParallelOptions& opts);
  tensor_parallel::ColumnParallelLinear tp_fc1{nullptr};
  tensor_parallel::RowParallelLinear tp_fc2{nullptr};

 private:
  double dropout_;
  std::shared_ptr<torch::nn::Module> mlp_;  // the holder of "0" and "3"
  tensor_parallel::Communicator* comm_ = nullptr;  // set by parallelize
};
TORCH_MODULE(EncoderBlock);

// torchvision's Encoder: pos_embedding, layers.encoder_layer_{i}, ln.
class VitEncoderImpl : public torch::nn::Module {
 public:
  // `keep(u)` false: unit u's weights (units(): 0 embeddings, 1..L blocks, L + 1 head) released once
  // drawn (partial_build.hpp)
  VitEncoderImpl(const config::ModelConfig& cfg, int64_t seq_length, const std::function<bool(size_t)>& keep);
  torch::Tensor pos_embedding;  // (1, S, D), S = patches + 1
  std::vector<EncoderBlock> blocks;
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(VitEncoder);

class VisionTransformer : public Model {
 public:
  // ctx.tp of T > 1 ranks: the full model from the seed, then each block's slices (see the top);
  // ctx.sequence_parallel at T > 1 is std::invalid_argument (refused at config load)
  explicit VisionTransformer(const config::ModelConfig& cfg, const BuildContext& ctx = {});
  // (B, in_channels, image_size, image_size) -> logits (B, num_classes)
  torch::Tensor forward(const torch::Tensor& x) override;
  InputKind input_kind() const override { return InputKind::Image; }
  std::string arch() const override { return "vit"; }
  double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const override;
  std::vector<ModelUnit> units() const override;  // embeddings, encoder_layer_0.., head
  torch::Tensor unit_forward(size_t i, const torch::Tensor& x) override;  // a pipeline stage's piece
  bool gates_units() const override { return true; }
  bool draws_in_training() const override { return cfg_.dropout > 0 || cfg_.attention_dropout > 0; }

  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token;  // (1, 1, D)
  VitEncoder encoder{nullptr};
  torch::nn::Linear head{nullptr};  // heads.head

  // tensor parallel (model.hpp): the blocks' sliced parameters; the logits stay whole (no vocab shard)
  tensor_parallel::NamedSpecs shard_specs() const override;
  tensor_parallel::Communicator& tp_comm() const override { return *tp_; }

 private:
  config::ModelConfig cfg_;
  tensor_parallel::Communicator* tp_ = &tensor_parallel::solo();
};

ModelSpec vit_spec();

}  // namespace trainer::models
