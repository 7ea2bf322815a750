// Stop signals raised in-process: the handler only records the signal; a second SIGINT exits at once.
// Cases that may end the process run in a forked child.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>

#include "engine/checkpoint/stop_signal.hpp"

using namespace trainer;

namespace {

// Runs fn in a child process and returns its exit status (128 + signal when killed by one).
int in_child(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct HandlersInstalled {
  HandlersInstalled() {
    engine::clear_stop_request();
    engine::install_stop_handlers();
  }
  ~HandlersInstalled() {
    engine::restore_stop_handlers();
    engine::clear_stop_request();
  }
};

}  // namespace

TEST_CASE("stop signal: SIGTERM sets the flag and the process carries on", "[unit]") {
  HandlersInstalled h;
  CHECK_FALSE(engine::stop_requested());
  CHECK(engine::stop_signal_name().empty());
  ::raise(SIGTERM);
  CHECK(engine::stop_requested());
  CHECK(engine::stop_signal() == SIGTERM);
  CHECK(engine::stop_signal_name() == "SIGTERM");
}

TEST_CASE("stop signal: SIGUSR1 (SLURM's --signal) sets the flag", "[unit]") {
  HandlersInstalled h;
  ::raise(SIGUSR1);
  CHECK(engine::stop_requested());
  CHECK(engine::stop_signal_name() == "SIGUSR1");
}

TEST_CASE("stop signal: the first signal is the one reported", "[unit]") {
  HandlersInstalled h;
  ::raise(SIGUSR1);
  ::raise(SIGTERM);
  CHECK(engine::stop_signal_name() == "SIGUSR1");
  engine::clear_stop_request();
  CHECK_FALSE(engine::stop_requested());
}

TEST_CASE("stop signal: one SIGINT stops gracefully, a second aborts with 130", "[unit]") {
  int status = in_child([] {
    engine::install_stop_handlers();
    ::raise(SIGINT);
    if (!engine::stop_requested() || engine::stop_signal_name() != "SIGINT") return 3;  // still alive: good
    ::raise(SIGINT);
    return 4;  // not reached when the second SIGINT aborts
  });
  CHECK(status == 130);
}

TEST_CASE("stop signal: SIGTERM then one SIGINT does not abort", "[unit]") {
  // torchrun forwards SIGTERM while the terminal sends SIGINT to the same process: one each is a
  // graceful stop, not a double Ctrl-C.
  int status = in_child([] {
    engine::install_stop_handlers();
    ::raise(SIGTERM);
    ::raise(SIGINT);
    return engine::stop_signal_name() == "SIGTERM" ? 0 : 5;
  });
  CHECK(status == 0);
}

TEST_CASE("stop signal: restore puts the previous handlers back", "[unit]") {
  int status = in_child([] {
    ::signal(SIGTERM, SIG_DFL);  // the previous handler (not the test framework's own)
    engine::install_stop_handlers();
    engine::restore_stop_handlers();
    ::raise(SIGTERM);  // default action again: the child dies of SIGTERM
    return 6;
  });
  CHECK(status == 128 + SIGTERM);
}
