// `trainer run`: every check that can refuse the run before its directory exists, then the run.
#include "engine/commands/run_command.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "config/exit_codes.hpp"
#include "config/file_read.hpp"
#include "config/file_write.hpp"
#include "data/file_util.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/checkpoint/resume_options.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "dist/stop_aware_store.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/commands/run_guard.hpp"
#include "engine/loop/trainer.hpp"
#include "io/checkpoint.hpp"
#include "io/run_dir.hpp"
#include "obs/crash_report.hpp"
#include "obs/logging.hpp"

namespace trainer::engine {
namespace {

namespace fs = std::filesystem;

// A refusal of the command line or the run directory: exit 2, nothing created (a usage error to
// run_command, as std::invalid_argument is).
struct Refused : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct RunStart {
  config::LoadedConfig loaded;
  ResumeOptions resume;
  RunGuard guard;
};

// The name of a checkpoint (step-<N> folder) in `ckpts`, or "" when it holds none.
std::string a_checkpoint(const fs::path& ckpts) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpts, ec))
    if (io::parse_step_dir_name(e.path().filename().string())) return e.path().filename().string();
  return "";
}

// Everything that can refuse the run before anything exists. Throws ConfigError, LaunchEnvError
// and Refused.
RunStart plan_run_start(const RunArgs& args, const dist::LaunchEnv& env) {
  RunStart s{load_checked(args, env, /*builds_mesh=*/true), parse_resume(args.resume), {}};
  const auto& cfg = s.loaded.cfg;
  // `trainer launch --join`: its ranks join a running job, which only dist.recovery in_process admits
  // (the rank itself refused it, exit 1, naming TRAINER_JOIN)
  if (env.join_incarnation > 0 && cfg.dist.recovery != config::Recovery::InProcess)
    throw Refused("launch --join: the config has dist.recovery " + config::name_of(cfg.dist.recovery) +
                  "; a node joins a running job only under dist.recovery: in_process (under restart, start the "
                  "whole job again: it resumes from its newest checkpoint)");
  // a run directory inside the image folder it trains on became a class of its own, and broke the data
  // for every later command (found from outside, 2026-12-07)
  if (cfg.data.format == config::DataFormat::ImageFolder)
    for (const auto& data : {cfg.data.path, cfg.data.val_path})
      if (is_inside_folder(io::run_dir_path(cfg), data))
        throw Refused("run.out_dir: the run directory " + io::run_dir_path(cfg).string() + " would be inside the "
                      "data folder " + data + " (a class folder of its own to the next run); put run.out_dir elsewhere");
  const fs::path ckpts = checkpoint_dir(cfg, io::run_dir_path(cfg));
  const std::string held = a_checkpoint(ckpts);
  if (args.force && s.resume.mode != ResumeMode::Never)  // it did nothing, in silence
    throw Refused("--force goes with --resume never (it starts over a run directory that has checkpoints); with "
                  "--resume " + args.resume + " it would do nothing");
  // a fresh start over a run that has checkpoints would mix its work with the new run's
  if (s.resume.mode == ResumeMode::Never && !args.force && !held.empty())
    throw Refused(ckpts.string() + " already holds checkpoints (" + held +
                  ", ...); --resume never starts over only with --force, or use --resume auto");
  if (s.resume.mode == ResumeMode::Path)
    if (const auto what = io::checkpoint_folder_problem(s.resume.path); !what.empty())
      throw Refused("--resume " + args.resume + ": " + what +
                    " (a step-N folder, latest, or a checkpoints folder or run directory)");
  // model.init is read by a fresh start only: a run that resumes has its weights in the checkpoint
  const bool fresh = s.resume.mode == ResumeMode::Never || (s.resume.mode == ResumeMode::Auto && held.empty());
  check_named_files(s.loaded, /*data=*/true, /*init=*/fresh);
  // a run folder trained with another config is neither resumed nor rewritten (run_guard.hpp)
  s.guard = check_run_directory(cfg, io::run_dir_path(cfg), s.resume, args.force);
  if (!s.guard.refusal.empty()) throw Refused(s.guard.refusal);
  return s;
}

// An error that ends the run, into this rank's log file (the console has it from std::cerr).
void log_to_rank_file(const std::string& what) {
  for (auto& sink : spdlog::default_logger()->sinks())
    if (std::dynamic_pointer_cast<spdlog::sinks::basic_file_sink_mt>(sink)) {
      sink->log(spdlog::details::log_msg("trainer", spdlog::level::err, what));
      sink->flush();
    }
}

}  // namespace

void check_named_files(const config::LoadedConfig& loaded, bool data, bool init) {
  std::vector<config::Diagnostic> errors;
  // `kind`: what the key may name when it exists (a pattern that matches files is left to its reader)
  enum class Kind { FileOrFolder, File, Folder };
  auto need = [&](const std::string& key, const std::string& path, const char* what, Kind kind) {
    if (path.empty()) return;
    struct stat st {};
    std::string wrong;
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      struct stat link {};
      // a link to nothing, or a loop of links: the name exists, so the pattern would match it (found
      // from outside: the run folder made, then exit 1 with "Too many levels of symbolic links")
      if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
        wrong = err == ELOOP ? "a loop of symbolic links" : "a symbolic link to nothing (its target does not exist)";
      else
        wrong = data::expand_glob(path).empty() ? what : "";
    } else if (S_ISDIR(st.st_mode)) wrong = kind == Kind::File ? "is a folder; name the file" : "";
    else if (S_ISREG(st.st_mode)) wrong = kind == Kind::Folder ? "is a file; name the folder" : "";
    else wrong = "is " + file_kind(st.st_mode) + ", not a regular file or folder";  // it may block or never end
    if (!wrong.empty()) errors.push_back({loaded.where(key), key, config::printable(path) + ": " + wrong});
  };
  const auto& c = loaded.cfg;
  if (data && c.data.format != config::DataFormat::Synthetic) {
    // text is one file of bytes; an image folder is a folder of class folders; the others take either
    const Kind kind = c.data.format == config::DataFormat::Text          ? Kind::File
                      : c.data.format == config::DataFormat::ImageFolder ? Kind::Folder
                                                                          : Kind::FileOrFolder;
    need("data.path", c.data.path, "no such file or folder, and no file matches it as a pattern", kind);
    need("data.val_path", c.data.val_path, "no such file or folder, and no file matches it as a pattern", kind);
  }
  if (init)
    need(c.model.init.from.empty() ? "model.init_from" : "model.init.from", config::init_file(c.model), "no such file",
         Kind::File);
  // the folders the run writes (check says what the run would: it passed a file as either)
  const fs::path run_dir = io::run_dir_path(c), ckpts = checkpoint_dir(c, run_dir);
  std::error_code ec;
  for (fs::path p = run_dir; !p.empty() && p != p.root_path(); p = p.parent_path())  // the first that exists
    if (fs::exists(p, ec)) {
      if (!fs::is_directory(p, ec))
        errors.push_back({loaded.where("run.out_dir"), "run.out_dir",
                          config::printable(p.string()) + ": is a file, not a folder (the run directory is " +
                              config::printable(run_dir.string()) + ")"});
      break;
    }
  // each resolved on its own: a run directory that cannot be (a name over 255 bytes, a loop of links)
  // gave two empty paths, "equal", and blamed checkpoint.dir (found from outside)
  std::error_code run_ec, ckpt_ec;
  const auto run_real = fs::weakly_canonical(run_dir, run_ec), ckpt_real = fs::weakly_canonical(ckpts, ckpt_ec);
  if (run_ec)
    errors.push_back({loaded.where("run.out_dir"), "run.out_dir",
                      "the run directory " + config::printable(run_dir.string()) + " (run.out_dir / run.name) cannot "
                      "be made: " + run_ec.message()});
  else if (ckpt_ec)
    errors.push_back({loaded.where("checkpoint.dir"), "checkpoint.dir",
                      config::printable(ckpts.string()) + ": cannot be made: " + ckpt_ec.message()});
  else if (ckpt_real == run_real)
    errors.push_back({loaded.where("checkpoint.dir"), "checkpoint.dir",
                      ckpts.string() + ": is the run directory itself; name a folder of its own (\"\": <run dir>/checkpoints)"});
  else if (fs::exists(ckpts, ec) && !fs::is_directory(ckpts, ec))
    errors.push_back({loaded.where("checkpoint.dir"), "checkpoint.dir", ckpts.string() + ": is a file, not a folder for checkpoints"});
  if (!errors.empty()) throw config::ConfigError(std::move(errors));
}

int check_run_start(const RunArgs& args, const dist::LaunchEnv& env, double* timeout_s) {
  return run_command([&] {
    const auto start = plan_run_start(args, env);
    if (timeout_s) *timeout_s = start.loaded.cfg.dist.timeout_s;
    return kExitOk;
  });
}

int check_check_start(const CheckArgs& args, const dist::LaunchEnv& env, double* timeout_s) {
  return run_command([&] {
    const auto loaded = load_checked(args, env, /*builds_mesh=*/true);
    check_named_files(loaded, /*data=*/!args.no_data, /*init=*/true);
    if (timeout_s) *timeout_s = loaded.cfg.dist.timeout_s;
    return kExitOk;
  });
}

int cmd_run(const RunArgs& args) {
  bool logging = false;  // once the run's log is open, errors go there too (every rank keeps its own)
  auto report = [&](const std::exception& e) {
    std::cerr << "error: " << error_text(e) << "\n";
    if (logging) log_to_rank_file(error_text(e));
  };
  try {
    auto env = dist::detect_launch_env();
    auto start = plan_run_start(args, env);
    const auto& cfg = start.loaded.cfg;
    auto dir = io::prepare_run_dir(cfg, env.rank, dist::writes_run_files(env),  // a joiner is not the writer
                                   start.resume.mode == ResumeMode::Never);
    obs::init_run_logging(env.rank, cfg.log.level, dir.rank_log(env.rank).string());
    obs::install_crash_report(env.rank, dir.rank_log(env.rank).string());  // a fatal signal's stack, in that log too
    logging = true;
    spdlog::info("run directory {}", dir.root.string());
    for (const auto& aside : dir.set_aside)
      spdlog::info("--resume never: the earlier run's records and checkpoints were moved to {}; this run starts at "
                   "step 0", aside);
    for (const auto& w : start.loaded.warnings) spdlog::warn("{}", w.str());
    if (!start.guard.warning.empty()) spdlog::warn("{}", start.guard.warning);
    for (const auto& lock : {dir.lock, dir.checkpoint_lock})
      if (lock && !lock->recovered_from().empty())
        spdlog::warn("{}: took over a stale lock of {}, which ended without releasing it (killed?)",
                     lock->file().string(), lock->recovered_from());
    dist::set_rendezvous_stop_query([] { return stop_signal_name(); });  // the ranks' meeting ends on a stop signal
    return run_training(start.loaded.cfg, env, dir, start.resume);
  } catch (const CheckpointFailed& e) {
    report(e);
    return kExitCheckpointFailed;
  } catch (const dist::RendezvousStopped&) {  // a stop signal while the ranks met: nothing to save yet
    spdlog::warn("{} received during start-up while this rank waited for the others to meet: stopped before the "
                 "first step, nothing to save; exiting with code {} (requeue me)",
                 stop_signal_name(), kExitSavedAfterSignal);
    return kExitSavedAfterSignal;
  } catch (const config::ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const Refused& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const dist::LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    report(e);
    return kExitFailure;
  }
}

}  // namespace trainer::engine
