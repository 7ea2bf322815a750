#include "config/schema.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace trainer::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Builder {
  std::vector<FieldInfo> out;
  std::string prefix;

  FieldInfo& add(const std::string& name, FieldType type, const std::string& doc) {
    FieldInfo f;
    f.key = prefix + "." + name;
    f.type = type;
    f.doc = doc;
    out.push_back(std::move(f));
    return out.back();
  }
  void b(const std::string& n, bool& v, const std::string& doc) { add(n, FieldType::Bool, doc).ref = &v; }
  void i(const std::string& n, int64_t& v, double lo, double hi, const std::string& doc) {
    auto& f = add(n, FieldType::Int, doc);
    f.ref = &v;
    f.min = lo;
    f.max = hi;
  }
  void f(const std::string& n, double& v, double lo, double hi, const std::string& doc) {
    auto& fi = add(n, FieldType::Float, doc);
    fi.ref = &v;
    fi.min = lo;
    fi.max = hi;
  }
  void s(const std::string& n, std::string& v, const std::string& doc) { add(n, FieldType::String, doc).ref = &v; }
  void p(const std::string& n, std::string& v, const std::string& doc) { add(n, FieldType::Path, doc).ref = &v; }
  void c(const std::string& n, std::string& v, std::vector<std::string> choices, const std::string& doc) {
    auto& f = add(n, FieldType::Choice, doc);
    f.ref = &v;
    f.choices = std::move(choices);
  }
  // a Choice key whose member is an enum of config/enums.hpp; the names are choices_of<E>()
  template <class E>
  void e(const std::string& n, E& v, const std::string& doc) {
    auto& f = add(n, FieldType::Choice, doc);
    f.choices = choices_of<E>();
    f.ref = EnumRef{[&v] { return static_cast<size_t>(v); }, [&v](size_t i) { v = static_cast<E>(i); }};
  }
  void l(const std::string& n, std::vector<double>& v, const std::string& doc) {
    add(n, FieldType::FloatList, doc).ref = &v;
  }
  void regexes(const std::string& n, std::vector<std::string>& v, const std::string& doc) {
    auto& f = add(n, FieldType::StringList, doc);
    f.ref = &v;
    f.regex = true;
  }
  // a list of strings that also takes the word `auto`, stored as the empty list
  void strings_or_auto(const std::string& n, std::vector<std::string>& v, const std::string& doc) {
    auto& f = add(n, FieldType::StringList, doc);
    f.ref = &v;
    f.accepts_auto = true;
  }
  void prefixes(const std::string& n, PrefixPairs& v, const std::string& doc) {
    add(n, FieldType::PrefixMap, doc).ref = &v;
  }
  void groups(const std::string& n, std::vector<ParamGroupRule>& v, const std::string& doc) {
    add(n, FieldType::GroupList, doc).ref = &v;
  }
  // the key before is a model family's own: the families that read it say so in their ArchRules
  void family() { out.back().family_key = true; }
};

}  // namespace

bool applies_to_arch(const FieldInfo& f, const std::string& arch) {
  return !f.family_key || std::find(f.applies_to.begin(), f.applies_to.end(), arch) != f.applies_to.end();
}

std::string applies_text(const FieldInfo& f) {
  std::string s;
  for (const auto& a : f.applies_to) s += (s.empty() ? "" : ", ") + a;
  return s;
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"run",      "model", "data",       "train", "optim",
                                                 "schedule", "dist",  "checkpoint", "log",
                                                 "profile"};
  return names;
}

std::vector<FieldInfo> describe_fields(RunConfig& c) {
  Builder k;
  k.prefix = "run";
  k.s("name", c.run.name, "Run name; the run directory is <out_dir>/<name>/.");
  k.p("out_dir", c.run.out_dir, "Folder holding run directories (written in a config file: relative to that file's "
                                "folder; the default: the working directory's runs/).");
  k.i("seed", c.run.seed, 0, 9.2e18, "Seed of every random stream (init, shuffling, augmentation, dropout).");
  k.b("deterministic", c.run.deterministic, "Deterministic algorithms only; bitwise-reproducible on CPU.");

  k.prefix = "model";
  auto& m = c.model;
  std::string families;
  for (const auto& a : arch_names()) families += (families.empty() ? "" : ", ") + a;
  k.s("arch", m.arch, "Model family: one of the registered model specs (" + families + ").");
  k.i("depth", m.depth, 8, 1000, "ResNet depth: 18/34/50/101/152 (torchvision layout) or 6n+2 (CIFAR layout).");
  k.family();
  k.c("stem", m.stem, {"imagenet", "cifar"}, "ResNet first layer: imagenet (7x7/2 conv + max-pool) or cifar (3x3/1, no pool).");
  k.family();
  k.i("in_channels", m.in_channels, 1, 64, "Input image channels.");
  k.family();
  k.i("num_classes", m.num_classes, 2, 1e6, "Output classes.");
  k.family();
  k.f("width", m.width, 0.125, 16, "Channel multiplier: ResNet base 64 (torchvision layout) or 16 (CIFAR layout); convnet widths 24-32-64-128.");
  k.family();
  k.i("whiten", m.whiten, 0, 8,
      "ConvNet first layer: 0 = a learned 3x3 conv (24 x width channels); k = airbench's whitening layer, a frozen "
      "k x k conv without padding whose 2 C k^2 filters are the +/- eigenvectors of the covariance of k x k patches "
      "of the first 5000 training images (un-augmented), scaled by 1/sqrt(eigenvalue + 5e-4), computed at a fresh "
      "start and saved with the weights (buffer `whiten`).");
  k.family();
  k.b("zero_init_residual", m.zero_init_residual, "Zero the last BatchNorm weight of each residual branch.");
  k.family();
  k.b("channels_last", m.channels_last, "Keep activations and weights in NHWC (channels_last) memory format.");
  k.family();
  k.i("vocab_size", m.vocab_size, 2, 1e7, "GPT vocabulary size (256 for byte-level text).");
  k.family();
  k.i("block_size", m.block_size, 1, 1e6, "GPT context length in tokens.");
  k.family();
  k.i("n_layer", m.n_layer, 1, 1000, "GPT Transformer blocks.");
  k.family();
  k.i("n_head", m.n_head, 1, 1000, "GPT attention heads (must divide n_embd).");
  k.family();
  k.i("n_embd", m.n_embd, 1, 1e6, "GPT embedding width.");
  k.family();
  k.f("dropout", m.dropout, 0, 0.99,
      "Dropout probability: GPT embeddings, attention, residuals; ViT embeddings, attention output, MLP (torchvision's dropout).");
  k.family();
  k.b("bias", m.bias, "GPT: biases in Linear and LayerNorm layers.");
  k.family();
  k.e("attention", m.attention,
      "Attention: sdpa (fused kernels), math (explicit softmax), or auto (GPT: measured at start, see docs/PERFORMANCE.md; "
      "ViT: math on a CPU under bf16/fp16 autocast, where SDPA's CPU kernel is slow at short sequences, else sdpa).");
  k.family();
  k.i("image_size", m.image_size, 1, 8192, "ViT input image side in pixels (fixed: the position embedding has one entry per patch).");
  k.family();
  k.i("patch_size", m.patch_size, 1, 8192, "ViT patch side in pixels (must divide image_size).");
  k.family();
  k.i("num_layers", m.num_layers, 1, 1000, "ViT encoder blocks.");
  k.family();
  k.i("num_heads", m.num_heads, 1, 1000, "ViT attention heads (must divide hidden_dim).");
  k.family();
  k.i("hidden_dim", m.hidden_dim, 1, 1e6, "ViT token width.");
  k.family();
  k.i("mlp_dim", m.mlp_dim, 1, 1e7, "ViT MLP hidden width (vit_b_16: 4 x hidden_dim).");
  k.family();
  k.f("attention_dropout", m.attention_dropout, 0, 0.99, "ViT dropout on the attention weights.");
  k.family();
  k.b("activation_checkpointing", m.activation_checkpointing,
      "Recompute activations in backward (per ResNet stage, ConvNet block, GPT block or ViT encoder block) to save memory.");
  k.p("init_from", m.init_from, "The old spelling of model.init.from, still read (setting both is an error).");
  k.prefix = "model.init";
  k.p("from", m.init.from,
      "Initial weights: a .safetensors file or a torch.save'd state_dict (.pt / .pth, read without Python); \"\" = "
      "random init. Not read when the run resumes from a checkpoint. The report: <run dir>/init_report.json.");
  k.b("strict", m.init.strict, "Missing and unexpected names are errors (false: warnings; the rest loads).");
  k.regexes("skip", m.init.skip,
            "Regexes (RE2 syntax, searched anywhere in the name: anchor with ^...$ for the whole name) of the file's names "
            "(before renaming) not to load; the model keeps its own initialisation there.");
  k.prefixes("rename", m.init.rename,
             "Prefix mapping of the file's names, e.g. {\"module.\": \"\"} for a DDP checkpoint; the first "
             "matching prefix wins.");
  k.b("reinit_mismatched", m.init.reinit_mismatched,
      "A file tensor whose shape differs from the model's (a new head) is not loaded: the model's own "
      "initialisation stays (false: an error).");

  k.prefix = "data";
  auto& d = c.data;
  k.e("format", d.format, "Dataset reader.");
  k.p("path", d.path, "Training data: file, folder or glob (relative to the config file's folder).");
  k.p("val_path", d.val_path, "Validation data (\"\" = the format's test files or a split of path).");
  k.f("val_fraction", d.val_fraction, 0, 0.9,
      "text and tokens: fraction of the data (its tail) used for validation; tokens without data.val_path or "
      "val_*.bin shards only.");
  k.i("image_size", d.image_size, 0, 8192, "Resize images to this side in pixels (0 = keep).");
  k.i("val_resize", d.val_resize, 0, 8192,
      "Validation and predict: the shorter side is resized to this, then the centred data.image_size square is "
      "cropped, as torchvision's Resize(val_resize) + CenterCrop(image_size) (256 for ImageNet's 224; 0 = "
      "data.image_size: no margin). Needs data.image_size, and at least it. Training with "
      "random_resized_crop off resizes to data.image_size.");
  k.i("workers", d.workers, 0, 256,
      "Loader worker threads (0 = load on the training thread); auto = on CUDA every hardware thread of this "
      "rank's share but one (at least 2, at most 16: the host's job there is the input pipeline), on a CPU 2.");
  k.out.back().accepts_auto = true;
  k.out.back().auto_value = -1;
  k.i("prefetch", d.prefetch, 1, 1024, "Finished batches waiting ahead of the step, besides the one each worker is building (at most data.workers + data.prefetch batches in memory).");
  k.c("on_bad_sample", d.on_bad_sample, {"error", "skip"}, "A sample that fails to decode (and image_folder files of an image type trainer does not decode: .bmp, .ppm, .pgm, .tif, .tiff, .webp): stop, or skip and count it (a batch left with no sample takes the first good one after it in the epoch's order).");
  k.e("on_change", d.on_change,
      "A data file truncated, deleted, replaced or modified while the run uses it (checked at each epoch boundary "
      "and when a read fails; several ranks agree at the step-boundary vote): error saves a checkpoint and exits "
      "65 on every rank, naming the file; reload reopens the data on every rank together, logs it and goes on from "
      "the start of the next epoch (see docs/RELIABILITY.md).");
  k.i("limit_samples", d.limit_samples, 0, 9.2e18, "Use only the first N training samples (0 = all).");
  k.f("bytes_per_token", d.bytes_per_token, 0, 1e6,
      "tokens: mean bytes of text per token (e.g. about 4.2 for GPT-2 BPE on English web text), so that eval reports "
      "bits per byte = loss / ln 2 / bytes_per_token (0 = unknown: no bpb; format text is byte-level and reports it).");
  k.prefix = "data.augment";
  k.i("crop_padding", d.augment.crop_padding, 0, 1024, "Random crop after zero padding by this many pixels (0 = off).");
  k.b("hflip", d.augment.hflip, "Random horizontal flip (p = 0.5).");
  k.b("hflip_alternate", d.augment.hflip_alternate,
      "With hflip: airbench's alternating flip. An image is flipped in the first epoch by its own coin, then in each "
      "epoch the opposite of the epoch before, so every two epochs show it both ways (still p = 0.5 per epoch).");
  k.f("rotation_degrees", d.augment.rotation_degrees, 0, 180, "Random rotation in [-d, d] degrees (0 = off).");
  k.b("random_resized_crop", d.augment.random_resized_crop,
      "torchvision's RandomResizedCrop: a random box (area rrc_scale x the image's, aspect ratio log-uniform in "
      "rrc_ratio; 10 attempts, then a centre crop) resized to the output size; image_folder crops the decoded image.");
  k.l("rrc_scale", d.augment.rrc_scale, "RandomResizedCrop scale [min, max]: the box's area as a fraction of the image's.");
  k.l("rrc_ratio", d.augment.rrc_ratio, "RandomResizedCrop ratio [min, max]: the box's width / height.");
  k.f("brightness", d.augment.brightness, 0, 1e3,
      "ColorJitter brightness: factor uniform in [max(0, 1 - v), 1 + v] (0 = off); the jitters run in a random order.");
  k.f("contrast", d.augment.contrast, 0, 1e3, "ColorJitter contrast: factor uniform in [max(0, 1 - v), 1 + v] (0 = off).");
  k.f("saturation", d.augment.saturation, 0, 1e3,
      "ColorJitter saturation: factor uniform in [max(0, 1 - v), 1 + v] (0 = off; RGB only).");
  k.f("hue", d.augment.hue, 0, 0.5, "ColorJitter hue: shift uniform in [-v, v] of the hue circle (0 = off; RGB only).");
  k.prefix = "data.mixup";
  k.f("alpha", d.mixup.alpha, 0, 1e3,
      "Mixup: one lambda ~ Beta(alpha, alpha) per batch, input = lambda x + (1 - lambda) x.flip(0), soft targets mixed "
      "the same way (0 = off; image models only).");
  k.f("prob", d.mixup.prob, 0, 1, "Probability that a training batch is mixed (mixup or cutmix).");
  k.f("switch_prob", d.mixup.switch_prob, 0, 1, "With both data.mixup.alpha and data.cutmix.alpha: probability of cutmix.");
  k.prefix = "data.cutmix";
  k.f("alpha", d.cutmix.alpha, 0, 1e3,
      "CutMix: lambda ~ Beta(alpha, alpha) per batch, a box of area 1 - lambda pasted from x.flip(0); the targets mix "
      "with the box's true area (0 = off; image models only).");
  k.prefix = "data.normalize";
  k.e("mode", d.normalize.mode, "Input normalisation.");
  k.l("mean", d.normalize.mean, "Per-channel mean for mean_std ([] = computed from the training split: image_folder "
                                 "from 512 images spread over it, synthetic from at most 2^28 bytes of samples).");
  k.l("std", d.normalize.std, "Per-channel std for mean_std ([] = computed from the training split: image_folder "
                                 "from 512 images spread over it, synthetic from at most 2^28 bytes of samples).");
  k.prefix = "data.synthetic";
  k.i("num_samples", d.synthetic.num_samples, 1, 1e9, "synthetic: training samples.");
  k.i("val_samples", d.synthetic.val_samples, 0, 1e9, "synthetic: validation samples.");
  k.i("image_size", d.synthetic.image_size, 1, 8192, "synthetic: image side in pixels.");

  k.prefix = "train";
  auto& t = c.train;
  k.i("batch_size", t.batch_size, 1, 1e7,
      "Samples per micro-batch, per process; auto = the largest that fits memory (needs global_batch_size).");
  k.out.back().accepts_auto = true;
  k.i("grad_accum", t.grad_accum, 1, 1e5, "Micro-batches per optimizer step.");
  k.i("global_batch_size", t.global_batch_size, 0, 1e9,
      "Samples per optimizer step over all processes (0 = batch_size x grad_accum x world size); sets grad_accum.");
  k.i("max_steps", t.max_steps, 0, 9.2e18, "Optimizer steps to run (0 = use epochs).");
  k.f("epochs", t.epochs, 0, 1e6, "Passes over the training split (0 = use max_steps); fractions allowed. An epoch is floor(samples / train.global_batch_size) whole steps, in every layout (the permutation's tail short of a global batch is dropped, a different tail each epoch); a fraction of epochs rounds up to a whole step.");
  k.e("precision", t.precision,
      "Compute precision (weights stay fp32): fp32, bf16 (autocast), fp16 (autocast + dynamic loss scaling, CUDA only) "
      "or auto: on CUDA bf16 at compute capability >= 8.0, fp16 on 7.x, fp32 below; on a CPU bf16 only where it has "
      "native bf16 (avx512_bf16 or amx_bf16 in /proc/cpuinfo) and a probe of the model's forward + backward at the "
      "run's shapes is at least 10 % faster in bf16, else fp32. The choice and its reason: the log, autotune.json "
      "(a resumed run keeps it) and `trainer check`.");
  k.b("tf32", t.tf32, "CUDA: allow TF32 tensor cores in fp32 matmuls and convolutions (ignored on CPU).");
  k.e("device", t.device, "Where to train (auto: CUDA when available).");
  k.i("threads", t.threads, 0, 4096, "Intra-op threads (0 = the usable cores, those of the CPU affinity mask, / local ranks). On a host other processes keep busy, 1: a team of threads waits at each operation for the one kept off a core (a run warns at start when the load average exceeds the cores).");
  k.b("reuse_host_memory", t.reuse_host_memory,
      "Keep freed host memory for reuse (malloc mmap threshold 32 MiB, no trimming) instead of re-faulting it every step.");
  k.b("cuda_graphs", t.cuda_graphs,
      "CUDA: capture the whole step into a CUDA graph after 3 warm-up steps and replay it (static shapes); "
      "falls back to eager steps with a logged reason where it cannot (CPU, several ranks, fp16, ...).");
  k.f("memory_budget_gb", t.memory_budget_gb, 0, 1e6,
      "batch_size auto: memory per process in GB (0 = CPU: 80 % of available host memory / local ranks; CUDA: 90 % of the GPU).");
  k.f("grad_clip", t.grad_clip, 0, kInf, "Clip gradients to this global L2 norm (0 = off).");
  k.i("log_every", t.log_every, 1, 1e9, "Steps between metric records.");
  k.i("eval_every", t.eval_every, 0, 1e9, "Steps between evaluations (0 = only at the end).");
  k.i("eval_steps", t.eval_steps, 0, 1e9,
      "Batches of train.batch_size per evaluation, counted over all ranks together: the first eval_steps x "
      "batch_size samples of the validation split, shared among the ranks, so any world size scores the same "
      "samples (0 = the whole validation split).");
  k.c("eval_tta", t.eval_tta, {"none", "flip"},
      "Test-time augmentation of every evaluation (image models): flip also scores each image by the mean of its "
      "and its left-right mirror's logits, reported beside the plain figures as tta_loss / tta_accuracy / tta_top5 "
      "(the plain ones still decide best and early stopping; twice the evaluation's compute).");
  k.e("nonfinite", t.nonfinite,
      "A non-finite loss or gradient norm (outside the fp16 scaler): skip the step, roll back to the last "
      "checkpoint, or abort. skip/rollback check every step (one host sync per step); abort checks on log steps.");
  k.i("max_nonfinite", t.max_nonfinite, 1, 1e6, "Consecutive skipped or rolled-back steps before the run aborts.");
  k.regexes("freeze", t.freeze,
            "Regexes (RE2 syntax, searched anywhere in parameter names) of parameters that take no gradient, no optimizer "
            "state and no all-reduce; one that matches nothing is a warning.");
  k.b("freeze_bn", t.freeze_bn,
      "BatchNorm modules whose parameters are all frozen stay in eval mode while training (running statistics "
      "unchanged).");
  k.f("label_smoothing", t.label_smoothing, 0, 1,
      "Training loss: cross-entropy against (1 - v) one-hot + v / classes, as torch's cross_entropy(label_smoothing=v); "
      "evaluation loss stays unsmoothed.");
  k.prefix = "train.ema";
  k.f("decay", t.ema.decay, 0, 0.999999999,
      "EMA of the weights: shadow = decay x shadow + (1 - decay) x weights after every `every` optimizer steps "
      "(train.ema.warmup: a smaller decay first); float buffers (BatchNorm statistics) averaged, integer ones copied (0 = off). Checkpointed (ema.safetensors).");
  k.i("every", t.ema.every, 1, 1e9, "Optimizer steps between EMA updates.");
  k.b("eval", t.ema.eval, "Also evaluate the EMA weights at every evaluation (the eval record gains ema_loss, ema_accuracy, ema_top5).");
  k.b("warmup", t.ema.warmup,
      "Warm the decay up: update n (counted in EMA updates) uses min(decay, 1 - (1 + n)^(-2/3)), as timm's ModelEmaV3 "
      "with use_warmup, so a short run's shadow is not held back by the initial weights (0.999 without it keeps "
      "e^-2.3 = 10 % of them after 2300 steps).");
  k.b("lookahead", t.ema.lookahead,
      "Lookahead (airbench's): after each update the weights become the shadow, and the update after step t of T "
      "uses decay x (t/T)^3 (0 early: the shadow follows the weights, then averages more and more); the last step "
      "always updates, so the run ends on the average. Not with train.ema.warmup or train.ema.eval.");
  k.prefix = "train.early_stopping";
  k.c("metric", t.early_stopping.metric, {"", "loss", "accuracy", "top5", "bpb", "ppl"}, "Eval metric watched (\"\" = off).");
  k.e("mode", t.early_stopping.mode, "Better is lower (min) or higher (max); auto: max for accuracies.");
  k.i("patience", t.early_stopping.patience, 1, 1e9, "Evaluations without improvement before stopping.");
  k.f("min_delta", t.early_stopping.min_delta, 0, kInf, "Smallest change that counts as an improvement.");

  k.prefix = "optim";
  auto& o = c.optim;
  k.e("name", o.name, "Optimizer.");
  k.f("lr", o.lr, 0, 1e3, "Peak learning rate.");
  k.f("momentum", o.momentum, 0, 0.9999, "SGD momentum.");
  k.b("nesterov", o.nesterov, "SGD: Nesterov momentum.");
  k.f("weight_decay", o.weight_decay, 0, 10, "Weight decay (decoupled for AdamW).");
  k.l("betas", o.betas, "AdamW betas [beta1, beta2].");
  k.f("eps", o.eps, 0, 1, "AdamW epsilon.");
  k.b("decay_norm_and_bias", o.decay_norm_and_bias, "Also apply weight decay to biases, norms and embeddings.");
  k.b("fused", o.fused, "One fused ATen kernel per step (_fused_adamw_ / _fused_sgd_) instead of a per-parameter loop.");
  k.groups("groups", o.groups,
           "Parameter groups: [{match: REGEX, lr: X, weight_decay: Y}, ...]; a parameter takes the first rule whose "
           "regex (RE2 syntax, searched anywhere in the name) matches its name; lr and weight_decay default to optim.lr / "
           "optim.weight_decay (no decay still applies to biases and norms); lr follows the schedule in proportion.");
  k.f("layer_decay", o.layer_decay, 0, 1,
      "Layer-wise lr decay over the model's blocks (its units: GPT and ViT blocks, ResNet stages): block i of n "
      "(from 0) trains at lr x layer_decay^(n - i), what comes before the first block (embeddings, stem) at "
      "layer_decay^(n + 1), the head and final norm at lr (1 = off).");

  k.prefix = "schedule";
  auto& s = c.schedule;
  k.e("name", s.name, "Learning-rate schedule after warmup.");
  k.i("warmup_steps", s.warmup_steps, 0, 1e9, "Linear warmup from 0 to optim.lr over this many steps.");
  k.f("min_lr_ratio", s.min_lr_ratio, 0, 1, "Floor of the schedule as a fraction of optim.lr.");
  k.i("step_size", s.step_size, 1, 1e9, "step: steps between decays.");
  k.f("gamma", s.gamma, 0, 1, "step: factor applied at each decay.");

  k.prefix = "dist";
  k.e("backend", c.dist.backend, "Collective backend (auto: NCCL on CUDA, else Gloo).");
  k.f("timeout_s", c.dist.timeout_s, 1, 86400, "Seconds before a collective counts as hung.");
  k.f("bucket_mb", c.dist.bucket_mb, 0.001, 4096, "Gradient all-reduce bucket size in MiB.");
  k.e("sharding", c.dist.sharding,
      "What each rank holds of the training state: none = a full replica (DDP); optimizer = ZeRO-1 (each rank "
      "keeps and steps the optimizer state of its 1/N of every bucket, then the parameters are all-gathered); "
      "gradients = ZeRO-2 (also the gradients are reduce-scattered bucket by bucket during backward, each rank "
      "keeps its 1/N); full = ZeRO-3 (the parameters too: each unit of the model, a block or stage, is "
      "all-gathered just before its forward and its backward and freed after; dist.bucket_mb unused). No effect "
      "on a single process; with dist.tensor_parallel over the world / T data-parallel ranks.");
  k.s("store", c.dist.store, "Rendezvous: \"\" = TCPStore at MASTER_ADDR:MASTER_PORT, or file:///shared/path.");
  k.s("interface", c.dist.interface,
      "Network interface of the collectives (Gloo binds and advertises its IPv4 address; NCCL gets it as "
      "NCCL_SOCKET_IFNAME). \"\" = GLOO_SOCKET_IFNAME if set, else loopback when every rank is on this node, else the "
      "interface that routes to MASTER_ADDR. trainer check prints each rank's choice.");
  k.e("recovery", c.dist.recovery,
      "What a failed rank costs. restart: the job stops and `trainer launch --max-restarts` (or the scheduler) "
      "starts it again from the newest checkpoint. in_process: the survivors abandon the step, regroup without the "
      "dead rank and go on from memory at the smaller world size, keeping train.global_batch_size by accumulation "
      "when it divides; `trainer launch --max-restarts K` starts replacement ranks that join the running group "
      "(needs `trainer launch`, Gloo, dist.sharding none; docs/LAUNCHING.md says what it covers).");
  k.i("tensor_parallel", c.dist.tensor_parallel, 1, 1024,
      "Tensor parallel size T (Megatron-style, GPT and ViT): each layer's weights are split over T consecutive "
      "ranks (attention by heads, MLP by columns then rows, GPT's vocabulary of the tied embedding / lm_head by "
      "rows; ViT's patch embedding and head stay whole), so every rank computes 1/T of each layer; data parallel "
      "runs over world / T (the ranks of one tp coordinate: replicated DDP, or dist.sharding's ZeRO-1/2/3 with "
      "the rank's slices as its parameters). T must divide the world size, and model.n_head and 4 x model.n_embd (GPT) or "
      "model.num_heads and model.mlp_dim (ViT). Checkpoints hold the full (T = 1) tensors, so a run resumes at any "
      "T. train.ema keeps the rank's slices of the shadow; train.batch_size auto and `trainer check --memory` "
      "measure one rank's slices. 1 = off.");
  k.b("sequence_parallel", c.dist.sequence_parallel,
      "With dist.tensor_parallel > 1: LayerNorm, dropout and the residual stream run on 1/T of the sequence "
      "(all-gather / reduce-scatter in place of the all-reduces: fewer activation bytes per rank); GPT only "
      "(model.block_size must divide by T).");
  k.i("pipeline_parallel", c.dist.pipeline_parallel, 1, 1024,
      "Pipeline parallel size P (GPT and ViT): the model's units (embeddings, blocks, head) are cut into P x "
      "dist.pipeline.virtual_stages stages over P ranks that pass activations forward and gradients back, "
      "point to point; the outermost mesh dimension (rank = (pp_rank x D + dp_rank) x T + tp_rank, D the data-parallel size), so tensor "
      "parallel stays within a host and the stages may cross hosts. P x dist.tensor_parallel must divide the "
      "world size; data parallel runs over the rest. Each rank builds the whole model once (the same "
      "initialisation as one process) and keeps its stages' parameters. Checkpoints hold the one-process "
      "tensors, so a run resumes at any P. 1 = off.");
  k.prefix = "dist.pipeline";
  k.i("microbatches", c.dist.pipeline.microbatches, 1, 1e6,
      "M: each batch (train.batch_size per data-parallel rank) is split into M equal microbatches that flow "
      "through the stages; the gradients are the batch's, as one process computes them (M must divide "
      "train.batch_size). auto = the largest divisor of train.batch_size up to 2 x P x virtual_stages. "
      "M < P works (with more bubble).");
  k.out.back().accepts_auto = true;
  k.e("schedule", c.dist.pipeline.schedule,
      "The order each rank runs its forwards and backwards in (`trainer check` draws it with its bubble): gpipe "
      "(all forwards, then all backwards: M microbatches' activations held), 1f1b (one forward one backward after "
      "a warm-up: at most P held), interleaved_1f1b (virtual_stages > 1 stages a rank, less bubble), zero_bubble "
      "(ZB-H1: the backward split into its input half and its weight half, weight halves fill the idle slots).");
  k.i("virtual_stages", c.dist.pipeline.virtual_stages, 1, 64,
      "Stages per rank (interleaved_1f1b only; 1 for the others): rank r holds stages r, r + P, r + 2P, ...");
  k.strings_or_auto("stages", c.dist.pipeline.stages,
      "The units each stage holds, in forward order: auto = balanced by the units' estimated cost (any unit count, "
      "divisible by the stages or not), or P x virtual_stages entries \"A-B\" (units A to B, inclusive) or \"A\" "
      "(one unit); `trainer check` lists the units. Every unit exactly once, in order.");

  k.prefix = "checkpoint";
  k.i("every_steps", c.checkpoint.every_steps, 0, 1e9, "Steps between checkpoints (0 = only at the end).");
  k.i("keep_last", c.checkpoint.keep_last, 1, 1e6, "Newest checkpoints kept.");
  k.p("dir", c.checkpoint.dir, "Checkpoint folder (\"\" = <run dir>/checkpoints); one run's: another run's checkpoints in it are "
      "refused (docs/RELIABILITY.md). Moved between attempts: resume the old folder once (--resume OLD).");
  k.i("keep_every", c.checkpoint.keep_every, 0, 1e9, "Also keep forever every checkpoint whose step is a multiple of this (0 = off).");
  k.e("on_error", c.checkpoint.on_error,
      "A failed periodic save: warn and keep training (up to max_failures in a row), or abort the run (exit 74). "
      "The final save and a stop signal's save are never optional: their failure exits 74.");
  k.i("max_failures", c.checkpoint.max_failures, 0, 1e6,
      "on_error warn: consecutive failed saves tolerated; one more stops the run with exit 74.");
  k.b("save_best", c.checkpoint.save_best,
      "When an evaluation improves the best metric, save a checkpoint at that step and point `best` at it (kept by pruning).");
  k.b("requeue", c.checkpoint.requeue,
      "SLURM: after a stop signal's checkpoint, run `scontrol requeue` for this job (array task included) before exiting 75.");
  k.f("verify_tolerance", c.checkpoint.verify_tolerance, 0, 1e9,
      "On resume, recomputed losses of steps the interrupted run had logged must match within this relative "
      "difference, or the run stops (0 = off).");

  k.prefix = "log";
  k.b("jsonl", c.log.jsonl, "Write metrics.jsonl in the run directory.");
  k.c("progress", c.log.progress, {"auto", "on", "off"}, "Progress bar on rank 0, cleared before every log line. auto: when stdout is a terminal, TERM is set and "
      "not dumb, and the process is no mpirun/mpiexec rank (OMPI_COMM_WORLD_*, PMI_*: their ptys end up in log files); "
      "on: whatever stdout is.");
  k.b("tensorboard", c.log.tensorboard, "Write TensorBoard event files under <run dir>/tb.");
  k.f("peak_tflops", c.log.peak_tflops, 0, 1e6, "Peak TFLOP/s for MFU (0 = the device's known peak, if any).");
  k.c("level", c.log.level, {"trace", "debug", "info", "warn", "error"}, "Console log level.");

  k.prefix = "profile";
  k.i("steps", c.profile.steps, 0, 1e6,
      "Optimizer steps to record with the PyTorch profiler (0 = off): <run dir>/profile/trace_rank<r>.json + ops_rank<r>.txt.");
  k.i("start_step", c.profile.start_step, 0, 9.2e18, "Steps completed before recording starts (past the warm-up).");
  k.b("record_shapes", c.profile.record_shapes, "Record input shapes in the trace.");
  // Keys a run may change when it resumes: where and how fast it runs, how long, what it logs and keeps.
  // Any other key changes what is trained: `trainer run` refuses a run directory that was trained with
  // another value of one (engine/commands: refuse_other_config). Entries ending in '.' are sections.
  static const std::vector<std::string> kResumable = {
      "run.name", "run.out_dir", "model.attention", "model.activation_checkpointing", "model.channels_last",
      "data.workers", "data.prefetch", "data.on_bad_sample", "data.on_change", "train.max_steps", "train.epochs",
      "train.device", "train.threads", "train.memory_budget_gb", "train.reuse_host_memory", "train.cuda_graphs",
      "train.log_every", "train.eval_every", "train.eval_steps", "train.eval_tta", "train.nonfinite", "train.max_nonfinite",
      "train.ema.eval", "train.early_stopping.", "dist.", "checkpoint.", "log.", "profile."};
  for (auto& f : k.out)
    for (const auto& r : kResumable)
      if (r.back() == '.' ? f.key.rfind(r, 0) == 0 : f.key == r) f.changes_training = false;
  for (auto& f : k.out)
    if (f.family_key)
      for (const auto& a : arch_infos())
        if (std::find(a.keys.begin(), a.keys.end(), f.key) != a.keys.end()) f.applies_to.push_back(a.name);
  return std::move(k.out);
}

}  // namespace trainer::config
