#include "engine/checkpoint/folder_owner.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fstream>
#include <optional>
#include <stdexcept>

#include "io/checkpoint.hpp"

namespace trainer::engine {
namespace {

// A folder's state.json, not verified (resume's verification names a folder whose file does not
// read): not an object when it does not parse.
nlohmann::json state_of(const std::filesystem::path& folder) {
  std::ifstream in(folder / "state.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// state.json's run_dir ("" when it predates the field); nullopt when state.json does not read
std::optional<std::string> owner_of(const std::filesystem::path& folder) {
  const auto state = state_of(folder);
  if (!state.is_object()) return std::nullopt;
  const auto it = state.find("run_dir");
  return it != state.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

void refuse_other_runs_checkpoints(const std::filesystem::path& dir, const std::string& run_root, bool explicit_dir) {
  const auto folders = io::step_folders_newest_first(dir);
  for (size_t i = 0; i < folders.size(); ++i) {
    const auto owner = owner_of(folders[i].path);
    if (!owner) continue;
    if (owner->empty() || *owner == run_root) return;
    const auto name = folders[i].path.filename().string();
    if (!explicit_dir) {
      bool ours_below = false;  // an older checkpoint of this very run directory
      for (size_t j = i + 1; j < folders.size() && !ours_below; ++j) ours_below = owner_of(folders[j].path) == run_root;
      if (!ours_below) {
        spdlog::info("{}: its checkpoints were saved by the run in {} (a copied or moved run directory): this run ({}) "
                     "continues them", dir.string(), *owner, run_root);
        return;
      }
      throw std::runtime_error(
          folders[i].path.string() + " was saved by another run (the run in " + *owner + "), but the older "
          "checkpoints in " + dir.string() + " are this run's (" + run_root + "): resuming it would continue "
          "another run's weights as this run's, and the steps between would be missing from this run's records. "
          "Move " + name + " out of the folder; to start from it on purpose, pass --resume with its new path");
    }
    std::error_code ec;
    if (!std::filesystem::exists(*owner, ec)) {  // that run directory was moved or renamed (to this one, likely)
      spdlog::warn("checkpoint.dir {}: its newest checkpoint was saved by the run in {}, which is gone (moved?): this "
                   "run ({}) takes the folder over", dir.string(), *owner, run_root);
      return;
    }
    throw std::runtime_error("checkpoint.dir " + dir.string() + " holds the checkpoints of another run (" + name +
                             " was saved by the run in " + *owner + ", this run is " + run_root +
                             "): its saves would be resumed as this run's and pruned by this run's saves. Give this "
                             "run its own checkpoint.dir (another folder, or \"\" for <run dir>/checkpoints); to start "
                             "from one of them, do that and also pass --resume " + folders[i].path.string());
  }
}

bool saved_unscheduled(const std::filesystem::path& folder) {
  const auto state = state_of(folder);
  return state.is_object() && state.value(io::kStateUnscheduled, false);
}

}  // namespace trainer::engine
