// data.on_change: what a run does when a data file changed under it (data/file_watch.hpp finds the
// change: at an epoch boundary, or when a read of a truncated mapping faults). The Trainer keeps
// the position of the last completed step (a step whose batch failed is redone), then either stops
// (CheckpointManager::stop_for_data_change: a checkpoint, exit 65) or, under reload, swaps in the
// datasets reopened here and goes on. docs/RELIABILITY.md, "Data that changes".
#pragma once

#include <cstdint>
#include <optional>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"

namespace trainer::engine {

struct ReopenedData {
  data::DatasetPair data;
  data::LoaderState resume_at;  // the start of the epoch after the last step's (its own if unconsumed)
};

// With data.on_change: reload in a one-process run: the datasets opened again as at start-up
// (reindexed, checked against the model) with the training samples' shape unchanged, and where the
// loader goes on. Logs what it did. nullopt (an error logged for a failed reopen) when the run must
// stop instead: on_change error, a multi-rank run (whose ranks cannot agree on it mid-step), or data
// that cannot be reopened.
std::optional<ReopenedData> reopen_changed_data(const config::RunConfig& cfg, const data::DataChanged& change,
                                                const data::Dataset& old_train, const data::LoaderState& pos,
                                                int64_t step, bool multi_rank);

}  // namespace trainer::engine
