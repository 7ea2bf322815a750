#include "engine/step/step_runner.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "engine/eval/evaluator.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optim.hpp"
#include "engine/step/train_step.hpp"
#include "obs/profiler.hpp"

namespace trainer::engine {
namespace {

// TRAINER_INJECT_NONFINITE_GRAD=7,8: fault injection for tests and drills. The gradients of those
// optimizer steps (1-based, as logged) are made NaN on every rank after the gradient sync, once per
// listing: a step redone after a rollback is clean unless it is listed again ("7,7"). An item
// RANK:STEP ("1:7") poisons that rank's gradients alone (an overflow on one pipeline stage).
std::multiset<int64_t> injected_nonfinite_steps(int64_t rank) {
  std::multiset<int64_t> out;
  const char* v = std::getenv("TRAINER_INJECT_NONFINITE_GRAD");
  if (!v) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    long long r = -1, step = -1;
    char tail = 0;
    const bool ranked = item.find(':') != std::string::npos;
    const int got = ranked ? std::sscanf(item.c_str(), "%lld:%lld%c", &r, &step, &tail)
                           : std::sscanf(item.c_str(), "%lld%c", &step, &tail);
    if (got != (ranked ? 2 : 1) || step < 1 || (ranked && r < 0))
      throw std::invalid_argument("TRAINER_INJECT_NONFINITE_GRAD: '" + item +
                                  "' is not a step number (1, 2, ...) or RANK:STEP (1:7)");
    if (!ranked || r == rank) out.insert(step);
  }
  return out;
}

// TRAINER_INJECT_READ_FAILURE=RANK:STEP: fault injection for tests and drills. On that rank the
// first batch of that optimizer step (1-based) fails as a read of a truncated mapping does (a
// DataChanged inside the step), once: a rank's read failing while its peers go on into the step.
int64_t injected_read_failure(int64_t rank) {
  const char* v = std::getenv("TRAINER_INJECT_READ_FAILURE");
  if (!v) return -1;
  long long r = -1, step = -1;
  char tail = 0;
  if (std::sscanf(v, "%lld:%lld%c", &r, &step, &tail) != 2 || r < 0 || step < 1)
    throw std::invalid_argument(std::string("TRAINER_INJECT_READ_FAILURE: '") + v + "' is not RANK:STEP (0:5, ...)");
  return r == rank ? step : -1;
}

}  // namespace

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.6g}", v);
}


StepRunner::StepRunner(StepParts parts, StepSettings settings)
    : parts_(std::move(parts)),
      set_(std::move(settings)),
      inject_nonfinite_(injected_nonfinite_steps(set_.rank)),
      inject_read_failure_(injected_read_failure(set_.rank)) {
  if (BatchMixer::wanted(set_.mixup, set_.cutmix)) {
    mixer_.emplace(set_.mixup, set_.cutmix, set_.num_classes, set_.seed, set_.data_rank);
    spdlog::info("data.mixup/cutmix: mixup alpha {}, cutmix alpha {}, prob {}, switch_prob {} (one lambda per "
                 "micro-batch, soft targets)",
                 set_.mixup.alpha, set_.cutmix.alpha, set_.mixup.prob, set_.mixup.switch_prob);
  }
  if (set_.label_smoothing > 0)
    spdlog::info("train.label_smoothing {}: the training loss is smoothed, evaluation is not", set_.label_smoothing);
  if (!inject_nonfinite_.empty())
    spdlog::warn("TRAINER_INJECT_NONFINITE_GRAD: the gradients of {} step(s) will be made NaN (fault injection)",
                 inject_nonfinite_.size());
}

// TRAINER_INJECT_READ_FAILURE: the step's first batch fails as a truncated mapping's read does, once.
void StepRunner::fail_read_if_injected(int64_t step, int64_t micro) {
  if (step + 1 != inject_read_failure_ || micro != 0) return;
  inject_read_failure_ = -1;
  throw data::DataChanged(parts_.loader.dataset().describe(),
                          "a read failed inside step " + std::to_string(step + 1) + " on rank " +
                              std::to_string(set_.rank) + " (TRAINER_INJECT_READ_FAILURE, fault injection)");
}

torch::Tensor StepRunner::to_device(const torch::Tensor& t, bool image_input) const {
  return to_model_device(t, set_.device, image_input && set_.channels_last);
}

std::pair<torch::Tensor, torch::Tensor> StepRunner::device_batch(const data::Batch& batch, int64_t step,
                                                                 int64_t micro) const {
  auto input = to_device(batch.input, !set_.tokens);
  auto target = to_device(batch.target, false);
  if (!mixer_) return {input, target};
  // on the device, after the copy: the loader's batches stay per-sample
  return mixer_->apply(input, target, mixer_->choose(step, micro, input.size(-2), input.size(-1)));
}

// train.cuda_graphs (engine/step/graphed_step.hpp): a GraphedStep when the settings allow one, else the
// reason in the log and eager steps.
void StepRunner::enable_graphs(GraphConditions c) {
  c.fault_injection = !inject_nonfinite_.empty();
  c.uniform_lr = uniform_learning_rate(parts_.optimizer);
  if (const auto why = graph_blocker(c); !why.empty()) {
    spdlog::warn("train.cuda_graphs: not used, every step runs eagerly: {}", why);
    return;
  }
  graph_ = std::make_unique<GraphedStep>(
      parts_.optimizer, parts_.params, set_.device,
      [this](const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
        return graph_body(inputs, targets);
      });
  spdlog::info("train.cuda_graphs: after {} eager warm-up steps the step is captured into a CUDA graph and replayed",
               kGraphWarmupSteps);
}


StepSettings run_step_settings(const config::RunConfig& cfg, Precision precision, const torch::Device& device,
                               bool tokens, int64_t grad_accum, int64_t rank, int64_t data_rank,
                               int64_t data_world) {
  return {.grad_accum = grad_accum,
          .grad_clip = cfg.train.grad_clip,
          .nonfinite = cfg.train.nonfinite,
          .precision = precision,
          .device = device,
          .tokens = tokens,
          .channels_last = cfg.model.channels_last,
          .rank = rank,
          .data_rank = data_rank,
          .data_world = data_world,
          .label_smoothing = cfg.train.label_smoothing,
          .mixup = cfg.data.mixup,
          .cutmix = cfg.data.cutmix,
          .num_classes = cfg.model.num_classes,
          .seed = cfg.run.seed};
}

// One optimizer step: grad_accum micro-batches forward/backward, gradient sync, unscale, clip,
// step, scale update, zero_grad. No host synchronisation unless fp16 (the scaler's skip
// decision), `need_norm`, or train.nonfinite skip|rollback (the per-step finiteness check).
StepOutcome StepRunner::run(int64_t step, bool need_norm, IntervalTimes& times) {
  parts_.model.train();
  const int64_t accum = set_.grad_accum;
  const bool check_finite = set_.nonfinite != config::NonFinite::Abort;
  std::vector<data::Batch> taken;  // batches a graphed step took from the loader but left to this eager one
  if (graph_ && steps_in_process_++ >= kGraphWarmupSteps)
    if (auto out = graphed_train_step(step, need_norm, times, taken)) return *out;
  // dropout streams by unit (models/unit_rng.hpp): every rank draws the step's key, so the default
  // stream stays alike on all of them; a captured graph replays its own draws
  struct KeyReset {
    models::Model& m;
    ~KeyReset() { m.set_step_key(std::nullopt); }
  } key_reset{parts_.model};
  if (parts_.model.draws_in_training() && !graph_) parts_.model.set_step_key(models::draw_step_key());
  torch::Tensor step_loss;
  int64_t step_losses = accum;  // micro-batch losses in step_loss
  if (parts_.pipeline) {  // the stages run every micro-batch of the step, forward and backward
    auto pl = pipeline_forward_backward(step, times);
    step_loss = pl.sum;
    step_losses = pl.count;
  }
  for (int64_t micro = 0; micro < accum && !parts_.pipeline; ++micro) {
    auto t0 = Clock::now();
    std::optional<data::Batch> batch;
    if (micro < static_cast<int64_t>(taken.size())) {
      batch = std::move(taken[static_cast<size_t>(micro)]);
    } else {
      RECORD_USER_SCOPE("trainer::next_batch");
      batch = parts_.loader.next();
    }
    fail_read_if_injected(step, micro);
    if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
    times.data_ms += ms_since(t0);

    auto t1 = Clock::now();
    auto [input, target] = device_batch(*batch, step, micro);
    // gradients sync only on the last micro-batch: earlier ones accumulate locally (no_sync)
    parts_.parallel.before_backward(micro == accum - 1);
    RECORD_USER_SCOPE("trainer::forward_backward");
    // the index of these samples' micro-batch in the global batch, as one process at this micro-batch
    // size would count it (rank r holds [r B, (r + 1) B) of each global batch: data/sampler.hpp)
    parts_.model.set_microbatch(micro * set_.data_world + set_.data_rank);
    auto l = forward_backward(parts_.model, input, target, accum, set_.precision, set_.device, parts_.scaler,
                              set_.label_smoothing);
    step_loss = step_loss.defined() ? step_loss + l : l;  // stays on the device until a log step
    times.compute_ms += ms_since(t1);
  }

  auto t2 = Clock::now();
  parts_.parallel.after_backward();  // every rank holds the averaged gradients from here
  parts_.parallel.commit(step);      // dist.recovery in_process: all ranks synced, or none steps
  times.comm_ms += ms_since(t2);
  if (need_norm) times.held = parts_.parallel.held_bytes(parts_.params, parts_.optimizer);  // gradients exist now
  if (auto it = inject_nonfinite_.find(step + 1); it != inject_nonfinite_.end()) {
    inject_nonfinite_.erase(it);
    torch::NoGradGuard ng;
    for (auto& p : parts_.parallel.step_params(parts_.params))
      if (p.grad().defined()) p.grad().fill_(std::numeric_limits<float>::quiet_NaN());
  }

  auto t3 = Clock::now();
  RECORD_USER_SCOPE("trainer::optimizer");
  auto applied = apply_gradients(parts_.optimizer, parts_.scaler, parts_.parallel.step_params(parts_.params),
                                 set_.grad_clip, parts_.lr_at(step), need_norm, check_finite, &parts_.parallel);
  parts_.parallel.after_step();  // sharded: every rank's updated slice to every rank
  if (times.held) times.held->optimizer = optimizer_state_bytes(parts_.optimizer);  // the first step creates it
  if (!applied.stepped) ++skipped_steps_;
  times.optim_ms += ms_since(t3);
  ++times.steps;
  if (applied.nonfinite) {
    // the gradients agree over ranks after the sync; the loss is this rank's own
    const double local = step_loss.item<double>();
    if (!std::isfinite(local))
      spdlog::warn("rank {}: non-finite loss ({}) at step {}", set_.rank, number_text(local), step + 1);
    return {applied.grad_norm, true};
  }
  // a skipped step's loss stays out of the logged average
  add_loss(step_loss, step_losses);
  return {applied.grad_norm, false};
}

// The step's grad_accum batches, concatenated, through the pipeline's stages: the executor cuts them
// into grad_accum x M microbatches (each a loss / (grad_accum x M), as one process's accumulation).
// The data-parallel sync waits for the end (no hook fires during the stages' backwards).
PipelineStages::StepLoss StepRunner::pipeline_forward_backward(int64_t step, IntervalTimes& times) {
  const int64_t accum = set_.grad_accum;
  auto t0 = Clock::now();
  std::vector<torch::Tensor> inputs, targets;
  for (int64_t micro = 0; micro < accum; ++micro) {
    std::optional<data::Batch> batch;
    {
      RECORD_USER_SCOPE("trainer::next_batch");
      batch = parts_.loader.next();
    }
    fail_read_if_injected(step, micro);
    if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
    auto [input, target] = device_batch(*batch, step, micro);  // mixed as one process mixes it: before the cut
    inputs.push_back(input);
    targets.push_back(target);
  }
  times.data_ms += ms_since(t0);
  auto t1 = Clock::now();
  const auto input = accum == 1 ? inputs.front() : torch::cat(inputs), target = accum == 1 ? targets.front() : torch::cat(targets);
  parts_.parallel.before_backward(false);  // no bucket launches inside the stages' backwards
  RECORD_USER_SCOPE("trainer::pipeline_forward_backward");
  PipelineStages::StepLoss out;
  {
    // dist.sharding full: this rank's units gathered once for the whole schedule, not per microbatch
    // (torchtitan keeps FSDP's parameters unsharded between a pipeline's microbatches too); the
    // gradients stay whole in .grad until after_backward's tied sum, then reduce-scatter
    FullParams whole(&parts_.parallel, /*write=*/false);
    out = parts_.pipeline->forward_backward(parts_.model, input, target, accum, set_.precision, set_.device,
                                            [this](const torch::Tensor& logits, const torch::Tensor& t) {
                                              return models_loss(parts_.model, logits, t, set_.label_smoothing);
                                            },
                                            parts_.scaler.enabled() ? parts_.scaler.scale_tensor() : torch::Tensor());
  }
  parts_.parallel.before_backward(true);  // after_backward syncs every bucket now
  times.compute_ms += ms_since(t1);
  return out;
}

// The captured step's work (GraphedStep's StepBody): what train_step and apply_gradients do for a
// run that graph_blocker() accepts (no scaler, no sync, no finiteness check), with the gradient
// norm always computed and no zero_grad.
StepTensors StepRunner::graph_body(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  const auto accum = static_cast<int64_t>(inputs.size());
  torch::Tensor loss;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto l = forward_backward(parts_.model, inputs[i], targets[i], accum, set_.precision, set_.device, parts_.scaler,
                              set_.label_smoothing);  // a constant of the loss: captured like the rest
    loss = loss.defined() ? loss + l : l;
  }
  auto norm = clip_grad_norm(parts_.params, set_.grad_clip);
  parts_.optimizer.step();
  return {loss, norm};
}

// A step through the graph: the first one after the warm-up captures it, later ones replay it.
// nullopt: the caller runs this step eagerly on the batches left in `taken` (the capture failed,
// and graphs are off for the rest of the run; or the batches' shapes differ from the captured ones).
std::optional<StepOutcome> StepRunner::graphed_train_step(int64_t step, bool need_norm, IntervalTimes& times,
                                              std::vector<data::Batch>& taken) {
  const int64_t accum = set_.grad_accum;
  auto t0 = Clock::now();
  {
    RECORD_USER_SCOPE("trainer::next_batch");
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto batch = parts_.loader.next();
      if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
      taken.push_back(std::move(*batch));
    }
  }
  times.data_ms += ms_since(t0);

  auto t1 = Clock::now();
  const double lr = parts_.lr_at(step);
  set_learning_rate(parts_.optimizer, lr);  // the host's copy (checkpoints save it); the graph reads a device tensor
  std::optional<StepTensors> out;
  {
    RECORD_USER_SCOPE("trainer::graph_step");
    std::vector<torch::Tensor> inputs, targets;
    const bool capture = !graph_->captured();
    for (const auto& b : taken) {
      inputs.push_back(capture ? to_device(b.input, !set_.tokens) : b.input);  // a capture's become the static inputs
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
  add_loss(out->loss, accum);
  return StepOutcome{need_norm || set_.grad_clip > 0 ? out->grad_norm : torch::Tensor(), false};
}

void StepRunner::add_loss(const torch::Tensor& loss, int64_t micro_batches) {
  if (per_step_ > 0 && per_step_ != micro_batches && loss_count_ > 0 && loss_sum_.defined()) {
    const int64_t n = loss_count_ / per_step_ * micro_batches;  // the same steps, as this run's micro-batches
    loss_sum_ = loss_sum_ / static_cast<double>(loss_count_) * static_cast<double>(n);
    loss_count_ = n;
  }
  per_step_ = micro_batches;
  loss_sum_ = loss_sum_.defined() ? loss_sum_ + loss : loss;
  loss_count_ += micro_batches;
  if (carried_.steps > 0) {
    const int64_t n = carried_.steps * micro_batches;
    loss_sum_ = loss_sum_ + carried_.mean * static_cast<double>(n);
    loss_count_ += n;
    carried_ = {};
  }
}

}  // namespace trainer::engine
