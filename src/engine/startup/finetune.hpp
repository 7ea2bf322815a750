// Fine-tuning at start-up: model.init (the initial weights, with a load report in the log and in
// <run dir>/init_report.json) and train.freeze / train.freeze_bn (what takes no gradient).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "models/init_load.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// The file the report goes to, in the run directory.
inline constexpr const char* kInitReportFile = "init_report.json";

// Loads model.init into `model` (nothing when no file is set), logs what was loaded, skipped, renamed,
// re-initialised, missing and unexpected, and on the primary rank writes <run_dir>/init_report.json.
// Called for a fresh start only: a resumed run's weights come from its checkpoint, and its init file is
// not read (it may be gone or changed since). Throws models::InitLoadError naming the file.
// Tensor parallel: the file holds T = 1 tensors; every rank of the tp group calls it (a collective),
// the file is applied to a whole model and each rank keeps its slices, as at initialisation.
void load_initial_weights(models::Model& model, const config::ModelConfig& cfg, const std::filesystem::path& run_dir,
                          bool primary);

// The run's model: models::build_model_on (over ctx's tp group), then train.freeze applied.
models::ModelPtr build_run_model(const config::RunConfig& cfg, const torch::Device& device,
                                 const models::BuildContext& ctx = {});

// train.freeze: every parameter whose name matches a regex gets requires_grad(false), before the
// optimizer and the gradient sync are built, so it has no optimizer state and no all-reduce bucket.
// train.freeze_bn: BatchNorm modules whose parameters are all frozen stay in eval mode. Logs the
// counts; a regex that matches no parameter is a warning. Returns the frozen names.
std::vector<std::string> apply_freeze(models::Model& model, const config::TrainConfig& cfg);

}  // namespace trainer::engine
