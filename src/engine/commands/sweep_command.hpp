// `trainer sweep CONFIG --set optim.lr=0.01,0.05 --set train.batch_size=64,128 [--random N]`: one
// `trainer run` per point of the grid (or N points drawn from it), each in its own run folder under
// the sweep's folder, points already finished skipped, a table of the final metrics at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::engine {

struct SweepArgs {
  std::string config;
  std::vector<std::string> sets;  // --set: one value (every point), a,b,c (an axis) or a distribution
  std::string out_dir;            // --out-dir: the folder holding the sweep's folder (default run.out_dir)
  std::string name;               // --name: the sweep's folder (default "<run.name>-sweep")
  int64_t random = 0;             // --random N: N points drawn instead of the whole grid
  uint64_t seed = 0;              // --seed: the draw's seed
  int64_t jobs = 1;               // --jobs: points running at once
  int64_t nproc = 1;              // --nproc: ranks per point (`trainer launch -n`)
  bool dry_run = false;           // --dry-run: list the points and their state, run nothing
};

// Every point's config is loaded and validated (and its run folder checked against the config it
// holds) before the first one starts: any error exits 2 with nothing started. The points run as
// child processes (their output in <sweep>/logs/<point>.log); a stop signal is forwarded to the
// running ones and no new one starts. Exit: 0 every point finished, 1 one failed (the others still
// ran), 75 stopped by a signal (each running point saved a checkpoint: the same command resumes).
int cmd_sweep(const SweepArgs& args);

}  // namespace trainer::engine
