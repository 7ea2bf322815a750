#include "obs/records.hpp"

namespace trainer::obs {
namespace {

template <class T>
void put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

}  // namespace

nlohmann::json to_json(const TrainRecord& r) {
  nlohmann::json j = {{"kind", "train"},        {"step", r.step},
                      {"epoch", r.epoch},       {"time_s", r.time_s},
                      {"samples", r.samples},   {"loss", r.loss},
                      {"lr", r.lr},             {"grad_norm", r.grad_norm},
                      {"skipped_steps", r.skipped_steps}, {"world_size", r.world_size},
                      {"samples_per_s", r.samples_per_s},
                      {"step_ms", r.step_ms},   {"data_wait_ms", r.data_wait_ms},
                      {"compute_ms", r.compute_ms}, {"optim_ms", r.optim_ms}};
  put(j, "loss_ranks", r.loss_ranks);
  put(j, "loss_scale", r.loss_scale);
  put(j, "tokens_per_s", r.tokens_per_s);
  put(j, "comm_ms", r.comm_ms);
  put(j, "tp_comm_ms", r.tp_comm_ms);
  put(j, "pp_wait_ms", r.pp_wait_ms);
  put(j, "pp_bubble", r.pp_bubble);
  put(j, "pp_act_peak_mb", r.pp_act_peak_mb);
  put(j, "rss_mb", r.rss_mb);
  put(j, "peak_rss_mb", r.peak_rss_mb);
  put(j, "cuda_allocated_mb", r.cuda_allocated_mb);
  put(j, "cuda_reserved_mb", r.cuda_reserved_mb);
  put(j, "cuda_peak_allocated_mb", r.cuda_peak_allocated_mb);
  put(j, "gpu_util_pct", r.gpu_util_pct);
  put(j, "mfu", r.mfu);
  put(j, "param_bytes", r.param_bytes);
  put(j, "grad_bytes", r.grad_bytes);
  put(j, "optim_state_bytes", r.optim_state_bytes);
  return j;
}

nlohmann::json to_json(const EvalRecord& r) {
  nlohmann::json j = {{"kind", "eval"}, {"step", r.step},   {"epoch", r.epoch},     {"time_s", r.time_s},
                      {"loss", r.loss}, {"count", r.count}, {"eval_ms", r.eval_ms}, {"best_metric", r.best_metric},
                      {"best_value", r.best_value}, {"best_step", r.best_step}};
  put(j, "accuracy", r.accuracy);
  put(j, "top5", r.top5);
  put(j, "ppl", r.ppl);
  put(j, "bpb", r.bpb);
  put(j, "ema_loss", r.ema_loss);
  put(j, "ema_accuracy", r.ema_accuracy);
  put(j, "ema_top5", r.ema_top5);
  put(j, "ema_ppl", r.ema_ppl);
  put(j, "ema_bpb", r.ema_bpb);
  put(j, "tta_loss", r.tta_loss);
  put(j, "tta_accuracy", r.tta_accuracy);
  put(j, "tta_top5", r.tta_top5);
  return j;
}

nlohmann::json to_json(const SummaryRecord& r) {
  nlohmann::json j = {{"kind", "summary"},          {"steps", r.steps},
                      {"epochs", r.epochs},         {"samples", r.samples},
                      {"wall_s", r.wall_s},         {"attempts", r.attempts},
                      {"attempt_wall_s", r.attempt_wall_s}, {"stop_reason", r.stop_reason},
                      {"best_metric", r.best_metric}, {"num_parameters", r.num_parameters},
                      {"world_size", r.world_size}, {"device", r.device},
                      {"precision", r.precision}};
  put(j, "best_value", r.best_value);
  put(j, "best_step", r.best_step);
  return j;
}

nlohmann::json to_json(const AttemptRecord& r) {
  nlohmann::json j = {{"kind", "attempt"}, {"attempt", r.attempt}, {"start_step", r.start_step}, {"time_s", r.time_s}};
  j["resumed_from"] = r.resumed_from ? nlohmann::json(*r.resumed_from) : nlohmann::json(nullptr);
  j["world_size"] = r.world_size;
  if (!r.checkpoint_dir.empty()) j["checkpoint_dir"] = r.checkpoint_dir;
  return j;
}

nlohmann::json to_json(const WorldRecord& r) {
  return {{"kind", "world"}, {"step", r.step}, {"world_size", r.world_size},
          {"previous_world_size", r.previous_world_size}, {"reason", r.reason}};
}

std::vector<std::pair<std::string, double>> scalars(const TrainRecord& r) {
  std::vector<std::pair<std::string, double>> s = {{"train/loss", r.loss},
                                                   {"train/lr", r.lr},
                                                   {"train/grad_norm", r.grad_norm},
                                                   {"perf/samples_per_s", r.samples_per_s},
                                                   {"perf/step_ms", r.step_ms},
                                                   {"perf/data_wait_ms", r.data_wait_ms},
                                                   {"perf/compute_ms", r.compute_ms},
                                                   {"perf/optim_ms", r.optim_ms}};
  auto opt = [&](const char* tag, const std::optional<double>& v) {
    if (v) s.emplace_back(tag, *v);
  };
  opt("train/loss_scale", r.loss_scale);
  opt("perf/tokens_per_s", r.tokens_per_s);
  opt("perf/comm_ms", r.comm_ms);
  opt("perf/tp_comm_ms", r.tp_comm_ms);
  opt("perf/pp_wait_ms", r.pp_wait_ms);
  opt("perf/pp_bubble", r.pp_bubble);
  opt("memory/pp_act_peak_mb", r.pp_act_peak_mb);
  opt("perf/mfu", r.mfu);
  opt("memory/rss_mb", r.rss_mb);
  opt("memory/peak_rss_mb", r.peak_rss_mb);
  opt("memory/cuda_allocated_mb", r.cuda_allocated_mb);
  opt("memory/cuda_reserved_mb", r.cuda_reserved_mb);
  opt("memory/cuda_peak_allocated_mb", r.cuda_peak_allocated_mb);
  opt("perf/gpu_util_pct", r.gpu_util_pct);
  return s;
}

std::vector<std::pair<std::string, double>> scalars(const EvalRecord& r) {
  std::vector<std::pair<std::string, double>> s = {{"eval/loss", r.loss}};
  auto opt = [&](const char* tag, const std::optional<double>& v) {
    if (v) s.emplace_back(tag, *v);
  };
  opt("eval/accuracy", r.accuracy);
  opt("eval/top5", r.top5);
  opt("eval/ppl", r.ppl);
  opt("eval/bpb", r.bpb);
  opt("eval/ema_loss", r.ema_loss);
  opt("eval/ema_accuracy", r.ema_accuracy);
  opt("eval/ema_top5", r.ema_top5);
  opt("eval/ema_ppl", r.ema_ppl);
  opt("eval/ema_bpb", r.ema_bpb);
  opt("eval/tta_loss", r.tta_loss);
  opt("eval/tta_accuracy", r.tta_accuracy);
  opt("eval/tta_top5", r.tta_top5);
  return s;
}

}  // namespace trainer::obs
