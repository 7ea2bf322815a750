// What each `trainer` subcommand does. apps/trainer/main.cpp only parses the command line.
#pragma once

#include <string>
#include <vector>

namespace trainer::engine {

struct ConfigArgs {
  std::string config;                  // YAML file
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string out_dir;                 // --out-dir: replaces run.out_dir (relative to the working dir)
};

struct CheckArgs : ConfigArgs {
  bool no_data = false;  // --no-data: validate and build the model only (data not on this machine)
  bool decode_all = false;  // --decode-all: decode every image whole (default: every header)
  bool memory = false;     // --memory: measure activations and print the memory table
  double memory_gb = 0;    // --memory-gb: the budget for "largest micro-batch" (0 = the run's default budget)
};

struct RunArgs : ConfigArgs {
  std::string resume = "auto";  // auto | never | PATH
  bool force = false;
};

// Each returns the process exit code (see config/exit_codes.hpp) and prints its own errors.
int cmd_run(const RunArgs& args);
int cmd_check(const CheckArgs& args);
int cmd_env();
int cmd_config_keys();  // every config key as a Markdown table (docs/CONFIG.md is checked against it)

}  // namespace trainer::engine
