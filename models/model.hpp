// The model interface the engine trains, the ModelSpec each family registers, and the registry that
// builds a model from model.arch.
// Parameter and buffer names equal torchvision's / nanoGPT's, so weights move to and from PyTorch as
// safetensors files (io/safetensors.hpp) without renaming.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/arch.hpp"
#include "config/config.hpp"
#include "models/builtin.hpp"
#include "models/unit_rng.hpp"
#include "tensor_parallel/communicator.hpp"
#include "tensor_parallel/layers.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::models {

enum class InputKind { Image, Tokens };

// A unit of the model for per-block treatment: activation checkpointing recomputes the checkpointed
// units in backward (model.activation_checkpointing), and parameter sharding gathers one unit at a
// time. The units partition the model's parameters: each named parameter (tied ones under their
// first name) starts with exactly one unit's prefixes. In forward order.
struct ModelUnit {
  std::string name;                   // "transformer.h.0", "layer1", "embeddings", "head"
  std::vector<std::string> prefixes;  // parameter-name prefixes it owns, each ending in "." or a full name
  bool checkpointed = false;          // a block that activation checkpointing wraps
  // Parameters of other units this one's forward also reads (tied weights: GPT's head reads
  // transformer.wte.weight, which "embeddings" owns). A pipeline stage holding this unit keeps a copy.
  std::vector<std::string> reads = {};
};

// The index in `units` of the unit owning parameter `name` (a prefix ending in "." that starts it,
// or a prefix equal to it), -1 when none does.
int64_t unit_of(const std::vector<ModelUnit>& units, const std::string& name);

// dist.sharding full (engine/parallel/sharded_parallel.hpp): each unit's parameters are gathered from the ranks
// just before the unit runs and freed after it. The model calls enter(i) before it first uses unit i's
// parameters in a forward and leave(i, y) after it last used them, y being the tensor the rest of the
// forward reads from unit i (leave may attach a gradient hook to it: the re-gather for backward).
// Every forward enters unit 0 first (the gate takes that as a new forward) and enters and leaves
// each unit once. The calls stay outside activation checkpointing's recomputed function (the
// recompute in backward must not free what it uses). No gate: a plain forward.
class UnitGate {
 public:
  virtual ~UnitGate() = default;
  virtual void enter(size_t unit) = 0;
  virtual torch::Tensor leave(size_t unit, torch::Tensor y) = 0;
};

class Model : public torch::nn::Module {
 public:
  // Image: (B, C, H, W) float -> logits (B, num_classes). Tokens: (B, T) int64 -> logits (B, T, vocab).
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  virtual InputKind input_kind() const = 0;
  virtual std::string arch() const = 0;  // "resnet" | "gpt" | "vit"
  // Training FLOPs (forward + backward, ~3x forward) for ONE sample of the given shape: images (C, H, W),
  // tokens (T). For GPT use 6N + 12 * n_layer * T * n_embd per token, times T.
  virtual double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const = 0;
  int64_t num_parameters() const;  // unique parameters (tied weights counted once)
  // The whole model's, as one process holds it: a tensor-parallel rank's slices (shard_specs) counted
  // at their global shape. What the log and the summary report (a tp rank reported its slice).
  virtual int64_t global_num_parameters() const;
  virtual std::vector<ModelUnit> units() const = 0;
  // Pipeline parallel (dist.pipeline_parallel, docs/PIPELINE.md): the forward of units [first, last]
  // alone, no unit gate. `x` is the model's input when first == 0, else what unit first - 1 returned;
  // the result is what unit last + 1 reads, or forward's logits when `last` is the final unit.
  // Chaining ranges that cover every unit runs forward's operations in forward's order, so the
  // result is forward's bit for bit. std::invalid_argument for a range outside units().
  torch::Tensor forward_units(const torch::Tensor& x, int64_t first, int64_t last);
  // train(true) switches every submodule to training mode except those named here, which stay in
  // eval mode (train.freeze_bn: a frozen BatchNorm keeps its running statistics).
  void train(bool on = true) override;
  void keep_in_eval(std::vector<std::shared_ptr<torch::nn::Module>> modules);
  // True when forward calls enter_unit / leave_unit around every unit of units() (all built-in
  // families): dist.sharding full refuses a model that does not.
  virtual bool gates_units() const { return false; }
  // The unit gate forward calls (nullptr: none); the gate's owner clears it before it goes away.
  void set_unit_gate(UnitGate* gate) { gate_ = gate; }
  UnitGate* unit_gate() const { return gate_; }

  // Tensor parallel (dist.tensor_parallel, docs/TENSOR_PARALLEL.md). A model built over a
  // Communicator of T > 1 ranks holds slices of some parameters: shard_specs() names each sharded one
  // (its global name -> where this rank's tensor sits in the T = 1 tensor); a parameter absent from it
  // is replicated (every rank holds all of it). Empty at T = 1 and for families without TP.
  virtual tensor_parallel::NamedSpecs shard_specs() const { return {}; }
  // Non-null: forward returns this rank's vocabulary slice of the logits, (B, T, V_padded / T), to be
  // fed to tensor_parallel::vocab_parallel_cross_entropy over tp_comm(); null: the whole logits.
  virtual const tensor_parallel::VocabShard* vocab_shard() const { return nullptr; }
  // The whole, unpadded logits from what forward returned (evaluation metrics, sampling): gathered
  // over tp_comm() when vocab_shard() is set (a collective of the tp group), else `logits` itself.
  virtual torch::Tensor full_logits(const torch::Tensor& logits) const { return logits; }
  // The tp group's collectives the model was built over (solo() when T = 1).
  virtual tensor_parallel::Communicator& tp_comm() const { return tensor_parallel::solo(); }

  // Dropout streams by unit (unit_rng.hpp): true when a forward in training mode draws random numbers
  // (dropout above 0). The engine then gives each step a key, and each microbatch its index, before the
  // forward; every unit's forward in training mode draws from its own stream. nullopt: torch's default
  // stream, as the probes and evaluation use it.
  virtual bool draws_in_training() const { return false; }

  // Weights computed from the training data rather than drawn (ConvNet's whitening stem): a fresh start
  // (engine/loop/start_point.hpp) hands the first data_init_samples() training images, un-augmented and
  // normalised, (N, C, H, W) float, to init_from_data, before model.init. Not a collective: every rank
  // computes the same from the same images (models/whitening.hpp rounds alike on any CPU). 0: none.
  virtual int64_t data_init_samples() const { return 0; }
  virtual void init_from_data(const torch::Tensor& /*images*/) {}
  void set_step_key(std::optional<uint64_t> key) { streams_.step_key = key; }
  void set_microbatch(int64_t micro) { streams_.micro = micro; }

 protected:
  // units()[i] is about to run / has run (its parameters last read by `y`): see UnitGate
  void enter_unit(size_t i) {
    if (gate_) gate_->enter(i);
  }
  torch::Tensor leave_unit(size_t i, torch::Tensor y) { return gate_ ? gate_->leave(i, std::move(y)) : y; }
  // Unit i's forward (forward_units): a family with pipeline stages overrides it; the default throws
  // (the config refuses dist.pipeline_parallel for a family whose ArchRules have no pipeline_units).
  virtual torch::Tensor unit_forward(size_t i, const torch::Tensor& x);
  // unit_forward(i, x) in unit i's dropout stream when a step key is set and the model trains: forward
  // and forward_units call it for every unit whose forward draws random numbers.
  torch::Tensor run_unit(size_t i, const torch::Tensor& x);

 private:
  UnitStreams streams_;
  std::vector<std::shared_ptr<torch::nn::Module>> kept_in_eval_;
  UnitGate* gate_ = nullptr;
};
using ModelPtr = std::shared_ptr<Model>;

// model.attention auto: what engine/startup/autotune times at start-up, as the family's own attention
// at the run's shapes, so the engine needs no family's header or keys.
struct AttentionProbe {
  int64_t heads = 0, seq = 0, head_size = 0;  // one attention call: q, k, v are (B, heads, seq, head_size)
  // the family's attention over q, k, v in training mode without dropout: math = the explicit masked
  // softmax, else its fused kernel (scaled_dot_product_attention)
  std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool math)> run;
};

// Everything about one model family, in one place. Each family defines its spec next to its model
// (gpt_spec() in gpt.cpp, ...) and register_builtin_models adds it with one line; nothing outside
// models/ names a family. `rules` is what config needs before any model exists (input kind, the
// family's own keys, its eval metrics, its cross-key rules, checked at config load with file:line:col).
// What a family's build gets besides its config: the tensor-parallel group (solo() at T = 1: the
// plain model, bit for bit) and dist.sequence_parallel. The communicator must outlive the model and
// every autograd graph it records (their backward calls it).
struct BuildContext {
  tensor_parallel::Communicator* tp = &tensor_parallel::solo();
  bool sequence_parallel = false;
  // build_model_on calls it on the model built on the CPU, before the model moves to its device: a
  // pipeline rank releases there what its build did not release already (io::release_weight), so the
  // other stages' weights never take the device's memory.
  std::function<void(Model&)> before_move = {};
  // Set: the units (units()) whose weights this process keeps; a family that can (GPT, ViT) releases
  // the others' right after drawing them, so the host never holds the whole model (partial_build.hpp).
  // The kept weights equal a whole build's bit for bit. Unset, or a family that cannot: all built.
  std::function<bool(size_t unit)> keeps_unit = {};
};

struct ModelSpec {
  config::ArchRules rules;
  // the caller seeds torch first; a family without tensor parallel refuses ctx.tp->size() > 1 in its
  // rules (at config load) and ignores ctx
  std::function<ModelPtr(const config::ModelConfig&, const BuildContext&)> build;
  // model.attention auto: set = both kernels timed at start-up on this probe of the run's config
  // (engine/startup/autotune); empty = the model's own fixed rule (or it has no attention choice)
  std::function<AttentionProbe(const config::ModelConfig&)> attention_probe;
  std::string layout;  // whose parameter names the weights use: "torchvision ResNet", "nanoGPT", ...
  // Training loss: cross-entropy over the last dimension of the logits against int64 targets, for
  // every family so far (classes for images, the vocabulary per position for tokens).
};

// dist.tensor_parallel T's rules shared by the Transformer families (at config load, T > 1 only):
// `heads` (the key `heads_key`) and the MLP width (`width`, described as `width_text`) divide by T,
// or err names dist.tensor_parallel and says which does not.
void tp_width_rules(const config::RunConfig& c, int64_t heads, const std::string& heads_key, int64_t width,
                    const std::string& width_text, const config::ErrFn& err);

class ModelRegistry {
 public:
  void add(ModelSpec spec);  // a name added twice is std::invalid_argument
  // Builds the model with its own initialisation (the caller seeds torch first: initialisation draws
  // from torch's generator); model.init is applied apart (models/init_load.hpp), since a resumed run
  // must not read it. Unknown arch: std::invalid_argument listing the known ones.
  ModelPtr create(const config::ModelConfig& cfg, const BuildContext& ctx = {}) const;
  const ModelSpec& spec(const std::string& arch) const;  // unknown arch: std::invalid_argument
  std::vector<std::string> names() const;  // sorted

 private:
  std::map<std::string, ModelSpec> specs_;
};

// Restrides every 4-d parameter and buffer of `m` to channels-last, in place (set_data). A tensor with
// one channel, such as the stem weight of a 1-channel model, is "contiguous" in both layouts, so
// .contiguous(ChannelsLast) would leave it NCHW-strided; a convolution then suggests NCHW for its
// output and the whole network runs mixed layouts with a copy per conv (PyTorch's
// Module.to(memory_format=...) restrides such tensors too). No-op for tensors already restrided.
void to_channels_last(torch::nn::Module& m);
// True when `t` has channels-last strides (not merely an ambiguous layout that is also NCHW).
bool has_channels_last_strides(const torch::Tensor& t);

// Adds every built-in family (resnet, gpt, vit), and registers their ArchRules with the config
// layer the first time it runs (register_builtin_archs).
void register_builtin_models(ModelRegistry& registry);
// register_builtin_archs() (models/builtin.hpp): the built-in families' ArchRules into config.
// The built-in families, built once.
const ModelRegistry& builtin_models();

// `cfg`'s model from the built-in registry (the caller seeds torch first: the model's own
// initialisation draws from it), moved to `device`, and channels-last when model.channels_last asks
// for it and the model takes images. Every user of a model builds it here: the run, the EMA's
// shadow, inference, `trainer check`'s memory probe, train.batch_size auto's probe.
ModelPtr build_model_on(const config::ModelConfig& cfg, const torch::Device& device, const BuildContext& ctx = {});

}  // namespace trainer::models
