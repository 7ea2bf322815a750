// Logging through spdlog: rank 0 prints to the console, every rank writes logs/rank<k>.log.
#pragma once

#include <spdlog/spdlog.h>

#include <functional>
#include <string>

namespace trainer::obs {

using GetEnvFn = std::function<const char*(const char*)>;

// Whether a terminal on this process would be one a person watches, as the environment tells:
// TERM set and not "dumb", and not a rank of mpirun/mpiexec (OMPI_COMM_WORLD_* / PMI_*), which
// hands every rank a pty of its own whose text ends up in redirected logs.
bool terminal_env_interactive(const GetEnvFn& getenv_fn);
// isatty(fd) and terminal_env_interactive of the process environment. In-place drawing and
// colours are for such a terminal only.
bool interactive_terminal(int fd);

// Something drawn in place on the console (the progress bar): each console log line is preceded
// by hide() and followed by show(), so that a line never starts after the bar's text. One at a
// time; nullptr unregisters (and waits for a line being written to finish).
class ConsoleOverlay {
 public:
  virtual ~ConsoleOverlay() = default;
  virtual void hide() = 0;
  virtual void show() = 0;
};
void set_console_overlay(ConsoleOverlay* overlay);
// Unregisters `overlay` if it is the one registered (a newer one stays).
void release_console_overlay(ConsoleOverlay* overlay);

// Console only (before the run directory exists). Level: trace|debug|info|warn|error.
void init_console_logging(const std::string& level = "info");

// Console on rank 0 (errors on every rank, prefixed with the rank) plus the rank's own file.
void init_run_logging(int64_t rank, const std::string& level, const std::string& rank_log_file);
// A rank that became the run's writer mid-run (dist.recovery in_process, rank 0 lost): its console
// speaks at `level` from now on, as rank 0's did (other ranks' report errors only).
void speak_on_console(const std::string& level);

}  // namespace trainer::obs
