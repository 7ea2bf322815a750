// A run's pipeline plan from its config, before any process starts: the stages (dist.pipeline.stages
// auto balanced by the units' estimated costs, or the explicit list), the shape (P, M, v), the
// schedule's action lists, their offline validation and the timeline they imply. `trainer check`
// prints it (describe_plan); the engine runs the same plan.
#pragma once

#include <string>
#include <vector>

#include "config/arch.hpp"
#include "config/config.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"

namespace trainer::pipeline {

struct Plan {
  std::vector<config::ArchUnit> units;  // the model's, in forward order
  std::vector<UnitRange> stages;        // P x v, stage s on rank s % P
  PipelineShape shape;
  Schedule schedule = Schedule::OneFOneB;
  bool balanced = true;                 // stages auto (else the config's list)
};

Schedule schedule_of(config::PipeSchedule s);

// std::invalid_argument when the config has no plan (P = 1, a family without stages, a list that
// does not parse): validate() refuses those first, so a loaded config always has one when P > 1.
Plan make_plan(const config::RunConfig& cfg);

// The plan as `trainer check` prints it: each stage's units and share of the cost, the schedule's
// validation, each rank's timeline at unit costs, the bubble and the activations held.
std::string describe_plan(const Plan& plan);

}  // namespace trainer::pipeline
