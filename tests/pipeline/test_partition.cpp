// Stages from a model's units: the exact min-max balance against brute force, uneven counts, and
// the explicit list's errors naming the units.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <ostream>
#include <random>

#include "pipeline/partition.hpp"
#include "pipeline/unit_range_print.hpp"

using namespace trainer::pipeline;
using Catch::Matchers::Contains;

namespace {

double max_stage(const std::vector<double>& c, const std::vector<UnitRange>& split) {
  double m = 0;
  for (const auto& r : split) {
    double s = 0;
    for (int64_t u = r.first; u <= r.last; ++u) s += c[static_cast<size_t>(u)];
    m = std::max(m, s);
  }
  return m;
}

// the smallest max over every way to cut n units into k non-empty contiguous stages
double brute_force(const std::vector<double>& c, int64_t k) {
  const auto n = static_cast<int64_t>(c.size());
  double best = 1e300;
  std::vector<UnitRange> cur;
  std::function<void(int64_t, int64_t)> go = [&](int64_t start, int64_t left) {
    if (left == 1) {
      cur.push_back({start, n - 1});
      best = std::min(best, max_stage(c, cur));
      cur.pop_back();
      return;
    }
    for (int64_t end = start; end <= n - left; ++end) {
      cur.push_back({start, end});
      go(end + 1, left - 1);
      cur.pop_back();
    }
  };
  go(0, k);
  return best;
}

void require_partition(const std::vector<UnitRange>& split, int64_t n, int64_t k) {
  REQUIRE(static_cast<int64_t>(split.size()) == k);
  CHECK(split.front().first == 0);
  CHECK(split.back().last == n - 1);
  for (size_t s = 0; s < split.size(); ++s) {
    CHECK(split[s].size() >= 1);
    if (s > 0) CHECK(split[s].first == split[s - 1].last + 1);
  }
}

}  // namespace

TEST_CASE("balanced stages are the exact min-max split, for any unit count", "[unit][pipeline]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + trial % 9, k = 1 + (trial / 9) % n;
    std::vector<double> c(static_cast<size_t>(n));
    for (auto& x : c) x = cost(rng);
    INFO("n=" << n << " k=" << k);
    const auto split = balance_stages(c, k);
    require_partition(split, n, k);
    CHECK(max_stage(c, split) == Approx(brute_force(c, k)).epsilon(1e-12));
  }
}

TEST_CASE("equal units that do not divide by the stages: the early stages take one more", "[unit][pipeline]") {
  CHECK(balance_stages(std::vector<double>(6, 1.0), 4) == std::vector<UnitRange>{{0, 1}, {2, 3}, {4, 4}, {5, 5}});
  // a GPT of 5 blocks on 2 stages, embeddings and head counted as units of their own cost
  const std::vector<double> gpt{0.5, 1, 1, 1, 1, 1, 0.5};
  CHECK(balance_stages(gpt, 2) == std::vector<UnitRange>{{0, 3}, {4, 6}});
  CHECK_THROWS_WITH(balance_stages(std::vector<double>(3, 1.0), 4),
                    Contains("4 stages need at least as many units; the model has 3"));
}

TEST_CASE("an explicit stage list names the units it misses, doubles or puts out of order", "[unit][pipeline]") {
  const std::vector<std::string> names{"embeddings", "transformer.h.0", "transformer.h.1", "transformer.h.2", "head"};
  CHECK(check_stage_list({{0, 2}, {3, 4}}, names, 2).empty());
  CHECK_THAT(check_stage_list({{0, 1}, {3, 4}}, names, 2), Contains("no stage holds transformer.h.1"));
  CHECK_THAT(check_stage_list({{0, 2}, {2, 4}}, names, 2),
             Contains("more than one stage holds transformer.h.1") &&
                 Contains("stage 1 starts at transformer.h.1, not after stage 0's last unit transformer.h.1"));
  CHECK_THAT(check_stage_list({{0, 4}}, names, 2), Contains("1 stages listed, the layout has 2"));
  CHECK_THAT(check_stage_list({{0, 2}, {3, 7}}, names, 2), Contains("stage 1 names units outside 0..4"));
  CHECK_THAT(check_stage_list({{0, 4}, {4, 3}}, names, 2), Contains("stage 1 is empty"));
}
