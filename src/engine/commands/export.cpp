#include "engine/commands/export.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "config/exit_codes.hpp"
#include "config/file_read.hpp"
#include "config/file_write.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "dist/launch_env.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/commands/inference.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_parts.hpp"
#include "models/model.hpp"

namespace trainer::engine {
namespace fs = std::filesystem;
namespace {

torch::ScalarType parse_dtype(const std::string& dtype) {
  if (dtype == "fp32") return torch::kFloat;
  if (dtype == "bf16") return torch::kBFloat16;
  if (dtype == "fp16") return torch::kHalf;
  throw std::invalid_argument("--dtype: '" + dtype + "' is not one of fp32 | bf16 | fp16");
}

// The model.* keys that apply to this arch, as typed JSON: for GPT the nanoGPT GPTConfig fields
// (vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias) appear under their own names.
nlohmann::json model_config_json(config::RunConfig& cfg) {
  nlohmann::json j = nlohmann::json::object();
  const std::string prefix = "model.";
  for (const auto& f : config::describe_fields(cfg)) {
    if (f.key.rfind(prefix, 0) != 0) continue;
    if (!config::applies_to_arch(f, cfg.model.arch)) continue;
    const std::string name = f.key.substr(prefix.size());
    // a path on the training machine and how it was read: meaningless to the reader
    if (name == "init_from" || name.rfind("init.", 0) == 0) continue;
    std::visit(
        [&](const auto& r) {
          using R = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<R, config::EnumRef>) j[name] = f.choices.at(r.get());
          else if constexpr (!std::is_same_v<R, std::vector<config::ParamGroupRule>*>) j[name] = *r;
        },
        f.ref);
  }
  return j;
}

std::string read_text(const fs::path& p) {  // regular files only: a FIFO would block
  return RegularFile::open<io::CheckpointError>(p.string(), 1u << 30, "a checkpoint state document")
      .read_all<io::CheckpointError>();
}

// A checkpoint, a checkpoints folder, or a run directory (where its run saved, as eval takes one).
fs::path resolve_export_source(const std::string& path) {
  std::error_code ec;
  const bool run_dir = fs::is_regular_file(fs::path(path) / "config.yaml", ec);
  return io::resolve_checkpoint_path(run_dir ? run_checkpoint_folder(path) : fs::path(path));
}

}  // namespace

void export_checkpoint(const std::string& checkpoint, const std::string& out, const std::string& dtype_name, bool ema) {
  const auto dtype = parse_dtype(dtype_name);
  if (out.empty()) throw std::invalid_argument("--out: an output .safetensors file is required");
  const fs::path dir = resolve_export_source(checkpoint);
  io::verify_checkpoint(dir);  // every checksum, before anything is deserialised

  const fs::path state_path = dir / "state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_text(state_path));
  } catch (const nlohmann::json::exception& e) {
    throw io::CheckpointError(state_path.string() + ": invalid JSON: " + e.what());
  }
  if (!state.contains(io::kStateConfigYaml) || !state[io::kStateConfigYaml].is_string())
    throw io::CheckpointError(state_path.string() + ": no '" + std::string(io::kStateConfigYaml) +
                              "' (the resolved config): not written by `trainer run`?");
  auto loaded = config::load_config_text(state[io::kStateConfigYaml].get<std::string>(), state_path.string());
  config::RunConfig cfg = loaded.cfg;

  const std::string group = ema ? "ema" : "model";
  bool in_parts = false;  // state.json's tensor_parts lists the group
  if (state.contains(io::kStateTensorParts) && state[io::kStateTensorParts].is_object())
    for (const auto& g : state[io::kStateTensorParts].value("groups", nlohmann::json::array()))
      in_parts = in_parts || g == group;
  const fs::path weights_path = dir / (group + ".safetensors");
  if (!in_parts && !fs::exists(weights_path))
    throw io::CheckpointError(weights_path.string() + (ema ? ": missing: this checkpoint holds no EMA weights (the run "
                                                             "had train.ema.decay 0)"
                                                           : ": missing (no model weights)"));
  auto model = models::builtin_models().create(cfg.model);
  // a tensor-parallel run's parts assembled into the global tensors
  io::load_state_into(*model, io::load_checkpoint_group(dir, group), /*strict=*/true);

  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  int64_t flushed = 0;  // nonzero weights that become 0 in the exported dtype
  std::string flushed_first;
  for (auto& [name, t] : io::named_state(*model)) {
    if (!t.is_floating_point()) {
      tensors.emplace_back(name, t.detach().cpu());
      continue;
    }
    auto converted = t.detach().to(torch::kCPU, dtype);
    // the checkpoint holds finite weights only (never saved otherwise): an infinity here is an overflow
    if (const int64_t over = converted.isinf().sum().item<int64_t>(); over > 0)
      throw std::runtime_error("--dtype " + dtype_name + ": " + std::to_string(over) + " value(s) of " + name +
                               " (largest magnitude " + fmt::format("{:g}", t.abs().max().item<double>()) +
                               ") overflow " + dtype_name + "'s range and would be infinite; export as bf16 or fp32");
    if (const int64_t n = (t.detach().cpu().ne(0) & converted.eq(0)).sum().item<int64_t>(); n > 0) {
      if (flushed == 0) flushed_first = name;
      flushed += n;
    }
    tensors.emplace_back(name, std::move(converted));
  }
  if (flushed > 0)  // small weights are meaningful (a norm's tiny shift, a late layer's bias): said, not refused
    std::cerr << "warning: --dtype " << dtype_name << ": " << flushed << " nonzero value(s) (the first in "
              << flushed_first << ") are below " << dtype_name << "'s smallest magnitude and become 0"
              << (dtype == torch::kHalf ? "; bf16 keeps fp32's range" : "") << "\n";
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},  // what Hugging Face tooling expects of a PyTorch safetensors file
      {"arch", cfg.model.arch},
      {"layout", models::builtin_models().spec(cfg.model.arch).layout},  // whose names the tensors carry
      {"model_config", model_config_json(cfg).dump()},
      {"dtype", dtype_name},
      {"precision", config::name_of(cfg.train.precision)},  // the run's compute precision (auto resolved)
      {"weights", ema ? "ema" : "trained"},
      {"step", std::to_string(state.value("step", int64_t{-1}))},
      // a path need not be UTF-8, the header's JSON must be: a stray byte as U+FFFD
      {"source_checkpoint", nlohmann::json::parse(nlohmann::json(dir.string()).dump(
                                -1, ' ', false, nlohmann::json::error_handler_t::replace)).get<std::string>()},
      {"config_hash", state.value(io::kStateConfigHash, std::string())},
      {"trainer_version", TRAINER_VERSION},
  };
  if (state.contains(io::kStateDataClasses)) {  // what each output means (and the bytes of a name not UTF-8)
    const auto classes = classes_json(classes_from_state(state, state_path.string()));
    metadata[io::kStateDataClasses] = classes.names.dump();
    if (classes.hex) metadata[io::kStateDataClassesHex] = classes.hex->dump();
  }
  if (state.contains(io::kStateDataNormalize))  // how a PyTorch user feeds the model images (docs/CHECKPOINTS.md)
    metadata[io::kStateDataNormalize] =
        normalize_json(normalize_from_json(state[io::kStateDataNormalize], state_path.string())).dump();
  const fs::path out_path(out);
  if (out_path.has_parent_path()) fs::create_directories(out_path.parent_path());
  io::save_safetensors(out, tensors, metadata);
}

int cmd_export(const std::string& checkpoint, const std::string& out, const std::string& dtype, bool ema) {
  try {
    parse_dtype(dtype);  // command-line mistakes are usage errors (2); everything after is a failure (1)
    if (out.empty()) throw std::invalid_argument("--out: an output .safetensors file is required");
    check_output_file("--out", out, {checkpoint});  // a folder, a device, a FIFO, the run's own files: refused
    // a pickle's name on a safetensors file: torch.load of it fails later, far from here (found from outside)
    const std::string ext = fs::path(out).extension().string();
    if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt" || ext == ".pkl")
      throw std::invalid_argument("--out " + out + ": export writes safetensors (safetensors.torch.load_file reads "
                                  "it), not a pickle that torch.load reads; name it .safetensors");
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  int rank = 0;
  try {
    rank = dist::detect_launch_env().rank;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  if (rank != 0) {  // launched by mistake: one file, one writer
    std::cout << "trainer export runs on rank 0 only; rank " << rank << " has nothing to do\n";
    return kExitOk;
  }
  try {
    export_checkpoint(checkpoint, out, dtype, ema);
    std::cout << "exported " << (ema ? "the EMA weights of " : "") << resolve_export_source(checkpoint).string()
              << " -> " << out << " (" << dtype << ")\n";
    return kExitOk;
  } catch (const config::ConfigError& e) {
    for (const auto& d : e.diagnostics()) std::cerr << d.str() << "\n";
    std::cerr << "error: the checkpoint's config is not valid for this trainer\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "error: " << error_text(e) << "\n";
    return kExitFailure;
  }
}

}  // namespace trainer::engine
