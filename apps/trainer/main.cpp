// trainer: YAML experiment file -> trained model. This file only parses the command line.
#include <CLI/CLI.hpp>

#include <iostream>

#include "config/exit_codes.hpp"
#include "engine/commands.hpp"

namespace {

void add_config_args(CLI::App* cmd, trainer::engine::ConfigArgs& a) {
  cmd->add_option("config", a.config, "Experiment YAML file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "Override a key: --set optim.lr=0.05 (repeatable; YAML values, lists as [a, b])")
      ->type_name("KEY=VALUE");
  cmd->add_option("--out-dir", a.out_dir, "Folder for the run directory (replaces run.out_dir)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainer: deep-learning training runner (LibTorch). YAML experiment in, trained model out.", "trainer"};
  app.set_version_flag("--version", std::string("trainer ") + TRAINER_VERSION);
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 runtime failure, 2 usage/config error, 75 stopped by a signal after saving a checkpoint.");

  trainer::engine::RunArgs run_args;
  auto* run = app.add_subcommand("run", "Train: trainer run CONFIG [--set KEY=VALUE]...");
  add_config_args(run, run_args);
  run->add_option("--resume", run_args.resume, "auto (newest complete checkpoint), never, or a checkpoint PATH")
      ->default_val("auto");
  run->add_flag("--force", run_args.force, "With --resume never: start over a run directory that has checkpoints");

  trainer::engine::ConfigArgs check_args;
  auto* check = app.add_subcommand("check", "Validate a config, build its model and data, print a summary");
  add_config_args(check, check_args);

  auto* env = app.add_subcommand("env", "LibTorch, CUDA/cuDNN/NCCL, threads, CPU math libraries, launcher");
  auto* keys = app.add_subcommand("config-keys", "Print every config key with its type, default and meaning");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? trainer::kExitOk : trainer::kExitUsage;
  }
  if (*run) return trainer::engine::cmd_run(run_args);
  if (*check) return trainer::engine::cmd_check(check_args);
  if (*env) return trainer::engine::cmd_env();
  if (*keys) return trainer::engine::cmd_config_keys();
  return trainer::kExitUsage;
}
