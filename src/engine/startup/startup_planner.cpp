#include "engine/startup/startup_planner.hpp"

#include <spdlog/spdlog.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "config/file_read.hpp"
#include "config/load.hpp"
#include "engine/startup/pipeline_memory.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "engine/startup/autotune.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/startup/memory_plan.hpp"
#include "engine/startup/precision_auto.hpp"
#include "engine/optim/train_state.hpp"
#include "io/run_dir.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// model.attention auto (engine/startup/autotune.hpp): rank 0 decides, every rank takes its choice, and the
// run directory keeps it (autotune.json) so that a resumed run computes with the same kernels.

// <run dir>/autotune.json as an object ({} when there is none yet).
nlohmann::json StartupPlanner::read_autotune() const {
  const auto file = autotune_file();
  if (!std::filesystem::exists(file)) return nlohmann::json::object();
  // a folder, a FIFO or a huge file there is named as such (a stream read it as "basic_filebuf::underflow")
  const auto text = RegularFile::open<std::runtime_error>(file.string(), 1u << 20, "the run's start-up choices")
                        .read_all<std::runtime_error>();
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw std::runtime_error(file.string() + ": not a JSON object; delete it to measure again");
  return j;
}

// Rank 0 merges `entries` into autotune.json (atomically).
void StartupPlanner::write_autotune(const nlohmann::json& entries) const {
  if (!dist::writes_run_files(env_)) return;  // a replacement of rank 0 reads it but does not write it
  auto j = read_autotune();
  j.update(entries);
  io::write_file_atomic(autotune_file(), j.dump(2) + "\n");
}

// Rank 0's decisions reach the other ranks through collectives, never through the file, so ranks
// that do not share the run directory still agree.
bool StartupPlanner::rank0_says(bool flag) { return dist_ && dist_->active() ? dist_->any(env_.rank == 0 && flag) : flag; }

void StartupPlanner::resolve_attention() {
  const auto file = autotune_file();
  bool kept = false, math = false;
  // rank 0 decides; so does a process alone, a replacement that will join a running group included:
  // it reads the choice the group's rank 0 wrote at the start (a default would differ from it)
  const bool decides = env_.rank == 0 || !dist_ || !dist_->active();
  if (decides) {
    const auto saved = read_autotune();
    if (saved.contains("model.attention")) {
      const auto& a = saved["model.attention"];
      if (!a.is_string() || (a != "sdpa" && a != "math"))
        throw std::runtime_error(file.string() + ": \"model.attention\" is not sdpa or math; delete the file to measure again");
      kept = true;
      math = a == "math";
    }
  }
  kept = rank0_says(kept);
  AttentionChoice c;
  if (!kept && decides) {
    const auto rng = rng_state_tensors(device_);  // the timing draws random inputs
    const auto probe = models::builtin_models().spec(cfg_.model.arch).attention_probe(cfg_.model);
    c = choose_attention(probe, cfg_.train.batch_size, precision_, device_, cfg_.run.deterministic);
    restore_rng_state(rng, device_);
    math = c.attention == config::Attention::Math;
  }
  if (!decides) c.reason = "rank 0's measurement";
  math = rank0_says(math);
  cfg_.model.attention = math ? config::Attention::Math : config::Attention::Sdpa;
  const std::string& chosen = config::name_of(cfg_.model.attention);
  if (kept) {
    spdlog::info("model.attention auto: {} (kept from {})", chosen, file.string());
    return;
  }
  write_autotune({{"model.attention", chosen}, {"reason", c.reason}, {"sdpa_ms", c.sdpa_ms},
                  {"math_ms", c.math_ms}});
  spdlog::info("model.attention auto: {} ({})", chosen, c.reason);
}

Precision StartupPlanner::resolve_model_choices(const data::Dataset& train_set, bool attention_probe) {
  if (cfg_.train.precision == config::Precision::Auto) {  // first: what follows is measured in the precision
    const int64_t b = cfg_.train.batch_size > 0 ? cfg_.train.batch_size
                                                : std::min<int64_t>(16, cfg_.train.global_batch_size / env_.world_size);
    resolve_precision(train_set, b);
  }
  if (attention_probe && cfg_.model.attention == config::Attention::Auto) resolve_attention();
  return precision_;
}

Precision StartupPlanner::resolve_precision(const data::Dataset& train_set, int64_t batch) {
  const auto file = autotune_file();
  bool kept = false;
  Precision chosen = Precision::Fp32;
  PrecisionChoice c;
  // rank 0 reads the file; so does a rank alone in its world (a replacement joining a running group, whose
  // peers are busy training: it takes their precision from the run directory when it shares it)
  const bool decides = env_.rank == 0 || !(dist_ && dist_->active());
  if (decides) {
    const auto saved = read_autotune();
    if (saved.contains("train.precision")) {  // the run started in it: a resume computes in the same
      const auto& e = saved["train.precision"];
      const std::string name = e.is_object() && e.contains("choice") && e["choice"].is_string() ? e["choice"].get<std::string>() : "";
      if (name != "fp32" && name != "bf16" && name != "fp16")
        throw std::runtime_error(file.string() + ": \"train.precision\" has no choice fp32, bf16 or fp16; delete the "
                                                 "file to decide again");
      kept = true;
      chosen = config::parse_enum<Precision>(name, "train.precision");
    }
  }
  // (no collective for `kept`: only the deciding rank logs and writes it; two for the choice below, which
  // tests/dist/test_recovery counts among the start-up's collectives)
  if (!kept && decides) {
    const auto rng = rng_state_tensors(device_);  // the probe's model and inputs draw random numbers
    c = choose_precision(cfg_, device_, train_set.sample_shape(), train_set.num_classes(), batch);
    restore_rng_state(rng, device_);
    chosen = c.precision;
  }
  // rank 0's choice reaches every rank as two flags
  const bool bf16 = rank0_says(chosen == Precision::Bf16), fp16 = rank0_says(chosen == Precision::Fp16);
  chosen = bf16 ? Precision::Bf16 : fp16 ? Precision::Fp16 : Precision::Fp32;
  check_precision_supported(chosen, device_);  // a kept fp16 on a CPU
  cfg_.train.precision = precision_ = chosen;
  if (kept) {
    spdlog::info("train.precision auto: {} (kept from {})", precision_name(chosen), file.string());
    return chosen;
  }
  if (!decides) c.reason = "rank 0's choice";
  const auto& f = c.facts;
  write_autotune({{"train.precision",
                   {{"choice", precision_name(chosen)}, {"reason", c.reason}, {"cpu_bf16_flags", f.cpu_bf16_flags},
                    {"probe_batch", f.probe_batch}, {"fp32_ms", f.fp32_ms}, {"bf16_ms", f.bf16_ms}}}});
  spdlog::info("train.precision auto: {} ({})", precision_name(chosen), c.reason);
  return chosen;
}

// The smallest of the ranks' `mine` (each one of `candidates`, or 0), on every rank: walking the
// candidates from the largest, the first that no rank is below. One rank alone: `mine`.
int64_t StartupPlanner::agree_on_smallest(const std::vector<int64_t>& candidates, int64_t mine) {
  if (!dist_ || !dist_->active()) return mine;
  for (int64_t c : candidates)
    if (!dist_->any(c > mine)) return c;
  return 0;
}

// train.batch_size auto: the largest divisor of the per-rank batch that fits this process's memory
// (see memory_plan.hpp), the same on every rank (the smallest choice wins); grad_accum follows, so
// train.global_batch_size is kept. The probe runs on a separate model and restores the generators.
void StartupPlanner::choose_micro_batch(const data::Dataset& train_set) {
  // the ranks of one tp group read the same batches: the samples per step are the dp ranks'
  const int64_t dp = config::data_parallel_size(cfg_, env_.world_size);
  const int64_t per_rank = cfg_.train.global_batch_size / dp;
  const auto candidates = micro_batch_candidates(per_rank);
  // a resumed run keeps its micro-batch (BatchNorm statistics depend on it, and the resume check
  // compares losses) unless the world size, the global batch, the budget or the mesh changed
  nlohmann::json key = {{"world_size", env_.world_size},
                        {"global_batch_size", cfg_.train.global_batch_size},
                        {"memory_budget_gb", cfg_.train.memory_budget_gb}};
  if (cfg_.dist.tensor_parallel > 1) key["tensor_parallel"] = cfg_.dist.tensor_parallel;
  if (cfg_.dist.pipeline_parallel > 1) key["pipeline_parallel"] = cfg_.dist.pipeline_parallel;
  int64_t kept_b = 0;
  if (env_.rank == 0) {
    const auto saved = read_autotune();
    if (saved.contains("train.batch_size") && saved["train.batch_size"].is_object()) {
      auto entry = saved["train.batch_size"];
      const int64_t b = entry.value("micro_batch", int64_t{0});
      entry.erase("micro_batch");
      if (entry == key && b > 0 && per_rank % b == 0) kept_b = b;
    }
  }
  if (rank0_says(kept_b > 0)) {
    // rank 0's kept micro-batch reaches every rank as the minimum over ranks of
    // (rank 0: kept, others: the whole per-rank batch)
    const int64_t b = agree_on_smallest(candidates, env_.rank == 0 ? kept_b : per_rank);
    cfg_.train.batch_size = b;
    cfg_.train.grad_accum = per_rank / b;
    spdlog::info("train.batch_size auto: micro-batch {} x {} accumulation x {} rank(s) = global batch {} (kept "
                 "from {})",
                 b, cfg_.train.grad_accum, dp, cfg_.train.global_batch_size, autotune_file().string());
    return;
  }
  const auto mb = memory_budget(cfg_.train.memory_budget_gb, "train.memory_budget_gb", device_, env_.local_world_size);
  if (mb.bytes <= 0)
    throw std::runtime_error("train.batch_size auto: this machine's memory is unknown; set train.memory_budget_gb");
  const auto rng = rng_state_tensors(device_);
  if (cfg_.dist.pipeline_parallel > 1) return choose_pipeline_micro_batch(train_set, per_rank, dp, mb, key, rng);
  // it measures sizes (a rank's slices at tensor parallel); its weights do not matter
  auto probe_parts = build_probe_model(cfg_, device_);
  auto& probe_model = probe_parts.model;
  const bool image = probe_model->input_kind() == models::InputKind::Image;
  const auto fixed = strategy_memory_plan(cfg_.dist, dp, *probe_model, cfg_.optim).fixed;
  const int64_t b1 = image ? 2 : 1;
  const auto probe = probe_activations(*probe_model, train_set.sample_shape(), train_set.num_classes(),
                                       precision_, device_, cfg_.model.channels_last && image, b1, 2 * b1,
                                       /*max_b2=*/std::min<int64_t>(64, per_rank));
  const double budget = mb.bytes;
  const std::string& budget_source = mb.source;
  int64_t chosen = largest_fitting(fixed, probe, budget, candidates);
  if (device_.is_cuda() && chosen > 0) {
    // the estimate is a start: a real step at that size must run; out of memory steps down
    chosen = search_fitting(candidates, chosen, [&](int64_t b) {
      bool ok = true;
      try {
        auto reserve = torch::empty({fixed.optimizer + fixed.ddp_buckets}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
        (void)probe_activations(*probe_model, train_set.sample_shape(), train_set.num_classes(), precision_,
                                device_, cfg_.model.channels_last && image, b, b);
      } catch (const c10::OutOfMemoryError&) {
        ok = false;
      }
      if (!ok) spdlog::info("train.batch_size auto: micro-batch {} ran out of GPU memory; trying a smaller one", b);
      for (auto& p : probe_model->parameters()) p.mutable_grad() = torch::Tensor();
      device::cuda_empty_cache();
      return ok;
    });
  }
  probe_model.reset();
  restore_rng_state(rng, device_);
  chosen = agree_on_smallest(candidates, chosen);  // the largest micro-batch that fits on every rank
  if (chosen == 0)
    throw std::runtime_error(fmt::format(
        "train.batch_size auto: not even a micro-batch of 1 fits {} ({}): {} held across steps (parameters {}, "
        "optimizer {}, buckets {}{}) + a step of {} + {} per sample (measured by the {}); set "
        "model.activation_checkpointing, use bf16, or give more memory",
        bytes_text(budget), budget_source, bytes_text(static_cast<double>(fixed.total())), bytes_text(fixed.parameters),
        bytes_text(fixed.optimizer), bytes_text(fixed.ddp_buckets),
        fixed.gathered > 0 ? ", gathered units " + bytes_text(fixed.gathered) : std::string(),
        bytes_text(probe.intercept()), bytes_text(probe.per_sample()), probe.how));
  cfg_.train.batch_size = chosen;
  cfg_.train.grad_accum = per_rank / chosen;
  auto entry = key;
  entry["micro_batch"] = chosen;
  write_autotune({{"train.batch_size", entry}});
  spdlog::info("train.batch_size auto: micro-batch {} x {} accumulation x {} rank(s) = global batch {}; estimated "
               "{} of a {} budget ({}): {} held + a step of {} + {} per sample x {} (measured by the {} "
               "at micro-batches {} and {}{})",
               chosen, cfg_.train.grad_accum, dp, cfg_.train.global_batch_size,
               bytes_text(static_cast<double>(fixed.total()) + probe.at(chosen)), bytes_text(budget), budget_source,
               bytes_text(static_cast<double>(fixed.total())), bytes_text(probe.intercept()),
               bytes_text(probe.per_sample()), chosen, probe.how, probe.b1, probe.b2,
               cfg_.dist.tensor_parallel > 1 ? fmt::format(", on one rank's slices of tp {}", cfg_.dist.tensor_parallel)
                                             : std::string());
}

// Pipeline parallel: every pp rank's footprint under the schedule (engine/startup/pipeline_memory.hpp:
// one microbatch per stage measured, scaled, replayed), the largest micro-batch that fits all of them;
// the same pick on every rank (the smallest wins). An estimate: no step at that size is tried first.
void StartupPlanner::choose_pipeline_micro_batch(const data::Dataset& train_set, int64_t per_rank, int64_t dp,
                                                 const MemoryBudget& mb, const nlohmann::json& key,
                                                 const io::NamedTensors& rng) {
  PipelineMemory at;
  const int64_t mine = pipeline_auto_micro_batch(cfg_, dp, per_rank, mb.bytes, device_, train_set.sample_shape(),
                                                 train_set.num_classes(), &at);
  restore_rng_state(rng, device_);
  const int64_t chosen = agree_on_smallest(micro_batch_candidates(per_rank), mine);
  double peak = 0;
  int64_t peak_rank = 0;
  for (const auto& r : at.ranks)
    if (r.total() > peak) peak = r.total(), peak_rank = r.rank;
  if (chosen == 0)
    throw std::runtime_error(fmt::format(
        "train.batch_size auto: not even the smallest micro-batch fits {} ({}) under dist.pipeline_parallel {}: pp "
        "rank {} needs {} with {} sample(s) a microbatch (`trainer check --memory` with a train.batch_size prints each "
        "rank's footprint); set model.activation_checkpointing, use bf16, more stages, or give more memory",
        bytes_text(mb.bytes), mb.source, cfg_.dist.pipeline_parallel, peak_rank, bytes_text(peak), at.micro));
  cfg_.train.batch_size = chosen;
  cfg_.train.grad_accum = per_rank / chosen;
  auto entry = key;
  entry["micro_batch"] = chosen;
  write_autotune({{"train.batch_size", entry}});
  const std::string estimate =
      chosen != mine ? std::string("the smallest of the ranks' picks")
                     : fmt::format("the pipeline's {} microbatches of {} a step hold at most {} (pp rank {}) of a {} "
                                   "budget ({}; one microbatch per stage measured by the {}, replayed through the {} "
                                   "schedule)",
                                   at.microbatches, at.micro, bytes_text(peak), peak_rank, bytes_text(mb.bytes),
                                   mb.source, at.how, config::name_of(cfg_.dist.pipeline.schedule));
  spdlog::info("train.batch_size auto: micro-batch {} x {} accumulation x {} rank(s) = global batch {}; {}", chosen,
               cfg_.train.grad_accum, dp, cfg_.train.global_batch_size, estimate);
}

void StartupPlanner::release_startup_memory() {
  if (const int64_t freed = device::release_free_host_memory(); freed > 0)
    spdlog::debug("host memory: start-up left {} free in malloc's heaps; handed back to the kernel",
                  bytes_text(static_cast<double>(freed)));
}

// An intra-op team waits at every operation's end for its slowest thread: on a host whose other
// processes already fill the cores (the last minute's load average at least the usable cores + 1), a
// descheduled thread stalls the team (the quickstart's 56 ms step took 1000-1500 ms at load 8-11 on 2
// cores with 2 threads, 200-300 ms with 1; found from outside). Said once at start, with the way out;
// the thread count stays what the config says (one that followed the load would change the sums'
// order, and a resume's losses).
static void warn_if_host_busy(const config::RunConfig& cfg, int64_t threads) {
  if (threads < 2) return;
  const double load = device::load_average_1m();
  const int64_t cores = device::usable_cpus();
  if (load < static_cast<double>(cores + 1)) return;  // a core's worth of slack: a build that just ended
  spdlog::warn("the host's load average is {:.1f} on {} usable core(s) before this run starts: with {} intra-op threads "
               "a step waits for whichever thread the other processes keep off a core (steps can take 5-20x the "
               "time they take alone). On a shared host set train.threads: 1{}",
               load, cores, threads, cfg.train.threads == 0 ? " (train.threads 0 = the usable cores)" : "");
}

ProcessSetup configure_process(const config::RunConfig& cfg, const dist::LaunchEnv& env) {
  if (cfg.train.reuse_host_memory) {
    const auto line = device::keep_host_memory_for_reuse();
    if (!line.empty()) spdlog::debug("{}", line);
  }
  const int64_t threads = device::default_threads(cfg.train.threads, env.local_world_size);
  at::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  if (cfg.run.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const auto device = device::select_device(cfg.train.device, env.local_rank);
  if (device.is_cpu()) warn_if_host_busy(cfg, threads);
  const Precision precision = cfg.train.precision;  // auto: StartupPlanner::resolve_precision
  if (precision != Precision::Auto) check_precision_supported(precision, device);
  if (precision == Precision::Bf16 && device.is_cpu() && !cpu_has_native_bf16())
    spdlog::warn("precision bf16 on a CPU without avx512_bf16/amx_bf16: bf16 matmuls are emulated and likely "
                 "slower than fp32");
  if (device.is_cuda() && cfg.run.deterministic && !std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
    // deterministic cuBLAS needs a fixed workspace configuration, read when the first handle is
    // made; without it ATen refuses every CUDA matmul of a deterministic run
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
    spdlog::info("run.deterministic on CUDA: CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS's deterministic workspace)");
  }
  if (device.is_cuda()) {
    at::globalContext().setAllowTF32CuBLAS(cfg.train.tf32);
    at::globalContext().setAllowTF32CuDNN(cfg.train.tf32);
    at::globalContext().setBenchmarkCuDNN(!cfg.run.deterministic);
  }
  return {device, precision};
}

}  // namespace trainer::engine
