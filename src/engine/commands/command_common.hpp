// What the subcommands that take a config share (commands.cpp defines them).
#pragma once

#include <functional>

#include "config/load.hpp"
#include "dist/launch_env.hpp"
#include "engine/commands/commands.hpp"

namespace trainer::engine {

// The diagnostics, one per line, and "N config errors; nothing was started", to stderr. A rank other
// than its node's first (LOCAL_RANK and the like > 0) says only how many, and that local rank 0
// printed them: every rank finds the same errors in the same config.
void print_config_error(const config::ConfigError& e);

// Load, override, validate and resolve: everything that can be known before building anything.
// Throws config::ConfigError (exit 2) and dist::LaunchEnvError.
// builds_mesh: the command lays the world out as a device mesh (run, check: dist.tensor_parallel must
// divide the world size); eval and predict build the whole model on every rank.
config::LoadedConfig load_checked(const ConfigArgs& args, const dist::LaunchEnv& env, bool builds_mesh = false);

// The files the config names exist: data.path and data.val_path (a file, folder, or a pattern some
// file matches; not for data.format synthetic) when `data`, model.init.from when `init`. Throws
// ConfigError at their keys' file:line:col, so that a missing file is a config error (exit 2)
// found before the run directory is made, not a runtime failure after it.
void check_named_files(const config::LoadedConfig& loaded, bool data, bool init);

// Runs a model-using command (eval, predict) and maps what it throws to an exit code: config and
// launcher errors and bad arguments (std::invalid_argument) exit 2, anything else 1, each printed.
int run_command(const std::function<int()>& body);
// What an error says for a person: a LibTorch error without its C++ backtrace (an allocation that
// cannot be made printed 25 frames), anything else its what().
std::string error_text(const std::exception& e);

}  // namespace trainer::engine
