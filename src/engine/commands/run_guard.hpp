// `trainer run` over a run directory that already holds a run: the config that run was trained with
// (its config.yaml) against the new one, before anything is written there. A sweep written as a loop
// (`for lr in ...; do trainer run cfg.yaml --set optim.lr=$lr; done`) must not resume the previous
// point's run under the new values, nor rewrite its config.yaml.
#pragma once

#include <filesystem>
#include <string>

#include "config/config.hpp"
#include "engine/checkpoint/resume_options.hpp"

namespace trainer::engine {

struct RunGuard {
  std::string refusal;  // non-empty: the error (exit 2), naming the differing keys and the ways on
  std::string warning;  // non-empty: the run goes on, but the log says this (--resume PATH over another config)
};

// The run directory `root` holds a run when it has a checkpoint or training records. Then a key that
// changes training (config::training_changes) differing from its config.yaml is refused under
// --resume auto and --resume never without --force; --resume PATH (continue with the new values) and
// --resume never --force (start over) are the user's explicit choices and only warned about.
RunGuard check_run_directory(const config::RunConfig& cfg, const std::filesystem::path& root,
                             const ResumeOptions& resume, bool force);

}  // namespace trainer::engine
