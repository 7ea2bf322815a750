// What a run directory's metrics.jsonl says about the attempts before this one: how many there
// were, how long they ran, the last step they logged and their training losses (the resume check
// compares against these). Read by rank 0 when a run resumes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace trainer::obs {

struct RunHistory {
  int64_t attempts = 0;    // attempt records, or 1 for a file of records written before they existed
  double wall_s = 0;       // per attempt: the latest clock it is known to have reached (its last
                           // record, or the checkpoint the next attempt resumed from when that
                           // attempt saved it) minus its start, summed
  int64_t last_step = -1;  // highest step of a train or eval record (-1: none)
  int64_t last_train_step = -1, last_eval_step = -1;  // the same per kind: a kill between a step's train
                                                      // and eval records leaves the eval one to write
  std::map<int64_t, double> train_losses;  // by step; a later record of the same step wins
  std::vector<std::string> checkpoint_dirs;  // where the attempts saved checkpoints, each once, by its last use
  double last_reached_s = -1;  // the clock the last attempt is known to have reached (-1: no attempt)
};

// Lines that are not JSON objects are skipped: the file may end in a line torn by a kill. A missing
// file is an empty history.
RunHistory read_history(const std::filesystem::path& metrics);

}  // namespace trainer::obs
