// Cross-field validation and derived values. Every problem is collected, then thrown at once.
#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "config/load.hpp"
#include "config/schema.hpp"

namespace trainer::config {
namespace {

// run.name becomes one folder under run.out_dir: anything that could name another place ("..",
// "a/b", "/abs", "", ".") or that a file system refuses is a config error, not a surprise later.
// "world size", or "data-parallel ranks" where tensor or pipeline parallel take a share of the world
std::string dp_ranks_text(const RunConfig& c, int64_t world, int64_t dp_world) {
  if (dp_world == world) return "world size";
  return "data-parallel ranks (world " + std::to_string(world) + " / tensor_parallel " +
         std::to_string(c.dist.tensor_parallel) + " / pipeline_parallel " + std::to_string(c.dist.pipeline_parallel) + ")";
}

std::string run_name_problem(const std::string& n) {
  if (n.empty()) return "is empty; a run needs a name (its folder under run.out_dir)";
  if (n == "." || n == "..") return "'" + n + "' names a folder that is not a new one under run.out_dir";
  if (n.find('/') != std::string::npos || n.find('\\') != std::string::npos)
    return "'" + printable(n) + "' has a path separator; a run name is one folder name (use run.out_dir for the parent)";
  for (unsigned char ch : n)
    if (ch < 0x20 || ch == 0x7F) return "'" + printable(n) + "' has a control character";
  if (n.size() > 255) return "is " + std::to_string(n.size()) + " bytes long; a folder name has at most 255";
  return "";
}

// The image side the config already tells: a resize (data.image_size), synthetic images and CIFAR
// (always 32x32). 0 where only the data tells (idx and image_folder without a resize: checked when
// the data is opened, data/dataset.cpp).
struct ToldSide {
  int64_t side = 0;
  std::string key, what;  // the key that sets it, and "data.image_size resizes to " or the like
};
ToldSide told_image_side(const RunConfig& c) {
  if (c.data.image_size > 0) return {c.data.image_size, "data.image_size", "data.image_size resizes to "};
  if (c.data.format == DataFormat::Synthetic)
    return {c.data.synthetic.image_size, "data.synthetic.image_size", "data.synthetic.image_size makes "};
  if (c.data.format == DataFormat::Cifar) return {32, "data.format", "data.format 'cifar' gives "};
  return {};
}

// The arch's image-size rules against the size the config tells: a fixed size (ViT's position
// embedding) and a smallest side (the ConvNet's pooling). The error points at the data key when the
// file sets it, else at model.image_size when the file sets that.
void check_image_side(const LoadedConfig& loaded, const ArchRules& arch, const ErrFn& err) {
  const RunConfig& c = loaded.cfg;
  ToldSide told = told_image_side(c);
  if (told.side == 0) return;
  const auto square = [](int64_t n) { return std::to_string(n) + "x" + std::to_string(n); };
  const auto hint = [&](int64_t n) {  // CIFAR's size is not a key of its own: say which key changes it
    return told.key == "data.format" ? " (set data.image_size: " + std::to_string(n) + " to resize)" : std::string();
  };
  if (arch.fixed_image_size && told.side != c.model.image_size) {
    std::string key = told.key;
    if (!loaded.is_set(key) && loaded.is_set("model.image_size")) key = "model.image_size";
    err(key, told.what + square(told.side) + " images, but model.arch '" + c.model.arch + "' takes model.image_size " +
                 square(c.model.image_size) + " images" + hint(c.model.image_size));
  }
  const int64_t least = arch.min_image_side ? arch.min_image_side(c.model) : 0;
  if (told.side < least)
    err(told.key, told.what + square(told.side) + " images, but model.arch '" + c.model.arch + "' takes images of at least " +
                      square(least) + " with these model settings" + hint(least));
}

// model.init: one spelling of the file, and no loading options without a file to apply them to.
void validate_init(const LoadedConfig& loaded, const ErrFn& err) {
  const auto& m = loaded.cfg.model;
  if (!m.init_from.empty() && !m.init.from.empty())
    err("model.init_from", "set together with model.init.from; model.init_from is the old name of model.init.from: "
                           "keep one");
  if (!init_file(m).empty()) return;
  for (const char* key : {"model.init.strict", "model.init.skip", "model.init.rename", "model.init.reinit_mismatched"})
    if (loaded.is_set(key)) err(key, "has no effect without model.init.from (the file to load)");
}


// dist.tensor_parallel / dist.sequence_parallel: the generic rules (the family's own, heads and
// widths, are in its ArchRules::check). What is not wired yet is refused here, before anything starts.
void validate_tensor_parallel(const LoadedConfig& loaded, const ValidateOptions& opts, const ErrFn& err) {
  const RunConfig& c = loaded.cfg;
  const int64_t t = c.dist.tensor_parallel;
  const std::string ts = std::to_string(t);
  if (c.dist.sequence_parallel && t == 1)
    err("dist.sequence_parallel", "has no effect without dist.tensor_parallel > 1");
  if (t == 1) return;
  if (opts.builds_mesh && opts.world_size % t != 0)
    err("dist.tensor_parallel", ts + " does not divide the world size " + std::to_string(opts.world_size) +
                                    " (the launcher's ranks): the mesh is world / T data-parallel groups of T ranks");
  if (c.dist.recovery == Recovery::InProcess)
    err("dist.recovery", "in_process with dist.tensor_parallel " + ts +
                             " is not supported (a regroup does not rebuild the mesh's groups); use restart");
}
}  // namespace

int64_t data_parallel_size(const RunConfig& c, int64_t world_size) {
  const int64_t w = std::max<int64_t>(world_size, 1),
                t = std::max<int64_t>(c.dist.tensor_parallel, 1) * std::max<int64_t>(c.dist.pipeline_parallel, 1);
  return w % t == 0 ? w / t : w;
}

void resolve(RunConfig& c, int64_t world_size) {
  world_size = data_parallel_size(c, world_size);
  auto& t = c.train;
  if (t.batch_size == 0) return;  // auto: the engine picks the micro-batch and grad_accum at start
  const int64_t per_accum = t.batch_size * std::max<int64_t>(world_size, 1);
  if (t.global_batch_size > 0 && per_accum > 0 && t.global_batch_size % per_accum == 0)
    t.grad_accum = t.global_batch_size / per_accum;
  else
    t.global_batch_size = per_accum * t.grad_accum;
}

void validate(const LoadedConfig& loaded, const ValidateOptions& opts) {
  const RunConfig& c = loaded.cfg;
  std::vector<Diagnostic> diags;
  auto err = [&](const std::string& key, const std::string& msg) {
    diags.push_back(Diagnostic{loaded.where(key), key, msg});
  };

  if (auto why = run_name_problem(c.run.name); !why.empty()) err("run.name", why);

  // model: the family's own rules come from its ModelSpec (models/), registered as ArchRules
  const ArchRules* arch = find_arch(c.model.arch);
  if (!arch) {
    const auto archs = arch_names();
    std::string known;
    for (const auto& a : archs) known += (known.empty() ? "" : ", ") + a;
    std::string msg = "unknown arch '" + c.model.arch + "'; known: " + known;
    if (auto hint = did_you_mean(c.model.arch, archs); !hint.empty()) msg += " (did you mean '" + hint + "'?)";
    err("model.arch", msg);
  }
  const bool image_arch = arch && arch->input == ArchInput::Image;
  const bool token_arch = arch && arch->input == ArchInput::Tokens;
  if (arch) {
    RunConfig scratch;
    for (const auto& f : describe_fields(scratch))
      if (!applies_to_arch(f, c.model.arch) && loaded.is_set(f.key))
        err(f.key, "applies to model.arch '" + applies_text(f) + "', but model.arch is '" + c.model.arch + "'");
    if (arch->check) arch->check(c, err);
  }
  validate_init(loaded, err);

  // model vs data
  if (token_arch && gives_images(c.data.format))
    err("data.format", "'" + name_of(c.data.format) + "' gives images, but model.arch '" + c.model.arch +
                           "' takes tokens (use text, tokens or synthetic)");
  if (image_arch && gives_tokens(c.data.format))
    err("data.format", "'" + name_of(c.data.format) + "' gives tokens, but model.arch '" + c.model.arch +
                           "' takes images (use idx, cifar, image_folder or synthetic)");
  if (arch) check_image_side(loaded, *arch, err);
  if (c.data.format != DataFormat::Synthetic && c.data.path.empty())
    err("data.path", "required for data.format '" + name_of(c.data.format) + "'");
  const auto& nm = c.data.normalize;
  if (nm.mean.size() != nm.std.size())
    err("data.normalize.std", "has " + std::to_string(nm.std.size()) + " values but data.normalize.mean has " +
                                  std::to_string(nm.mean.size()));
  for (double s : nm.std)
    if (!(s > 0)) err("data.normalize.std", "every value must be > 0");
  if (image_arch && !nm.mean.empty() && static_cast<int64_t>(nm.mean.size()) != c.model.in_channels &&
      nm.mean.size() != 1)
    err("data.normalize.mean", "has " + std::to_string(nm.mean.size()) + " values for " +
                                   std::to_string(c.model.in_channels) + " input channels");

  // train (the batch arithmetic is over the data-parallel ranks)
  const auto& t = c.train;
  const int64_t dp_world = data_parallel_size(c, opts.world_size);
  if (t.max_steps > 0 && t.epochs > 0)  // set in one document: from two, the later wins (load.cpp)
    err(loaded.is_set("train.epochs") ? "train.epochs" : "train.max_steps",
        "set either train.max_steps or train.epochs, not both");
  if (t.max_steps == 0 && t.epochs == 0) err("train.max_steps", "set train.max_steps or train.epochs (both are 0)");
  if (t.batch_size == 0) {  // auto
    if (t.global_batch_size <= 0)
      err("train.batch_size", "auto picks the micro-batch that fits and keeps train.global_batch_size by accumulation: "
                              "set train.global_batch_size");
    else if (t.global_batch_size % std::max<int64_t>(dp_world, 1) != 0)
      err("train.global_batch_size", std::to_string(t.global_batch_size) + " is not divisible by the " +
                                         dp_ranks_text(c, opts.world_size, dp_world) + " " + std::to_string(dp_world) +
                                         " (train.batch_size auto)");
    if (loaded.is_set("train.grad_accum"))
      err("train.grad_accum", "is derived when train.batch_size is auto: remove it");
  } else if (t.global_batch_size > 0) {
    const int64_t per_accum = t.batch_size * dp_world;
    if (t.global_batch_size % per_accum != 0)
      err("train.global_batch_size", std::to_string(t.global_batch_size) + " is not divisible by batch_size x " +
                                         dp_ranks_text(c, opts.world_size, dp_world) + " = " +
                                         std::to_string(t.batch_size) + " x " + std::to_string(dp_world));
    else if (loaded.is_set("train.grad_accum") && t.global_batch_size / per_accum != t.grad_accum)
      err("train.grad_accum", "contradicts train.global_batch_size: " + std::to_string(t.global_batch_size) + " / (" +
                                  std::to_string(t.batch_size) + " x " + std::to_string(dp_world) + ") = " +
                                  std::to_string(t.global_batch_size / per_accum) + " micro-batches");
  }
  const bool on_cuda = t.device == DeviceKind::Cuda || (t.device == DeviceKind::Auto && opts.cuda_available);
  if (t.device == DeviceKind::Cuda && !opts.cuda_available) err("train.device", "'cuda' asked for, but no CUDA device is available");
  if (t.precision == Precision::Fp16 && !on_cuda)
    err("train.precision", "fp16 needs CUDA (dynamic loss scaling on GPU); on CPU use bf16 or fp32");
  if (t.eval_tta == "flip" && takes_tokens(c.model.arch))
    err("train.eval_tta", "flip mirrors images; model.arch '" + c.model.arch + "' takes tokens (use none)");
  const std::string em = t.early_stopping.metric;
  if (!em.empty() && arch && std::find(arch->eval_metrics.begin(), arch->eval_metrics.end(), em) == arch->eval_metrics.end()) {
    std::string known;
    for (const auto& m : arch->eval_metrics) known += (known.empty() ? "" : ", ") + m;
    err("train.early_stopping.metric", "'" + em + "' is not reported for model.arch '" + c.model.arch + "' (it reports " + known + ")");
  }

  // optim / schedule
  if (c.optim.betas.size() != 2) err("optim.betas", "expected two values [beta1, beta2]");
  if (std::any_of(c.optim.betas.begin(), c.optim.betas.end(), [](double b) { return b < 0 || b >= 1; })) {
    std::string got;  // said once, with the values (two betas out of range were two identical errors)
    for (double b : c.optim.betas) got += (got.empty() ? "" : ", ") + fmt::format("{}", b);
    err("optim.betas", "each beta must be in [0, 1), got [" + got + "]");
  }
  if (t.freeze_bn && t.freeze.empty()) err("train.freeze_bn", "needs train.freeze (the parameters to freeze)");
  if (c.optim.nesterov && c.optim.momentum == 0) err("optim.nesterov", "Nesterov needs optim.momentum > 0");

  // dist
  if (c.dist.backend == Backend::Nccl && !on_cuda) err("dist.backend", "nccl needs CUDA; use gloo (or auto) on CPU");
  if (c.dist.recovery == Recovery::InProcess) {
    if (c.dist.sharding != Sharding::None)
      err("dist.recovery", "in_process works with dist.sharding: none only (a dead rank's shard of the state would be lost)");
    if (c.dist.backend == Backend::Nccl || (c.dist.backend == Backend::Auto && on_cuda))
      err("dist.recovery", "in_process needs Gloo: a NCCL communicator whose peer died cannot be rebuilt in the same "
                           "process without ncclCommAbort; use restart on GPUs");
    if (!c.dist.store.empty())
      err("dist.recovery", "in_process needs the store `trainer launch` hosts (it outlives every rank); dist.store must be \"\"");
  }
  validate_tensor_parallel(loaded, opts, err);
  validate_pipeline(loaded, opts, err);
  if (const auto& i = c.dist.interface; !i.empty()) {
    const bool plain = i.size() <= 15 && i.find_first_of("/ \t\n:") == std::string::npos && i != "." && i != "..";
    if (!plain)
      err("dist.interface", "'" + printable(i) + "' is not a network interface name (at most 15 characters, no '/', ':' or spaces; "
                                "e.g. eth0, ib0)");
  }
  if (!c.dist.store.empty() && c.dist.store.rfind("file://", 0) != 0)
    err("dist.store", "'" + printable(c.dist.store) + "': expected \"\" (a TCPStore at MASTER_ADDR:MASTER_PORT) or file:///path");
  else if (c.dist.store.rfind("file://", 0) == 0 && c.dist.store.compare(7, 1, "/") != 0)
    err("dist.store", "'" + c.dist.store + "': expected file:///absolute/path (three slashes) on a file system every rank sees");

  validate_recipes(loaded, err);
  if (!diags.empty()) throw ConfigError(std::move(diags));
}

}  // namespace trainer::config
