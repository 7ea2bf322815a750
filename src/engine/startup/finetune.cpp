#include "engine/startup/finetune.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/name_pattern.hpp"
#include "engine/optim/tp_state.hpp"
#include "io/run_dir.hpp"
#include "io/safetensors.hpp"

namespace trainer::engine {
namespace {

nlohmann::json init_report_json(const models::InitReport& r) {
  nlohmann::json renamed = nlohmann::json::array();
  for (const auto& [from, to] : r.renamed) renamed.push_back({{"from", from}, {"to", to}});
  return {{"path", r.path},          {"format", r.format},         {"loaded", r.loaded},
          {"skipped", r.skipped},    {"renamed", renamed},         {"reinitialised", r.reinitialised},
          {"missing", r.missing},    {"unexpected", r.unexpected}, {"converted", r.converted}};
}

void log_init_report(const models::InitReport& r, bool strict) {
  spdlog::info("model.init: {} ({}): {} tensors loaded, {} skipped, {} renamed, {} re-initialised, {} missing, "
               "{} unexpected", r.path, r.format, r.loaded.size(), r.skipped.size(), r.renamed.size(),
               r.reinitialised.size(), r.missing.size(), r.unexpected.size());
  std::vector<std::string> renamed;
  for (const auto& [from, to] : r.renamed) renamed.push_back(from + " -> " + to);
  auto line = [](const char* what, const std::vector<std::string>& v) {
    if (!v.empty()) spdlog::info("model.init: {} ({}): {}", what, v.size(), models::name_list(v));
  };
  line("loaded", r.loaded);
  line("skipped", r.skipped);
  line("renamed", renamed);
  line("re-initialised (shape differs, the model's own initialisation kept)", r.reinitialised);
  line("dtype converted", r.converted);
  // without strict these are what the user accepted; still worth a warning, since a typo looks the same
  if (!strict && !r.missing.empty())
    spdlog::warn("model.init: missing ({}), left at the model's initialisation: {}", r.missing.size(),
                 models::name_list(r.missing));
  if (!strict && !r.unexpected.empty())
    spdlog::warn("model.init: unexpected ({}), not loaded: {}", r.unexpected.size(), models::name_list(r.unexpected));
}

// The modules whose parameters are all frozen (at least one parameter): BatchNorm only.
std::vector<std::shared_ptr<torch::nn::Module>> frozen_batch_norms(models::Model& model) {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (!m->as<torch::nn::BatchNorm1dImpl>() && !m->as<torch::nn::BatchNorm2dImpl>() &&
        !m->as<torch::nn::BatchNorm3dImpl>())
      continue;
    const auto params = m->parameters(/*recurse=*/false);
    bool all_frozen = !params.empty();
    for (const auto& p : params) all_frozen = all_frozen && !p.requires_grad();
    if (all_frozen) out.push_back(m);
  }
  return out;
}

}  // namespace

namespace {

io::NamedTensors state_of(const models::Model& m) {
  io::NamedTensors out;
  for (auto& [name, t] : io::named_state(m)) out.emplace_back(name, t.detach());
  return out;
}

void copy_state(models::Model& into, io::NamedTensors tensors) {
  io::SafetensorsFile f;
  f.path = "(the run's weights)";
  f.tensors = std::move(tensors);
  io::load_state_into(into, f, /*strict=*/true);
}

// Tensor parallel: a whole model on the CPU takes the run's own weights (gathered: what init.strict
// false leaves alone keeps them), then the file as at T = 1; this rank keeps its slices of the result.
models::InitReport load_init_sliced(models::Model& model, const config::ModelConfig& cfg, const std::string& path) {
  auto global = engine::gather_global(model, state_of(model));
  auto gen = at::detail::getDefaultCPUGenerator();
  const auto rng = gen.get_state();  // building the whole model draws weights: the run's stream is kept
  auto whole = models::build_model_on(cfg, torch::Device(torch::kCPU));
  gen.set_state(rng);
  for (auto& [name, t] : global) t = t.cpu();
  copy_state(*whole, std::move(global));
  auto report = models::load_init_weights(*whole, cfg.init, path);
  copy_state(model, engine::take_local(model, state_of(*whole)));
  return report;
}

}  // namespace

void load_initial_weights(models::Model& model, const config::ModelConfig& cfg, const std::filesystem::path& run_dir,
                          bool primary) {
  const std::string& path = config::init_file(cfg);
  if (path.empty()) return;
  const auto report = engine::tp_sharded(model) ? load_init_sliced(model, cfg, path)
                                                : models::load_init_weights(model, cfg.init, path);
  log_init_report(report, cfg.init.strict);
  // a tensor that did not fit keeps its random initialisation: frozen too, it never trains (the README's
  // fine-tuning recipe on grey images froze a random conv1; said at info level only)
  const auto params = model.named_parameters(/*recurse=*/true);
  for (const auto& what : report.reinitialised) {
    const std::string name = what.substr(0, what.find(':'));
    if (const auto* p = params.find(name); p && !p->requires_grad())
      spdlog::warn("model.init: {} did not fit {} and keeps its random initialisation, and train.freeze freezes it: it "
                   "will never train (leave it out of train.freeze)",
                   name, path);
  }
  if (!cfg.init.skip.empty() && report.skipped.empty())
    spdlog::warn("model.init.skip: no name of {} matches any of its regexes", path);
  if (primary) io::write_file_atomic(run_dir / kInitReportFile, init_report_json(report).dump(2) + "\n");
}

models::ModelPtr build_run_model(const config::RunConfig& cfg, const torch::Device& device,
                                 const models::BuildContext& ctx) {
  auto model = models::build_model_on(cfg.model, device, ctx);
  apply_freeze(*model, cfg.train);
  return model;
}

std::vector<std::string> apply_freeze(models::Model& model, const config::TrainConfig& cfg) {
  std::vector<std::string> frozen;
  if (cfg.freeze.empty()) return frozen;
  std::vector<config::NamePattern> res;
  for (const auto& s : cfg.freeze) res.emplace_back(s);  // checked when the config loaded
  std::vector<size_t> hits(res.size(), 0);
  int64_t frozen_numel = 0, total_numel = 0;
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    total_numel += p.value().numel();
    bool match = false;
    for (size_t i = 0; i < res.size(); ++i)
      if (res[i].found_in(p.key())) match = true, ++hits[i];
    if (!match) continue;
    p.value().set_requires_grad(false);
    frozen.push_back(p.key());
    frozen_numel += p.value().numel();
  }
  for (size_t i = 0; i < res.size(); ++i)
    if (hits[i] == 0) spdlog::warn("train.freeze: '{}' matches no parameter name", cfg.freeze[i]);
  spdlog::info("train.freeze: {} parameter tensors frozen ({} of {} values): {}", frozen.size(), frozen_numel,
               total_numel, models::name_list(frozen));
  if (cfg.freeze_bn) {
    auto bns = frozen_batch_norms(model);
    spdlog::info("train.freeze_bn: {} frozen BatchNorm modules stay in eval mode (running statistics unchanged)",
                 bns.size());
    model.keep_in_eval(std::move(bns));
  }
  return frozen;
}

}  // namespace trainer::engine
