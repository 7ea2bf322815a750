#include "pipeline/partition.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace trainer::pipeline {

std::vector<UnitRange> balance_stages(const std::vector<double>& cost, int64_t stages) {
  const auto n = static_cast<int64_t>(cost.size());
  if (stages < 1) throw std::invalid_argument("pipeline: at least one stage");
  if (n < stages)
    throw std::invalid_argument("pipeline: " + std::to_string(stages) + " stages need at least as many units; the model has " +
                                std::to_string(n));
  for (double c : cost)
    if (!(c >= 0)) throw std::invalid_argument("pipeline: a unit's cost is negative or not a number");
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + cost[static_cast<size_t>(i)];
  auto sum = [&](int64_t a, int64_t b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };  // [a, b)
  constexpr double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest possible maximum stage cost of units [0, i) in k stages; cut[k][i] the
  // start of the k-th stage in that split
  std::vector<std::vector<double>> best(static_cast<size_t>(stages + 1), std::vector<double>(static_cast<size_t>(n + 1), inf));
  std::vector<std::vector<int64_t>> cut(static_cast<size_t>(stages + 1), std::vector<int64_t>(static_cast<size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= stages; ++k)
    for (int64_t i = k; i <= n - (stages - k); ++i)
      for (int64_t j = i - 1; j >= k - 1; --j) {  // the k-th stage holds [j, i); the largest j first
        const double m = std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)], sum(j, i));
        if (m < best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = m;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
  std::vector<UnitRange> out(static_cast<size_t>(stages));
  for (int64_t k = stages, i = n; k >= 1; --k) {
    const int64_t j = cut[static_cast<size_t>(k)][static_cast<size_t>(i)];
    out[static_cast<size_t>(k - 1)] = UnitRange{j, i - 1};
    i = j;
  }
  return out;
}

}  // namespace trainer::pipeline
