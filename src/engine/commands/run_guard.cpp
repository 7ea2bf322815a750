#include "engine/commands/run_guard.hpp"

#include <system_error>

#include <nlohmann/json.hpp>

#include "config/config_diff.hpp"
#include "config/file_read.hpp"
#include "config/load.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "io/checkpoint.hpp"

namespace trainer::engine {
namespace {
namespace fs = std::filesystem;

// A checkpoint folder or a training record: something a fresh start or a resume would mix with.
bool holds_a_run(const config::RunConfig& cfg, const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoint_dir(cfg, root), ec))
    if (io::parse_step_dir_name(e.path().filename().string())) return true;
  const auto metrics = root / "metrics.jsonl";
  return fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
}

// The config the run in `root` was trained with, as YAML text, the file it was read from, and whether
// that is a checkpoint's resolved config: its config.yaml, else (deleted, or never written by a copy)
// the config_yaml of its newest checkpoint's state.json, so a deleted config.yaml does not let
// another config resume the run unasked. Empty when neither is there (a run with records and no
// checkpoint: nothing to resume), and when that checkpoint is another run directory's (a shared
// checkpoint.dir: the checkpoint manager refuses it at start, naming both runs).
struct SavedConfig {
  std::string text, file;
  bool resolved = false;
};
SavedConfig saved_config(const config::RunConfig& cfg, const fs::path& root) {
  std::error_code ec;
  if (const fs::path file = root / "config.yaml"; fs::exists(file, ec))
    return {RegularFile::open(file.string(), 16u << 20, "a run's config").read_all(), file.string(), false};
  for (const auto& ck : io::step_folders_newest_first(checkpoint_dir(cfg, root))) {
    const fs::path state = ck.path / "state.json";
    if (!fs::is_regular_file(state, ec)) continue;  // an unfinished folder: the resume passes it by too
    const auto j = nlohmann::json::parse(RegularFile::open(state.string(), 64u << 20, "a checkpoint's state").read_all(),
                                         nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains(io::kStateConfigYaml) || !j[io::kStateConfigYaml].is_string()) continue;
    const std::string owner = j.value("run_dir", std::string());
    if (!owner.empty() && fs::weakly_canonical(owner, ec) != fs::weakly_canonical(fs::absolute(root), ec)) return {};
    return {j[io::kStateConfigYaml].get<std::string>(), state.string() + " (config_yaml; config.yaml is missing)", true};
  }
  return {};
}

// A checkpoint's config is resolved: what the config leaves to the start (train.precision auto,
// train.batch_size auto and the accumulation it derives, model.attention auto) holds the start's
// choice there. Those keys set to auto in the new config are not changes.
std::vector<config::KeyChange> without_resolved_autos(std::vector<config::KeyChange> changes) {
  auto is_auto = [](const std::string& v) { return v == "auto" || v == "\"auto\""; };
  bool batch_auto = false;
  for (const auto& c : changes) batch_auto = batch_auto || (c.key == "train.batch_size" && is_auto(c.after));
  std::erase_if(changes, [&](const config::KeyChange& c) {
    return is_auto(c.after) || (batch_auto && (c.key == "train.grad_accum" || c.key == "train.global_batch_size"));
  });
  return changes;
}

}  // namespace

RunGuard check_run_directory(const config::RunConfig& cfg, const fs::path& root, const ResumeOptions& resume,
                             bool force) {
  RunGuard g;
  if (!holds_a_run(cfg, root)) return g;
  std::string changed, saved_file = (root / "config.yaml").string();
  bool from_checkpoint = false;  // config.yaml is gone: its newest checkpoint's config
  try {
    const auto s = saved_config(cfg, root);
    if (s.file.empty()) return g;
    saved_file = s.file;
    from_checkpoint = s.resolved;
    const auto saved = config::load_config_text(s.text, s.file);
    auto changes = config::training_changes(saved.cfg, cfg);
    changed = config::changes_text(s.resolved ? without_resolved_autos(std::move(changes)) : changes);
  } catch (const std::exception& e) {
    changed = "its config does not load here (" + std::string(e.what()) + ")";
  }
  if (changed.empty()) return g;
  const bool asked = resume.mode == ResumeMode::Path || (resume.mode == ResumeMode::Never && force);
  if (asked) {
    g.warning = root.string() + " was trained with another config: " + changed +
                (resume.mode == ResumeMode::Path ? "; continuing with the new values (--resume " + resume.path + ")"
                                                 : "; starting over (--resume never --force)");
    return g;
  }
  g.refusal = root.string() + " holds a run trained with another config (" + saved_file + "): " + changed +
              ". Nothing was started and " +
              (from_checkpoint ? "nothing there was changed" : "its config.yaml is kept") +
              ". Give the new config its own run directory "
              "(--set run.name=NAME or --out-dir DIR), start this one over (--resume never --force), or continue "
              "it with the new values (--resume " + checkpoint_dir(cfg, root).string() + ")";
  return g;
}

}  // namespace trainer::engine
