// Cross-field checks of the training recipes: what a recipe needs of the model and the data, and
// keys that would otherwise be ignored without a word (a probability of a mix that is off).
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "config/load.hpp"
#include "config/arch.hpp"
#include "config/schema.hpp"

namespace trainer::config {
namespace {

using RecipeErr = std::function<void(const std::string&, const std::string&)>;

std::string num_text(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// [lo, hi] with lo <= hi inside (min, max]: RandomResizedCrop's scale and ratio.
void check_range_pair(const std::vector<double>& v, const std::string& key, double max, const RecipeErr& err) {
  if (v.size() != 2) {
    err(key, "expected two values [min, max], got " + std::to_string(v.size()));
    return;
  }
  if (!(v[0] > 0) || !(v[1] <= max) || v[0] > v[1])
    err(key, "[" + num_text(v[0]) + ", " + num_text(v[1]) + "] must satisfy 0 < min <= max" +
                 (max < 1e300 ? " <= " + num_text(max) : ""));
}

void check_image_recipes(const LoadedConfig& loaded, bool token_arch, const RecipeErr& err) {
  const RunConfig& c = loaded.cfg;
  const auto& a = c.data.augment;
  const bool mixing = c.data.mixup.alpha > 0 || c.data.cutmix.alpha > 0;
  const std::pair<const char*, double> alphas[] = {{"data.mixup.alpha", c.data.mixup.alpha},
                                                   {"data.cutmix.alpha", c.data.cutmix.alpha}};
  if (token_arch) {
    for (const auto& [key, alpha] : alphas)
      if (alpha > 0) err(key, "mixes images and their labels; model.arch '" + c.model.arch + "' takes tokens");
    const std::pair<const char*, bool> image_only[] = {{"data.augment.random_resized_crop", a.random_resized_crop},
                                                       {"data.augment.brightness", a.brightness > 0},
                                                       {"data.augment.contrast", a.contrast > 0},
                                                       {"data.augment.saturation", a.saturation > 0},
                                                       {"data.augment.hue", a.hue > 0}};
    for (const auto& [key, on] : image_only)
      if (on) err(key, "transforms images; model.arch '" + c.model.arch + "' takes tokens");
  }
  if (!mixing)
    for (const char* key : {"data.mixup.prob", "data.mixup.switch_prob"})
      if (loaded.is_set(key)) err(key, "has no effect: data.mixup.alpha and data.cutmix.alpha are both 0");
  if (mixing && c.train.cuda_graphs)
    err("train.cuda_graphs", "a captured step replays fixed inputs; mixup/cutmix draw a new mix every step: "
                             "set train.cuda_graphs: false or turn the mix off");
  if (c.data.mixup.alpha > 0 && c.data.cutmix.alpha == 0 && loaded.is_set("data.mixup.switch_prob"))
    err("data.mixup.switch_prob", "chooses between mixup and cutmix, but data.cutmix.alpha is 0");
  check_range_pair(a.rrc_scale, "data.augment.rrc_scale", 1.0, err);
  check_range_pair(a.rrc_ratio, "data.augment.rrc_ratio", 1e308, err);
  if (!a.random_resized_crop)
    for (const char* key : {"data.augment.rrc_scale", "data.augment.rrc_ratio"})
      if (loaded.is_set(key)) err(key, "has no effect without data.augment.random_resized_crop: true");
  if (!a.hflip && a.hflip_alternate)
    err("data.augment.hflip_alternate", "has no effect without data.augment.hflip: true");
  if (c.data.val_resize > 0 && token_arch)
    err("data.val_resize", "resizes images; model.arch '" + c.model.arch + "' takes tokens");
  else if (c.data.val_resize > 0 && c.data.image_size == 0)
    err("data.val_resize", "resizes before the centred data.image_size crop, but data.image_size is 0 (keep): set "
                           "data.image_size too");
  else if (c.data.val_resize > 0 && c.data.val_resize < c.data.image_size)
    err("data.val_resize", std::to_string(c.data.val_resize) + " is smaller than the data.image_size " +
                               std::to_string(c.data.image_size) + " crop it is cut to");
  const bool image_arch = !token_arch && find_arch(c.model.arch) != nullptr;
  if (image_arch && c.model.in_channels != 3)
    for (const auto& [key, v] : {std::pair<const char*, double>{"data.augment.saturation", a.saturation},
                                 std::pair<const char*, double>{"data.augment.hue", a.hue}})
      if (v > 0)
        err(key, "needs RGB images (saturation and hue are defined on 3 channels), but model.in_channels is " +
                     std::to_string(c.model.in_channels));
}

// Bits per byte need the bytes behind a token: one for byte-level text, data.bytes_per_token otherwise.
void check_bits_per_byte(const LoadedConfig& loaded, bool token_arch, const RecipeErr& err) {
  const RunConfig& c = loaded.cfg;
  if (loaded.is_set("data.bytes_per_token") && !token_arch)
    err("data.bytes_per_token", "applies to token data, but model.arch '" + c.model.arch + "' takes images");
  if (c.data.format == DataFormat::Text && c.data.bytes_per_token != 0 && c.data.bytes_per_token != 1)
    err("data.bytes_per_token", "data.format text is byte-level (one token is one byte): leave it at 0 or set 1");
  if (token_arch && c.train.early_stopping.metric == "bpb" && c.data.format != DataFormat::Text && c.data.bytes_per_token == 0)
    err("train.early_stopping.metric", "'bpb' needs data.bytes_per_token for data.format '" + name_of(c.data.format) +
                                           "' (bits per byte are only defined for byte-level text); watch ppl or loss");
}

void check_ema(const LoadedConfig& loaded, const RecipeErr& err) {
  const auto& ema = loaded.cfg.train.ema;
  if (ema.decay == 0) {
    // keys written before EMA was switched off (a base config's or the file's, then --set
    // train.ema.decay=0) were switched off with it: only those written with or after the switch are a mistake
    const int off_at = loaded.is_set("train.ema.decay") ? loaded.where("train.ema.decay").source : -1;
    for (const char* key : {"train.ema.every", "train.ema.eval", "train.ema.warmup", "train.ema.lookahead"})
      if (loaded.is_set(key) && loaded.where(key).source >= off_at)
        err(key, "has no effect: train.ema.decay is 0 (EMA off)");
    return;
  }
  if (!ema.lookahead) return;
  // the lookahead's decay has its own ramp, and its shadow is the weights after every update
  if (ema.warmup)
    err("train.ema.warmup", "conflicts with train.ema.lookahead, whose decay ramps up as decay x (t/T)^3: set one");
  if (ema.eval)
    err("train.ema.eval", "with train.ema.lookahead the weights become the shadow at every update, and the run "
                          "ends on it: the evaluation of the weights is the shadow's; leave it false");
}

}  // namespace

double bytes_per_token(const DataConfig& data) { return data.format == DataFormat::Text ? 1.0 : data.bytes_per_token; }

void validate_recipes(const LoadedConfig& loaded, const RecipeErr& err) {
  const bool token_arch = takes_tokens(loaded.cfg.model.arch);
  check_image_recipes(loaded, token_arch, err);
  check_bits_per_byte(loaded, token_arch, err);
  check_ema(loaded, err);
}

void note_unused_options(LoadedConfig& loaded) {
  const RunConfig& c = loaded.cfg;
  auto unused = [&](const char* choice, std::initializer_list<const char*> keys, const std::string& why) {
    const int from = loaded.is_set(choice) ? loaded.where(choice).source : -1;
    for (const char* key : keys)
      if (loaded.is_set(key) && loaded.where(key).source >= from)
        loaded.warnings.push_back(Diagnostic{loaded.where(key), key, "has no effect " + why + ": ignored"});
  };
  if (c.optim.name == OptimizerKind::Adamw)
    unused("optim.name", {"optim.momentum", "optim.nesterov"}, "with optim.name adamw (they are sgd's)");
  else
    unused("optim.name", {"optim.betas", "optim.eps"}, "with optim.name sgd (they are adamw's)");
  const DataFormat f = c.data.format;
  const std::string with = "with data.format " + name_of(f);
  if (f == DataFormat::Synthetic)
    unused("data.format", {"data.path", "data.val_path", "data.val_fraction"}, with + " (its data is generated)");
  else
    unused("data.format", {"data.synthetic.num_samples", "data.synthetic.val_samples", "data.synthetic.image_size"},
           with + " (data.synthetic is the synthetic format's)");
  if (f == DataFormat::Synthetic && c.data.synthetic.val_samples == 0)  // found from outside: said nothing
    unused("data.synthetic.val_samples",
           {"train.eval_every", "train.eval_steps", "train.eval_tta", "train.early_stopping.metric",
            "train.early_stopping.mode", "train.early_stopping.patience", "train.early_stopping.min_delta"},
           "with data.synthetic.val_samples 0 (no validation split: nothing is evaluated, nothing stops early)");
  if (f != DataFormat::Synthetic && f != DataFormat::Text && f != DataFormat::Tokens)
    unused("data.format", {"data.val_fraction"}, with + " (text and tokens split a tail off; set data.val_path)");
  // a profile window past the run's end records nothing (and no profile/ folder), in silence
  const auto& p = c.profile;
  const int64_t steps = c.train.max_steps;
  if (p.steps > 0 && steps > 0 && p.start_step + p.steps > steps)
    loaded.warnings.push_back(Diagnostic{
        loaded.where("profile.steps"), "profile.steps",
        p.start_step >= steps ? "the window starts after step " + std::to_string(p.start_step) + ", but the run has " +
                                    std::to_string(steps) + " steps: nothing is recorded (lower profile.start_step)"
                              : "records steps " + std::to_string(p.start_step + 1) + ".." + std::to_string(steps) +
                                    " only: the run ends at step " + std::to_string(steps)});
}

}  // namespace trainer::config
