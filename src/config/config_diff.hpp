// Which keys that change training differ between two configs: the config a run directory was trained
// with (its config.yaml) and the one a new `trainer run` brings to it.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::config {

struct KeyChange {
  std::string key, before, after;  // the values as YAML text
};

// The keys whose values differ, in schema order, leaving out those a resumed run may change
// (FieldInfo::changes_training false: where and how fast it runs, how long, what it logs and keeps) and
// the batch arithmetic a change of world size explains: train.global_batch_size when it was derived
// (batch_size and grad_accum equal) and train.grad_accum when it is (batch_size and the global batch equal).
std::vector<KeyChange> training_changes(const RunConfig& before, const RunConfig& after);

// "optim.lr 0.1 -> 0.05, train.batch_size 64 -> 128".
std::string changes_text(const std::vector<KeyChange>& changes);

}  // namespace trainer::config
