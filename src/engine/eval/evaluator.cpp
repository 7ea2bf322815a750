#include "engine/eval/evaluator.hpp"

#include <cmath>

#include "config/load.hpp"
#include "device/device.hpp"

namespace trainer::engine {

data::LoaderOptions run_loader_options(const config::RunConfig& cfg, const dist::LaunchEnv& env,
                                       const torch::Device& device, bool train) {
  data::LoaderOptions o;
  o.batch_size = cfg.train.batch_size;
  o.workers = device::choose_workers(cfg.data.workers, device.is_cuda(), env.local_world_size).workers;
  o.prefetch = cfg.data.prefetch;
  o.seed = cfg.run.seed;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.train = train;
  o.pin_memory = device.is_cuda();
  o.device_index = device.is_cuda() ? device.index() : -1;  // copied to the GPU by the loader's threads
  o.channels_last = cfg.model.channels_last;                  // images normalised there in the model's format
  return o;
}

EvalSetup run_eval_setup(const config::RunConfig& cfg, const dist::LaunchEnv& env, Precision precision,
                         const torch::Device& device, bool tokens) {
  return {.loader = run_loader_options(cfg, env, device, /*train=*/false),
          .precision = precision,
          .device = device,
          .tokens = tokens,
          .channels_last = cfg.model.channels_last,
          .max_batches = cfg.train.eval_steps,
          .bytes_per_token = config::bytes_per_token(cfg.data),
          .flip_tta = cfg.train.eval_tta == "flip" && !tokens};
}

torch::Tensor to_model_device(const torch::Tensor& t, const torch::Device& device, bool channels_last_image) {
  auto d = t.to(device, /*non_blocking=*/true);
  if (channels_last_image) d = d.contiguous(at::MemoryFormat::ChannelsLast);
  return d;
}

EvalResult Evaluator::run(models::Model& model) {
  torch::NoGradGuard ng;
  model.eval();
  auto opts = setup_.loader;
  opts.eval_samples = setup_.max_batches * opts.batch_size;  // global: the pass is shared among the ranks
  data::DataLoader loader(val_, opts);
  EvalAccumulator acc(setup_.bytes_per_token), tta(setup_.bytes_per_token);
  const bool cl = setup_.channels_last && !setup_.tokens;
  for (;;) {
    auto batch = loader.next();
    if (!batch) break;
    auto input = to_model_device(batch->input, setup_.device, cl);
    auto target = to_model_device(batch->target, setup_.device, false);
    AutocastScope autocast(setup_.precision, setup_.device);
    auto forward = [&](const torch::Tensor& x) {
      auto out = setup_.forward ? setup_.forward(model, x) : model.forward(x);
      return model.full_logits(out);  // (B, C) or (B, T, V): gathered over tp
    };
    auto logits = forward(input);
    if (setup_.tokens) acc.add_tokens(logits, target);
    else acc.add_classification(logits, target);
    if (setup_.flip_tta) {  // (B, C, H, W): W mirrored; the mean in fp32 (autocast's logits may be bf16)
      auto mirrored = input.flip({-1});
      if (cl) mirrored = mirrored.contiguous(at::MemoryFormat::ChannelsLast);
      tta.add_classification((logits.to(torch::kFloat) + forward(mirrored).to(torch::kFloat)) * 0.5, target);
    }
  }
  model.train();
  auto r = acc.result();
  if (setup_.flip_tta) {
    const auto t = tta.result();
    r.tta_loss = t.loss;
    r.tta_accuracy = t.accuracy;
    r.tta_top5 = t.top5;
  }
  return combine_ranks(r);
}

// Each rank scored its own shard; the run's figures are count-weighted over all of them.
EvalResult Evaluator::combine_ranks(EvalResult r) {
  if (!dist_ || !dist_->active()) return r;
  const double w = static_cast<double>(world_size_);
  const double n = static_cast<double>(r.count);
  const double count = dist_->all_reduce_mean(n) * w;
  auto weighted = [&](double v) { return count > 0 ? dist_->all_reduce_mean(v * n) * w / count : 0.0; };
  r.loss = weighted(r.loss);
  if (!setup_.tokens) {  // every rank joins both reductions, also one whose share of a short pass was empty
    r.accuracy = weighted(r.accuracy.value_or(0.0));
    r.top5 = weighted(r.top5.value_or(0.0));
    if (setup_.flip_tta) {
      r.tta_loss = weighted(r.tta_loss.value_or(0.0));
      r.tta_accuracy = weighted(r.tta_accuracy.value_or(0.0));
      r.tta_top5 = weighted(r.tta_top5.value_or(0.0));
    }
  }
  if (setup_.tokens) {
    r.ppl = perplexity(r.loss);
    if (setup_.bytes_per_token > 0) r.bpb = bits_per_byte(r.loss, setup_.bytes_per_token);
  }
  r.count = static_cast<int64_t>(std::llround(count));
  return r;
}

}  // namespace trainer::engine
