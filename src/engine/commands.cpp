#include "engine/commands.hpp"

#include <torch/torch.h>

#include <iostream>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "dist/launch_env.hpp"
#include "engine/trainer.hpp"
#include "io/run_dir.hpp"
#include "obs/logging.hpp"

namespace trainer::engine {
namespace {

void print_config_error(const config::ConfigError& e) {
  for (const auto& d : e.diagnostics()) std::cerr << d.str() << "\n";
  std::cerr << e.diagnostics().size() << " config error" << (e.diagnostics().size() == 1 ? "" : "s")
            << "; nothing was started\n";
}

// Load, override, validate and resolve: everything that can be known before building anything.
config::LoadedConfig load_checked(const ConfigArgs& args, const dist::LaunchEnv& env) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.out_dir.empty()) overrides.push_back("run.out_dir=" + args.out_dir);
  config::ValidateOptions vo;
  vo.world_size = env.world_size;
  vo.cuda_available = device::cuda_available();
  return config::load_and_validate(args.config, overrides, vo);
}

}  // namespace

int cmd_config_keys() {
  config::RunConfig cfg;
  std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : config::describe_fields(cfg)) {
    std::string range;
    if (f.type == config::FieldType::Int || f.type == config::FieldType::Float) {
      std::ostringstream r;
      r << " Range [" << f.min << ", " << f.max << "].";
      range = r.str();
    }
    std::string applies = f.applies_to.empty() ? "" : " (" + f.applies_to + " only)";
    std::string type = config::type_name(f);
    for (size_t p = type.find('|'); p != std::string::npos; p = type.find('|', p + 2)) type.replace(p, 1, "\\|");
    std::cout << "| `" << f.key << "` | " << type << " | `" << config::default_text(f) << "` | "
              << f.doc << applies << range << " |\n";
  }
  return kExitOk;
}

int cmd_env() {
  std::cout << "trainer " << TRAINER_VERSION << "\n";
  std::cout << "LibTorch " << TORCH_VERSION << " (built with CUDA: " << (device::built_with_cuda() ? "yes" : "no")
            << ")\n";
  auto devices = device::cuda_devices();
  std::string cuda_rt = device::cuda_runtime_version();
  std::cout << "CUDA available: " << (devices.empty() ? "no" : "yes") << (cuda_rt.empty() ? "" : ", runtime " + cuda_rt)
            << "\n";
  for (const auto& d : devices)
    std::cout << "  cuda:" << d.index << " " << d.name << ", " << d.total_memory / (1 << 20) << " MiB, sm_" << d.major
              << d.minor << ", " << d.multiprocessors << " SMs\n";
  std::string cudnn = device::cudnn_version(), nccl = device::nccl_version();
  std::cout << "cuDNN: " << (cudnn.empty() ? "not available" : cudnn) << "\n";
  std::cout << "NCCL: " << (nccl.empty() ? "not available" : nccl) << "\n";
  std::cout << "Intra-op threads: " << at::get_num_threads() << " (hardware threads " << std::thread::hardware_concurrency()
            << "), inter-op threads: " << at::get_num_interop_threads() << "\n";
  std::cout << "CPU math: " << device::cpu_math_summary() << "\n";
  try {
    auto e = dist::detect_launch_env();
    std::cout << "Launcher: " << e.launcher << " (rank " << e.rank << " of " << e.world_size << ", local rank "
              << e.local_rank << " of " << e.local_world_size << ")";
    if (!e.master_addr.empty()) std::cout << ", master " << e.master_addr << ":" << e.master_port;
    std::cout << "\n";
  } catch (const dist::LaunchEnvError& e) {
    std::cout << "Launcher: invalid environment: " << e.what() << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

int cmd_check(const ConfigArgs& args) {
  try {
    auto env = dist::detect_launch_env();
    auto loaded = load_checked(args, env);
    const auto& c = loaded.cfg;
    std::cout << "config " << args.config << ": ok (hash " << config::config_hash(c).substr(0, 12) << ")\n";
    std::cout << "run directory: " << io::run_dir_path(c).string() << "\n";
    std::cout << "world size " << env.world_size << " (" << env.launcher << "), effective global batch "
              << c.train.global_batch_size << " = " << c.train.batch_size << " x " << c.train.grad_accum
              << " accumulation x " << env.world_size << " ranks\n";
    return kExitOk;
  } catch (const config::ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailure;
  }
}

int cmd_run(const RunArgs& args) {
  try {
    auto env = dist::detect_launch_env();
    auto loaded = load_checked(args, env);
    auto dir = io::prepare_run_dir(loaded.cfg, env.rank);
    obs::init_run_logging(env.rank, loaded.cfg.log.level, dir.rank_log(env.rank).string());
    spdlog::info("run directory {}", dir.root.string());
    return run_training(loaded.cfg, env, dir);
  } catch (const config::ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace trainer::engine
