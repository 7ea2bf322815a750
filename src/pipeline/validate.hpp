// The offline proof that a schedule's action lists can run: no process, no tensor. It executes the
// lists under the executor's rules and reports the first thing that breaks, naming the rank, the
// action's index in that rank's list and the action.
//
// The execution model (what the executor guarantees): each rank runs its list in order; a send never
// blocks (it is posted, and completes once the peer receives it); a receive blocks until the peer's
// matching send is posted; messages between two ranks arrive in the order they were sent, so the
// n-th receive on a channel must be the n-th send's message (same kind, stage and microbatch).
// A compute runs when its inputs are on the rank: a forward needs the previous stage's activation
// (computed here, or received), a backward (or its input half) needs its own forward and the next
// stage's gradient (or the loss, on the last stage), a weight half needs its input half.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace trainer::pipeline {

struct Validation {
  bool ok = true;
  std::vector<std::string> errors;  // each names the rank, the action index and the action
  std::string summary() const;      // "legal" or the errors, one per line
};

// Checks `program` against `shape`: every (stage, micro) computed exactly once on its stage's rank
// (a forward, and a backward or both halves), every message's peer the neighbouring stage's rank,
// every receive matched by the peer's send, every send received, no wait that never ends.
Validation validate(const Program& program, const PipelineShape& shape);

}  // namespace trainer::pipeline
