// RunConfig: the plain structs every component reads. Defaults live in the declarations.
// No component but src/config sees YAML; each takes its own struct. The key names here are a
// public contract (docs/CONFIG.md documents each one; tests/unit/config checks that it does).
// Adding a key: add the member here and one line in schema.cpp (describe_fields), then document it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/enums.hpp"

namespace trainer::config {

struct RunSection {
  std::string name = "run";
  std::string out_dir = "runs";  // run directory is <out_dir>/<name>/
  int64_t seed = 0;
  bool deterministic = false;
  bool operator==(const RunSection&) const = default;
};

// model.init: the weights a run starts from (models/init_load.hpp applies it).
struct InitConfig {
  std::string from;               // .safetensors, or a torch.save'd state_dict .pt / .pth ("" = random init)
  bool strict = true;             // missing and unexpected names are errors (false: warnings)
  std::vector<std::string> skip;  // regexes (config::NamePattern, search) of file names not to load
  // prefix mapping applied to the file's names, first matching prefix wins ("module." -> "")
  std::vector<std::pair<std::string, std::string>> rename;
  bool reinit_mismatched = false;  // a tensor whose shape differs keeps the model's own initialisation
  bool operator==(const InitConfig&) const = default;
};

// One entry of optim.groups: parameters whose name matches `match` (first rule wins) get these
// values instead of optim.lr / optim.weight_decay.
struct ParamGroupRule {
  std::string match;
  std::optional<double> lr, weight_decay;
  bool operator==(const ParamGroupRule&) const = default;
};

struct ModelConfig {
  std::string arch = "resnet";  // resnet | gpt | vit (the model registry knows the list)
  // resnet: depth 18/34/50/101/152 is the torchvision layout, 6n+2 (8, 20, 32, 44, 56, 110) the CIFAR one
  int64_t depth = 18;
  std::string stem = "imagenet";  // imagenet | cifar (3x3 stride-1 first conv, no max-pool)
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  double width = 1.0;  // channel multiplier on 64 (torchvision layout) or 16 (CIFAR layout)
  int64_t whiten = 0;  // convnet: 0 = a learned 3x3 stem; k = a frozen k x k whitening stem (models/whitening.hpp)
  bool zero_init_residual = false;
  bool channels_last = false;
  // gpt (nanoGPT's names and defaults, except a byte-level vocabulary)
  int64_t vocab_size = 256;
  int64_t block_size = 256;
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  double dropout = 0.0;
  bool bias = true;
  Attention attention = Attention::Auto;  // auto | sdpa | math (explicit masked softmax); auto: engine/startup/autotune.hpp
  // vit (torchvision VisionTransformer's names; the defaults are vit_b_16's); dropout is shared with gpt,
  // in_channels and num_classes with resnet
  int64_t image_size = 224;  // the position embedding fixes it: images must be image_size x image_size
  int64_t patch_size = 16;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t hidden_dim = 768;
  int64_t mlp_dim = 3072;
  double attention_dropout = 0.0;
  // both
  bool activation_checkpointing = false;
  std::string init_from;  // the old spelling of init.from (kept for old configs; both set is an error)
  InitConfig init;
  bool operator==(const ModelConfig&) const = default;
};

// The file the weights start from: model.init.from, or the old key model.init_from.
inline const std::string& init_file(const ModelConfig& m) { return m.init.from.empty() ? m.init_from : m.init.from; }

struct AugmentConfig {
  int64_t crop_padding = 0;   // random crop of the original size after zero padding by this much
  bool hflip = false;         // random horizontal flip with p = 0.5
  bool hflip_alternate = false;  // with hflip: each image's epoch-0 coin, then the opposite of the epoch before
  double rotation_degrees = 0.0;  // random rotation in [-d, d]
  // torchvision's RandomResizedCrop(size, scale, ratio): a box of scale x the area and an aspect
  // ratio log-uniform in `ratio`, resized to the output size (10 attempts, then a centre crop)
  bool random_resized_crop = false;
  std::vector<double> rrc_scale = {0.08, 1.0};
  std::vector<double> rrc_ratio = {0.75, 4.0 / 3.0};
  // torchvision's ColorJitter(brightness, contrast, saturation, hue): factors uniform in
  // [max(0, 1 - v), 1 + v] (hue: [-v, v], v <= 0.5), applied in a random order; 0 = off
  double brightness = 0.0, contrast = 0.0, saturation = 0.0, hue = 0.0;
  bool operator==(const AugmentConfig&) const = default;
};

struct NormalizeConfig {
  NormalizeMode mode = NormalizeMode::MeanStd;  // mean_std | minmax | none
  std::vector<double> mean;       // per channel; empty = computed from the training split
  std::vector<double> std;
  bool operator==(const NormalizeConfig&) const = default;
};

struct SyntheticConfig {
  int64_t num_samples = 1024;
  int64_t val_samples = 256;
  int64_t image_size = 32;  // images: channels come from model.in_channels, classes from model.num_classes
  bool operator==(const SyntheticConfig&) const = default;
};

// Mixup / CutMix of training batches (engine/step/batch_mix.hpp), timm's Mixup: one lambda per batch.
struct MixupConfig {
  double alpha = 0.0;        // mixup: lambda ~ Beta(alpha, alpha) (0 = off)
  double prob = 1.0;         // probability that a batch is mixed at all (mixup or cutmix)
  double switch_prob = 0.5;  // both alphas set: probability of cutmix instead of mixup
  bool operator==(const MixupConfig&) const = default;
};

struct CutmixConfig {
  double alpha = 0.0;  // cutmix: lambda ~ Beta(alpha, alpha), box area 1 - lambda (0 = off)
  bool operator==(const CutmixConfig&) const = default;
};

struct DataConfig {
  DataFormat format = DataFormat::Idx;  // idx | cifar | image_folder | text | tokens | synthetic
  std::string path;            // file, folder or glob, relative to the config file's folder
  std::string val_path;        // separate validation data ("" = split or the format's own test files)
  double val_fraction = 0.1;   // text: contiguous tail used for validation when val_path is empty
  int64_t image_size = 0;      // image_folder / resize: output side in pixels (0 = keep)
  int64_t val_resize = 0;      // validation / predict: shorter side before the centred image_size crop (0 = image_size)
  int64_t workers = -1;        // auto (-1): device::choose_workers; 0 = load on the training thread
  int64_t prefetch = 4;        // finished batches waiting ahead of the step (besides one per worker)
  std::string on_bad_sample = "error";  // error | skip
  OnChange on_change = OnChange::Error;  // a data file changed under the run: checkpoint + exit 65, or reopen it
  int64_t limit_samples = 0;   // use only the first N training samples (0 = all); for smoke tests
  double bytes_per_token = 0;  // tokens: mean bytes of text per token, for bits per byte (0 = unknown: no bpb)
  AugmentConfig augment;
  MixupConfig mixup;
  CutmixConfig cutmix;
  NormalizeConfig normalize;
  SyntheticConfig synthetic;
  bool operator==(const DataConfig&) const = default;
};

struct EarlyStoppingConfig {
  std::string metric = "";  // "" = off; else an eval metric: loss | accuracy | top5 | bpb | ppl
  StopMode mode = StopMode::Auto;  // auto | min | max (auto: max for accuracies, min otherwise)
  int64_t patience = 5;       // evaluations without improvement before stopping
  double min_delta = 0.0;
  bool operator==(const EarlyStoppingConfig&) const = default;
};

// Exponential moving average of the weights (engine/step/ema.hpp).
struct EmaConfig {
  double decay = 0.0;   // shadow = decay * shadow + (1 - decay) * weights (0 = off)
  int64_t every = 1;    // optimizer steps between updates
  bool eval = false;    // also evaluate the EMA weights at every evaluation
  bool warmup = false;  // the decay of update n is min(decay, 1 - (1 + n)^(-2/3)) (timm's ModelEmaV3 warm-up)
  bool lookahead = false;  // airbench's lookahead: the weights become the shadow at each update, decay x (t/T)^3
  bool operator==(const EmaConfig&) const = default;
};

struct TrainConfig {
  int64_t batch_size = 32;         // per process, per micro-step; 0 = auto (largest that fits memory)
  int64_t grad_accum = 1;
  int64_t global_batch_size = 0;   // 0 = batch_size * grad_accum * world_size
  int64_t max_steps = 0;           // optimizer steps; exactly one of max_steps / epochs drives the run
  double epochs = 0.0;
  Precision precision = Precision::Auto;  // fp32 | bf16 | fp16 (CUDA only) | auto (engine/startup/precision_auto.hpp)
  bool tf32 = true;                // CUDA: TF32 tensor cores for fp32 matmuls and convolutions
  DeviceKind device = DeviceKind::Auto;  // auto | cpu | cuda
  int64_t threads = 0;             // intra-op threads (0 = cores / local ranks)
  double memory_budget_gb = 0.0;   // batch_size auto: bytes per process (0 = 80 % host / 90 % GPU)
  bool reuse_host_memory = true;   // glibc malloc keeps freed blocks (see device::keep_host_memory_for_reuse)
  bool cuda_graphs = false;        // CUDA: capture the whole step once after warm-up, replay it (engine/step/graphed_step.hpp)
  double grad_clip = 0.0;          // max global grad norm (0 = off)
  int64_t log_every = 10;
  int64_t eval_every = 0;          // steps between evaluations (0 = only at the end)
  int64_t eval_steps = 0;          // batches per evaluation (0 = the whole validation split)
  std::string eval_tta = "none";  // none | flip: image models also scored on mirrored inputs, logits averaged
  NonFinite nonfinite = NonFinite::Abort;  // skip | rollback | abort: a non-finite loss or gradient norm
  int64_t max_nonfinite = 5;       // consecutive skipped / rolled-back steps before the run aborts
  double label_smoothing = 0.0;    // training loss only: torch's cross_entropy(label_smoothing=)
  EmaConfig ema;
  EarlyStoppingConfig early_stopping;
  std::vector<std::string> freeze;  // regexes of parameter names that take no gradient
  bool freeze_bn = false;           // BatchNorm modules whose parameters are all frozen stay in eval mode
  bool operator==(const TrainConfig&) const = default;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::Sgd;  // sgd | adamw
  double lr = 0.1;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  bool decay_norm_and_bias = false;  // false: biases, norms and embeddings get no weight decay
  bool fused = true;                 // ATen's fused multi-tensor kernels (false: LibTorch's per-parameter loop)
  std::vector<ParamGroupRule> groups;  // per-parameter lr / weight decay by name (first match wins)
  double layer_decay = 1.0;          // the model's blocks (units): lr x layer_decay^(depth - block) (1 = off)
  bool operator==(const OptimConfig&) const = default;
};

struct ScheduleConfig {
  ScheduleKind name = ScheduleKind::Constant;  // constant | step | linear | cosine
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;      // floor as a fraction of optim.lr
  int64_t step_size = 1000;       // step: decay every step_size steps
  double gamma = 0.1;             // step: multiply by gamma at each decay
  bool operator==(const ScheduleConfig&) const = default;
};

// dist.pipeline (docs/PIPELINE.md): how the stages of dist.pipeline_parallel P > 1 run.
struct PipelineConfig {
  int64_t microbatches = 0;  // M: each batch is split into M microbatches (0 = auto)
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  int64_t virtual_stages = 1;       // v: stages per rank (interleaved_1f1b)
  std::vector<std::string> stages;  // [] = auto (balanced by cost), else P x v unit ranges "A-B" / "A"
  bool operator==(const PipelineConfig&) const = default;
};

struct DistConfig {
  Backend backend = Backend::Auto;  // auto | gloo | nccl
  double timeout_s = 300.0;
  double bucket_mb = 25.0;
  Sharding sharding = Sharding::None;  // none | optimizer | gradients | full (dist.sharding)
  std::string store = "";  // "" = TCPStore at MASTER_ADDR:MASTER_PORT; file:///shared/path for a FileStore
  std::string interface = "";  // network interface of the collectives ("" = GLOO_SOCKET_IFNAME, else auto)
  Recovery recovery = Recovery::Restart;  // restart | in_process (dist.recovery)
  int64_t tensor_parallel = 1;    // T: ranks that share each layer (dist.tensor_parallel); dp = world / T
  bool sequence_parallel = false;  // LayerNorm / dropout regions on 1/T of the sequence (dist.sequence_parallel)
  int64_t pipeline_parallel = 1;  // P: stages of the model's depth, the mesh's outermost dimension
  PipelineConfig pipeline;
  bool operator==(const DistConfig&) const = default;
};

struct CheckpointConfig {
  int64_t every_steps = 0;  // 0 = only at the end
  int64_t keep_last = 3;
  std::string dir = "";     // "" = <run dir>/checkpoints
  int64_t keep_every = 0;   // also keep every checkpoint whose step is a multiple of this (0 = off)
  OnError on_error = OnError::Warn;  // warn | abort: what a failed save does to the run
  int64_t max_failures = 3;       // on_error warn: consecutive failed saves tolerated before the run stops
  bool save_best = true;          // an evaluation that improves the best metric saves and marks `best`
  bool requeue = false;           // SLURM: `scontrol requeue` this job after a stop signal's checkpoint
  double verify_tolerance = 0.01; // resume: relative drift allowed against the logged losses (0 = off)
  bool operator==(const CheckpointConfig&) const = default;
};

struct LogConfig {
  bool jsonl = true;
  std::string progress = "auto";  // auto | on | off (auto: a bar when stdout is a terminal)
  bool tensorboard = false;
  double peak_tflops = 0.0;       // for MFU; 0 = use the device's known peak, if any
  std::string level = "info";     // trace | debug | info | warn | error
  bool operator==(const LogConfig&) const = default;
};

struct ProfileConfig {
  int64_t steps = 0;          // optimizer steps to record with the PyTorch profiler (0 = off)
  int64_t start_step = 10;    // steps completed before recording starts (skips the warm-up)
  bool record_shapes = false; // input shapes in the trace (costs more while recording)
  bool operator==(const ProfileConfig&) const = default;
};

struct RunConfig {
  RunSection run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ScheduleConfig schedule;
  DistConfig dist;
  CheckpointConfig checkpoint;
  LogConfig log;
  ProfileConfig profile;
  bool operator==(const RunConfig&) const = default;
};

}  // namespace trainer::config
