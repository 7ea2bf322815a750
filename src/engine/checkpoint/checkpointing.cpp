#include "engine/checkpoint/checkpointing.hpp"

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "config/config_diff.hpp"
#include "config/load.hpp"
#include "engine/optim/tp_state.hpp"
#include "io/tensor_parts.hpp"
#include "engine/parallel/sharded_checkpoint.hpp"
#include "engine/optim/train_state.hpp"
#include "io/safetensors.hpp"

namespace trainer::engine {

std::filesystem::path checkpoint_dir(const config::RunConfig& cfg, const std::filesystem::path& run_dir) {
  return cfg.checkpoint.dir.empty() ? run_dir / "checkpoints" : std::filesystem::path(cfg.checkpoint.dir);
}

namespace {
// mean_std's values are called mean and std, minmax's min and max
std::pair<const char*, const char*> normalize_names(const std::string& mode) {
  return mode == "minmax" ? std::pair("min", "max") : std::pair("mean", "std");
}
}  // namespace

nlohmann::json normalize_json(const data::NormalizeValues& v) {
  nlohmann::json j = {{"mode", v.mode}};
  if (v.mode == "none") return j;
  const auto [a, b] = normalize_names(v.mode);
  j[a] = v.a;
  j[b] = v.b;
  return j;
}

data::NormalizeValues normalize_from_json(const nlohmann::json& j, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return io::CheckpointError(where + ": " + io::kStateDataNormalize + " " + why + " (it records how the training "
                               "images were normalised)");
  };
  if (!j.is_object() || !j.contains("mode") || !j["mode"].is_string()) throw bad("has no mode");
  data::NormalizeValues v;
  v.mode = j["mode"].get<std::string>();
  if (v.mode == "none") return v;
  if (v.mode != "mean_std" && v.mode != "minmax") throw bad("has the unknown mode '" + v.mode + "'");
  const auto [a, b] = normalize_names(v.mode);
  auto list = [&](const char* key) {
    std::vector<double> out;
    if (!j.contains(key) || !j[key].is_array() || j[key].empty() || j[key].size() > 64)
      throw bad(std::string("has no list of 1 to 64 values '") + key + "'");
    for (const auto& x : j[key]) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) throw bad(std::string("'") + key + "' holds a non-number");
      out.push_back(x.get<double>());
    }
    return out;
  };
  v.a = list(a);
  v.b = list(b);
  if (v.a.size() != v.b.size()) throw bad(std::string("'") + a + "' and '" + b + "' differ in length");
  return v;
}

ClassesJson classes_json(const std::vector<std::string>& names) {
  ClassesJson out{nlohmann::json::array(), std::nullopt};
  bool all_utf8 = true;
  for (const auto& n : names) {
    all_utf8 = all_utf8 && !config::first_invalid_utf8(n);
    // a stray byte becomes U+FFFD: the printable list a PyTorch user reads
    out.names.push_back(nlohmann::json::parse(
        nlohmann::json(n).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  }
  if (all_utf8) return out;
  out.hex = nlohmann::json::array();
  for (const auto& n : names) {
    std::string h;
    for (unsigned char ch : n) h += fmt::format("{:02x}", ch);
    out.hex->push_back(h);
  }
  return out;
}

namespace {

// A name's bytes from their hex (two lowercase or uppercase digits each); nullopt for anything else.
std::optional<std::string> from_hex(const std::string& h) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (h.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    const int hi = digit(h[i]), lo = digit(h[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

std::vector<std::string> classes_from_json(const nlohmann::json& names, const nlohmann::json* hex,
                                           const std::string& where) {
  const auto& j = hex ? *hex : names;
  std::vector<std::string> out;
  if (j.is_array())
    for (const auto& c : j) {
      if (!c.is_string()) break;
      if (!hex) {
        out.push_back(c.get<std::string>());
        continue;
      }
      auto bytes = from_hex(c.get<std::string>());
      if (!bytes) break;
      out.push_back(std::move(*bytes));
    }
  const bool same_count = !hex || (names.is_array() && names.size() == j.size());
  if (!j.is_array() || out.size() != j.size() || out.empty() || !same_count)
    throw io::CheckpointError(where + ": " + (hex ? io::kStateDataClassesHex : io::kStateDataClasses) +
                              " is not a list of class names" + (hex ? " in hex, one for each of data_classes" : ""));
  return out;
}

std::vector<std::string> classes_from_state(const nlohmann::json& state, const std::string& where) {
  const auto hex = state.find(io::kStateDataClassesHex);
  return classes_from_json(state.at(io::kStateDataClasses), hex == state.end() ? nullptr : &*hex, where);
}

void check_same_classes(const std::vector<std::string>& recorded, const std::vector<std::string>& now,
                        const std::string& what) {
  if (recorded.empty() || now.empty() || recorded == now) return;
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    return "[" + s + (v.size() > 8 ? ", ... " + std::to_string(v.size()) + " in all" : "") + "]";
  };
  size_t i = 0;
  while (i < recorded.size() && i < now.size() && recorded[i] == now[i]) ++i;
  throw std::runtime_error(
      what + " were trained with the class folders " + list(recorded) + "; the training data has " + list(now) +
      " now (first difference: label " + std::to_string(i) + ", " +
      (i < recorded.size() ? "'" + recorded[i] + "'" : "none") + " then, " + (i < now.size() ? "'" + now[i] + "'" : "none") +
      " now): every label would name another class. Restore the folders' names, or train anew");
}

std::optional<TpParts> tp_parts(const RunObjects& objs) {
  const auto& cp = checkpoint_part(objs);
  if (!tp_sharded(objs.model) && cp.pipeline_size() <= 1) return std::nullopt;
  const int64_t tp_rank = objs.model.tp_comm().rank(), tp_size = objs.model.tp_comm().size();
  TpParts p;
  p.part = cp.pipeline_rank() * tp_size + tp_rank;  // pipeline parallel: a part per (pp, tp) rank
  p.parts = cp.pipeline_size() * tp_size;
  p.writes = cp.writes_tp_part();
  const bool whole = tp_rank == 0;  // the replicated tensors: tp rank 0's (of each stage)
  auto own = [&cp](io::NamedTensors all) {  // pipeline parallel: the tensors of this rank's stages
    io::NamedTensors out;
    for (auto& [name, t] : all)
      if (cp.owns(name)) out.emplace_back(name, t);
    return out;
  };
  io::NamedTensors live;
  for (auto& [name, t] : io::named_state(objs.model)) live.emplace_back(name, t.detach());
  auto on_cpu = [](LocalPart part) {
    for (auto& [name, t] : part.tensors) t = t.to(torch::kCPU);
    return part;
  };
  if (cp.sharded_state()) {  // every rank: its pieces of the parameters its part holds, where they sit
    io::NamedTensors params;
    for (const auto& item : objs.model.named_parameters(/*recurse=*/true)) params.emplace_back(item.key(), item.value());
    const auto held = local_part(objs.model, own(params), whole);
    std::set<std::string> names;
    for (const auto& [name, t] : held.tensors) names.insert(name);
    p.shard = part_shard(cp, objs.optimizer, objs.model, p.part, p.parts, names, held.ranges, whole);
    p.shard_world = cp.shard_of().second;
  }
  // not sharded over dp: the whole (TP-local) tensors (a collective of every rank)
  const auto opt = p.shard ? io::NamedTensors{} : cp.whole_optimizer_state(objs.optimizer, objs.model);
  if (!p.writes) return p;
  p.groups["model"] = on_cpu(local_part(objs.model, own(live), whole));
  if (!p.shard) p.groups["optimizer"] = on_cpu(local_part(objs.model, own(opt), whole));
  if (objs.ema) {  // the shadow holds the live model's slices under the same names: the model's specs apply
    io::NamedTensors shadow;
    for (auto& [name, t] : io::named_state(objs.ema->model())) shadow.emplace_back(name, t.detach());
    p.groups["ema"] = on_cpu(local_part(objs.model, own(shadow), whole));
  }
  return p;
}

namespace {

// The dtypes a training loss is summed in (autocast keeps the loss in fp32; a half model's in its own).
constexpr torch::ScalarType kLossDtypes[] = {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf};

nlohmann::json interval_json(const LossInterval& li) {
  nlohmann::json sums = nlohmann::json::array();
  for (double v : li.loss_sums) sums.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
  return {{"loss_sums", sums},           {"loss_counts", li.loss_counts}, {"micro_batches_per_step", li.per_step},
          {"dtype", c10::toString(li.dtype)}, {"skipped_steps", li.skipped_steps}, {"steps", li.steps}};
}

// state.json's "log_interval" (nullopt when absent: an older checkpoint); throws io::CheckpointError
// for one that does not hold together (json exceptions for wrong types).
std::optional<LossInterval> interval_from(const nlohmann::json& s, const std::filesystem::path& from) {
  if (!s.contains("log_interval")) return std::nullopt;
  const auto& j = s.at("log_interval");
  LossInterval li;
  for (const auto& v : j.at("loss_sums"))
    li.loss_sums.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>());
  li.loss_counts = j.at("loss_counts").get<std::vector<int64_t>>();
  // an older checkpoint's: unknown (0), its sums then taken as this run's micro-batches
  li.per_step = j.value("micro_batches_per_step", std::vector<int64_t>(li.loss_counts.size(), 0));
  li.skipped_steps = j.at("skipped_steps").get<int64_t>();
  li.steps = j.value("steps", int64_t{-1});
  const auto dtype = j.at("dtype").get<std::string>();
  bool known = false;
  for (auto t : kLossDtypes)
    if (dtype == c10::toString(t)) li.dtype = t, known = true;
  const bool counts_ok = std::all_of(li.loss_counts.begin(), li.loss_counts.end(), [](int64_t c) { return c >= 0; });
  bool per_step_ok = li.per_step.size() == li.loss_counts.size();
  for (size_t r = 0; per_step_ok && r < li.per_step.size(); ++r)  // every counted step holds per_step
    per_step_ok = li.per_step[r] >= 0 && (li.per_step[r] == 0 || li.loss_counts[r] % li.per_step[r] == 0);
  if (!known || li.loss_sums.empty() || li.loss_sums.size() != li.loss_counts.size() || !counts_ok ||
      !per_step_ok || li.skipped_steps < 0)
    throw io::CheckpointError((from / "state.json").string() + ": log_interval does not hold together (a sum, a "
                              "count >= 0 and a count per step dividing it per rank, a loss dtype, skipped_steps >= 0)");
  return li;
}

}  // namespace

io::CheckpointContent capture_checkpoint(const config::RunConfig& cfg, const RunObjects& objs, const RunPosition& pos,
                                         const TpParts* parts) {
  io::CheckpointContent c;
  if (parts) {  // part 0 here; the other tp ranks staged theirs (checkpoint_manager.cpp)
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& [group, part] : parts->groups) {
      const auto name = io::part_group_name(group, 0, parts->parts);
      c.groups[name] = part.tensors;
      c.metadata[name] = {{io::kRangesKey, io::encode_ranges(part.ranges)}};
      groups.push_back(group);
    }
    c.state[io::kStateTensorParts] = {{"parts", parts->parts}, {"groups", groups}};
    if (parts->shard)  // every rank staged its part shard (checkpoint_manager.cpp)
      c.state["optimizer_part_shards"] = {{"parts", parts->parts}, {"world_size", parts->shard_world}};
  } else {
    io::NamedTensors model_state;
    for (auto& [name, t] : io::named_state(objs.model)) model_state.emplace_back(name, t.detach().to(torch::kCPU));
    c.groups["model"] = std::move(model_state);
    if (const auto& part = checkpoint_part(objs); part.sharded_state())  // every rank writes its shard (checkpoint_manager.cpp)
      c.state["optimizer_shards"] = part.shard_layout(objs.model);
    else
      c.groups["optimizer"] = optimizer_state_tensors(objs.optimizer, objs.model);
    if (objs.ema) {
      io::NamedTensors ema_state;
      for (auto& [name, t] : io::named_state(objs.ema->model())) ema_state.emplace_back(name, t.detach().to(torch::kCPU));
      c.groups["ema"] = std::move(ema_state);
    }
  }
  c.groups["rng"] = rng_state_tensors(objs.device);
  if (objs.ema) c.state["ema"] = {{"decay", objs.ema->decay()}, {"every", objs.ema->config().every}};

  auto& s = c.state;
  s["step"] = pos.step;
  s["loader"] = {{"epoch", pos.loader.epoch}, {"samples_consumed", pos.loader.samples_consumed}};
  const auto scaler = objs.scaler.state();
  s["loss_scaler"] = {{"scale", scaler.scale}, {"growth_tracker", scaler.growth_tracker}};
  const auto& tr = objs.tracker;
  s["best"] = {{"metric", tr.metric()},
               {"value", tr.best() ? nlohmann::json(*tr.best()) : nlohmann::json(nullptr)},
               {"step", tr.best_step()},
               {"evals_without_improvement", tr.evals_without_improvement()},
               {"evaluated_step", tr.evaluated_step()}};
  s["global_batch_size"] = cfg.train.global_batch_size;
  s["world_size"] = pos.world_size;
  s["time_s"] = pos.time_s;
  if (pos.records_lost > 0) s["records_lost"] = pos.records_lost;  // the attempt that ends the run exits 1
  if (pos.interval) s["log_interval"] = interval_json(*pos.interval);
  if (pos.samples >= 0) s["samples"] = pos.samples;
  if (pos.total_steps >= 0) s["total_steps"] = pos.total_steps;
  if (objs.data.normalize) s[io::kStateDataNormalize] = normalize_json(*objs.data.normalize);
  if (!objs.data.classes.empty()) {  // a name need not be UTF-8, state.json must be (classes_json)
    auto classes = classes_json(objs.data.classes);
    s[io::kStateDataClasses] = std::move(classes.names);
    if (classes.hex) s[io::kStateDataClassesHex] = std::move(*classes.hex);
  }
  s[io::kStateConfigYaml] = config::dump_yaml(cfg);
  s[io::kStateConfigHash] = config::config_hash(cfg);
  s["libtorch_version"] = TORCH_VERSION;
  return c;
}

namespace {

// The EMA weights of a checkpoint (global tensors: tensor parallel keeps the slices of `live`, the
// model the shadow mirrors); one saved without them (EMA turned on for the resumed run) starts the EMA
// from the restored weights, and says so.
void restore_ema(const io::CheckpointContent& content, const std::filesystem::path& from, const models::Model& live,
                 Ema& ema) {
  auto it = content.groups.find("ema");
  if (it == content.groups.end()) {
    spdlog::warn("{}: no EMA weights in this checkpoint (saved without train.ema): the EMA starts from the "
                 "restored weights",
                 from.string());
    ema.reset_from_live();
    return;
  }
  io::SafetensorsFile f;
  f.path = (from / "ema.safetensors").string();
  f.tensors = take_local(live, it->second);
  io::load_state_into(ema.model(), f, /*strict=*/true);
}

}  // namespace

RunPosition restore_checkpoint(const io::CheckpointContent& content, const std::filesystem::path& from,
                               const config::RunConfig& cfg, const RunObjects& objs) {
  auto group = [&](const std::string& name) -> const io::NamedTensors& {
    auto it = content.groups.find(name);
    if (it == content.groups.end())
      throw io::CheckpointError(from.string() + ": no " + name + ".safetensors in this checkpoint");
    return it->second;
  };
  const auto& s = content.state;
  try {
    // everything read first: a checkpoint that lacks a part fails before anything is loaded
    for (const char* g : {"model", "rng"}) (void)group(g);
    if (s.contains(io::kStateDataClasses))  // a renamed class folder: every label would shift
      check_same_classes(classes_from_state(s, (from / "state.json").string()), objs.data.classes,
                         "the weights of " + from.string());
    // assembled from the shards if sharded; tensor parallel: this rank's slices of the global tensors
    const auto optimizer = take_local(objs.model, full_optimizer_state(content, from));
    RunPosition pos;
    pos.step = s.at("step").get<int64_t>();
    pos.loader.epoch = s.at("loader").at("epoch").get<int64_t>();
    pos.loader.samples_consumed = s.at("loader").at("samples_consumed").get<int64_t>();
    pos.world_size = s.value("world_size", int64_t{0});
    pos.time_s = s.value("time_s", 0.0);
    pos.records_lost = s.value("records_lost", int64_t{0});
    pos.samples = s.value("samples", int64_t{-1});
    pos.total_steps = s.value("total_steps", int64_t{-1});
    pos.global_batch = s.value("global_batch_size", int64_t{-1});
    pos.interval = interval_from(s, from);
    if (pos.step < 0 || pos.loader.epoch < 0 || pos.loader.samples_consumed < 0 || pos.world_size < 0 ||
        pos.records_lost < 0)
      throw io::CheckpointError((from / "state.json").string() +
                                ": negative step, loader position, world size or lost record count");
    if (auto folder_step = io::parse_step_dir_name(from.filename().string()); folder_step && *folder_step != pos.step)
      throw io::CheckpointError((from / "state.json").string() + ": says step " + std::to_string(pos.step) +
                                ", but the folder is " + from.filename().string());
    LossScalerState sc;
    sc.scale = s.at("loss_scaler").at("scale").get<double>();
    sc.growth_tracker = s.at("loss_scaler").at("growth_tracker").get<int64_t>();
    const auto& b = s.at("best");
    std::optional<double> best;
    if (!b.at("value").is_null()) best = b.at("value").get<double>();
    const auto best_step = b.at("step").get<int64_t>();
    const auto evals_without = b.at("evals_without_improvement").get<int64_t>();
    // absent in checkpoints written before it existed: taken as evaluated (nothing is done again)
    const auto evaluated = b.value("evaluated_step", pos.step);
    // values a run cannot have saved (an edited state.json, re-signed): refused, not taken in silence
    // (an evaluated step past the checkpoint's skipped the final evaluation; a negative scale trained)
    const std::string state = (from / "state.json").string();
    if (!(sc.scale > 0) || !std::isfinite(sc.scale) || sc.growth_tracker < 0)
      throw io::CheckpointError(state + ": loss_scaler.scale must be a positive finite number and growth_tracker >= 0");
    if (best_step > pos.step || evaluated > pos.step || evals_without < 0 || (best && !std::isfinite(*best)))
      throw io::CheckpointError(state + ": best.step and best.evaluated_step must be at most the checkpoint's step " +
                                std::to_string(pos.step) + ", evals_without_improvement >= 0, the value finite");
    if (!std::isfinite(pos.time_s) || pos.time_s < 0)
      throw io::CheckpointError(state + ": time_s must be a finite number >= 0");

    io::SafetensorsFile weights;
    weights.path = (from / "model.safetensors").string();
    weights.tensors = take_local(objs.model, group("model"));
    {
      FullParams whole(objs.parallel, /*write=*/true);  // dist.sharding full: each rank keeps its slice
      io::load_state_into(objs.model, weights, /*strict=*/true);
    }
    checkpoint_part(objs).load_optimizer(objs.optimizer, objs.model, optimizer);  // a sharded run takes its slices
    restore_rng_state(group("rng"), objs.device);
    if (objs.ema) restore_ema(content, from, objs.model, *objs.ema);
    objs.scaler.load_state(sc);
    objs.tracker.restore(best, best_step, evals_without, evaluated);
    const std::string hash = s.value(io::kStateConfigHash, "");
    if (hash != config::config_hash(cfg)) {
      // named by the keys that change training: a world size's own accumulation, or a log interval, is
      // no other config (every elastic resize warned)
      std::string changes = "hash " + hash.substr(0, 12) + " vs " + config::config_hash(cfg).substr(0, 12);
      try {
        const auto saved = config::load_config_text(s.at(io::kStateConfigYaml).get<std::string>(),
                                                    (from / "state.json").string()).cfg;
        changes = config::changes_text(config::training_changes(saved, cfg));
      } catch (const std::exception&) {  // a config this version does not read: the hashes say it
      }
      if (!changes.empty())
        spdlog::warn("resuming from {} written with a different config ({}): the run continues with the current config",
                     from.string(), changes);
    }
    return pos;
  } catch (const nlohmann::json::exception& e) {
    throw io::CheckpointError((from / "state.json").string() + ": missing or malformed field: " + e.what());
  }
}

}  // namespace trainer::engine
