#include "engine/commands/inference.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "config/arch.hpp"
#include "config/file_read.hpp"
#include "config/load.hpp"
#include "device/device.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/startup/precision_auto.hpp"
#include "engine/startup/startup_planner.hpp"
#include "io/checkpoint.hpp"
#include "obs/history.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_parts.hpp"

namespace trainer::engine {
namespace {
namespace fs = std::filesystem;

// What the weights say about the run that made them.
struct InferWeights {
  io::SafetensorsFile file;
  std::string arch;             // the model the weights are of
  std::optional<config::Attention> attention;  // model.attention as that run resolved it, when recorded
  int64_t batch_size = 0;       // train.batch_size as that run resolved it (0 when not recorded)
  std::optional<config::Precision> precision;  // train.precision as that run resolved it, when recorded
  std::optional<bool> channels_last;           // model.channels_last of that run, when recorded
  std::optional<data::NormalizeValues> normalize;  // image data: how the run's bytes became its inputs
  std::vector<std::string> classes;                 // image_folder: the class names it was trained with
  int64_t step = -1;
};

// A checkpoints folder's newest step-<N> that verifies; newer ones that do not are warned about.
fs::path infer_newest_verified(const fs::path& dir) {
  std::string rejected;
  for (const auto& c : io::step_folders_newest_first(dir)) {
    try {
      io::verify_checkpoint(c.path);
      if (!rejected.empty()) spdlog::warn("newer checkpoints skipped (they do not verify):{}", rejected);
      return c.path;
    } catch (const io::CheckpointError& e) {
      rejected += std::string("\n  ") + e.what();
    }
  }
  throw io::CheckpointError(dir.string() + ": no checkpoint that verifies" +
                            (rejected.empty() ? std::string(" (no step-<N> folders)") : ":" + rejected));
}

InferWeights infer_from_checkpoint(const fs::path& step_dir) {
  InferWeights w;
  const fs::path state_path = step_dir / "state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(
        RegularFile::open<io::CheckpointError>(state_path.string(), 1u << 30, "a checkpoint state document")
            .read_all<io::CheckpointError>());
    w.step = state.at("step").get<int64_t>();
    if (state.contains(io::kStateDataNormalize))
      w.normalize = normalize_from_json(state[io::kStateDataNormalize], state_path.string());
    if (state.contains(io::kStateDataClasses))
      w.classes = classes_from_state(state, state_path.string());
    const auto trained =
        config::load_config_text(state.at(io::kStateConfigYaml).get<std::string>(), state_path.string()).cfg;
    w.arch = trained.model.arch;
    w.attention = trained.model.attention;
    w.batch_size = trained.train.batch_size;
    if (trained.train.precision != config::Precision::Auto) w.precision = trained.train.precision;
    w.channels_last = trained.model.channels_last;
  } catch (const nlohmann::json::exception& e) {
    throw io::CheckpointError(state_path.string() + ": missing or malformed field: " + e.what());
  } catch (const config::ConfigError& e) {
    throw io::CheckpointError(state_path.string() + ": the run's config does not load here: " + e.what());
  }
  w.file = io::load_checkpoint_group(step_dir, "model");  // a tensor-parallel run's parts assembled
  return w;
}

InferWeights infer_from_export(const fs::path& file) {
  InferWeights w;
  w.file = io::load_safetensors(file.string());
  const auto& meta = w.file.metadata;
  auto arch_entry = meta.find("arch");
  if (arch_entry == meta.end())
    throw io::CheckpointError(file.string() + ": no 'arch' in its metadata: not written by `trainer export`?");
  w.arch = arch_entry->second;
  if (auto mc = meta.find("model_config"); mc != meta.end()) {
    const auto j = nlohmann::json::parse(mc->second, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("channels_last") && j["channels_last"].is_boolean())
      w.channels_last = j["channels_last"].get<bool>();
    if (j.is_object() && j.contains("attention") && j["attention"].is_string()) {
      try {
        w.attention = config::parse_enum<config::Attention>(j["attention"].get<std::string>(), "model.attention");
      } catch (const std::invalid_argument&) {
        // a value this trainer does not know: the config's own choice stands
      }
    }
  }
  if (auto p = meta.find("precision"); p != meta.end() && p->second != "auto") {
    try {
      w.precision = config::parse_enum<config::Precision>(p->second, "train.precision");
    } catch (const std::invalid_argument&) {
      // a value this trainer does not know: the config's own choice stands
    }
  }
  if (auto n = meta.find(io::kStateDataNormalize); n != meta.end())
    w.normalize = normalize_from_json(nlohmann::json::parse(n->second, nullptr, /*allow_exceptions=*/false),
                                      file.string() + " (metadata)");
  if (auto c = meta.find(io::kStateDataClasses); c != meta.end()) {
    const auto h = meta.find(io::kStateDataClassesHex);
    const auto hex = h == meta.end() ? nlohmann::json() : nlohmann::json::parse(h->second, nullptr, false);
    w.classes = classes_from_json(nlohmann::json::parse(c->second, nullptr, /*allow_exceptions=*/false),
                                  h == meta.end() ? nullptr : &hex, file.string() + " (metadata)");
  }
  if (auto s = meta.find("step"); s != meta.end()) {
    try {
      w.step = std::stoll(s->second);
    } catch (const std::exception&) {
      w.step = -1;  // only shown in messages
    }
  }
  return w;
}

// The user's path -> the weights: a file is an export; a folder holding manifest.json is one
// checkpoint; another folder is a checkpoints folder, or a run directory holding one.
InferWeights infer_open(const std::string& path, std::string& shown) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec))
    throw WeightsNotFound("--checkpoint " + path + ": no such checkpoint, checkpoints folder or .safetensors file");
  if (!fs::is_directory(p, ec)) {
    shown = path;
    return infer_from_export(p);
  }
  fs::path step_dir = fs::canonical(p, ec);  // `latest` -> step-<N>
  if (ec) step_dir = p;
  // a step folder, complete or not (verify names what an incomplete one lacks)
  if (fs::exists(p / "manifest.json", ec) || io::parse_step_dir_name(step_dir.filename().string())) {
    io::verify_checkpoint(step_dir);  // every checksum, before anything is deserialised
  } else {
    step_dir = infer_newest_verified(fs::is_regular_file(p / "config.yaml", ec) ? run_checkpoint_folder(p)
                                     : fs::is_directory(p / "checkpoints", ec) ? p / "checkpoints"
                                                                               : p);
  }
  shown = step_dir.string();
  return infer_from_checkpoint(step_dir);
}

}  // namespace

// A run directory's checkpoint folder: its config.yaml's checkpoint.dir when set (resume looks there
// too), else its checkpoints/, else the newest folder its attempts saved in (their records in
// metrics.jsonl): the first of them that holds a step-<N> folder.
std::filesystem::path run_checkpoint_folder(const std::filesystem::path& run) {
  namespace fs = std::filesystem;
  std::vector<fs::path> where;
  try {
    const auto dir = config::load_config((run / "config.yaml").string()).cfg.checkpoint.dir;
    if (!dir.empty()) where.emplace_back(dir);
  } catch (const config::ConfigError&) {  // a config.yaml this version does not read
  }
  // its own checkpoints/ before the folders its attempts recorded: a copied run directory's records
  // name the original's folder, whose checkpoints were taken in silence (found from outside, 2026-12-07)
  where.push_back(run / "checkpoints");
  const auto attempts = obs::read_history(run / "metrics.jsonl").checkpoint_dirs;
  for (auto it = attempts.rbegin(); it != attempts.rend(); ++it) where.emplace_back(*it);
  for (const auto& dir : where)
    if (!io::step_folders_newest_first(dir).empty()) return dir;
  return where.front();
}

namespace {

// The training split's statistics as the run that made the weights computed them, where the config
// leaves them to be computed (data.normalize mean_std without mean or std, or minmax): the data as it
// is now (files added, re-encoded, another machine's copy) would give other inputs than the model
// was trained on, in silence. minmax is given as the mean_std it equals, (x - min) / (max - min).
void use_recorded_normalize(config::RunConfig& cfg, const data::NormalizeValues& rec, const std::string& weights) {
  auto& n = cfg.data.normalize;
  const std::string mode = config::name_of(n.mode);
  const bool computed = n.mode == config::NormalizeMode::Minmax ||
                        (n.mode == config::NormalizeMode::MeanStd && (n.mean.empty() || n.std.empty()));
  if (rec.mode != mode) {
    spdlog::warn("{} was trained with data.normalize.mode {}; the config's {} is used", weights, rec.mode, mode);
    return;
  }
  if (!computed) return;
  if (static_cast<int64_t>(rec.a.size()) != cfg.model.in_channels)
    throw io::CheckpointError(weights + ": its " + io::kStateDataNormalize + " has " + std::to_string(rec.a.size()) +
                              " channel(s); model.in_channels is " + std::to_string(cfg.model.in_channels));
  if (n.mode == config::NormalizeMode::Minmax) {
    n.mode = config::NormalizeMode::MeanStd;
    n.mean = rec.a;
    n.std.clear();
    for (size_t c = 0; c < rec.a.size(); ++c) n.std.push_back(rec.b[c] - rec.a[c]);
  } else {
    if (n.mean.empty()) n.mean = rec.a;
    if (n.std.empty()) n.std = rec.b;
  }
  spdlog::info("data normalisation: the training run's, recorded with the weights ({})", normalize_json(rec).dump());
}

}  // namespace

InferenceModel load_inference_model(const config::RunConfig& cfg, const dist::LaunchEnv& env, const std::string& path) {
  InferenceModel m;
  InferWeights w = infer_open(path, m.weights);
  m.step = w.step;
  m.classes = w.classes;
  // the same family, as the registry knows them (no family is named here: any two that differ)
  if (config::find_arch(w.arch) != config::find_arch(cfg.model.arch))
    throw io::CheckpointError(m.weights + ": holds a model.arch " + w.arch + " model; the config's model.arch is " +
                              cfg.model.arch);
  m.cfg = cfg;
  if (m.cfg.model.attention == config::Attention::Auto && w.attention) m.cfg.model.attention = *w.attention;
  if (m.cfg.train.batch_size == 0 && w.batch_size > 0) m.cfg.train.batch_size = w.batch_size;
  if (w.normalize) use_recorded_normalize(m.cfg, *w.normalize, m.weights);
  if (w.precision && m.cfg.train.precision != config::Precision::Auto && *w.precision != m.cfg.train.precision)
    spdlog::warn("{} was trained in train.precision {}; the config's {} is used (its figures differ from the run's; "
                 "--set train.precision={} reproduces them)",
                 m.weights, config::name_of(*w.precision), config::name_of(m.cfg.train.precision),
                 config::name_of(*w.precision));
  if (w.channels_last && *w.channels_last != m.cfg.model.channels_last)  // the convolutions' sums in another order
    spdlog::warn("{} was trained with model.channels_last {}; the config's {} is used (its figures differ from the "
                 "run's by rounding; --set model.channels_last={} reproduces them)",
                 m.weights, *w.channels_last, m.cfg.model.channels_last, *w.channels_last);
  if (m.cfg.train.precision == config::Precision::Auto) {
    if (w.precision) {
      m.cfg.train.precision = *w.precision;
    } else {  // no run's choice with these weights: the device's rule, without the training probe
      const auto device = device::select_device(m.cfg.train.device, env.local_rank);
      const auto c = decide_precision(precision_facts(m.cfg, device));
      m.cfg.train.precision = c.precision;
      spdlog::info("train.precision auto: {} ({}{})", precision_name(c.precision), c.reason,
                   c.needs_probe ? "; not timed for inference: fp32" : "");
    }
  }

  const auto proc = configure_process(m.cfg, env);
  m.device = proc.device;
  m.precision = proc.precision;
  m.model = models::build_model_on(m.cfg.model, m.device);
  io::load_state_into(*m.model, w.file, /*strict=*/true);  // another shape or model: every name listed
  m.model->eval();
  return m;
}

}  // namespace trainer::engine
