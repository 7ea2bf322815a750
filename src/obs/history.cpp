#include "obs/history.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace trainer::obs {

RunHistory read_history(const std::filesystem::path& metrics) {
  RunHistory h;
  std::ifstream in(metrics);
  bool open = false;  // inside an attempt's records
  double start = 0, latest = 0;
  auto close_attempt = [&] {
    if (open) h.wall_s += std::max(0.0, latest - start);
  };
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    const std::string kind = j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>() : "";
    const double t = j.contains("time_s") && j["time_s"].is_number() ? j["time_s"].get<double>() : latest;
    if (kind == "attempt") {
      // the checkpoint this attempt resumed from is newer than the previous attempt's start, so the
      // previous attempt saved it: that attempt ran at least until the checkpoint's clock
      if (open && t > start) latest = std::max(latest, t);
      close_attempt();
      ++h.attempts;
      open = true;
      start = latest = t;
      if (j.contains("checkpoint_dir") && j["checkpoint_dir"].is_string()) {
        const auto dir = j["checkpoint_dir"].get<std::string>();
        h.checkpoint_dirs.erase(std::remove(h.checkpoint_dirs.begin(), h.checkpoint_dirs.end(), dir),
                                h.checkpoint_dirs.end());
        h.checkpoint_dirs.push_back(dir);  // by the last attempt that used it
      }
      continue;
    }
    if (kind != "train" && kind != "eval") continue;
    if (!open) {  // records of a run that wrote no attempt record: one attempt from time 0
      ++h.attempts;
      open = true;
      start = latest = 0;
    }
    latest = std::max(latest, t);
    if (!j.contains("step") || !j["step"].is_number_integer()) continue;
    const auto step = j["step"].get<int64_t>();
    h.last_step = std::max(h.last_step, step);
    int64_t& last_of_kind = kind == "train" ? h.last_train_step : h.last_eval_step;
    last_of_kind = std::max(last_of_kind, step);
    if (kind == "train" && j.contains("loss") && j["loss"].is_number()) h.train_losses[step] = j["loss"].get<double>();
  }
  close_attempt();
  if (open) h.last_reached_s = latest;
  return h;
}

}  // namespace trainer::obs
