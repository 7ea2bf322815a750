#include "models/vit.hpp"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <stdexcept>

#include "io/weight_copy.hpp"
#include "models/checkpoint.hpp"
#include "models/partial_build.hpp"
#include "tensor_parallel/region_rng.hpp"

namespace trainer::models {
namespace {

namespace nn = torch::nn;
namespace tpl = tensor_parallel;

constexpr double kLayerNormEps = 1e-6;  // torchvision's partial(nn.LayerNorm, eps=1e-6)

nn::LayerNorm layer_norm(int64_t d) { return nn::LayerNorm(nn::LayerNormOptions({d}).eps(kLayerNormEps)); }

// One addmm for a (B, S, D) input, as PyTorch's nn.Linear (see fused_linear in gpt.cpp).
torch::Tensor vit_linear(const nn::Linear& l, const torch::Tensor& x) { return at::linear(x, l->weight, l->bias); }

// nn.init.trunc_normal_(t, std) with torch's default bounds [-2, 2] (absolute, not in units of std):
// inverse-CDF sampling of the truncated normal, as PyTorch does it.
// A released `t` (a pipeline rank's other stage): the same draws into a scratch tensor (partial_build.hpp).
void trunc_normal_(torch::Tensor t, double std) {
  if (io::is_released(t)) t = torch::empty(t.sizes(), t.options());
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double lo = cdf(-2.0 / std), hi = cdf(2.0 / std);
  t.uniform_(2 * lo - 1, 2 * hi - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2.0, 2.0);
}

std::string vit_shape_text(const torch::Tensor& x) {
  std::string s = "[";
  for (int64_t i = 0; i < x.dim(); ++i) s += (i ? ", " : "") + std::to_string(x.size(i));
  return s + "]";
}

// The rules of ViT's own keys, one text for config load (err names the key) and the constructor.
void vit_key_rules(const config::ModelConfig& m, const config::ErrFn& err) {
  if (m.patch_size >= 1 && m.image_size % m.patch_size != 0)
    err("model.patch_size", std::to_string(m.patch_size) + " does not divide model.image_size " +
                                std::to_string(m.image_size) + " (the image is cut into whole patches)");
  if (m.num_heads >= 1 && m.hidden_dim % m.num_heads != 0)
    err("model.num_heads", "hidden_dim " + std::to_string(m.hidden_dim) + " is not divisible by num_heads " +
                               std::to_string(m.num_heads));
}

void check_vit_config(const config::ModelConfig& c) {
  if (c.in_channels < 1 || c.num_classes < 1 || c.image_size < 1 || c.patch_size < 1 || c.num_layers < 0 ||
      c.num_heads < 1 || c.hidden_dim < 1 || c.mlp_dim < 1)
    throw std::invalid_argument("vit needs in_channels, num_classes, image_size, patch_size, num_heads, hidden_dim, "
                                "mlp_dim >= 1 and num_layers >= 0");
  vit_key_rules(c, [](const std::string& key, const std::string& msg) { throw std::invalid_argument(key + ": " + msg); });
  if (!(c.dropout >= 0.0 && c.dropout < 1.0) || !(c.attention_dropout >= 0.0 && c.attention_dropout < 1.0))
    throw std::invalid_argument("model.dropout and model.attention_dropout must be in [0, 1)");
}

}  // namespace

VitAttentionImpl::VitAttentionImpl(int64_t dim, int64_t heads, double dropout, config::Attention attention)
    : heads_(heads), dropout_(dropout), attention_(attention) {
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
  out_proj = register_module("out_proj", nn::Linear(dim, dim));
  // nn.MultiheadAttention._reset_parameters: xavier-uniform in_proj, zero biases; out_proj keeps
  // nn.Linear's default weight init
  torch::NoGradGuard no_grad;
  nn::init::xavier_uniform_(in_proj_weight);
  nn::init::zeros_(out_proj->bias);
}

// auto: the explicit softmax on a CPU under bf16/fp16 autocast, where SDPA's CPU flash kernel (its
// backward above all) is slower at ViT's short sequences: configs/vit_fmnist.yaml (17 tokens, 4 heads
// of 16) ran 40 bf16 steps 1.5-7x faster with it on the shared 2-core build machine (its flash
// backward was 43 % of a step in a profile); sdpa everywhere else.
bool VitAttentionImpl::use_math(const torch::Tensor& x) const {
  if (attention_ != config::Attention::Auto) return attention_ == config::Attention::Math;
  return x.is_cpu() && at::autocast::is_autocast_enabled(at::kCPU);
}

void VitAttentionImpl::parallelize(tpl::Communicator& comm, const tpl::ParallelOptions& opts) {
  comm_ = &comm;
  popts_ = opts;
  // the rows of this rank's heads in each of the q, k, v blocks, kept under nn.MultiheadAttention's names
  auto qkv = tpl::qkv_column_parallel(in_proj_weight, in_proj_bias, heads_, comm, opts);
  in_proj_weight.set_data(qkv->weight.detach());
  in_proj_bias.set_data(qkv->bias.detach());
  in_proj_specs_.clear();
  for (const auto& [name, spec] : qkv->shard_specs()) in_proj_specs_.emplace_back("in_proj_" + name, spec);
  tp_out = replace_module("out_proj", tpl::RowParallelLinear(out_proj->weight, out_proj->bias, comm, opts));
  out_proj = nullptr;
}

torch::Tensor VitAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t t = comm_ ? comm_->size() : 1;
  const int64_t B = x.size(0), S = x.size(1), D = x.size(2), hs = D / heads_, nh = heads_ / t, Dl = D / t;
  // (B, S, 3D/T): the q, k, v of this rank's heads (all heads at T = 1)
  auto proj = comm_ ? tpl::column_parallel_linear(x, in_proj_weight, in_proj_bias, *comm_, popts_)
                    : at::linear(x, in_proj_weight, in_proj_bias);
  auto qkv = proj.split(Dl, 2);                             // 3 x (B, S, D/T)
  auto q = qkv[0].view({B, S, nh, hs}).transpose(1, 2);     // (B, nh/T, S, hs)
  auto k = qkv[1].view({B, S, nh, hs}).transpose(1, 2);     // (B, nh/T, S, hs)
  auto v = qkv[2].view({B, S, nh, hs}).transpose(1, 2);     // (B, nh/T, S, hs)
  const double p = is_training() ? dropout_ : 0.0;
  torch::Tensor y;
  {  // at T > 1 the local heads' probability dropout draws this tp rank's own stream (region_rng.hpp)
    tpl::RegionRng rng(q.device(), comm_ ? *comm_ : tpl::solo(), p > 0);
    if (use_math(x)) {
      auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));  // (B, nh, S, S)
      y = torch::matmul(torch::dropout(torch::softmax(att, -1), p, is_training()), v);                  // (B, nh, S, hs)
    } else {
      y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p);  // (B, nh, S, hs)
    }
  }
  y = y.transpose(1, 2).contiguous().view({B, S, Dl});  // (B, S, D/T)
  return tp_out ? tp_out(y) : vit_linear(out_proj, y);   // (B, S, D): summed over the tp group
}

EncoderBlockImpl::EncoderBlockImpl(const config::ModelConfig& cfg) : dropout_(cfg.dropout) {
  const int64_t D = cfg.hidden_dim, M = cfg.mlp_dim;
  ln_1 = register_module("ln_1", layer_norm(D));
  self_attention =
      register_module("self_attention", VitAttention(D, cfg.num_heads, cfg.attention_dropout, cfg.attention));
  ln_2 = register_module("ln_2", layer_norm(D));
  // a holder named like torchvision's MLP Sequential: GELU and Dropout (children 1, 2, 4) have no state
  mlp_ = register_module("mlp", std::make_shared<nn::Module>());
  fc1 = mlp_->register_module("0", nn::Linear(D, M));
  fc2 = mlp_->register_module("3", nn::Linear(M, D));
  // torchvision's MLPBlock init: xavier-uniform weights, N(0, 1e-6) biases
  torch::NoGradGuard no_grad;
  for (auto* l : {fc1.get(), fc2.get()}) {
    nn::init::xavier_uniform_(l->weight);
    nn::init::normal_(l->bias, 0.0, 1e-6);
  }
}

void EncoderBlockImpl::parallelize(tpl::Communicator& comm, const tpl::ParallelOptions& opts) {
  comm_ = &comm;
  self_attention->parallelize(comm, opts);
  tp_fc1 = mlp_->replace_module("0", tpl::column_parallel(fc1->weight, fc1->bias, comm, opts));
  tp_fc2 = mlp_->replace_module("3", tpl::RowParallelLinear(fc2->weight, fc2->bias, comm, opts));
  fc1 = nullptr;
  fc2 = nullptr;
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& input) {
  const bool train = is_training();
  auto x = input + torch::dropout(self_attention(ln_1(input)), dropout_, train);  // (B, S, D)
  if (tp_fc1) {  // tensor parallel: the hidden units are this rank's M/T, their dropout its own stream
    auto h = tpl::region_dropout(torch::gelu(tp_fc1(ln_2(x))), dropout_, train, *comm_);  // (B, S, M/T)
    return x + torch::dropout(tp_fc2(h), dropout_, train);  // (B, S, D): the same mask on every tp rank
  }
  auto y = torch::gelu(vit_linear(fc1, ln_2(x)));                                 // (B, S, M), exact (erf) GELU
  y = torch::dropout(y, dropout_, train);
  y = torch::dropout(vit_linear(fc2, y), dropout_, train);  // (B, S, D)
  return x + y;                                             // (B, S, D)
}

VitEncoderImpl::VitEncoderImpl(const config::ModelConfig& cfg, int64_t seq_length,
                               const std::function<bool(size_t)>& keep) {
  pos_embedding = register_parameter("pos_embedding", torch::empty({1, seq_length, cfg.hidden_dim}));
  {
    torch::NoGradGuard no_grad;
    nn::init::normal_(pos_embedding, 0.0, 0.02);  // from BERT, as torchvision
    if (!keep(0)) io::release_weight(pos_embedding);
  }
  auto layers = register_module("layers", std::make_shared<nn::Module>());
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    blocks.push_back(layers->register_module("encoder_layer_" + std::to_string(i), EncoderBlock(cfg)));
    if (!keep(static_cast<size_t>(i) + 1)) release_module(*blocks.back());  // a block's init is its constructor's
  }
  ln = register_module("ln", layer_norm(cfg.hidden_dim));
  if (!keep(static_cast<size_t>(cfg.num_layers) + 1)) release_module(*ln);
}

VisionTransformer::VisionTransformer(const config::ModelConfig& cfg, const BuildContext& ctx) : cfg_(cfg), tp_(ctx.tp) {
  check_vit_config(cfg);
  const int64_t D = cfg.hidden_dim, p = cfg.patch_size, side = cfg.image_size / p;
  // Members are built in torchvision's order (conv_proj, class_token, encoder, heads) so that the
  // same seed draws the same random numbers for the same tensors.
  // A pipeline rank keeps its units' weights alone (ctx.keeps_unit; tensor parallel's slices of a
  // released weight are released too); a released unit's draws are made all the same (partial_build.hpp).
  const std::function<bool(size_t)> keep = ctx.keeps_unit ? ctx.keeps_unit : [](size_t) { return true; };
  const auto head_unit = static_cast<size_t>(cfg.num_layers) + 1;
  conv_proj = register_module("conv_proj", nn::Conv2d(nn::Conv2dOptions(cfg.in_channels, D, p).stride(p)));
  if (!keep(0)) release_module(*conv_proj);
  class_token = register_parameter("class_token", torch::zeros({1, 1, D}));
  if (!keep(0)) io::release_weight(class_token);
  encoder = register_module("encoder", VitEncoder(cfg, side * side + 1, keep));
  auto heads = register_module("heads", std::make_shared<nn::Module>());
  head = heads->register_module("head", nn::Linear(D, cfg.num_classes));
  if (!keep(head_unit)) release_module(*head);
  torch::NoGradGuard no_grad;
  trunc_normal_(conv_proj->weight, std::sqrt(1.0 / static_cast<double>(cfg.in_channels * p * p)));
  init_zeros(conv_proj->bias);
  init_zeros(head->weight);  // torchvision starts from a zero head: every class at the same logit
  init_zeros(head->bias);
  if (tp_->size() > 1) {
    if (ctx.sequence_parallel)
      throw std::invalid_argument("vit: dist.sequence_parallel is not supported (the sequence is the patches and "
                                  "the class token)");
    for (auto& block : encoder->blocks) block->parallelize(*tp_, tpl::ParallelOptions{});
  }
}

tpl::NamedSpecs VisionTransformer::shard_specs() const {
  if (tp_->size() == 1) return {};
  auto out = tpl::layer_shard_specs(*this);  // out_proj, mlp.0, mlp.3
  for (size_t i = 0; i < encoder->blocks.size(); ++i)
    for (const auto& [name, spec] : encoder->blocks[i]->self_attention->in_proj_specs())
      out.emplace_back("encoder.layers.encoder_layer_" + std::to_string(i) + ".self_attention." + name, spec);
  return out;
}

torch::Tensor VisionTransformer::forward(const torch::Tensor& input) {
  const int64_t n = cfg_.image_size;
  if (input.dim() != 4 || input.size(1) != cfg_.in_channels || input.size(2) != n || input.size(3) != n)
    throw std::invalid_argument("vit expects images (B, " + std::to_string(cfg_.in_channels) + ", " +
                                std::to_string(n) + ", " + std::to_string(n) + ") (model.in_channels, model.image_size), got " +
                                vit_shape_text(input));
  torch::Tensor x = input;
  for (size_t i = 0; i <= encoder->blocks.size() + 1; ++i) {  // units(): 0 embeddings, 1..num_layers the blocks, the head
    enter_unit(i);
    x = leave_unit(i, run_unit(i, x));
  }
  return x;  // (B, num_classes)
}

// Unit i alone (forward runs them in order with the gate around each): pipeline stages run ranges of them.
torch::Tensor VisionTransformer::unit_forward(size_t i, const torch::Tensor& x) {
  const size_t n = encoder->blocks.size();
  if (i == 0) {
    const int64_t B = x.size(0);
    auto y = conv_proj(x).flatten(2).transpose(1, 2);                  // (B, N, D), N = (image / patch)^2
    y = torch::cat({class_token.expand({B, -1, -1}), y}, 1);            // (B, N + 1, D)
    return torch::dropout(y + encoder->pos_embedding, cfg_.dropout, is_training());  // (B, N + 1, D)
  }
  if (i <= n) {
    auto& block = encoder->blocks[i - 1];
    if (cfg_.activation_checkpointing)
      return checkpoint(*block, [&block](const torch::Tensor& t) { return block->forward(t); }, x);  // (B, N + 1, D)
    return block->forward(x);  // (B, N + 1, D)
  }
  if (i == n + 1) return vit_linear(head, encoder->ln(x).select(1, 0));  // (B, D): the class token -> (B, num_classes)
  return Model::unit_forward(i, x);
}

double VisionTransformer::train_flops_per_sample(const std::vector<int64_t>& shape) const {
  if (shape.size() != 3) throw std::invalid_argument("vit FLOPs need a (C, H, W) sample shape");
  const auto p = static_cast<double>(cfg_.patch_size), D = static_cast<double>(cfg_.hidden_dim);
  const auto M = static_cast<double>(cfg_.mlp_dim), C = static_cast<double>(shape[0]);
  const double N = std::floor(static_cast<double>(shape[1]) / p) * std::floor(static_cast<double>(shape[2]) / p);
  const double S = N + 1;
  // forward, 2 FLOPs per multiply-add: patch conv; per block q/k/v, scores and mix, out_proj, MLP; head
  const double block = 2 * S * D * 3 * D + 2 * 2 * S * S * D + 2 * S * D * D + 2 * 2 * S * D * M;
  const double forward = 2 * N * C * p * p * D + static_cast<double>(cfg_.num_layers) * block +
                         2 * D * static_cast<double>(cfg_.num_classes);
  return 3.0 * forward;  // backward costs about twice the forward
}

std::vector<ModelUnit> VisionTransformer::units() const {
  std::vector<ModelUnit> u{{"embeddings", {"conv_proj.", "class_token", "encoder.pos_embedding"}, false}};
  for (size_t i = 0; i < encoder->blocks.size(); ++i) {
    const std::string name = "encoder.layers.encoder_layer_" + std::to_string(i);
    u.push_back({name, {name + "."}, true});
  }
  u.push_back({"head", {"encoder.ln.", "heads."}, false});
  return u;
}

ModelSpec vit_spec() {
  ModelSpec s;
  s.rules.name = "vit";
  s.rules.input = config::ArchInput::Image;
  s.rules.fixed_image_size = true;  // the position embedding has one entry per patch
  // pipeline stages: units() from the config, each with its forward FLOPs per image (as train_flops_per_sample)
  s.rules.pipeline_units = [](const config::ModelConfig& m) {
    const auto p = static_cast<double>(m.patch_size), D = static_cast<double>(m.hidden_dim);
    const double N = std::floor(static_cast<double>(m.image_size) / p) * std::floor(static_cast<double>(m.image_size) / p);
    const double S = N + 1, M = static_cast<double>(m.mlp_dim);
    std::vector<config::ArchUnit> u{{"embeddings", 2 * N * static_cast<double>(m.in_channels) * p * p * D + S * D}};
    const double block = 2 * S * D * 3 * D + 2 * 2 * S * S * D + 2 * S * D * D + 2 * 2 * S * D * M;
    for (int64_t i = 0; i < m.num_layers; ++i) u.push_back({"encoder.layers.encoder_layer_" + std::to_string(i), block});
    u.push_back({"head", 2 * D * static_cast<double>(m.num_classes) + 5 * D});
    return u;
  };
  s.rules.keys = {"model.in_channels", "model.num_classes", "model.dropout",   "model.attention",
                  "model.image_size",  "model.patch_size",  "model.num_layers", "model.num_heads",
                  "model.hidden_dim",  "model.mlp_dim",     "model.attention_dropout"};
  s.rules.eval_metrics = {"accuracy", "top5", "loss"};
  s.rules.check = [](const config::RunConfig& c, const config::ErrFn& err) {
    vit_key_rules(c.model, err);
    tp_width_rules(c, c.model.num_heads, "model.num_heads", c.model.mlp_dim, "model.mlp_dim", err);
    if (c.dist.tensor_parallel > 1 && c.dist.sequence_parallel)
      err("dist.sequence_parallel", "ViT has no sequence-parallel layout (its sequence, the patches and the class "
                                    "token, seldom divides by dist.tensor_parallel " +
                                        std::to_string(c.dist.tensor_parallel) + "): leave it off");
  };
  s.build = [](const config::ModelConfig& c, const BuildContext& ctx) -> ModelPtr {
    return std::make_shared<VisionTransformer>(c, ctx);
  };
  s.layout = "torchvision VisionTransformer (torchvision.models.vit_b_16 and friends)";
  return s;
}

}  // namespace trainer::models
