// Where a run's training loop starts, decided once before it, after the objects are built:
//   resumed   --resume auto|never|PATH: every rank restores the same checkpoint into the run's
//             objects (CheckpointManager); the loader goes on at its position, the records' clock
//             and resume check from it (RunRecorder); a run sized in epochs resumed on another
//             number of data-parallel ranks is recounted (world_change.hpp)
//   fresh     nothing to resume: the weights a model computes from its training data (ConvNet's
//             model.whiten), then model.init's, on every rank; the EMA from those weights
// A replacement rank that joins a running group starts from rank 0's state instead
// (WorldRecovery::join), not from here.
#pragma once

#include <cstdint>
#include <filesystem>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/checkpoint/resume_options.hpp"
#include "engine/loop/run_evaluation.hpp"
#include "engine/loop/run_recorder.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/step/ema.hpp"
#include "models/model.hpp"

namespace trainer::engine {

struct StartPoint {
  int64_t step = 0;         // the first step the loop runs
  int64_t total_steps = 0;  // the run's length (RunRecorder already told when it changed)
  int64_t samples = -1;     // samples trained before `step` (a resume's checkpoint; -1: step x samples per step)
};

// What a start restores or loads into.
struct StartParts {
  CheckpointManager& ckpt;      // restores a checkpoint into the run's objects
  RunRecorder& records;         // the earlier attempts; the clock and the resume check of a resume
  data::DataLoader& loader;     // continues at a resumed checkpoint's position
  models::Model& model;         // model.init writes it on a fresh start
  const DataParallel* parallel; // dist.sharding full: the whole model gathered while model.init writes it
  Ema* ema;                     // null without train.ema
};

// Every rank: resumes as `how` says, else loads model.init (`primary`: this rank writes its report).
// `data_world`: the data-parallel ranks now; `total_steps`: the run's length as configured. Throws as
// CheckpointManager::resume and load_initial_weights do.
StartPoint resume_or_start(const StartParts& p, const ResumeOptions& how, const config::RunConfig& cfg,
                           const std::filesystem::path& run_root, bool primary, int64_t data_world,
                           int64_t total_steps);

// The start point ended the run: its last step with the final evaluation made (a stop signal at the
// last step saved before it: the end is made now), or early stopping at its evaluation. Says so.
// `joined`: a replacement that joined a running group (its state is rank 0's: no end is its own).
bool run_already_complete(int64_t start_step, int64_t total_steps, bool joined, const RunEvaluation& evaluation);

}  // namespace trainer::engine
