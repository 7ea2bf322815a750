// What `trainer eval` and `trainer predict` share: the weights a user names, verified and loaded into
// the config's model, on the device and in the precision a run of that config would use.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "config/config.hpp"
#include "dist/launch_env.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// A run directory's checkpoint folder: its config.yaml's checkpoint.dir when set (resume looks there
// too), else its checkpoints/, else the newest folder its attempts saved in (their records in
// metrics.jsonl): the first of them that holds a step-<N> folder.
std::filesystem::path run_checkpoint_folder(const std::filesystem::path& run);

// The path given is not there at all: a usage error (exit 2), unlike a checkpoint that is there but
// does not verify or does not fit the model (io::CheckpointError / io::SafetensorsError, exit 1).
class WeightsNotFound : public std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct InferenceModel {
  // The config as given, with the choices the checkpoint's run made at its start where the config
  // leaves them to be made (model.attention auto, train.batch_size auto): evaluating with other
  // choices would not reproduce the run's figures. Likewise the image normalisation's statistics when
  // the weights record them (data.normalize left to be computed: the training run's, not the data's now).
  config::RunConfig cfg;
  torch::Device device{torch::kCPU};
  Precision precision = Precision::Fp32;
  models::ModelPtr model;  // the loaded weights, on `device`, in eval mode
  std::string weights;     // what was loaded: a step folder or an exported file
  int64_t step = -1;       // the training step of the weights (-1: not recorded)
  std::vector<std::string> classes;  // image_folder: the class names the weights were trained with
                                     // (empty: not recorded); eval and predict compare the data's
};

// `path`: a checkpoint step folder (or its `latest` / `best` link), a checkpoints folder or a run
// directory (its newest checkpoint that verifies), or an exported .safetensors file. A checkpoint is
// verified (every checksum) before it is read, as resume does; the weights are loaded strictly, so a
// checkpoint of another model or shape is refused, naming the file and the tensors.
// Also configures the process as a run would (threads, seeds, determinism, device).
InferenceModel load_inference_model(const config::RunConfig& cfg, const dist::LaunchEnv& env, const std::string& path);

}  // namespace trainer::engine
