// dist.pipeline_parallel and dist.pipeline.*: the checks made before anything starts (exit 2 with
// file:line:col). The stage list is checked against the units the family's ArchRules name, so a
// list that misses or doubles a unit never reaches a process (docs/PIPELINE.md).
#include <algorithm>
#include <string>

#include "config/arch.hpp"
#include "config/load.hpp"
#include "config/stage_list.hpp"

namespace trainer::config {
namespace {


// With P = 1 the pipeline keys do nothing: a value set there is a mistake worth naming.
void unused_keys(const PipelineConfig& p, const ErrFn& err) {
  const PipelineConfig d;
  const std::string why = "has no effect without dist.pipeline_parallel > 1";
  if (p.microbatches != d.microbatches) err("dist.pipeline.microbatches", why);
  if (p.schedule != d.schedule) err("dist.pipeline.schedule", why);
  if (p.virtual_stages != d.virtual_stages) err("dist.pipeline.virtual_stages", why);
  if (!p.stages.empty()) err("dist.pipeline.stages", why);
}

// The explicit list: P x v entries, each a unit range, every unit exactly once in forward order.
void stage_list(const std::vector<std::string>& entries, const std::vector<ArchUnit>& units, int64_t stages,
                const ErrFn& err) {
  std::vector<UnitRange> list;
  for (const auto& e : entries) {
    std::string why;
    const auto r = parse_stage_entry(e, why);
    if (!r) return err("dist.pipeline.stages", why);
    list.push_back(*r);
  }
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  if (const auto bad = check_stage_list(list, names, stages); !bad.empty())
    err("dist.pipeline.stages", bad + " (units: `trainer check` lists them)");
}

}  // namespace

int64_t pipeline_microbatches(const RunConfig& c) {
  const auto& p = c.dist.pipeline;
  if (p.microbatches > 0) return p.microbatches;
  const int64_t b = c.train.batch_size;
  if (c.dist.pipeline_parallel <= 1 || b <= 0) return 1;
  const int64_t cap = 2 * c.dist.pipeline_parallel * std::max<int64_t>(p.virtual_stages, 1);
  for (int64_t m = std::min(cap, b); m > 1; --m)
    if (b % m == 0) return m;
  return 1;
}

void validate_pipeline(const LoadedConfig& loaded, const ValidateOptions& opts, const ErrFn& err) {
  const RunConfig& c = loaded.cfg;
  const auto& p = c.dist.pipeline;
  const int64_t P = c.dist.pipeline_parallel, v = p.virtual_stages, T = c.dist.tensor_parallel;
  const std::string ps = "dist.pipeline_parallel " + std::to_string(P);
  if (P == 1) return unused_keys(p, err);

  const ArchRules* arch = find_arch(c.model.arch);
  if (arch && !arch->pipeline_units)
    err("dist.pipeline_parallel", "model.arch " + c.model.arch + " has no pipeline stages (GPT and ViT have); use "
                                  "dist.sharding to spread it");
  if (opts.builds_mesh && opts.world_size % (P * T) != 0)
    err("dist.pipeline_parallel", std::to_string(P) + " x dist.tensor_parallel " + std::to_string(T) +
                                      " does not divide the world size " + std::to_string(opts.world_size) +
                                      " (the launcher's ranks): the mesh is P stages of world / P ranks");
  const bool interleaved = p.schedule == PipeSchedule::Interleaved1F1B;
  if (interleaved && v < 2)
    err("dist.pipeline.schedule", "interleaved_1f1b needs dist.pipeline.virtual_stages >= 2 (stages a rank "
                                  "holds); with 1 use schedule 1f1b");  // where the schedule was set: file or --set
  if (!interleaved && v > 1)
    err("dist.pipeline.virtual_stages", std::to_string(v) + " needs schedule interleaved_1f1b (" +
                                            name_of(p.schedule) + " runs one stage a rank)");
  if (arch && arch->pipeline_units) {
    const auto units = arch->pipeline_units(c.model);
    const int64_t stages = P * v, n = static_cast<int64_t>(units.size());
    if (n < stages)
      err("dist.pipeline_parallel", ps + " x virtual_stages " + std::to_string(v) + " = " + std::to_string(stages) +
                                        " stages, but the model has " + std::to_string(n) +
                                        " units (embeddings, blocks, head): at most " + std::to_string(n));
    else if (!p.stages.empty())
      stage_list(p.stages, units, stages, err);
  }
  if (p.microbatches > 0 && c.train.batch_size > 0 && c.train.batch_size % p.microbatches != 0)
    err("dist.pipeline.microbatches", std::to_string(p.microbatches) + " does not divide train.batch_size " +
                                          std::to_string(c.train.batch_size) +
                                          " (each microbatch is an equal share of the batch)");
  // auto picks a micro-batch that divides a rank's samples per step: one of M equal shares needs M | S
  const int64_t dp = std::max<int64_t>(data_parallel_size(c, opts.world_size), 1);
  if (p.microbatches > 0 && c.train.batch_size == 0 && c.train.global_batch_size > 0 &&
      c.train.global_batch_size % dp == 0 && (c.train.global_batch_size / dp) % p.microbatches != 0)
    err("dist.pipeline.microbatches",
        std::to_string(p.microbatches) + " does not divide the " + std::to_string(c.train.global_batch_size / dp) +
            " samples a data-parallel rank takes per step (train.global_batch_size " +
            std::to_string(c.train.global_batch_size) + " over " + std::to_string(dp) +
            " rank(s)): train.batch_size auto picks a micro-batch that divides them, and each microbatch is an "
            "equal share of it; choose microbatches dividing " + std::to_string(c.train.global_batch_size / dp) +
            ", or auto");
  if (c.dist.recovery == Recovery::InProcess)
    err("dist.recovery", "in_process with " + ps + " is not supported (a regroup does not rebuild the mesh's "
                         "groups); use restart");
  // what the stages do not run yet (docs/PIPELINE.md): refused before anything starts
  const std::string not_yet = " is not wired with dist.pipeline_parallel yet";
  if (c.train.cuda_graphs) err("train.cuda_graphs", "true" + not_yet);
}

}  // namespace trainer::config
