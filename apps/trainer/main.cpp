// trainer: YAML experiment file -> trained model. This file only parses the command line.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "data/prepare_text.hpp"
#include "dist/launcher.hpp"
#include "engine/commands/bench_data.hpp"
#include "engine/commands/commands.hpp"
#include "obs/report.hpp"
#include "engine/commands/eval_command.hpp"
#include "engine/commands/export.hpp"
#include "engine/commands/predict_command.hpp"
#include "engine/commands/run_command.hpp"
#include "engine/commands/sweep_command.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "models/builtin.hpp"

namespace {

void add_config_args(CLI::App* cmd, trainer::engine::ConfigArgs& a, bool run_dir = false) {
  if (run_dir)  // eval / predict: what a finished run's last line suggests, `trainer eval RUN_DIR`
    cmd->add_option("config", a.config, "Experiment YAML file, or a run directory (its config.yaml, and its newest "
                                        "checkpoint unless --checkpoint names one)")
        ->required()->check(CLI::ExistingPath);
  else
    cmd->add_option("config", a.config, "Experiment YAML file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "Override a key: --set optim.lr=0.05 (repeatable; YAML values, lists as [a, b])")
      ->type_name("KEY=VALUE");
  cmd->add_option("--out-dir", a.out_dir, "Folder for the run directory (replaces run.out_dir)");
}

// eval / predict given a run directory for CONFIG: its own config.yaml, and --checkpoint (when not
// given) the run directory, i.e. its newest checkpoint that verifies. False (said) when neither works.
bool resolve_run_dir(const char* cmd, trainer::engine::ConfigArgs& a, std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(a.config, ec)) {
    if (!checkpoint.empty()) return true;
    std::cerr << "error: " << cmd << ": --checkpoint is required with a config file (or give a run directory in "
              << "its place: its config.yaml and newest checkpoint)\n";
    return false;
  }
  const fs::path config = fs::path(a.config) / "config.yaml";
  if (!fs::is_regular_file(config, ec)) {
    std::cerr << "error: " << cmd << ": " << trainer::config::printable(a.config)
              << " is a folder without config.yaml: give an experiment YAML file, or a run directory\n";
    return false;
  }
  if (checkpoint.empty()) checkpoint = a.config;
  a.config = config.string();
  return true;
}

void add_run_options(CLI::App* run, trainer::engine::RunArgs& a) {
  add_config_args(run, a);
  run->add_option("--resume", a.resume, "auto (newest complete checkpoint), never, or a checkpoint PATH")
      ->default_val("auto");
  run->add_flag("--force", a.force, "With --resume never: start over a run directory that has checkpoints");
}

// CLI11's PositiveNumber / NonNegativeNumber name their range with DBL_MAX's 309 digits ("Value 0 not
// in range 0.000000 to 17976931348623157..."): these say what is wanted.
CLI::Validator number_above(double floor, bool inclusive, const char* name) {
  return CLI::Validator(
      [floor, inclusive](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "expected a number, got '" + text + "'";
        if (!std::isfinite(v)) return "expected a finite number, got '" + text + "'";  // inf, 1e999, nan
        if (inclusive ? v >= floor : v > floor) return "";
        return std::string("must be ") + (inclusive ? ">= " : "> ") + CLI::detail::to_string(floor) + ", got " + text;
      },
      name);
}
const CLI::Validator kPositive = number_above(0, false, "POSITIVE");
// CLI11's Range lets nan through (every comparison with it is false)
const CLI::Validator kValFraction = number_above(0, true, "FRACTION") & CLI::Range(0.0, 0.9);
const CLI::Validator kNonNegative = number_above(0, true, "NONNEGATIVE");
// bench-data --workers 1,2,4: each entry a whole count; "1,,2" was read as 1,0,2 and "a" got "not in range"
const CLI::Validator kWorkerCount(
    [](std::string& text) -> std::string {
      if (text.empty()) return "an empty entry in the list (as in 1,,2): give worker counts such as 1,2,4";
      int64_t v = 0;
      if (text.find_first_not_of("0123456789") != std::string::npos || !CLI::detail::lexical_cast(text, v))
        return "'" + text + "' is not a worker count (a whole number from 0 to 256)";
      return v <= 256 ? "" : "'" + text + "' workers: give 0 to 256";
    },
    "0..256");

bool is_command(const CLI::App& app, const std::string& name) {
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == name) return true;
  return false;
}

// CLI11 answers a mistyped command with "A subcommand is required" or "arguments were not
// expected", which does not say what went wrong: name it and the commands there are.
bool unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') return false;
  const std::string name = argv[1];
  if (is_command(app, name)) return false;
  std::string known;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    known += (known.empty() ? "" : ", ") + sub->get_name();
  std::cerr << "error: unknown command " << trainer::config::printable(name) << "; known: " << known << "\n"
            << "Run with --help for more information.\n";
  return true;
}

void add_check_options(CLI::App* check, trainer::engine::CheckArgs& a) {
  add_config_args(check, a);
  check->add_flag("--no-data", a.no_data, "Do not open the dataset (validate and build the model only)");
  check->add_flag("--decode-all", a.decode_all,
                  "Decode every image whole (default: read every image header: readable, within the size limit, "
                  "one size when data.image_size is 0)")
      ->excludes("--no-data");
  check->add_flag("--memory", a.memory,
                  "Measure activation memory (forward + backward at two small micro-batches, with and without "
                  "activation checkpointing) and print the memory per process and the largest micro-batch that fits");
  check->add_option("--memory-gb", a.memory_gb,
                    "Memory per process for the largest-micro-batch line (implies --memory; default: "
                    "train.memory_budget_gb, else 80 % of available host memory or 90 % of the GPU)")
      ->check(kPositive);
}

// `trainer launch ... -- run|check ARGS`: the command line and the checks the command makes before
// anything is created (engine/commands/run_command.hpp), once, in the launcher, with the environment
// its ranks will see: nullopt when they pass, else the exit code, the errors said once and no rank
// started.
std::optional<int> check_launched(const std::vector<std::string>& args, const trainer::dist::LaunchEnv& env,
                                  double* timeout_s) {
  CLI::App app{"", "trainer"};
  trainer::engine::RunArgs run_args;
  trainer::engine::CheckArgs check_args;
  auto* run = app.add_subcommand("run", "Train");
  add_run_options(run, run_args);
  add_check_options(app.add_subcommand("check", "Validate a config"), check_args);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes a vector back to front
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? trainer::kExitOk : trainer::kExitUsage;  // --help: said once, no rank started
  }
  const int rc = *run ? trainer::engine::check_run_start(run_args, env, timeout_s)
                       : trainer::engine::check_check_start(check_args, env, timeout_s);
  if (rc != trainer::kExitOk) return rc;
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  // first: a stop signal from here on is a graceful stop for `run` (exit 75), whatever start-up is
  // doing; before here the front (apps/trainer/front.cpp) kept it blocked since the first instruction
  trainer::engine::install_stop_handlers();
  // a reader that went away (`trainer run | tee` after a closed terminal) must not kill a run that
  // is saving its checkpoint: writes fail with EPIPE instead
  ::signal(SIGPIPE, SIG_IGN);
  trainer::models::register_builtin_archs();  // config validates each model family's keys by its spec
  CLI::App app{"trainer: deep-learning training runner (LibTorch). YAML experiment in, trained model out.", "trainer"};
  app.set_version_flag("--version", std::string("trainer ") + TRAINER_VERSION);
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 runtime failure, 2 usage/config error, 65 a data file changed under the run (a "
             "checkpoint saved: run again), 74 a checkpoint that had to be saved was not, 75 stopped by a signal after "
             "saving a checkpoint (requeue me), 130 a second SIGINT (no checkpoint of the stop).");

  trainer::engine::RunArgs run_args;
  auto* run = app.add_subcommand("run", "Train: trainer run CONFIG [--set KEY=VALUE]...");
  add_run_options(run, run_args);

  trainer::engine::CheckArgs check_args;
  auto* check = app.add_subcommand("check", "Validate a config, build its model and data, print a summary");
  add_check_options(check, check_args);

  trainer::dist::LaunchOptions launch_opts;
  std::vector<std::string> launch_args;
  auto* launch = app.add_subcommand("launch", "Spawn this node's ranks: trainer launch -n N [--nnodes M --node-rank R "
                                              "--master-addr A] [--master-port P] [--max-restarts K] -- run CONFIG ...");
  launch->add_option("-n,--nproc", launch_opts.nprocs, "Number of ranks on this node")->required()->check(kPositive);
  launch->add_option("--nnodes", launch_opts.nnodes, "Nodes of the job, each running this command (default 1)")
      ->check(kPositive);
  launch->add_option("--node-rank", launch_opts.node_rank, "This node's index in [0, nnodes) (default 0)")
      ->check(kNonNegative);
  launch->add_option("--master-addr", launch_opts.master_addr,
                     "Address of node 0, reachable from every node (default 127.0.0.1: one node)");
  launch->add_option("--master-port", launch_opts.master_port,
                     "Rendezvous port on the master address (default: a free one on one node, 29500 on several)")
      ->check(CLI::Range(0, 65535));
  launch->add_option("--max-restarts", launch_opts.max_restarts,
                     "Start a failed group again up to K times; `trainer run` resumes from its newest checkpoint (default 0)")
      ->check(kNonNegative);
  launch->add_flag("--join", launch_opts.join,
                   "This node's ranks join a job that is running (dist.recovery: in_process), e.g. a node that comes "
                   "back after it was lost, instead of starting with it");
  launch->add_flag("--oversubscribe", launch_opts.oversubscribe,
                   "Start -n ranks even when they are more than 8 per usable core of this node (refused as a likely "
                   "typo without it)");
  launch->add_option("args", launch_args, "The trainer command each rank runs, after --")->required();

  trainer::engine::SweepArgs sw;
  auto* sweep = app.add_subcommand("sweep", "Train every point of a grid: trainer sweep CONFIG --set optim.lr=0.01,0.1 "
                                            "--set train.batch_size=64,128 [--random N]");
  sweep->add_option("config", sw.config, "Experiment YAML file")->required()->check(CLI::ExistingFile);
  sweep->add_option("--set", sw.sets, "KEY=VALUE for every point, KEY=a,b,c for an axis of the grid, or "
                                      "KEY=uniform(lo,hi) / loguniform(lo,hi) / randint(lo,hi) with --random")
      ->type_name("KEY=VALUES");
  sweep->add_option("--random", sw.random, "Run N points drawn from the grid and distributions instead of the whole grid")
      ->check(kPositive);
  sweep->add_option("--seed", sw.seed, "Seed of --random's draw (the same seed, the same points)")->capture_default_str();
  sweep->add_option("--name", sw.name, "The sweep's folder under run.out_dir, holding a run folder per point "
                                       "(default: <run.name>-sweep)");
  sweep->add_option("--out-dir", sw.out_dir, "Folder for the sweep's folder (replaces run.out_dir)");
  sweep->add_option("--jobs", sw.jobs, "Points running at once (each gets cores / jobs threads unless train.threads "
                                       "is set)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{256}));
  sweep->add_option("--nproc", sw.nproc, "Ranks per point: each point runs under `trainer launch -n N`")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sweep->add_flag("--dry-run", sw.dry_run, "List the points, their run folders' state, and run nothing");

  std::string pt_input, pt_out;
  int64_t pt_shard_tokens = 100'000'000;
  double pt_val_fraction = 0.05;
  bool pt_force = false;
  auto* prepare = app.add_subcommand("prepare-text", "Write a text file as byte-level token shards (llm.c format)");
  prepare->add_option("input", pt_input, "UTF-8 or any text file")->required()->check(CLI::ExistingFile);
  prepare->add_option("--out", pt_out, "Output folder for train_*.bin / val_*.bin")->required();
  prepare->add_option("--shard-tokens", pt_shard_tokens, "Tokens per shard")->capture_default_str()->check(kPositive);
  prepare->add_option("--val-fraction", pt_val_fraction, "Tail fraction written as val shards")
      ->capture_default_str()->check(kValFraction);
  prepare->add_flag("--force", pt_force, "Replace the shard files --out already holds (else refused)");

  std::string export_ckpt, export_out, export_dtype = "fp32";
  bool export_ema = false;
  auto* export_cmd = app.add_subcommand("export", "Write a checkpoint's weights as safetensors with torchvision / nanoGPT names");
  export_cmd->add_option("checkpoint", export_ckpt, "A step-<N> folder, its `latest` link, or a checkpoints folder")->required();
  export_cmd->add_option("--out", export_out, "Output .safetensors file")->required();
  export_cmd->add_flag("--ema", export_ema, "Write the EMA weights (train.ema) instead of the trained ones");
  export_cmd->add_option("--dtype", export_dtype, "Weight dtype")->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();

  std::vector<std::string> report_dirs;
  std::string report_out;
  auto* report = app.add_subcommand("report", "One self-contained HTML page of a run's curves and summary, or of "
                                              "several runs (or a sweep's folder) on shared axes");
  report->add_option("run_dirs", report_dirs, "Run directories (each holds metrics.jsonl), or a sweep's folder")
      ->required()->expected(1, -1);
  report->add_option("--out", report_out, "Output HTML file (default: RUN_DIR/report.html for one run or one sweep "
                                          "folder, ./compare.html for several)");

  trainer::engine::EvalArgs eval_args;
  auto* eval = app.add_subcommand("eval", "Validation metrics of a checkpoint or an exported file (a JSON record)");
  add_config_args(eval, eval_args, /*run_dir=*/true);
  eval->add_option("--checkpoint", eval_args.checkpoint,
                   "A step-<N> folder (or latest / best), a checkpoints folder or run directory (its newest checkpoint "
                   "that verifies), or an exported .safetensors file (required with a config file)");
  eval->add_option("--output", eval_args.output, "Write the JSON record to this file instead of stdout");

  trainer::engine::PredictArgs pa;
  auto* predict = app.add_subcommand("predict", "Classify images, or continue a prompt with a GPT, from a checkpoint");
  add_config_args(predict, pa, /*run_dir=*/true);
  predict->add_option("--checkpoint", pa.checkpoint, "As for eval: a checkpoint, checkpoints folder, run directory or "
                                                     ".safetensors file (required with a config file)");
  predict->add_option("--input", pa.inputs, "Image files or folders (image models): one JSON line per image")
      ->expected(1, -1);
  predict->add_option("--labels", pa.labels, "Class names, one per line (default: the image folder's class folders, "
                                             "else the indices)");
  predict->add_option("--batch-size", pa.batch_size, "Images per forward pass")->capture_default_str()
      ->check(kPositive);
  predict->add_option("--top-k", pa.top_k, "Images: classes listed per image (default 5). GPT: sample among the k most "
                                           "likely tokens (default 0 = all)")
      ->check(kNonNegative);
  auto* prompt_opt = predict->add_option("--prompt", pa.prompt, "GPT: the prompt text (byte-level models), or token "
                                                                "ids separated by spaces (token models)");
  predict->add_option("--prompt-file", pa.prompt_file, "GPT: read the prompt from this file");
  predict->add_option("--max-new-tokens", pa.max_new_tokens, "GPT: tokens to generate")->capture_default_str()
      ->check(kNonNegative);
  predict->add_option("--temperature", pa.temperature, "GPT: softmax temperature; 0 = greedy")->capture_default_str()
      ->check(kNonNegative);
  predict->add_option("--seed", pa.seed, "GPT: seed of the sampling generator (the same seed, the same text)")
      ->capture_default_str();
  predict->add_option("--output", pa.output, "Write the results to this file instead of stdout (written as they "
                                             "come: a stop signal ends it where it is, exit 128 + the signal)");
  predict->add_option("--threads", pa.threads, "Intra-op threads (default: as train.threads; 1 is often fastest for "
                                               "a small GPT's one-token steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));

  trainer::engine::BenchDataArgs bd;
  auto* bench_data = app.add_subcommand("bench-data", "The configured input pipeline alone (no model): samples/s "
                                                      "per worker count and where a sample's time goes");
  add_config_args(bench_data, bd);
  bench_data->add_option("--workers", bd.workers, "Worker counts to measure, e.g. 1,2,4 (default: 1, 2 and "
                                                  "data.workers)")
      ->delimiter(',')
      ->check(kWorkerCount);
  bench_data->add_option("--batches", bd.batches, "Timed batches per worker count, after a warm-up")
      ->capture_default_str()
      ->check(kPositive);
  bench_data->add_flag("--val", bd.validation, "The validation pipeline (resize + centre crop) instead of training's");
  bench_data->add_option("--run", bd.run_dir, "A run directory: how many workers keep its step fed (its "
                                              "metrics.jsonl's rate without the data wait)");

  auto* env = app.add_subcommand("env", "LibTorch, CUDA/cuDNN/NCCL, threads, CPU math libraries, launcher");
  auto* keys = app.add_subcommand("config-keys", "Print every config key with its type, default and meaning");

  if (unknown_command(app, argc, argv)) return trainer::kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // `trainer launch -n 2 run x.yaml --set K=V`: the ranks' command goes after `--`
    if (rc != 0 && *launch && std::string(e.what()).find("not expected") != std::string::npos)
      std::cerr << "launch: put the ranks' command after --, e.g. trainer launch -n 2 -- run x.yaml --set KEY=VALUE\n";
    return rc == 0 ? trainer::kExitOk : trainer::kExitUsage;
  }
  if (!*run && !*predict) {  // predict stops between batches / tokens, its output so far written
    // other commands take the signals' default actions, including one that arrived during start-up;
    // `launch` keeps them blocked (pending) until its forwarding handlers exist, which unblock them
    trainer::engine::restore_stop_handlers();
    if (*launch || *sweep)  // kept pending until their forwarding handlers are in place
      trainer::engine::block_stop_signals();
    else
      trainer::engine::unblock_stop_signals();
    if (const int sig = trainer::engine::stop_signal()) ::raise(sig);
  }
  if (*predict) trainer::engine::set_stop_phase(trainer::engine::StopPhase::Batches);
  if (*run) return trainer::engine::cmd_run(run_args);
  if (*check) return trainer::engine::cmd_check(check_args);
  if (*launch) {
    // checked here, once, not by every rank it would start ("unknown command exp.yaml" N times)
    if (launch_args.empty() || !is_command(app, launch_args.front()) || launch_args.front() == "launch") {
      const std::string got = launch_args.empty() ? std::string() : launch_args.front();
      std::cerr << "error: launch: the command each rank runs comes after --, e.g. trainer launch -n 4 -- run exp.yaml; "
                << "got " << trainer::config::printable(got)
                << (got == "launch" ? ", which a rank cannot run (one launcher per node)\n" : ", which is not a trainer command\n");
      return trainer::kExitUsage;
    }
    // 127.0.0.1 is the default of one node only: node 1 of several dialled it and timed out
    if (launch->count("--master-addr") == 0 && launch_opts.nnodes > 1) launch_opts.master_addr.clear();
    if (launch_args.front() == "run" || launch_args.front() == "check")
      launch_opts.preflight = [&launch_args, join = launch_opts.join](trainer::dist::LaunchEnv env, double* timeout_s) {
        if (join) env.join_incarnation = 1;  // its ranks are replacements: the config must allow that
        return check_launched(launch_args, env, timeout_s);
      };
    return trainer::dist::cmd_launch(launch_opts, launch_args);
  }
  if (*sweep) return trainer::engine::cmd_sweep(sw);
  if (*prepare) return trainer::data::cmd_prepare_text(pt_input, pt_out, pt_shard_tokens, pt_val_fraction, pt_force);
  if (*export_cmd) return trainer::engine::cmd_export(export_ckpt, export_out, export_dtype, export_ema);
  if (*report) return trainer::obs::cmd_report(report_dirs, report_out);
  if (*eval) {
    if (!resolve_run_dir("eval", eval_args, eval_args.checkpoint)) return trainer::kExitUsage;
    return trainer::engine::cmd_eval(eval_args);
  }
  if (*predict) {
    if (!resolve_run_dir("predict", pa, pa.checkpoint)) return trainer::kExitUsage;
    pa.has_prompt = prompt_opt->count() > 0;
    return trainer::engine::cmd_predict(pa);
  }
  if (*bench_data) return trainer::engine::cmd_bench_data(bd);
  if (*env) return trainer::engine::cmd_env();
  if (*keys) return trainer::engine::cmd_config_keys();
  return trainer::kExitUsage;
}
