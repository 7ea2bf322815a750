// data.on_change: what a run does when a data file changed under it (data/file_watch.hpp finds the
// change: at an epoch boundary, or when a read of a truncated mapping faults). docs/RELIABILITY.md,
// "Data that changes".
//  - Agreed at a step boundary (one process; or several ranks that each looked at their files at
//    the boundary vote, engine/loop/world_recovery.hpp): every rank stops together with the usual
//    collective checkpoint (CheckpointManager::stop_for_data_change, exit 65), or, under reload,
//    reopens the data together (the reopen agreed over the ranks) and goes on.
//  - Found inside a step on one rank of several (a read that faulted): its peers may already wait
//    in the step's collectives, so no checkpoint can be agreed. The rank leaves a note in the store
//    and exits 65; a peer whose collective then fails reads the note and exits 65 too. The last
//    saved checkpoint stays; the step in flight is redone on resume.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "dist/dist_context.hpp"

namespace trainer::engine {

// The datasets a run starts with, the same on every rank: each rank opens its own copy (node-local
// files), and ranks whose copies differ drew their slices of different global orders in silence (found
// from outside: 1781 windows on one node, 890 on the other, exit 0). Their sample counts are compared
// through the store (no collective): rank 0 and a rank that differs throw DataError naming both.
data::DatasetPair open_run_datasets(const config::RunConfig& cfg, dist::DistContext& dist);

struct ReopenedData {
  data::DatasetPair data;
  data::LoaderState resume_at;  // the start of the epoch after the last step's (its own if unconsumed)
};

// With data.on_change: reload: the datasets opened again as at start-up (reindexed, checked against
// the model) with the training samples' shape unchanged, and where the loader goes on. Several ranks
// call it together (the change agreed): they go on only when every rank reopened the data and they
// all count the same samples. Logs what it did. nullopt (an error logged) when the run must stop
// instead: on_change error, or data that cannot be reopened (on some rank).
std::optional<ReopenedData> reopen_changed_data(const config::RunConfig& cfg, const std::string& change,
                                                const data::Dataset& old_train, const data::LoaderState& pos,
                                                int64_t step, dist::DistContext& dist);

// This rank's files as they are now, the training files, then the validation files (which the
// evaluation reads through the same mappings; `val` may be null): "" unchanged, else the
// DataChanged text naming the first changed file.
std::string look_at_files(const data::Dataset& train, const data::Dataset* val);

// A multi-rank run, a change found inside step `step` + 1 on this rank: the note for the peers, the
// error in this rank's log; kExitDataChanged.
int stop_alone_for_data_change(dist::DistContext& dist, const std::string& what, int64_t step);

// A collective failed: when a peer left a note (it stopped for a data change inside a step), this rank
// logs it and returns kExitDataChanged; nullopt otherwise (the failure is the run's).
std::optional<int> stop_after_peer_data_change(dist::DistContext& dist, const std::string& failure, int64_t step);

}  // namespace trainer::engine
