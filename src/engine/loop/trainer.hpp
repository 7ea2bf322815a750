// The training loop: builds everything a run needs from the resolved RunConfig, trains for the
// configured steps, evaluates, stops early when asked, and records what it does (src/obs/).
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "dist/launch_env.hpp"
#include "engine/checkpoint/resume_options.hpp"
#include "io/run_dir.hpp"

namespace trainer::engine {

// Trains; returns the process exit code. Throws on errors (data, model, numerics) with a message
// that names what went wrong; cmd_run prints it. `dir`: its locks change hands when this rank
// becomes the writer mid-run (dist.recovery in_process, rank 0 lost).
int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, io::RunDir& dir,
                 const ResumeOptions& resume = {});

}  // namespace trainer::engine
