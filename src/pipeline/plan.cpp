#include "pipeline/plan.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "config/load.hpp"
#include "pipeline/timeline.hpp"
#include "pipeline/validate.hpp"

namespace trainer::pipeline {

Schedule schedule_of(config::PipeSchedule s) {
  switch (s) {
    case config::PipeSchedule::GPipe: return Schedule::GPipe;
    case config::PipeSchedule::OneFOneB: return Schedule::OneFOneB;
    case config::PipeSchedule::Interleaved1F1B: return Schedule::Interleaved1F1B;
    case config::PipeSchedule::ZeroBubble: return Schedule::ZeroBubble;
  }
  throw std::invalid_argument("pipeline: unknown schedule");
}

Plan make_plan(const config::RunConfig& c) {
  const auto& p = c.dist.pipeline;
  if (c.dist.pipeline_parallel < 2) throw std::invalid_argument("pipeline: dist.pipeline_parallel is 1");
  const auto* arch = config::find_arch(c.model.arch);
  if (!arch || !arch->pipeline_units)
    throw std::invalid_argument("pipeline: model.arch " + c.model.arch + " has no pipeline stages");
  Plan plan;
  plan.units = arch->pipeline_units(c.model);
  plan.shape = {c.dist.pipeline_parallel, config::pipeline_microbatches(c), p.virtual_stages};
  plan.schedule = schedule_of(p.schedule);
  plan.balanced = p.stages.empty();
  if (plan.balanced) {
    std::vector<double> costs;
    for (const auto& u : plan.units) costs.push_back(u.cost);
    plan.stages = balance_stages(costs, plan.shape.stages());
  } else {
    for (const auto& e : p.stages) {
      std::string why;
      const auto r = config::parse_stage_entry(e, why);
      if (!r) throw std::invalid_argument("dist.pipeline.stages: " + why);
      plan.stages.push_back(*r);
    }
    std::vector<std::string> names;
    for (const auto& u : plan.units) names.push_back(u.name);
    if (const auto bad = check_stage_list(plan.stages, names, plan.shape.stages()); !bad.empty())
      throw std::invalid_argument("dist.pipeline.stages: " + bad);
  }
  return plan;
}

std::string describe_plan(const Plan& plan) {
  const auto& sh = plan.shape;
  double total = 0;
  for (const auto& u : plan.units) total += u.cost;
  std::string out = fmt::format("pipeline: {} stages on {} ranks ({}), {} microbatches a batch, schedule {}\n",
                                sh.stages(), sh.ranks,
                                plan.balanced ? "stages auto: balanced by estimated forward FLOPs"
                                              : "dist.pipeline.stages",
                                sh.microbatches, schedule_name(plan.schedule));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& r = plan.stages[s];
    double cost = 0;
    for (int64_t u = r.first; u <= r.last; ++u) cost += plan.units[static_cast<size_t>(u)].cost;
    const auto& first = plan.units[static_cast<size_t>(r.first)].name;
    const auto& last = plan.units[static_cast<size_t>(r.last)].name;
    out += fmt::format("  stage {} on pp rank {}: units {} ({}{}), {:.1f} % of the cost\n", s,
                       sh.rank_of(static_cast<int64_t>(s)), config::stage_entry_text(r), first,
                       r.first == r.last ? "" : " .. " + last, total > 0 ? 100.0 * cost / total : 0.0);
  }
  const auto program = make_schedule(plan.schedule, sh);
  const auto v = validate(program, sh);
  out += "  schedule check: " + v.summary() + "\n";
  if (!v.ok) return out;
  const auto t = simulate(program, sh);
  out += "  timeline at unit costs (F 1, B 2 = I 1 + W 1; letter + microbatch % 10, '..' idle):\n";
  out += render(t, sh);
  if (!out.empty() && out.back() != '\n') out += "\n";
  return out;
}

}  // namespace trainer::pipeline
