// Which of a model's units (models::Model::units(), embeddings and head included) each pipeline
// stage holds: contiguous ranges in forward order, every unit exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::pipeline {

struct UnitRange {
  int64_t first = 0, last = 0;  // unit indices, inclusive
  int64_t size() const { return last - first + 1; }
  bool operator==(const UnitRange&) const = default;
};

// dist.pipeline.stages auto: `stages` contiguous ranges over units of the given costs that minimise
// the most expensive stage (exact, by dynamic programming), for any number of units, divisible by
// the stage count or not. Ties go to the split that puts more units early. std::invalid_argument
// when there are fewer units than stages or a cost is negative.
std::vector<UnitRange> balance_stages(const std::vector<double>& unit_costs, int64_t stages);

// dist.pipeline.stages [list]: the ranges must cover units 0 .. n-1 in order, each unit exactly once,
// and be `stages` in number. Returns what is wrong, naming the missing, doubled or out-of-order
// units by `unit_names` ("" when the list is good).
std::string check_stage_list(const std::vector<UnitRange>& list, const std::vector<std::string>& unit_names,
                             int64_t stages);

}  // namespace trainer::pipeline
