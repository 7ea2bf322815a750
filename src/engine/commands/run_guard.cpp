#include "engine/commands/run_guard.hpp"

#include <system_error>

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

}  // namespace

RunGuard check_run_directory(const config::RunConfig& cfg, const fs::path& root, const ResumeOptions& resume,
                             bool force) {
  RunGuard g;
  const fs::path saved_file = root / "config.yaml";
  std::error_code ec;
  if (!fs::exists(saved_file, ec) || !holds_a_run(cfg, root)) return g;
  std::string changed;
  try {
    const auto saved = config::load_config_text(
        RegularFile::open(saved_file.string(), 16u << 20, "a run's config").read_all(), saved_file.string());
    changed = config::changes_text(config::training_changes(saved.cfg, cfg));
  } catch (const std::exception& e) {
    changed = "its config.yaml does not load here (" + std::string(e.what()) + ")";
  }
  if (changed.empty()) return g;
  const bool asked = resume.mode == ResumeMode::Path || (resume.mode == ResumeMode::Never && force);
  if (asked) {
    g.warning = root.string() + " was trained with another config: " + changed +
                (resume.mode == ResumeMode::Path ? "; continuing with the new values (--resume " + resume.path + ")"
                                                 : "; starting over (--resume never --force)");
    return g;
  }
  g.refusal = root.string() + " holds a run trained with another config (" + saved_file.string() + "): " + changed +
              ". Nothing was started and its config.yaml is kept. Give the new config its own run directory "
              "(--set run.name=NAME or --out-dir DIR), start this one over (--resume never --force), or continue "
              "it with the new values (--resume " + checkpoint_dir(cfg, root).string() + ")";
  return g;
}

}  // namespace trainer::engine
