#include "engine/commands/commands.hpp"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "data/dataset.hpp"
#include "device/cuda_seam.hpp"
#include "device/nvml.hpp"
#include "device/device.hpp"
#include "dist/device_mesh.hpp"
#include "dist/dist_check.hpp"
#include "dist/launch_env.hpp"
#include "engine/commands/check_data.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/startup/pipeline_memory.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/startup/memory_plan.hpp"
#include "engine/startup/precision_auto.hpp"
#include "engine/optim/precision.hpp"
#include "io/run_dir.hpp"
#include "models/init_load.hpp"
#include "models/model.hpp"
#include "pipeline/plan.hpp"

namespace trainer::engine {

void print_config_error(const config::ConfigError& e) {
  const size_t n = e.diagnostics().size();
  const std::string errors = std::to_string(n) + " config error" + (n == 1 ? "" : "s");
  // every rank of a job reads the same config and finds the same errors: under torchrun, mpirun or
  // srun each node's first rank prints them, the others one line (8 ranks had printed them 8 times)
  int64_t local_rank = 0;
  try {
    local_rank = dist::detect_launch_env().local_rank;
  } catch (const std::exception&) {  // a launcher error of its own: this rank prints everything
  }
  if (local_rank > 0) {
    std::cerr << "error: " << errors << ", printed by this node's local rank 0; nothing was started\n";
    return;
  }
  for (const auto& d : e.diagnostics()) std::cerr << d.str() << "\n";
  std::cerr << errors << "; nothing was started\n";
}

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

int run_command(const std::function<int()>& body) {
  try {
    return body();
  } catch (const config::ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << error_text(e) << "\n";
    return kExitFailure;
  }
}

// Load, override, validate and resolve: everything that can be known before building anything.
config::LoadedConfig load_checked(const ConfigArgs& args, const dist::LaunchEnv& env, bool builds_mesh) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.out_dir.empty()) {
    for (const auto& o : overrides)
      if (o.rfind("run.out_dir=", 0) == 0)
        throw config::ConfigError(std::vector<config::Diagnostic>{
            {{"--out-dir " + config::printable(args.out_dir)}, "run.out_dir",
             "--set " + config::printable(o) + " names the run's folder too: give one of the two"}});
    overrides.push_back("run.out_dir=" + args.out_dir);
  }
  models::register_builtin_archs();  // config checks each family's keys and rules
  config::ValidateOptions vo;
  vo.world_size = env.world_size;
  vo.cuda_available = device::cuda_available();
  vo.builds_mesh = builds_mesh;
  auto loaded = config::load_and_validate(args.config, overrides, vo);
  dist::check_rendezvous(env, loaded.cfg.dist.store);  // before any folder is made: a usage error
  dist::check_recovery_launcher(env, loaded.cfg.dist.recovery == config::Recovery::InProcess);
  return loaded;
}

int cmd_config_keys() {
  config::RunConfig cfg;
  std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : config::describe_fields(cfg)) {
    std::string range;
    if (f.type == config::FieldType::Int || f.type == config::FieldType::Float) {
      std::ostringstream r;
      r << " Range [" << config::number_text(f.min) << ", " << config::number_text(f.max) << "].";
      range = r.str();
    }
    std::string applies = f.applies_to.empty() ? "" : " (" + config::applies_text(f) + " only)";
    std::string type = config::type_name(f);
    for (size_t p = type.find('|'); p != std::string::npos; p = type.find('|', p + 2)) type.replace(p, 1, "\\|");
    const char* resumable = f.changes_training ? "" : " A resumed run may change it.";
    std::cout << "| `" << f.key << "` | " << type << " | `" << config::default_text(f) << "` | "
              << f.doc << applies << range << resumable << " |\n";
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
  const std::string nvml = device::nvml_status();
  std::cout << "NVML (GPU utilisation): " << (nvml.empty() ? "available" : nvml) << "\n";
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

namespace {

std::string human_count(double n) {
  const char* units[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (std::abs(n) >= 1000 && u < 6) {
    n /= 1000;
    ++u;
  }
  std::ostringstream s;
  s << std::setprecision(n < 10 && u > 0 ? 3 : 4) << n << units[u];
  return s.str();
}

// The shape of one sample as the model sees it, when the config alone tells it.
std::vector<int64_t> sample_shape_from_config(const config::RunConfig& c) {
  if (config::takes_tokens(c.model.arch)) return {c.model.block_size};
  if (c.data.format == config::DataFormat::Synthetic) return {c.model.in_channels, c.data.synthetic.image_size, c.data.synthetic.image_size};
  if (c.data.image_size > 0) return {c.model.in_channels, c.data.image_size, c.data.image_size};
  return {};
}

// One column of `trainer check`'s memory table: the strategy's plan and the step measured.
struct MemoryColumn {
  std::string title;
  MemoryPlan plan;
  ActivationProbe probe;
};

// The model as configured, with model.activation_checkpointing `ac`: its plan under the run's
// strategy, its step measured as the run probes (up to 64, and with batch_size auto not beyond the
// samples per rank per step).
MemoryColumn probe_column(const config::RunConfig& c, int64_t dp_size, const torch::Device& device,
                          const std::vector<int64_t>& shape, int64_t classes, bool ac) {
  const int64_t per_rank = c.train.global_batch_size / std::max<int64_t>(dp_size, 1);
  const int64_t probe_cap = c.train.batch_size == 0 ? std::min<int64_t>(64, per_rank) : 64;
  auto probe_cfg = c;
  probe_cfg.model.activation_checkpointing = ac;
  torch::manual_seed(c.run.seed);
  auto probe = build_probe_model(probe_cfg, device);  // at tensor parallel: one rank's slices
  auto& model = probe.model;
  const bool image = model->input_kind() == models::InputKind::Image;
  const int64_t b1 = image ? 2 : 1;
  return {ac ? "activation checkpointing" : "no checkpointing",
          strategy_memory_plan(c.dist, dp_size, *model, c.optim),
          probe_activations(*model, shape, classes, c.train.precision, device, c.model.channels_last && image, b1,
                            2 * b1, /*max_b2=*/probe_cap)};
}

// "the largest micro-batch in the budget" of one column: a count, "any" or "none fits".
std::string largest_in_budget(const MemoryColumn& col, double budget) {
  const double room = budget - static_cast<double>(col.plan.fixed.total()) - col.probe.intercept();
  const double per = col.probe.per_sample();
  if (room < per) return "none fits";
  if (per <= 0) return "any";
  return std::to_string(static_cast<int64_t>(room / per));
}

// The budget `trainer check` measures against: --memory-gb when given, else the run's.
MemoryBudget check_budget(const config::RunConfig& c, double memory_gb, const torch::Device& device,
                          const dist::LaunchEnv& env) {
  return memory_gb > 0 ? memory_budget(memory_gb, "--memory-gb", device, env.local_world_size)
                       : memory_budget(c.train.memory_budget_gb, "train.memory_budget_gb", device, env.local_world_size);
}

// train.batch_size auto with nothing (`smallest`) fitting the run's own budget: the run would stop at
// its start, so check stops too.
[[noreturn]] void refuse_no_fit(const std::string& smallest, const MemoryBudget& budget) {
  throw std::runtime_error("train.batch_size auto: not even " + smallest + " fits " + bytes_text(budget.bytes) + " (" +
                           budget.source + "): a run of this config stops at its start; set "
                           "model.activation_checkpointing, use bf16, or give more memory");
}

// What train.batch_size auto would pick in `budget` for the configured column. Nothing fitting the
// run's own budget (`runs_budget`: not --memory-gb's) is an error: the run would stop at its start.
void print_auto_pick(const config::RunConfig& c, int64_t world_size, const torch::Device& device,
                     const MemoryColumn& col, const MemoryBudget& budget, bool runs_budget) {
  const int64_t per_rank = c.train.global_batch_size / std::max<int64_t>(world_size, 1);
  const int64_t pick = largest_fitting(col.plan.fixed, col.probe, budget.bytes, micro_batch_candidates(per_rank));
  if (pick == 0) {
    if (runs_budget) refuse_no_fit("micro-batch 1", budget);
    std::cout << "train.batch_size auto: not even micro-batch 1 fits this budget\n";
    return;
  }
  std::cout << "train.batch_size auto would pick micro-batch " << pick << " x " << per_rank / pick
            << " accumulation (divisors of " << per_rank << " samples per rank per step)"
            << (device.is_cuda() ? ", then confirm it by a real step" : "") << "\n";
}

// The memory table of `trainer check`: the strategy's plan (its rows, as it names them), the step
// measured on `device` for the model as configured and with model.activation_checkpointing flipped.
void print_memory(const config::RunConfig& c, const dist::LaunchEnv& env, const std::vector<int64_t>& shape,
                  int64_t classes, double budget_gb) {
  const auto device = device::select_device(c.train.device, env.local_rank);
  check_precision_supported(c.train.precision, device);
  const int64_t dp = config::data_parallel_size(c, env.world_size);  // per rank of the mesh: its slices
  const std::vector<MemoryColumn> cols = {probe_column(c, dp, device, shape, classes, false),
                                          probe_column(c, dp, device, shape, classes, true)};
  const auto mb = check_budget(c, budget_gb, device, env);
  const int64_t b = c.train.batch_size;
  std::cout << "memory per process (" << config::name_of(c.train.precision) << ", fp32 weights and optimizer state; the step measured on "
            << device.str() << " by the " << cols[0].probe.how << " at micro-batches " << cols[0].probe.b1 << " and "
            << cols[0].probe.b2 << " without checkpointing, " << cols[1].probe.b1 << " and " << cols[1].probe.b2
            << " with):\n";
  if (c.dist.tensor_parallel > 1)
    std::cout << "  (one rank of the mesh: its slices at tp " << c.dist.tensor_parallel << " and " << dp
              << " data-parallel rank(s); its step measured in this process with stand-in collectives that give "
                 "their tensors' shapes)\n";
  auto row = [&](const std::string& name, auto value) {
    std::cout << "  " << std::left << std::setw(34) << name;
    for (const auto& col : cols) std::cout << std::right << std::setw(26) << value(col);
    std::cout << "\n";
  };
  auto bytes = [](double v) { return bytes_text(v); };
  row("", [](const MemoryColumn& col) { return col.title; });
  for (size_t i = 0; i < cols[0].plan.rows.size(); ++i)  // the same strategy in both columns: the same rows
    row(cols[0].plan.rows[i].label,
        [&](const MemoryColumn& col) { return bytes(static_cast<double>(col.plan.rows[i].bytes)); });
  row("step constant (measured)", [&](const MemoryColumn& col) { return bytes(col.probe.intercept()); });
  row("activations per sample (measured)", [&](const MemoryColumn& col) { return bytes(col.probe.per_sample()); });
  if (b > 0)
    row("total at micro-batch " + std::to_string(b), [&](const MemoryColumn& col) {
      return bytes(static_cast<double>(col.plan.fixed.total()) + col.probe.at(b));
    });
  if (mb.bytes <= 0) return;
  row("largest micro-batch in " + bytes_text(mb.bytes),
      [&](const MemoryColumn& col) { return largest_in_budget(col, mb.bytes); });
  std::cout << "  (budget: " << mb.source << ")\n";
  if (c.train.batch_size == 0)
    print_auto_pick(c, dp, device, cols[c.model.activation_checkpointing ? 1 : 0], mb, budget_gb <= 0);
}

// train.precision auto as the run would decide it on this machine (the probe included when the data were
// opened: --no-data measures nothing), printed with its reason; `c` takes the choice (the memory table is
// measured in it).
void print_precision_choice(config::RunConfig& c, const dist::LaunchEnv& env, const std::vector<int64_t>& shape,
                            bool measure) {
  const auto device = device::select_device(c.train.device, env.local_rank);
  PrecisionChoice pc = decide_precision(precision_facts(c, device));
  if (pc.needs_probe && measure && !shape.empty()) {
    const int64_t classes = config::takes_tokens(c.model.arch) ? c.model.vocab_size : c.model.num_classes;
    const int64_t b = c.train.batch_size > 0 ? c.train.batch_size
                                             : std::min<int64_t>(16, c.train.global_batch_size / env.world_size);
    torch::manual_seed(c.run.seed);
    pc = choose_precision(c, device, shape, classes, b);
  }
  if (pc.needs_probe)  // nothing decided: the table below is fp32's
    std::cout << "train.precision auto: undecided, bf16 or fp32 (" << pc.reason
              << "; not measured without the data: the run decides at its start; figures below are fp32's)\n";
  else
    std::cout << "train.precision auto: " << config::name_of(pc.precision) << " (" << pc.reason << ")\n";
  c.train.precision = pc.precision;
}

// dist.tensor_parallel T or dist.pipeline_parallel P > 1: rank -> (pp, dp, tp) and the node it runs
// on (the launcher's ranks are node-major, local_world_size per node; the rank table of the dist
// check below names each host). With P > 1 the stages and each rank's schedule follow.
void print_mesh(const config::RunConfig& cfg, const dist::LaunchEnv& env) {
  const int64_t tp = cfg.dist.tensor_parallel, pp = cfg.dist.pipeline_parallel, need = tp * pp;
  if (pp > 1) std::cout << pipeline::describe_plan(pipeline::make_plan(cfg));
  if (env.world_size % need != 0) {
    std::cout << "device mesh: " << (pp > 1 ? "dist.pipeline_parallel x dist.tensor_parallel " : "dist.tensor_parallel ")
              << need << " needs a world of a multiple of " << need << " ranks (run under a launcher, e.g. trainer "
              << "launch --nproc " << need << "); `trainer run` at this world size, " << env.world_size
              << ", refuses this config (exit 2): the checks above are the layout's without its ranks\n";
    return;
  }
  const dist::MeshLayout layout(env.world_size, tp, pp);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const int64_t per_node = std::max<int64_t>(env.local_world_size, 1), my_node = env.rank / per_node;
  std::cout << "device mesh: " << (pp > 1 ? "pp " + std::to_string(pp) + " x " : std::string()) << "dp "
            << layout.size(dist::MeshDim::DP) << " x tp " << tp << " (tp ranks consecutive"
            << (pp > 1 ? ", pp outermost" : "") << ")\n";
  for (int64_t r = 0; r < env.world_size; ++r) {
    const auto c = layout.coord(r);
    const int64_t node = r / per_node;
    std::cout << "  rank " << r << ": " << (pp > 1 ? "pp " + std::to_string(c.pp) + ", " : std::string()) << "dp "
              << c.dp << ", tp " << c.tp << ", node " << node
              << (node == my_node ? std::string(" (") + host + ")" : std::string()) << "\n";
  }
}

}  // namespace

namespace {

// Standard output silenced while it lives, when `quiet` (errors still go to stderr).
class QuietStdout {
 public:
  explicit QuietStdout(bool quiet) : saved_(quiet ? std::cout.rdbuf(nullptr) : nullptr) {}
  ~QuietStdout() {
    if (!saved_) return;
    std::cout.rdbuf(saved_);
    std::cout.clear();  // writes to no buffer set badbit
  }
  QuietStdout(const QuietStdout&) = delete;
  QuietStdout& operator=(const QuietStdout&) = delete;

 private:
  std::streambuf* saved_;
};

}  // namespace

int cmd_check(const CheckArgs& args) {
  try {
    auto env = dist::detect_launch_env();
    // in a launched job every rank checks, and rank 0 alone prints the summary: the others' is the
    // same (N ranks had printed it N times); any rank's error still reaches stderr
    const QuietStdout quiet(env.world_size > 1 && env.rank != 0);
    // outside a launcher `check` reads the config alone; in a launched job the mesh must fit the world
    auto loaded = load_checked(args, env, /*builds_mesh=*/env.world_size > 1 || env.launcher != "none");
    check_named_files(loaded, /*data=*/!args.no_data, /*init=*/true);
    auto& c = loaded.cfg;
    const std::string hash = config::config_hash(c);  // of the config as loaded, as the run hashes it
    std::cout << "config " << args.config << ": ok (hash " << hash.substr(0, 12) << ")\n";
    for (const auto& w : loaded.warnings) std::cout << "warning: " << w.str() << "\n";
    if (!loaded.bases.empty()) {
      std::cout << "bases (applied in this order, then the file):";
      for (const auto& b : loaded.bases) std::cout << " " << b;
      std::cout << "\n";
    }
    std::cout << "run directory: " << io::run_dir_path(c).string() << "\n";

    torch::manual_seed(c.run.seed);
    auto model = models::builtin_models().create(c.model);
    std::cout << "model: " << c.model.arch << ", " << model->num_parameters() << " parameters ("
              << human_count(static_cast<double>(model->num_parameters())) << ")\n";
    if (const auto& init = config::init_file(c.model); !init.empty()) {  // the file is read as a fresh run reads it
      const auto r = models::load_init_weights(*model, c.model.init, init);
      std::cout << "model.init: " << init << " (" << r.format << "): " << r.loaded.size() << " loaded, "
                << r.skipped.size() << " skipped, " << r.renamed.size() << " renamed, " << r.reinitialised.size()
                << " re-initialised, " << r.missing.size() << " missing, " << r.unexpected.size() << " unexpected\n";
      if (!r.converted.empty())
        std::cout << "model.init: dtype converted (" << r.converted.size() << "): " << models::name_list(r.converted) << "\n";
    }

    std::vector<int64_t> shape = sample_shape_from_config(c);
    int64_t train_size = -1;
    if (!args.no_data) {
      auto ds = open_for_check(c, args.decode_all);
      std::cout << "train data: " << ds.train->describe() << "\n";
      std::cout << "val data:   " << (ds.val ? ds.val->describe() : std::string("none")) << "\n";
      const bool skip_bad = c.data.on_bad_sample == "skip";
      check_data(*ds.train, "train", skip_bad, args.decode_all, std::cout);
      if (ds.val) check_data(*ds.val, "val", skip_bad, args.decode_all, std::cout);
      shape = ds.train->sample_shape();
      train_size = ds.train->size();
    } else {
      std::cout << "data: not opened (--no-data)\n";
    }
    if (!shape.empty()) {
      double flops = model->train_flops_per_sample(shape);
      std::cout << "training FLOPs per sample: " << human_count(flops) << "FLOP";
      if (config::takes_tokens(c.model.arch)) std::cout << " (" << human_count(flops / shape[0]) << "FLOP per token)";
      std::cout << "\n";
    }

    const int64_t global = c.train.global_batch_size;
    const int64_t dp = config::data_parallel_size(c, env.world_size);  // a tp group reads the same batches
    const std::string ranks = dp == env.world_size ? " ranks"
                              : " data-parallel ranks (dist.tensor_parallel " + std::to_string(c.dist.tensor_parallel) +
                                    ", dist.pipeline_parallel " + std::to_string(c.dist.pipeline_parallel) + ")";
    if (c.train.batch_size == 0)
      std::cout << "world size " << env.world_size << " (" << env.launcher << "), global batch " << global
                << " = micro-batch auto (the largest that fits, chosen at start) x accumulation x " << dp << ranks
                << "\n";
    else
      std::cout << "world size " << env.world_size << " (" << env.launcher << "), effective global batch " << global
                << " = " << c.train.batch_size << " per rank x " << c.train.grad_accum << " accumulation x " << dp
                << ranks << "\n";
    if (c.dist.tensor_parallel > 1 || c.dist.pipeline_parallel > 1) print_mesh(c, env);
    if (train_size >= 0) {
      const int64_t steps_per_epoch = train_size / global;
      std::cout << "steps per epoch: " << steps_per_epoch << " (" << train_size << " samples / " << global << ")\n";
      if (steps_per_epoch == 0)
        throw std::runtime_error("the training split (" + std::to_string(train_size) +
                                 " samples) is smaller than one global batch (" + std::to_string(global) + ")");
      const int64_t total = c.train.max_steps > 0
                                ? c.train.max_steps
                                : static_cast<int64_t>(std::ceil(c.train.epochs * static_cast<double>(steps_per_epoch)));
      std::cout << "optimizer steps: " << total << (c.train.max_steps > 0 ? " (train.max_steps)" : " (train.epochs)")
                << "\n";
    }
    if (c.train.precision == config::Precision::Auto) print_precision_choice(c, env, shape, !args.no_data);  // and takes it
    if ((args.memory || args.memory_gb > 0) && c.dist.pipeline_parallel > 1) {
      if (shape.empty())
        throw std::runtime_error("--memory needs the sample shape: open the data (no --no-data) or set data.image_size");
      const auto device = device::select_device(c.train.device, env.local_rank);
      check_precision_supported(c.train.precision, device);
      const int64_t classes = config::takes_tokens(c.model.arch) ? c.model.vocab_size : c.model.num_classes;
      if (c.train.batch_size > 0) {
        print_pipeline_memory(measure_pipeline_memory(c, dp, device, shape, classes), c, std::cout);
      } else {  // train.batch_size auto: the footprint at what it would pick
        const auto mb = check_budget(c, args.memory_gb, device, env);
        const int64_t per_rank = c.train.global_batch_size / std::max<int64_t>(dp, 1);
        PipelineMemory at;
        const int64_t pick = pipeline_auto_micro_batch(c, dp, per_rank, mb.bytes, device, shape, classes, &at);
        auto shown = c;
        shown.train.batch_size = pick > 0 ? pick : per_rank;
        print_pipeline_memory(at, shown, std::cout);
        if (pick == 0 && args.memory_gb <= 0) refuse_no_fit("the smallest micro-batch", mb);
        if (pick == 0)
          std::cout << "train.batch_size auto: not even the smallest micro-batch fits " << bytes_text(mb.bytes) << " ("
                    << mb.source << ")\n";
        else
          std::cout << "train.batch_size auto would pick micro-batch " << pick << " x " << per_rank / pick
                    << " accumulation (divisors of " << per_rank << " samples per rank per step) in "
                    << bytes_text(mb.bytes) << " (" << mb.source << ")\n";
      }
    } else if (args.memory || args.memory_gb > 0 || c.train.batch_size == 0) {
      if (shape.empty())
        throw std::runtime_error("--memory needs the sample shape: open the data (no --no-data) or set data.image_size");
      int64_t classes = config::takes_tokens(c.model.arch) ? c.model.vocab_size : c.model.num_classes;
      std::cout.flush();
      print_memory(c, env, shape, classes, args.memory_gb);
    }
    // in a launched job: join the process group, print the rank table and the all-reduce bandwidth
    if (env.world_size > 1 || env.launcher != "none") {
      std::cout.flush();
      dist::print_dist_check(env, c.dist, device::select_device(c.train.device, env.local_rank), hash, std::cout);
    }
    return kExitOk;
  } catch (const config::ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << error_text(e) << "\n";
    return kExitFailure;
  }
}

}  // namespace trainer::engine
