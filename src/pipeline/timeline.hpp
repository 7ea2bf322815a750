// What a schedule implies in time, before any process runs: each rank's actions at unit costs
// (forward 1, backward 2 = input half 1 + weight half 1, messages free), the bubble (the share of
// rank-time spent waiting) and the most activations a rank holds. `trainer check` prints it; the
// measured bubble of a real run is in its train records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace trainer::pipeline {

struct Segment {
  Action action;
  int64_t start = 0, end = 0;  // in units of one forward
};

struct Timeline {
  std::vector<std::vector<Segment>> ranks;  // compute only, in order
  int64_t makespan = 0;
  double bubble = 0;                       // 1 - busy / (ranks x makespan)
  std::vector<int64_t> peak_activations;   // per rank: the most microbatch-stages whose activations it holds
};

// The program must be legal (validate.hpp); std::logic_error otherwise (a wait that never ends).
Timeline simulate(const Program& program, const PipelineShape& shape);

// One row per rank, one 2-character cell per unit of time: the compute's letter (F, B, I, W;
// lowercase for the odd virtual stages of an interleaved schedule) and its microbatch modulo 10,
// ".." for idle; then the bubble and peak activations. Rows longer than `max_width` cells are cut.
std::string render(const Timeline& t, const PipelineShape& shape, int64_t max_width = 120);

}  // namespace trainer::pipeline
