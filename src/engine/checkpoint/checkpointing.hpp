// What a checkpoint of a training run holds, and the two directions: capture the live objects into
// io::CheckpointContent, and restore them from one. The storage itself is io::CheckpointStore.
//
//   model.safetensors      io::named_state(model): torchvision / nanoGPT names (export reads it)
//   optimizer.safetensors  per-parameter optimizer state (engine/optim/train_state.hpp)
//   rng.safetensors        CPU (and CUDA) generator states
//   ema.safetensors        train.ema: the EMA weights, under the model's names (export --ema reads it)
//   state.json             step, loader position, loss scaler, best metric, the log interval's
//                          losses per rank, resolved config + hash
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "data/transforms.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/parallel/sharded_checkpoint.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/step/ema.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/tp_state.hpp"
#include "io/checkpoint.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// The log interval a checkpoint cuts (train.log_every > 1, a save between two log steps): every
// rank's training loss summed over the interval's steps so far, so that a resumed run logs the
// interval's mean as the uninterrupted run did. state.json "log_interval".
struct LossInterval {
  std::vector<double> loss_sums;      // per rank of the run that saved it, in the sums' dtype (NaN: not finite)
  std::vector<int64_t> loss_counts;   // the micro-batches in each sum (0: nothing logged since the last record)
  std::vector<int64_t> per_step;      // the micro-batches each counted step added (0: unknown, an older checkpoint)
  torch::ScalarType dtype = torch::kFloat;  // of the sums on the device: restored as it was (a bitwise resume)
  int64_t skipped_steps = 0;          // steps the fp16 scaler skipped so far (agreed: the same on every rank)
  int64_t steps = -1;                 // the steps in the sums (-1: not recorded)
};

struct RunPosition {
  int64_t step = 0;           // optimizer steps done
  data::LoaderState loader;   // global position of the training loader after `step`
  int64_t world_size = 1;     // ranks of the run that saved it (0: not recorded, an older checkpoint)
  double time_s = 0;          // the run's training clock at `step`, over all attempts (0: not recorded)
  int64_t records_lost = 0;   // metrics records that failed to write up to `step`, over all attempts
  std::optional<LossInterval> interval;  // absent: not recorded (an older checkpoint)
  // Filled by restore (capture takes them from the run): what an older checkpoint lacks stays at -1.
  int64_t samples = -1;       // samples trained up to `step`, summed over the world sizes that ran them
  int64_t total_steps = -1;   // the run's length when it saved (an epochs-sized run recounts it at a new world size)
  int64_t global_batch = -1;  // samples per step when it saved
};

struct RunObjects {
  models::Model& model;
  torch::optim::Optimizer& optimizer;
  LossScaler& scaler;
  EarlyStopping& tracker;
  const torch::Device& device;
  const DataParallel* parallel = nullptr;  // sharded: the optimizer state is this rank's shard
  Ema* ema = nullptr;  // train.ema, when on
  // image data: how its bytes became the model's input, and its class names, recorded for eval,
  // predict, export and resume
  data::DataRecord data;
};

// How `objs`' optimizer state is checkpointed: its strategy's part, the replicated layout without one.
inline const CheckpointPart& checkpoint_part(const RunObjects& objs) {
  return objs.parallel ? objs.parallel->checkpoint_part() : replicated_checkpoint_part();
}

// Tensor parallel (engine/optim/tp_state.hpp, io/tensor_parts.hpp): a checkpoint in parts, one per tp
// rank of dp rank 0's tp group, each its rank's slices of the model, the optimizer state and the EMA
// under their global names with their ranges (the replicated tensors in part 0). No tp collective; an
// optimizer state sharded over dp is not gathered: every rank writes its pieces of its part (`shard`,
// sharded_checkpoint.hpp). Pipeline parallel: a part per (pp, tp) rank of
// dp rank 0, each holding its stages' tensors (CheckpointPart::owns; a stage's replicated tensors in
// its tp rank 0's part). nullopt when no parameter is sharded and P = 1.
struct TpParts {
  int64_t part = 0, parts = 1;  // pp rank x T + tp rank, and P x T
  bool writes = false;          // of dp rank 0's tp group: its part goes into the checkpoint
  std::map<std::string, LocalPart> groups;  // "model", "optimizer" (not sharded over dp), "ema"
  // Sharded over dp: every rank's pieces of its part's optimizer state (sharded_checkpoint.hpp)
  std::optional<PartShard> shard;
  int64_t shard_world = 1;      // the dp ranks the shards are over
};
std::optional<TpParts> tp_parts(const RunObjects& objs);

// `parts` (tensor parallel, rank 0's): its groups as part 0 (the other parts are staged by their
// ranks) and state.json's tensor_parts.
io::CheckpointContent capture_checkpoint(const config::RunConfig& cfg, const RunObjects& objs, const RunPosition& pos,
                                         const TpParts* parts = nullptr);

// Loads everything into `objs` and returns where the run stands. Throws io::CheckpointError /
// std::runtime_error naming the checkpoint and what does not fit (another model, optimizer, a
// state.json whose step is not its folder's). Every group and state field is checked to be there
// before anything is loaded, so a checkpoint that lacks one leaves `objs` untouched.
RunPosition restore_checkpoint(const io::CheckpointContent& content, const std::filesystem::path& from,
                               const config::RunConfig& cfg, const RunObjects& objs);

// The record of how image bytes became the model's input (state.json's io::kStateDataNormalize, and an
// export's metadata of the same name): {"mode": "mean_std", "mean": [...], "std": [...]}, {"mode":
// "minmax", "min": [...], "max": [...]} (per channel, of x / 255) or {"mode": "none"} (x / 255).
nlohmann::json normalize_json(const data::NormalizeValues& v);
// Its reading: io::CheckpointError naming `where` for one that does not hold together (another mode,
// lists of different or no lengths, a value that is not finite).
data::NormalizeValues normalize_from_json(const nlohmann::json& j, const std::string& where);

// The class names a checkpoint records (state.json's io::kStateDataClasses, an export's metadata of the
// same name: a JSON list of strings). JSON text must be UTF-8 and a class folder's name need not be (an
// old Latin-1 dataset): `names` shows such a byte as U+FFFD, and `hex` (io::kStateDataClassesHex), there
// only then, holds every name's bytes in hex, which is what is read back (a resume compares the names).
struct ClassesJson {
  nlohmann::json names;
  std::optional<nlohmann::json> hex;
};
ClassesJson classes_json(const std::vector<std::string>& names);
// Their reading, from `hex` where given (else `names`); CheckpointError naming `where` for anything else.
std::vector<std::string> classes_from_json(const nlohmann::json& names, const nlohmann::json* hex,
                                           const std::string& where);
// The same from a state document holding io::kStateDataClasses (and io::kStateDataClassesHex where given).
std::vector<std::string> classes_from_state(const nlohmann::json& state, const std::string& where);
// Throws std::runtime_error when `now` (the data's class names as read now) and `recorded` (those the
// weights were trained with) both exist and differ: the labels would mean other classes, in silence
// (a class folder renamed, added or removed). `what` says whose the weights are.
void check_same_classes(const std::vector<std::string>& recorded, const std::vector<std::string>& now,
                        const std::string& what);

// The checkpoint folder of a run: checkpoint.dir, or <run dir>/checkpoints.
std::filesystem::path checkpoint_dir(const config::RunConfig& cfg, const std::filesystem::path& run_dir);

}  // namespace trainer::engine
