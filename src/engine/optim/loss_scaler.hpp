// Dynamic loss scaling for fp16 (the GradScaler recipe): multiply the loss by `scale` so small
// gradients survive fp16, divide the gradients back before clipping and stepping, skip the step and
// lower the scale when any gradient is inf/NaN, raise it after `growth_interval` clean steps.
// Built on ATen's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, which run on
// CUDA and, in LibTorch 2.11, on CPU tensors too (the unit tests exercise them on CPU).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainer::engine {

struct LossScalerConfig {
  bool enabled = false;  // only fp16 runs scale; otherwise every call is a no-op and steps always happen
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

// A run's scaler: on for fp16. TRAINER_INJECT_LOSS_SCALE=S (tests and drills) turns it on at the
// initial scale S (a positive finite number) whatever the precision, so that its scaling, its
// skipped steps and the ranks' overflow vote run on a CPU; std::invalid_argument for another value.
LossScalerConfig run_loss_scaler_config(bool fp16);

// What a checkpoint saves to resume the scaler exactly.
struct LossScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // clean steps since the last change of scale
  bool operator==(const LossScalerState&) const = default;
};

class LossScaler {
 public:
  LossScaler(LossScalerConfig cfg, const torch::Device& device);

  bool enabled() const { return cfg_.enabled; }
  torch::Tensor scale_loss(const torch::Tensor& loss) const;  // loss * scale (loss itself when disabled)

  // Divides the gradients of `params` by the scale in place and records on the device whether any
  // was inf/NaN. No host synchronisation. Call once per optimizer step, after the last backward.
  void unscale(const std::vector<torch::Tensor>& params);

  // Runs opt.step() unless the last unscale found inf/NaN; returns whether it stepped. Reads one
  // scalar from the device when enabled (the decision must be made on the host).
  bool step(torch::optim::Optimizer& opt);

  // Backs off after a non-finite step, grows after growth_interval clean ones (on the device).
  void update();

  torch::Tensor scale_tensor() const { return scale_; }  // (1,) float32 on the device
  // The found-inf flag of the last unscale ((1,) float32, shared): a sharded run sums it over ranks
  // in place before step() so that every rank skips the same steps.
  torch::Tensor found_inf() const { return found_inf_; }
  LossScalerState state() const;                       // host sync
  void load_state(const LossScalerState& s);

 private:
  LossScalerConfig cfg_;
  torch::Tensor scale_;           // (1,) float32
  torch::Tensor growth_tracker_;  // (1,) int32
  torch::Tensor found_inf_;       // (1,) float32: 1 when the last unscale saw inf/NaN
};

}  // namespace trainer::engine
