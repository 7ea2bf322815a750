#include "engine/trainer.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "device/cuda_graph.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "device/nvml.hpp"
#include "dist/dist_context.hpp"
#include "dist/grad_sync.hpp"
#include "engine/checkpoint_manager.hpp"
#include "engine/checkpointing.hpp"
#include "engine/early_stopping.hpp"
#include "engine/eval_metrics.hpp"
#include "engine/grad_clip.hpp"
#include "engine/graphed_step.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/optim.hpp"
#include "engine/precision.hpp"
#include "engine/schedule.hpp"
#include "engine/stop_signal.hpp"
#include "engine/train_step.hpp"
#include "engine/memory_plan.hpp"
#include "engine/autotune.hpp"
#include "engine/train_state.hpp"
#include "obs/profiler.hpp"
#include "models/model.hpp"
#include "obs/memory.hpp"
#include "obs/history.hpp"
#include "obs/mfu.hpp"
#include "obs/run_log.hpp"

namespace trainer::engine {
namespace {

using Clock = std::chrono::steady_clock;

// A multi-rank run agrees on a pending stop signal at least this often (and on every log step).
constexpr int64_t kStopCheckEvery = 10;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Host time spent per phase since the last record. On CPU the ops run synchronously, so these are
// the phases' real durations; on CUDA they are host-timeline durations (see docs/METRICS.md).
struct IntervalTimes {
  int64_t steps = 0;
  double data_ms = 0, compute_ms = 0, comm_ms = 0, optim_ms = 0;
  Clock::time_point start = Clock::now();
};

// TRAINER_INJECT_NONFINITE_GRAD=7,8: fault injection for tests and drills. The gradients of those
// optimizer steps (1-based, as logged) are made NaN on every rank after the gradient sync, once per
// listing: a step redone after a rollback is clean unless it is listed again ("7,7").
std::multiset<int64_t> injected_nonfinite_steps() {
  std::multiset<int64_t> out;
  const char* v = std::getenv("TRAINER_INJECT_NONFINITE_GRAD");
  if (!v) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int64_t step = -1;
    try {
      step = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || step < 1)
      throw std::invalid_argument("TRAINER_INJECT_NONFINITE_GRAD: '" + item + "' is not a step number (1, 2, ...)");
    out.insert(step);
  }
  return out;
}

// "nan", "inf", "-inf" or the number (a NaN's sign bit means nothing to a user).
std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.6g}", v);
}

double metric_value(const EvalResult& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "accuracy" && r.accuracy) return *r.accuracy;
  if (metric == "top5" && r.top5) return *r.top5;
  if (metric == "bpb" && r.bpb) return *r.bpb;
  if (metric == "ppl" && r.ppl) return *r.ppl;
  throw std::invalid_argument("metric '" + metric + "' is not reported by this model's evaluation");
}

class Trainer {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir, const ResumeOptions& resume)
      : cfg_(cfg), env_(env), dir_(dir), resume_(resume) {}

  int run() {
    setup();
    resume();
    install_stop_handlers();
    int rc = train_loop();
    // after a stop signal's checkpoint the process is on its way out: more signals of the same burst
    // (schedulers repeat SIGTERM) must not kill it between the saved checkpoint and exit 75, so the
    // handlers stay (found by the SIGTERM-burst test once saves got faster); otherwise the previous
    // handlers come back
    if (rc != kExitSavedAfterSignal) restore_stop_handlers();
    return rc;
  }

 private:
  // --- setup -------------------------------------------------------------------------------------
  void setup() {
    if (cfg_.train.reuse_host_memory) {
      const auto line = device::keep_host_memory_for_reuse();
      if (!line.empty()) spdlog::debug("{}", line);
    }
    at::set_num_threads(static_cast<int>(device::default_threads(cfg_.train.threads, env_.local_world_size)));
    torch::manual_seed(static_cast<uint64_t>(cfg_.run.seed));
    if (cfg_.run.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    device_ = device::select_device(cfg_.train.device, env_.local_rank);
    precision_ = parse_precision(cfg_.train.precision);
    check_precision_supported(precision_, device_);
    if (precision_ == Precision::Bf16 && device_.is_cpu() && !cpu_has_native_bf16())
      spdlog::warn("precision bf16 on a CPU without avx512_bf16/amx_bf16: bf16 matmuls are emulated and likely "
                   "slower than fp32");
    if (device_.is_cuda() && cfg_.run.deterministic && !std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
      // deterministic cuBLAS needs a fixed workspace configuration, read when the first handle is
      // made; without it ATen refuses every CUDA matmul of a deterministic run
      ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
      spdlog::info("run.deterministic on CUDA: CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS's deterministic workspace)");
    }
    if (device_.is_cuda()) {
      at::globalContext().setAllowTF32CuBLAS(cfg_.train.tf32);
      at::globalContext().setAllowTF32CuDNN(cfg_.train.tf32);
      at::globalContext().setBenchmarkCuDNN(!cfg_.run.deterministic);
    }
    if (env_.world_size > 1)
      dist_ = dist::DistContext::create(env_, cfg_.dist, device_, config::config_hash(cfg_));

    if (cfg_.model.arch == "gpt" && cfg_.model.attention == "auto") resolve_attention();
    models::ModelRegistry registry;
    models::register_builtin_models(registry);
    model_ = registry.create(cfg_.model);  // seeded above: every rank draws the same initial weights
    model_->to(device_);
    if (cfg_.model.channels_last && model_->input_kind() == models::InputKind::Image) models::to_channels_last(*model_);
    if (dist_ && dist_->active()) dist_->broadcast_module(*model_);  // init_from or not, rank 0's weights are the truth
    params_ = unique_parameters(*model_);
    if (dist_ && dist_->active()) grad_sync_ = std::make_unique<dist::GradSync>(*dist_, params_, cfg_.dist.bucket_mb);

    auto datasets = data::create_datasets(cfg_.data, cfg_.model, cfg_.run.seed);
    train_set_ = datasets.train;
    val_set_ = datasets.val;
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    if (cfg_.train.batch_size == 0) choose_micro_batch();
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    samples_per_step_ = cfg_.train.batch_size * cfg_.train.grad_accum * env_.world_size;

    optimizer_ = build_optimizer(cfg_.optim, *model_);
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    LossScalerConfig sc;
    sc.enabled = precision_ == Precision::Fp16;
    scaler_ = std::make_unique<LossScaler>(sc, device_);
    tracker_ = std::make_unique<EarlyStopping>(cfg_.train.early_stopping, tokens_ ? "loss" : "accuracy");

    inject_nonfinite_ = injected_nonfinite_steps();
    if (!inject_nonfinite_.empty())
      spdlog::warn("TRAINER_INJECT_NONFINITE_GRAD: the gradients of {} step(s) will be made NaN (fault injection)",
                   inject_nonfinite_.size());
    if (cfg_.train.cuda_graphs) setup_graph();

    flops_per_sample_ = model_->train_flops_per_sample(train_set_->sample_shape());
    peak_tflops_ = cfg_.log.peak_tflops;
    if (peak_tflops_ <= 0 && device_.is_cuda()) {
      for (const auto& d : device::cuda_devices())
        if (d.index == device_.index()) peak_tflops_ = obs::known_peak_tflops(d.name, cfg_.train.precision, cfg_.train.tf32).value_or(0);
    }

    obs::RunLogOptions lo;
    lo.primary = env_.rank == 0;
    lo.jsonl = cfg_.log.jsonl;
    lo.jsonl_path = dir_.metrics_file().string();
    lo.tensorboard = cfg_.log.tensorboard;
    lo.tensorboard_dir = (dir_.root / "tb").string();
    lo.progress_bar = obs::progress_bar_wanted(cfg_.log.progress, isatty(STDOUT_FILENO) != 0);
    lo.total_steps = total_steps_;
    log_ = std::make_unique<obs::RunLog>(lo);

    spdlog::info("model {}: {} parameters; data: {}", model_->arch(), model_->num_parameters(), train_set_->describe());
    if (val_set_) spdlog::info("validation: {}", val_set_->describe());
    spdlog::info("device {}, precision {}, {} intra-op threads, world size {}; {} steps of {} samples "
                 "({} per micro-batch x {} accumulation x {} ranks), {} batches per epoch per rank",
                 device_.str(), cfg_.train.precision, at::get_num_threads(), env_.world_size, total_steps_,
                 samples_per_step_, cfg_.train.batch_size, cfg_.train.grad_accum, env_.world_size,
                 train_loader_->batches_per_epoch());
  }

  // train.cuda_graphs (engine/graphed_step.hpp): a GraphedStep when the settings allow one, else the
  // reason in the log and eager steps.
  void setup_graph() {
    GraphConditions c;
    c.cuda = device_.is_cuda();
    c.world_size = env_.world_size;
    c.precision = precision_;
    c.nonfinite = cfg_.train.nonfinite;
    c.fused_optimizer = cfg_.optim.fused;
    c.activation_checkpointing = cfg_.model.activation_checkpointing;
    c.fault_injection = !inject_nonfinite_.empty();
    if (const auto why = graph_blocker(c); !why.empty()) {
      spdlog::warn("train.cuda_graphs: not used, every step runs eagerly: {}", why);
      return;
    }
    graph_ = std::make_unique<GraphedStep>(
        *optimizer_, params_, device_,
        [this](const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
          return graph_body(inputs, targets);
        });
    spdlog::info("train.cuda_graphs: after {} eager warm-up steps the step is captured into a CUDA graph and replayed",
                 kGraphWarmupSteps);
  }

  data::LoaderOptions loader_options(bool train) const {
    data::LoaderOptions o;
    o.batch_size = cfg_.train.batch_size;
    o.workers = cfg_.data.workers;
    o.prefetch = cfg_.data.prefetch;
    o.seed = cfg_.run.seed;
    o.rank = env_.rank;
    o.world_size = env_.world_size;
    o.train = train;
    o.pin_memory = device_.is_cuda();
    o.device_index = device_.is_cuda() ? device_.index() : -1;  // copied to the GPU by the loader's threads
    return o;
  }

  // model.attention auto (engine/autotune.hpp): rank 0 decides, every rank takes its choice, and the
  // run directory keeps it (autotune.json) so that a resumed run computes with the same kernels.
  std::filesystem::path autotune_file() const { return dir_.root / "autotune.json"; }

  // <run dir>/autotune.json as an object ({} when there is none yet).
  nlohmann::json read_autotune() const {
    const auto file = autotune_file();
    if (!std::filesystem::exists(file)) return nlohmann::json::object();
    std::ifstream in(file);
    auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw std::runtime_error(file.string() + ": not a JSON object; delete it to measure again");
    return j;
  }

  // Rank 0 merges `entries` into autotune.json (atomically).
  void write_autotune(const nlohmann::json& entries) const {
    if (env_.rank != 0) return;
    auto j = read_autotune();
    j.update(entries);
    io::write_file_atomic(autotune_file(), j.dump(2) + "\n");
  }

  // Rank 0's decisions reach the other ranks through collectives, never through the file, so ranks
  // that do not share the run directory still agree.
  bool rank0_says(bool flag) { return dist_ && dist_->active() ? dist_->any(env_.rank == 0 && flag) : flag; }

  void resolve_attention() {
    const auto file = autotune_file();
    bool kept = false, math = false;
    if (env_.rank == 0) {
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
    if (!kept && env_.rank == 0) {
      const auto rng = rng_state_tensors(device_);  // the timing draws random inputs
      c = choose_attention(cfg_.model, cfg_.train.batch_size, precision_, device_, cfg_.run.deterministic);
      restore_rng_state(rng, device_);
      math = c.attention == "math";
    }
    if (env_.rank != 0) c.reason = "rank 0's measurement";
    math = rank0_says(math);
    cfg_.model.attention = math ? "math" : "sdpa";
    if (kept) {
      spdlog::info("model.attention auto: {} (kept from {})", cfg_.model.attention, file.string());
      return;
    }
    write_autotune({{"model.attention", cfg_.model.attention}, {"reason", c.reason}, {"sdpa_ms", c.sdpa_ms},
                    {"math_ms", c.math_ms}});
    spdlog::info("model.attention auto: {} ({})", cfg_.model.attention, c.reason);
  }

  // The smallest of the ranks' `mine` (each one of `candidates`, or 0), on every rank: walking the
  // candidates from the largest, the first that no rank is below. One rank alone: `mine`.
  int64_t agree_on_smallest(const std::vector<int64_t>& candidates, int64_t mine) {
    if (!dist_ || !dist_->active()) return mine;
    for (int64_t c : candidates)
      if (!dist_->any(c > mine)) return c;
    return 0;
  }

  // train.batch_size auto: the largest divisor of the per-rank batch that fits this process's memory
  // (see memory_plan.hpp), the same on every rank (the smallest choice wins); grad_accum follows, so
  // train.global_batch_size is kept. The probe runs on a separate model and restores the generators.
  void choose_micro_batch() {
    const int64_t per_rank = cfg_.train.global_batch_size / env_.world_size;
    const auto candidates = micro_batch_candidates(per_rank);
    // a resumed run keeps its micro-batch (BatchNorm statistics depend on it, and the resume check
    // compares losses) unless the world size, the global batch or the budget changed
    const nlohmann::json key = {{"world_size", env_.world_size},
                                {"global_batch_size", cfg_.train.global_batch_size},
                                {"memory_budget_gb", cfg_.train.memory_budget_gb}};
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
                   b, cfg_.train.grad_accum, env_.world_size, cfg_.train.global_batch_size, autotune_file().string());
      return;
    }
    const auto rng = rng_state_tensors(device_);
    auto probe_cfg = cfg_.model;
    probe_cfg.init_from.clear();  // the probe measures sizes; its weights do not matter
    models::ModelRegistry registry;
    models::register_builtin_models(registry);
    auto probe_model = registry.create(probe_cfg);
    probe_model->to(device_);
    const bool image = probe_model->input_kind() == models::InputKind::Image;
    if (cfg_.model.channels_last && image) models::to_channels_last(*probe_model);
    const auto fixed = fixed_memory(*probe_model, cfg_.optim, env_.world_size);
    const int64_t b1 = image ? 2 : 1;
    const auto probe = probe_activations(*probe_model, train_set_->sample_shape(), train_set_->num_classes(),
                                         precision_, device_, cfg_.model.channels_last && image, b1, 2 * b1,
                                         /*max_b2=*/std::min<int64_t>(64, per_rank));
    const auto mb = memory_budget(cfg_.train.memory_budget_gb, "train.memory_budget_gb", device_, env_.local_world_size);
    const double budget = mb.bytes;
    const std::string& budget_source = mb.source;
    if (budget <= 0)
      throw std::runtime_error("train.batch_size auto: this machine's memory is unknown; set train.memory_budget_gb");
    int64_t chosen = largest_fitting(fixed, probe, budget, candidates);
    if (device_.is_cuda() && chosen > 0) {
      // the estimate is a start: a real step at that size must run; out of memory steps down
      chosen = search_fitting(candidates, chosen, [&](int64_t b) {
        bool ok = true;
        try {
          auto reserve = torch::empty({fixed.optimizer + fixed.ddp_buckets}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
          (void)probe_activations(*probe_model, train_set_->sample_shape(), train_set_->num_classes(), precision_,
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
          "optimizer {}, buckets {}) + a step of {} + {} per sample (measured by the {}); set "
          "model.activation_checkpointing, use bf16, or give more memory",
          bytes_text(budget), budget_source, bytes_text(static_cast<double>(fixed.total())), bytes_text(fixed.parameters),
          bytes_text(fixed.optimizer), bytes_text(fixed.ddp_buckets),
          bytes_text(probe.intercept()), bytes_text(probe.per_sample()), probe.how));
    cfg_.train.batch_size = chosen;
    cfg_.train.grad_accum = per_rank / chosen;
    auto entry = key;
    entry["micro_batch"] = chosen;
    write_autotune({{"train.batch_size", entry}});
    spdlog::info("train.batch_size auto: micro-batch {} x {} accumulation x {} rank(s) = global batch {}; estimated "
                 "{} of a {} budget ({}): {} held + a step of {} + {} per sample x {} (measured by the {} "
                 "at micro-batches {} and {})",
                 chosen, cfg_.train.grad_accum, env_.world_size, cfg_.train.global_batch_size,
                 bytes_text(static_cast<double>(fixed.total()) + probe.at(chosen)), bytes_text(budget), budget_source,
                 bytes_text(static_cast<double>(fixed.total())), bytes_text(probe.intercept()),
                 bytes_text(probe.per_sample()), chosen, probe.how, probe.b1, probe.b2);
  }

  torch::Tensor to_device(const torch::Tensor& t, bool image_input) const {
    auto d = t.to(device_, /*non_blocking=*/true);
    if (image_input && cfg_.model.channels_last) d = d.contiguous(at::MemoryFormat::ChannelsLast);
    return d;
  }

  // --- the step ----------------------------------------------------------------------------------
  struct StepOutcome {
    torch::Tensor grad_norm;  // before clipping (on the device) when computed, else undefined
    bool nonfinite = false;   // train.nonfinite skip|rollback: the step was skipped
  };

  // One optimizer step: grad_accum micro-batches forward/backward, gradient sync, unscale, clip,
  // step, scale update, zero_grad. No host synchronisation unless fp16 (the scaler's skip
  // decision), `need_norm`, or train.nonfinite skip|rollback (the per-step finiteness check).
  StepOutcome train_step(int64_t step, bool need_norm, IntervalTimes& times) {
    model_->train();
    const int64_t accum = cfg_.train.grad_accum;
    const bool check_finite = cfg_.train.nonfinite != "abort";
    std::vector<data::Batch> taken;  // batches a graphed step took from the loader but left to this eager one
    if (graph_ && steps_in_process_++ >= kGraphWarmupSteps)
      if (auto out = graphed_train_step(step, need_norm, times, taken)) return *out;
    torch::Tensor step_loss;
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto t0 = Clock::now();
      std::optional<data::Batch> batch;
      if (micro < static_cast<int64_t>(taken.size())) {
        batch = std::move(taken[static_cast<size_t>(micro)]);
      } else {
        RECORD_USER_SCOPE("trainer::next_batch");
        batch = train_loader_->next();
      }
      if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
      times.data_ms += ms_since(t0);

      auto t1 = Clock::now();
      auto input = to_device(batch->input, !tokens_);
      auto target = to_device(batch->target, false);
      // gradients sync only on the last micro-batch: earlier ones accumulate locally (no_sync)
      if (grad_sync_) grad_sync_->set_enabled(micro == accum - 1);
      RECORD_USER_SCOPE("trainer::forward_backward");
      auto l = forward_backward(*model_, input, target, accum, precision_, device_, *scaler_);
      step_loss = step_loss.defined() ? step_loss + l : l;  // stays on the device until a log step
      times.compute_ms += ms_since(t1);
    }

    auto t2 = Clock::now();
    if (grad_sync_) grad_sync_->finish();  // waits for the buckets launched during the last backward
    times.comm_ms += ms_since(t2);
    if (auto it = inject_nonfinite_.find(step + 1); it != inject_nonfinite_.end()) {
      inject_nonfinite_.erase(it);
      torch::NoGradGuard ng;
      for (auto& p : params_)
        if (p.grad().defined()) p.grad().fill_(std::numeric_limits<float>::quiet_NaN());
    }

    auto t3 = Clock::now();
    RECORD_USER_SCOPE("trainer::optimizer");
    auto applied = apply_gradients(*optimizer_, *scaler_, params_, cfg_.train.grad_clip, schedule_->lr_at(step),
                                   need_norm, check_finite);
    if (!applied.stepped) ++skipped_steps_;
    times.optim_ms += ms_since(t3);
    ++times.steps;
    if (applied.nonfinite) {
      // the gradients agree over ranks after the sync; the loss is this rank's own
      const double local = step_loss.item<double>();
      if (!std::isfinite(local))
        spdlog::warn("rank {}: non-finite loss ({}) at step {}", env_.rank, number_text(local), step + 1);
      return {applied.grad_norm, true};
    }
    // a skipped step's loss stays out of the logged average
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + step_loss : step_loss;
    loss_count_ += accum;
    return {applied.grad_norm, false};
  }

  // The captured step's work (GraphedStep's StepBody): what train_step and apply_gradients do for a
  // run that graph_blocker() accepts (no scaler, no sync, no finiteness check), with the gradient
  // norm always computed and no zero_grad.
  StepTensors graph_body(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
    const auto accum = static_cast<int64_t>(inputs.size());
    torch::Tensor loss;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto l = forward_backward(*model_, inputs[i], targets[i], accum, precision_, device_, *scaler_);
      loss = loss.defined() ? loss + l : l;
    }
    auto norm = clip_grad_norm(params_, cfg_.train.grad_clip);
    optimizer_->step();
    return {loss, norm};
  }

  // A step through the graph: the first one after the warm-up captures it, later ones replay it.
  // nullopt: the caller runs this step eagerly on the batches left in `taken` (the capture failed,
  // and graphs are off for the rest of the run; or the batches' shapes differ from the captured ones).
  std::optional<StepOutcome> graphed_train_step(int64_t step, bool need_norm, IntervalTimes& times,
                                                std::vector<data::Batch>& taken) {
    const int64_t accum = cfg_.train.grad_accum;
    auto t0 = Clock::now();
    {
      RECORD_USER_SCOPE("trainer::next_batch");
      for (int64_t micro = 0; micro < accum; ++micro) {
        auto batch = train_loader_->next();
        if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
        taken.push_back(std::move(*batch));
      }
    }
    times.data_ms += ms_since(t0);

    auto t1 = Clock::now();
    const double lr = schedule_->lr_at(step);
    set_learning_rate(*optimizer_, lr);  // the host's copy (checkpoints save it); the graph reads a device tensor
    std::optional<StepTensors> out;
    {
      RECORD_USER_SCOPE("trainer::graph_step");
      std::vector<torch::Tensor> inputs, targets;
      const bool capture = !graph_->captured();
      for (const auto& b : taken) {
        inputs.push_back(capture ? to_device(b.input, !tokens_) : b.input);  // a capture's become the static inputs
        targets.push_back(capture ? to_device(b.target, false) : b.target);
      }
      if (capture) {
        out = graph_->capture_and_run(std::move(inputs), std::move(targets), lr);
        if (!out) {
          spdlog::warn("train.cuda_graphs: capturing step {} failed, so the run goes on without graphs: {}", step + 1,
                       graph_->failure());
          graph_.reset();
          return std::nullopt;
        }
        spdlog::info("train.cuda_graphs: step {} captured after {} eager warm-up steps; the following steps replay it",
                     step + 1, kGraphWarmupSteps);
      } else {
        out = graph_->replay(inputs, targets, lr);
        if (!out) {
          if (!warned_graph_shape_)
            spdlog::warn("train.cuda_graphs: step {} has batches of another shape than the captured step; such "
                         "steps run eagerly",
                         step + 1);
          warned_graph_shape_ = true;
          graph_->before_eager_step(lr);
          return std::nullopt;
        }
      }
    }
    taken.clear();
    times.compute_ms += ms_since(t1);  // the host's time to launch the graph (docs/METRICS.md)
    ++times.steps;
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + out->loss : out->loss;
    loss_count_ += accum;
    return StepOutcome{need_norm || cfg_.train.grad_clip > 0 ? out->grad_norm : torch::Tensor(), false};
  }

  // --- evaluation --------------------------------------------------------------------------------
  EvalResult evaluate() {
    torch::NoGradGuard ng;
    model_->eval();
    data::DataLoader loader(val_set_, loader_options(/*train=*/false));
    EvalAccumulator acc;
    for (int64_t b = 0; cfg_.train.eval_steps == 0 || b < cfg_.train.eval_steps; ++b) {
      auto batch = loader.next();
      if (!batch) break;
      auto input = to_device(batch->input, !tokens_);
      auto target = to_device(batch->target, false);
      AutocastScope autocast(precision_, device_);
      auto logits = model_->forward(input);  // (B, C) or (B, T, V)
      if (tokens_) acc.add_tokens(logits, target);
      else acc.add_classification(logits, target);
    }
    model_->train();
    return combine_ranks(acc.result());
  }

  // Each rank scored its own shard; the run's figures are count-weighted over all of them.
  EvalResult combine_ranks(EvalResult r) {
    if (!dist_ || !dist_->active()) return r;
    const double w = static_cast<double>(env_.world_size);
    const double n = static_cast<double>(r.count);
    const double count = dist_->all_reduce_mean(n) * w;
    auto weighted = [&](double v) { return count > 0 ? dist_->all_reduce_mean(v * n) * w / count : 0.0; };
    r.loss = weighted(r.loss);
    if (r.accuracy) r.accuracy = weighted(*r.accuracy);
    if (r.top5) r.top5 = weighted(*r.top5);
    if (tokens_) {
      r.ppl = perplexity(r.loss);
      r.bpb = bits_per_byte(r.loss);
    }
    r.count = static_cast<int64_t>(std::llround(count));
    return r;
  }

  // Evaluates, records, and returns true when early stopping asks the run to end.
  bool evaluate_and_record(int64_t step) {
    if (!val_set_) {
      if (!warned_no_val_) spdlog::warn("no validation data: evaluation is skipped");
      warned_no_val_ = true;
      return false;
    }
    auto t0 = Clock::now();
    EvalResult r = evaluate();
    if (r.count == 0) throw std::runtime_error("the validation split gave no samples to evaluate");
    const bool stop = tracker_->update(metric_value(r, tracker_->metric()), step);
    obs::EvalRecord rec;
    rec.step = step;
    rec.epoch = epochs_done();
    rec.time_s = clock_s();
    rec.loss = r.loss;
    rec.count = r.count;
    rec.accuracy = r.accuracy;
    rec.top5 = r.top5;
    rec.ppl = r.ppl;
    rec.bpb = r.bpb;
    rec.eval_ms = ms_since(t0);
    rec.best_metric = tracker_->metric();
    rec.best_value = tracker_->best().value_or(0);
    rec.best_step = tracker_->best_step();
    log_->eval(rec);
    return stop;
  }

  // --- records -----------------------------------------------------------------------------------
  double epochs_done() const {
    auto st = train_loader_->state();
    const double per_epoch = static_cast<double>(train_loader_->batches_per_epoch() * cfg_.train.batch_size * env_.world_size);
    return static_cast<double>(st.epoch) + (per_epoch > 0 ? static_cast<double>(st.samples_consumed) / per_epoch : 0.0);
  }

  void record_train(int64_t step, const torch::Tensor& norm, IntervalTimes& times) {
    if (loss_count_ == 0) {  // every step of the interval was skipped (the same on every rank)
      times = IntervalTimes{};
      return;
    }
    obs::TrainRecord r;
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - times.start).count();
    const double n = static_cast<double>(times.steps);
    r.step = step;
    r.epoch = epochs_done();
    r.time_s = clock_s();
    r.samples = step * samples_per_step_;
    const double local_loss = loss_sum_.item<double>() / static_cast<double>(loss_count_);  // the log step's host sync
    r.loss = local_loss;
    if (dist_ && dist_->active()) r.loss = dist_->all_reduce_mean(r.loss);
    if (!std::isfinite(r.loss) && !scaler_->enabled()) {
      if (!std::isfinite(local_loss))
        spdlog::error("rank {}: non-finite training loss ({}) in the steps up to {}", env_.rank, number_text(local_loss),
                      step);
      throw std::runtime_error("training loss is " + number_text(r.loss) + " in the steps up to " +
                               std::to_string(step) + (env_.world_size > 1 ? " (each rank's log says whether it saw it)" : "") +
                               "; train.nonfinite: abort stops here. Lower optim.lr, set train.grad_clip, use fp32, "
                               "or set train.nonfinite: skip | rollback");
    }
    verify_against_log(step, r.loss);
    r.lr = schedule_->lr_at(step - 1);
    r.grad_norm = norm.item<double>();
    if (scaler_->enabled()) r.loss_scale = scaler_->state().scale;
    r.skipped_steps = skipped_steps_;
    r.samples_per_s = elapsed_s > 0 ? n * static_cast<double>(samples_per_step_) / elapsed_s : 0.0;
    if (tokens_) r.tokens_per_s = r.samples_per_s * static_cast<double>(train_set_->sample_shape().at(0));
    r.step_ms = elapsed_s * 1000.0 / n;
    r.data_wait_ms = times.data_ms / n;
    r.compute_ms = times.compute_ms / n;
    r.optim_ms = times.optim_ms / n;
    if (dist_ && dist_->active()) r.comm_ms = times.comm_ms / n;
    if (auto mem = obs::host_memory()) {
      r.rss_mb = mem->rss_mb;
      r.peak_rss_mb = mem->peak_rss_mb;
    }
    if (device_.is_cuda()) {
      auto m = device::cuda_memory_stats(device_.index());
      r.cuda_allocated_mb = static_cast<double>(m.allocated) / (1 << 20);
      r.cuda_reserved_mb = static_cast<double>(m.reserved) / (1 << 20);
      r.cuda_peak_allocated_mb = static_cast<double>(m.peak_allocated) / (1 << 20);
      r.gpu_util_pct = device::gpu_utilization_percent(device_.index());
    }
    r.mfu = obs::compute_mfu(flops_per_sample_, r.samples_per_s, env_.world_size, peak_tflops_);
    log_->train(r);
    loss_sum_ = torch::Tensor();
    loss_count_ = 0;
    times = IntervalTimes{};
  }

  // checkpoint.verify_tolerance: a resumed run recomputes steps the interrupted run had logged; a
  // record whose whole interval lies after the checkpoint must match the logged loss.
  void verify_against_log(int64_t step, double loss) {
    if (logged_losses_.empty()) return;
    auto it = logged_losses_.find(step);
    if (it != logged_losses_.end() && step - cfg_.train.log_every >= start_step_) {
      const double diff = std::abs(loss - it->second) / std::max(std::abs(it->second), 1e-12);
      verify_max_diff_ = std::max(verify_max_diff_, diff);
      ++verified_;
      if (diff > cfg_.checkpoint.verify_tolerance)
        throw std::runtime_error(fmt::format(
            "resume check: the loss at step {} is {:.6g}, but the interrupted run logged {:.6g} (relative difference "
            "{:.3g} > checkpoint.verify_tolerance {:g}): the data, the code or the config changed since the checkpoint. "
            "Set checkpoint.verify_tolerance: 0 to continue anyway",
            step, loss, it->second, diff, cfg_.checkpoint.verify_tolerance));
    }
    if (step >= logged_losses_.rbegin()->first) {
      if (verified_ > 0)
        spdlog::info("resume check: {} logged step(s) recomputed, max relative loss difference {:.2g} (tolerance {:g})",
                     verified_, verify_max_diff_, cfg_.checkpoint.verify_tolerance);
      logged_losses_.clear();
    }
  }

  // --- checkpoints (engine/checkpoint_manager.hpp) ------------------------------------------------
  RunObjects objects() { return RunObjects{*model_, *optimizer_, *scaler_, *tracker_, device_}; }

  // The run's training clock: the seconds of the attempts before this one (up to the checkpoint it
  // resumed from) plus this attempt's.
  double clock_s() const { return clock_offset_s_ + std::chrono::duration<double>(Clock::now() - run_start_).count(); }

  // --resume auto|never|PATH: every rank restores the same checkpoint; the resume check then compares
  // the losses of the steps the interrupted run logged after it, and those steps are not logged twice.
  void resume() {
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env_, dist_.get(), dir_.root, objects(), [this](int64_t step) {
      return RunPosition{step, train_loader_->state(), env_.world_size, clock_s()};
    });
    const auto history = obs::read_history(dir_.metrics_file());
    attempt_.attempt = history.attempts + 1;
    previous_wall_s_ = history.wall_s;
    const auto resumed = ckpt_->resume(resume_.mode);
    if (!resumed) return;
    const auto& pos = resumed->pos;
    train_loader_->restore(pos.loader);
    start_step_ = pos.step;
    clock_offset_s_ = pos.time_s;
    attempt_.start_step = pos.step;
    attempt_.time_s = pos.time_s;
    attempt_.resumed_from = resumed->from.string();
    spdlog::info("resumed from {} at step {} (epoch {}, {} samples into it); attempt {}", resumed->from.string(),
                 pos.step, pos.loader.epoch, pos.loader.samples_consumed, attempt_.attempt);
    if (pos.world_size > 0 && pos.world_size != env_.world_size) adapt_to_world_size(pos);
    if (cfg_.checkpoint.verify_tolerance > 0) {
      logged_losses_ = history.train_losses;
      logged_losses_.erase(logged_losses_.begin(), logged_losses_.upper_bound(start_step_));
      if (!logged_losses_.empty())
        spdlog::info("resume check: the interrupted run logged {} step(s) after step {}; their losses will be compared",
                     logged_losses_.size(), start_step_);
      // the check holds the recomputed steps to the logged ones: they are logged once, by the first attempt
      if (history.last_step > start_step_) log_->skip_records_until(history.last_step);
    }
  }

  // A checkpoint saved by another number of ranks: parameters and optimizer state are replicated, so
  // they load as they are; the data position is global, so the loader continues at the same sample;
  // every rank takes the saved generator state (the ranks' streams are re-derived from it).
  void adapt_to_world_size(const RunPosition& pos) {
    const int64_t saved_global = cfg_.train.batch_size * pos.world_size;  // per micro-step, at save time
    spdlog::warn("resuming a checkpoint of {} rank(s) on {}: the data continue at global sample {} of epoch {}, "
                 "and every rank's random generators are re-derived from the saved state",
                 pos.world_size, env_.world_size, pos.loader.samples_consumed, pos.loader.epoch);
    if (cfg_.train.global_batch_size > 0 && cfg_.train.global_batch_size == samples_per_step_)
      spdlog::info("train.global_batch_size {} kept: {} per micro-batch x {} accumulation x {} ranks",
                   cfg_.train.global_batch_size, cfg_.train.batch_size, cfg_.train.grad_accum, env_.world_size);
    else
      spdlog::warn("the global batch changes to {} samples per step ({} ranks); set train.global_batch_size to keep it "
                   "across world sizes (was {} x accumulation)",
                   samples_per_step_, env_.world_size, saved_global);
    if (cfg_.train.max_steps == 0) {
      // a run sized in epochs ends after the same number of samples: the remaining steps are
      // recounted at the new samples per step, and the schedule is laid out over the new total
      const int64_t per_epoch = train_loader_->batches_per_epoch() * cfg_.train.batch_size * env_.world_size;
      const double target = cfg_.train.epochs * static_cast<double>(per_epoch);
      const double done = static_cast<double>(pos.loader.epoch * per_epoch + pos.loader.samples_consumed);
      const int64_t left = std::max<int64_t>(
          0, static_cast<int64_t>(std::ceil((target - done) / static_cast<double>(samples_per_step_) - 1e-9)));
      if (start_step_ + left != total_steps_) {
        spdlog::info("the run is sized in epochs: {} steps in all now (was {})", start_step_ + left, total_steps_);
        total_steps_ = start_step_ + left;
        schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
      }
    }
  }

  // --- the loop ----------------------------------------------------------------------------------
  // Signals only set a flag; every rank acts on it at the same step boundary. With several ranks
  // agreeing costs a collective and a host sync, so they agree only on log steps and every
  // kStopCheckEvery steps (the same steps on every rank), never on each step of the hot path.
  bool stop_agreed(int64_t step, bool log_step) {
    if (!dist_ || !dist_->active()) return stop_requested();
    return (log_step || step % kStopCheckEvery == 0) && dist_->any(stop_requested());
  }

  // A stop signal: one checkpoint at this step boundary, then exit 75 (a stop before the first step
  // has nothing new to save: the run resumes where it stands). A save that fails exits 74 instead.
  int stop_for_signal(int64_t step) {
    const std::string sig = stop_signal_name().empty() ? "a stop signal" : stop_signal_name();
    if (step == start_step_) {
      spdlog::warn("{} received during start-up, before step {}: nothing new to save; exiting with code {} "
                   "(requeue me)", sig, step + 1, kExitSavedAfterSignal);
    } else {
      spdlog::warn("{} received: saving a checkpoint at step {} and exiting with code {} (requeue me)", sig, step,
                   kExitSavedAfterSignal);
      ckpt_->save(step, SaveKind::Signal);
    }
    if (dist_) dist_->barrier();
    ckpt_->requeue_if_asked();
    return kExitSavedAfterSignal;
  }

  // train.nonfinite skip|rollback after a step whose gradients were not finite; returns the step the
  // run continues from.
  int64_t handle_nonfinite(int64_t step, IntervalTimes& times) {
    if (cfg_.train.nonfinite == "rollback") {
      loss_sum_ = torch::Tensor();
      loss_count_ = 0;
      times = IntervalTimes{};
      return ckpt_->roll_back(step);
    }
    if (++nonfinite_in_row_ > cfg_.train.max_nonfinite)
      throw std::runtime_error(fmt::format("non-finite gradients in {} consecutive steps up to step {} "
                                           "(train.max_nonfinite {}): giving up",
                                           nonfinite_in_row_, step, cfg_.train.max_nonfinite));
    spdlog::warn("non-finite gradients at step {}: step skipped ({} in a row, at most {})", step, nonfinite_in_row_,
                 cfg_.train.max_nonfinite);
    return step;
  }

  // Periodic checkpoint and evaluation after `step`; returns true when early stopping ends the run.
  bool checkpoint_and_evaluate(int64_t step, bool& evaluated) {
    evaluated = false;
    if (step >= total_steps_) return false;  // the end of the run saves and evaluates once, below
    bool saved = false;
    if (cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0)
      saved = ckpt_->save(step, SaveKind::Periodic);
    if (cfg_.train.eval_every <= 0 || step % cfg_.train.eval_every != 0) return false;
    evaluated = true;
    const bool stop_early = evaluate_and_record(step);
    ckpt_->keep_best(step, saved);
    if (stop_early)
      spdlog::info("early stopping at step {}: {} has not improved for {} evaluations (best {:.4f} at step {})", step,
                   tracker_->metric(), tracker_->evals_without_improvement(), tracker_->best().value_or(0),
                   tracker_->best_step());
    return stop_early;
  }

  int train_loop() {
    run_start_ = Clock::now();
    log_->attempt(attempt_);
    if (step_is_final(start_step_)) {
      spdlog::info("the run is already complete ({} of {} steps); nothing to train", start_step_, total_steps_);
      return kExitOk;
    }
    if (stop_agreed(start_step_, /*log_step=*/true)) return stop_for_signal(start_step_);
    IntervalTimes times;
    std::string stop_reason = cfg_.train.max_steps > 0 ? "max_steps" : "epochs";
    int64_t step = start_step_;
    bool evaluated_last = false;
    obs::StepProfiler profiler(cfg_.profile.start_step, cfg_.profile.steps, dir_.root / "profile", env_.rank,
                               device_.is_cuda(), cfg_.profile.record_shapes);
    // a graph is captured on a stream other than the default one: with train.cuda_graphs every step,
    // evaluation and checkpoint of the loop runs on that one stream, in order
    std::optional<device::CudaSideStream> graph_stream;
    if (graph_) graph_stream.emplace(device_.index());
    while (step < total_steps_) {
      if (dist_) dist_->set_step(step);
      const bool log_step = step_is_final(step + 1) || (step + 1) % cfg_.train.log_every == 0;
      profiler.before_step(step);
      auto outcome = train_step(step, log_step, times);
      profiler.after_step(step);
      ++step;
      if (outcome.nonfinite) {
        step = handle_nonfinite(step, times);
        if (cfg_.train.nonfinite == "rollback") continue;
      } else {
        nonfinite_in_row_ = 0;
      }
      log_->step_done(step);
      if (log_step) record_train(step, outcome.grad_norm, times);
      if (stop_agreed(step, log_step)) return stop_for_signal(step);
      if (checkpoint_and_evaluate(step, evaluated_last)) {
        stop_reason = "early_stopping";
        break;
      }
    }
    if (!evaluated_last) evaluate_and_record(step);
    if (ckpt_->save(step, SaveKind::Final)) ckpt_->keep_best(step, /*saved_at_step=*/true);
    if (dist_) dist_->barrier();
    write_summary(step, stop_reason);
    return kExitOk;
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }

  void write_summary(int64_t step, const std::string& stop_reason) {
    obs::SummaryRecord s;
    s.steps = step;
    s.epochs = epochs_done();
    s.samples = step * samples_per_step_;
    s.attempt_wall_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    s.wall_s = previous_wall_s_ + s.attempt_wall_s;
    s.attempts = attempt_.attempt;
    s.stop_reason = stop_reason;
    s.best_metric = tracker_->metric();
    s.best_value = tracker_->best();
    if (tracker_->best()) s.best_step = tracker_->best_step();
    s.num_parameters = model_->num_parameters();
    s.world_size = env_.world_size;
    s.device = device_.str();
    s.precision = cfg_.train.precision;
    log_->summary(s);
    const std::string attempts =
        s.attempts > 1 ? fmt::format(" over {} attempts ({:.1f} s in this one)", s.attempts, s.attempt_wall_s) : "";
    spdlog::info("done: {} steps, {:.2f} epochs, {} samples in {:.1f} s{} ({}); best {} {:.4f} at step {}", s.steps,
                 s.epochs, s.samples, s.wall_s, attempts, stop_reason, s.best_metric, s.best_value.value_or(0),
                 s.best_step.value_or(0));
  }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  const dist::LaunchEnv& env_;
  const io::RunDir& dir_;
  ResumeOptions resume_;
  int64_t start_step_ = 0;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::Fp32;
  std::unique_ptr<dist::DistContext> dist_;
  std::unique_ptr<dist::GradSync> grad_sync_;  // declared after dist_: destroyed before it
  models::ModelPtr model_;
  std::vector<torch::Tensor> params_;
  std::shared_ptr<data::Dataset> train_set_, val_set_;
  bool tokens_ = false;
  std::unique_ptr<data::DataLoader> train_loader_;
  int64_t total_steps_ = 0, samples_per_step_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<GraphedStep> graph_;  // train.cuda_graphs, when the run can use it
  int64_t steps_in_process_ = 0;         // train_step calls so far (the graph's warm-up counts them)
  bool warned_graph_shape_ = false;
  std::unique_ptr<EarlyStopping> tracker_;
  std::unique_ptr<obs::RunLog> log_;
  double flops_per_sample_ = 0, peak_tflops_ = 0;
  torch::Tensor loss_sum_;
  int64_t loss_count_ = 0, skipped_steps_ = 0;
  std::multiset<int64_t> inject_nonfinite_;  // TRAINER_INJECT_NONFINITE_GRAD
  int64_t nonfinite_in_row_ = 0;            // train.nonfinite: skip
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  obs::AttemptRecord attempt_;               // this attempt: number, start step, resumed from
  double clock_offset_s_ = 0;                // the training clock at the checkpoint resumed from
  double previous_wall_s_ = 0;               // wall seconds of the earlier attempts (metrics.jsonl)
  std::map<int64_t, double> logged_losses_;  // checkpoint.verify_tolerance: the interrupted run's records
  double verify_max_diff_ = 0;
  int64_t verified_ = 0;
  bool warned_no_val_ = false;
  Clock::time_point run_start_;
};

}  // namespace

int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch) {
  if (t.max_steps > 0) return t.max_steps;
  const double micro = t.epochs * static_cast<double>(batches_per_epoch);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(micro / static_cast<double>(t.grad_accum) - 1e-9)));
}

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir,
                 const ResumeOptions& resume) {
  Trainer t(cfg, env, dir, resume);
  return t.run();
}

}  // namespace trainer::engine
