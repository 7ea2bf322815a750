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

std::string check_stage_list(const std::vector<UnitRange>& list, const std::vector<std::string>& names, int64_t stages) {
  const auto n = static_cast<int64_t>(names.size());
  auto name = [&](int64_t u) { return u >= 0 && u < n ? names[static_cast<size_t>(u)] : "unit " + std::to_string(u); };
  std::vector<int> seen(static_cast<size_t>(n), 0);
  std::string bad;
  auto add = [&](const std::string& e) { bad += (bad.empty() ? "" : "; ") + e; };
  for (size_t s = 0; s < list.size(); ++s) {
    const auto& r = list[s];
    if (r.first > r.last) add("stage " + std::to_string(s) + " is empty (" + std::to_string(r.first) + " > " + std::to_string(r.last) + ")");
    if (r.first < 0 || r.last >= n) add("stage " + std::to_string(s) + " names units outside 0.." + std::to_string(n - 1));
    for (int64_t u = std::max<int64_t>(r.first, 0); u <= std::min(r.last, n - 1); ++u) ++seen[static_cast<size_t>(u)];
    if (s > 0 && r.first <= list[s - 1].last && r.first >= 0)
      add("stage " + std::to_string(s) + " starts at " + name(r.first) + ", not after stage " + std::to_string(s - 1) +
          "'s last unit " + name(list[s - 1].last) + " (stages go in forward order)");
  }
  std::string missing, doubled;
  for (int64_t u = 0; u < n; ++u) {
    if (seen[static_cast<size_t>(u)] == 0) missing += (missing.empty() ? "" : ", ") + name(u);
    if (seen[static_cast<size_t>(u)] > 1) doubled += (doubled.empty() ? "" : ", ") + name(u);
  }
  if (!missing.empty()) add("no stage holds " + missing);
  if (!doubled.empty()) add("more than one stage holds " + doubled);
  if (static_cast<int64_t>(list.size()) != stages)
    add(std::to_string(list.size()) + " stages listed, the layout has " + std::to_string(stages));
  return bad;
}

}  // namespace trainer::pipeline
