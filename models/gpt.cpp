#include "models/gpt.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "models/checkpoint.hpp"
#include "models/partial_build.hpp"
#include "tensor_parallel/layers.hpp"
#include "tensor_parallel/mappings.hpp"

namespace trainer::models {
namespace {

namespace nn = torch::nn;

constexpr double kInitStd = 0.02;  // nanoGPT / GPT-2

nn::Linear linear(int64_t in, int64_t out, bool bias) { return nn::Linear(nn::LinearOptions(in, out).bias(bias)); }

// at::linear rather than nn::Linear's forward: LibTorch's functional linear runs matmul + add_ on a
// (B, T, C) input (and MmBackward + a bias reduction in backward), while at::linear flattens it into
// one addmm as PyTorch's nn.Linear does: ~10 % of a GPT-mini step on CPU.
torch::Tensor fused_linear(const nn::Linear& l, const torch::Tensor& x) { return at::linear(x, l->weight, l->bias); }

// The rules of GPT's own keys, one text for config load (err names the key) and the constructor.
void gpt_key_rules(const config::ModelConfig& c, const config::ErrFn& err) {
  if (c.n_head >= 1 && c.n_embd % c.n_head != 0)
    err("model.n_head", "n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " + std::to_string(c.n_head));
}

void check_config(const config::ModelConfig& c) {
  if (c.vocab_size < 1 || c.block_size < 1 || c.n_layer < 0 || c.n_head < 1 || c.n_embd < 1)
    throw std::invalid_argument("gpt needs vocab_size, block_size, n_head, n_embd >= 1 and n_layer >= 0");
  gpt_key_rules(c, [](const std::string& key, const std::string& msg) { throw std::invalid_argument(key + ": " + msg); });
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) throw std::invalid_argument("model.dropout must be in [0, 1)");
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool math,
                               double dropout, bool training) {
  const double p = training ? dropout : 0.0;
  if (!math) return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p, /*is_causal=*/true);
  const int64_t T = q.size(-2), hs = q.size(-1);
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));  // (B, nh, T, T)
  auto future = torch::ones({T, T}, q.options().dtype(torch::kBool)).triu(1);  // true above the diagonal
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity());
  att = torch::dropout(torch::softmax(att, -1), p, training);
  return torch::matmul(att, v);  // (B, nh, T, hs)
}

LayerNormImpl::LayerNormImpl(int64_t n, bool with_bias) {
  weight = register_parameter("weight", torch::ones({n}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({n}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const config::ModelConfig& cfg)
    : n_head_(cfg.n_head), n_embd_(cfg.n_embd), dropout_(cfg.dropout), math_(cfg.attention == config::Attention::Math) {
  c_attn = register_module("c_attn", linear(n_embd_, 3 * n_embd_, cfg.bias));  // q, k, v for all heads at once
  c_proj = register_module("c_proj", linear(n_embd_, n_embd_, cfg.bias));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  if (tp_attn) return parallel_forward(x);
  const int64_t B = x.size(0), T = x.size(1), C = n_embd_, hs = C / n_head_;
  auto qkv = fused_linear(c_attn, x).split(C, 2);                       // 3 x (B, T, C)
  auto q = qkv[0].view({B, T, n_head_, hs}).transpose(1, 2);  // (B, nh, T, hs)
  auto k = qkv[1].view({B, T, n_head_, hs}).transpose(1, 2);  // (B, nh, T, hs)
  auto v = qkv[2].view({B, T, n_head_, hs}).transpose(1, 2);  // (B, nh, T, hs)
  auto y = causal_attention(q, k, v, math_, dropout_, is_training());  // (B, nh, T, hs)
  y = y.transpose(1, 2).contiguous().view({B, T, C});                  // (B, T, C)
  return torch::dropout(fused_linear(c_proj, y), dropout_, is_training());  // (B, T, C)
}

MlpImpl::MlpImpl(const config::ModelConfig& cfg) : dropout_(cfg.dropout) {
  c_fc = register_module("c_fc", linear(cfg.n_embd, 4 * cfg.n_embd, cfg.bias));
  c_proj = register_module("c_proj", linear(4 * cfg.n_embd, cfg.n_embd, cfg.bias));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (tp_fc)  // (B, T, C), (B, T/tp, C) with sequence parallel
    return residual_dropout(tp_proj(torch::gelu(tp_fc(x))), dropout_, is_training(), *comm_, sequence_parallel_);
  auto h = torch::gelu(fused_linear(c_fc, x));                            // (B, T, 4C), exact (erf) GELU as nn.GELU()
  return torch::dropout(fused_linear(c_proj, h), dropout_, is_training());  // (B, T, C)
}

BlockImpl::BlockImpl(const config::ModelConfig& cfg) {
  ln_1 = register_module("ln_1", LayerNorm(cfg.n_embd, cfg.bias));
  attn = register_module("attn", CausalSelfAttention(cfg));
  ln_2 = register_module("ln_2", LayerNorm(cfg.n_embd, cfg.bias));
  mlp = register_module("mlp", Mlp(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto y = x + attn(ln_1(x));  // (B, T, C)
  return y + mlp(ln_2(y));     // (B, T, C)
}

TransformerImpl::TransformerImpl(const config::ModelConfig& cfg, const std::function<bool(size_t)>& keep) {
  // units (Gpt::units()): 0 embeddings, 1..n_layer the blocks, n_layer + 1 the head, which reads wte
  const auto head = static_cast<size_t>(cfg.n_layer) + 1;
  wte = register_module("wte", nn::Embedding(cfg.vocab_size, cfg.n_embd));
  if (!keep(0) && !keep(head)) release_module(*wte);
  wpe = register_module("wpe", nn::Embedding(cfg.block_size, cfg.n_embd));
  if (!keep(0)) release_module(*wpe);
  h = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    blocks.push_back(Block(cfg));
    if (!keep(static_cast<size_t>(i) + 1)) release_module(*blocks.back());  // its construction drew its values
    h->push_back(blocks.back());
  }
  ln_f = register_module("ln_f", LayerNorm(cfg.n_embd, cfg.bias));
  if (!keep(head)) release_module(*ln_f);
}

Gpt::Gpt(const config::ModelConfig& cfg, const BuildContext& ctx) : cfg_(cfg), tp_(ctx.tp) {
  popts_.sequence_parallel = ctx.sequence_parallel && tp_->size() > 1;
  check_config(cfg);
  // a pipeline rank keeps its units' weights alone (tensor parallel's slices of a released weight are
  // released too: tensor_parallel::take_ranges)
  const std::function<bool(size_t)> all = [](size_t) { return true; };
  transformer = register_module("transformer", Transformer(cfg, ctx.keeps_unit ? ctx.keeps_unit : all));
  // nanoGPT's init: N(0, 0.02) for Linear and Embedding weights, zero biases, and the projections
  // that write into the residual stream scaled by 1/sqrt(2 n_layer) (GPT-2's residual scaling). A
  // released weight's draws are made all the same (init_normal), so the kept ones are a whole build's.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* l = m->as<nn::Linear>()) {
      init_normal(l->weight, 0.0, kInitStd);
      if (l->bias.defined()) init_zeros(l->bias);
    } else if (auto* e = m->as<nn::Embedding>()) {
      init_normal(e->weight, 0.0, kInitStd);
    }
  }
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(cfg.n_layer, 1)));
  for (auto& p : named_parameters(true))
    if (p.key().size() >= 13 && p.key().ends_with("c_proj.weight")) init_normal(p.value(), 0.0, proj_std);
  if (tp_->size() > 1) parallelize();
}

torch::Tensor Gpt::forward(const torch::Tensor& idx) {
  if (idx.dim() != 2 || !(idx.scalar_type() == torch::kLong || idx.scalar_type() == torch::kInt))
    throw std::invalid_argument("gpt expects int64 token ids of shape (B, T), got a " + std::to_string(idx.dim()) +
                                "-d " + std::string(c10::toString(idx.scalar_type())) + " tensor");
  const int64_t T = idx.size(1);
  if (T > cfg_.block_size)
    throw std::invalid_argument("sequence length " + std::to_string(T) + " exceeds model.block_size " +
                                std::to_string(cfg_.block_size));
  if (idx.device().is_cpu() && idx.numel() > 0) {  // on CUDA this check would cost a sync per step
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    if (lo < 0 || hi >= cfg_.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside model.vocab_size " +
                                  std::to_string(cfg_.vocab_size));
  }
  // units (see units()): 0 embeddings, 1..n_layer the blocks, n_layer + 1 the head (ln_f). The tied
  // wte is used again by lm_head, so unit 0 is left only after the logits.
  enter_unit(0);
  auto x = run_unit(0, idx);  // (B, T, C)
  for (size_t i = 1; i <= transformer->blocks.size(); ++i) {
    enter_unit(i);
    x = leave_unit(i, run_unit(i, x));  // (B, T, C)
  }
  const size_t head = transformer->blocks.size() + 1;
  enter_unit(head);
  x = leave_unit(head, transformer->ln_f(x));                          // (B, T, C)
  return leave_unit(0, lm_logits(x));  // (B, T, V): lm_head tied to wte
}

// Unit i alone (forward above is these in order, with the gate around them; the head split in two so
// that the tied wte's gate leaves after the logits): 0 the embeddings and their dropout, 1..n_layer
// the blocks, n_layer + 1 ln_f and the logits.
torch::Tensor Gpt::unit_forward(size_t i, const torch::Tensor& x) {
  const size_t n = transformer->blocks.size();
  if (i == 0)
    return residual_dropout(embed(x), cfg_.dropout, is_training(), *tp_, popts_.sequence_parallel);  // (B, T, C)
  if (i <= n) {
    auto& block = transformer->blocks[i - 1];
    if (cfg_.activation_checkpointing)
      return checkpoint(*block, [&block](const torch::Tensor& t) { return block->forward(t); }, x);  // (B, T, C)
    return block->forward(x);  // (B, T, C)
  }
  if (i == n + 1) return lm_logits(transformer->ln_f(x));  // (B, T, V): lm_head tied to wte
  return Model::unit_forward(i, x);
}

torch::Tensor Gpt::embed(const torch::Tensor& idx) {
  const int64_t T = idx.size(1);
  auto pos = torch::arange(T, idx.options().dtype(torch::kLong));  // (T)
  if (!transformer->tp_wte) return transformer->wte(idx) + transformer->wpe(pos);  // (B, T, C)
  // the sum over the tp group, or with sequence parallel this rank's chunk of the sequence
  if (popts_.sequence_parallel) pos = tensor_parallel::local_chunk(pos, *tp_, 0);  // (T/tp)
  return transformer->tp_wte(idx) + transformer->wpe(pos);  // (B, T or T/tp, C)
}

torch::Tensor Gpt::lm_logits(const torch::Tensor& x) {
  if (!transformer->tp_wte) return torch::linear(x, transformer->wte->weight);  // (B, T, V)
  return tensor_parallel::parallel_lm_logits(x, transformer->tp_wte->weight, *tp_, popts_);  // (B, T, V_padded/tp)
}

double Gpt::train_flops_per_sample(const std::vector<int64_t>& shape) const {
  if (shape.size() != 1) throw std::invalid_argument("gpt FLOPs need a (T) sample shape");
  const auto T = static_cast<double>(shape[0]);
  const auto N = static_cast<double>(global_parameters() - transformer->wpe->weight.numel());  // the whole model's
  const double per_token = 6.0 * N + 12.0 * static_cast<double>(cfg_.n_layer * cfg_.n_embd) * T;
  return per_token * T;
}

std::vector<ModelUnit> Gpt::units() const {
  std::vector<ModelUnit> u{{"embeddings", {"transformer.wte.", "transformer.wpe."}, false}};
  for (size_t i = 0; i < transformer->blocks.size(); ++i) {
    const std::string name = "transformer.h." + std::to_string(i);
    u.push_back({name, {name + "."}, true});
  }
  u.push_back({"head", {"transformer.ln_f."}, false, {"transformer.wte.weight"}});  // lm_head is wte (tied): in "embeddings"
  return u;
}

ModelSpec gpt_spec() {
  ModelSpec s;
  s.rules.name = "gpt";
  s.rules.input = config::ArchInput::Tokens;
  s.rules.keys = {"model.vocab_size", "model.block_size", "model.n_layer", "model.n_head",
                  "model.n_embd",     "model.dropout",    "model.bias",    "model.attention"};
  s.rules.eval_metrics = {"loss", "ppl", "bpb"};
  // pipeline stages: units() from the config, each with its forward FLOPs per sample of block_size tokens
  s.rules.pipeline_units = [](const config::ModelConfig& m) {
    const auto T = static_cast<double>(m.block_size), C = static_cast<double>(m.n_embd);
    std::vector<config::ArchUnit> u{{"embeddings", 2 * T * C}};
    for (int64_t i = 0; i < m.n_layer; ++i) u.push_back({"transformer.h." + std::to_string(i), T * 24 * C * C + 4 * T * T * C});
    u.push_back({"head", T * (2 * static_cast<double>(m.vocab_size) * C + 5 * C)});  // ln_f and the tied lm_head
    return u;
  };
  s.rules.check = [](const config::RunConfig& c, const config::ErrFn& err) {
    gpt_key_rules(c.model, err);
    if (c.data.format == config::DataFormat::Text && c.model.vocab_size < 256)
      err("model.vocab_size", "byte-level text needs vocab_size >= 256");
    gpt_parallel_rules(c, err);
  };
  s.build = [](const config::ModelConfig& c, const BuildContext& ctx) -> ModelPtr { return std::make_shared<Gpt>(c, ctx); };
  s.attention_probe = [](const config::ModelConfig& c) {
    AttentionProbe p;
    p.heads = c.n_head;
    p.seq = c.block_size;
    p.head_size = c.n_embd / c.n_head;
    p.run = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool math) {
      return causal_attention(q, k, v, math, 0.0, /*training=*/true);
    };
    return p;
  };
  s.layout = "nanoGPT (model.GPT)";
  return s;
}

}  // namespace trainer::models
