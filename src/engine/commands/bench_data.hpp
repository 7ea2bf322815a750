// `trainer bench-data CONFIG`: the configured input pipeline alone (no model), at several worker
// counts: samples/s, where a sample's time goes (read, decode, augment, collate), and, given a run
// directory, how many workers would keep that run's step fed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/commands/commands.hpp"

namespace trainer::engine {

struct BenchDataArgs : ConfigArgs {
  std::vector<int64_t> workers;  // --workers 1,2,4 (empty: 1, 2 and data.workers)
  int64_t batches = 20;          // --batches: timed batches per worker count (after a warm-up)
  bool validation = false;       // --val: the validation pipeline (resize + centre crop) instead
  std::string run_dir;           // --run: a run directory whose metrics.jsonl gives the step's rate
};

int cmd_bench_data(const BenchDataArgs& args);

}  // namespace trainer::engine
