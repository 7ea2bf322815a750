#pragma once

#include <filesystem>
#include <string>

namespace trainer::engine {

// Whose checkpoints a folder holds: every checkpoint's state.json names the run directory that saved
// it (run_dir). Throws std::runtime_error, naming both runs, when resuming from `dir` would take
// another run's weights as this run's:
// - an explicit checkpoint.dir (`explicit_dir`) whose newest checkpoint another run directory that
//   still exists saved (its saves would also be pruned by this run's);
// - the run's own checkpoints/ whose newest checkpoints were saved by another run while older ones
//   are this run's (a step folder copied in: the steps between would never be logged here).
// A run directory copied or moved with its checkpoints/ (no checkpoint is this run's yet), a moved
// owner, and checkpoints saved before run_dir existed are taken as this run's.
void refuse_other_runs_checkpoints(const std::filesystem::path& dir, const std::string& run_root, bool explicit_dir);

// state.json of `folder` says it was saved for a stop signal or a data change, not by the schedule
// (io::kStateUnscheduled); false when it does not read.
bool saved_unscheduled(const std::filesystem::path& folder);

}  // namespace trainer::engine
