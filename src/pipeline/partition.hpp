// Which of a model's units (models::Model::units(), embeddings and head included) each pipeline
// stage holds: contiguous ranges in forward order, every unit exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/stage_list.hpp"

namespace trainer::pipeline {

using config::UnitRange;         // config/stage_list.hpp: the explicit list is checked at config load
using config::check_stage_list;

// dist.pipeline.stages auto: `stages` contiguous ranges over units of the given costs that minimise
// the most expensive stage (exact, by dynamic programming), for any number of units, divisible by
// the stage count or not. Ties go to the split that puts more units early. std::invalid_argument
// when there are fewer units than stages or a cost is negative.
std::vector<UnitRange> balance_stages(const std::vector<double>& unit_costs, int64_t stages);

}  // namespace trainer::pipeline
