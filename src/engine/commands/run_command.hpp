// `trainer run`: the checks made before anything is created, then the run itself (cmd_run).
#pragma once

#include "dist/launch_env.hpp"
#include "engine/commands/commands.hpp"

namespace trainer::engine {

// What `trainer run` checks before it creates anything: the config (load_checked), the files it names
// (check_named_files), --resume, and a run directory trained with another config (run_guard.hpp).
// Returns 0 when the run may start, else its exit code (2 for a refusal, 1 when a check itself
// failed), the errors printed to stderr (run_command's mapping).
// `trainer launch` calls it once with the environment its ranks will see, so that a refused run is
// said once and no rank is started, instead of every rank saying it.
int check_run_start(const RunArgs& args, const dist::LaunchEnv& env, double* timeout_s = nullptr);

// The same for `trainer check` under `trainer launch`: the config and the files it names (the data's
// unless --no-data), once, before any rank starts. 0 or the exit code, the errors printed.
int check_check_start(const CheckArgs& args, const dist::LaunchEnv& env, double* timeout_s = nullptr);

}  // namespace trainer::engine
