#include "engine/checkpoint/stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace trainer::engine {
namespace {

// Lock-free atomics are async-signal-safe (a plain int would need volatile sig_atomic_t).
std::atomic<int> g_signal{0};
std::atomic<int> g_sigint_count{0};
static_assert(std::atomic<int>::is_always_lock_free);

constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT, SIGHUP};
constexpr int kCount = 4;
struct sigaction g_previous[kCount];
bool g_installed = false;

std::atomic<int> g_phase{static_cast<int>(StopPhase::StartUp)};
static_assert(std::atomic<int>::is_always_lock_free);

void hs_write(const char* text) { [[maybe_unused]] auto n = ::write(STDERR_FILENO, text, std::strlen(text)); }

// Only async-signal-safe calls in here: atomics, write(2), strlen, _exit(2).
void on_stop_signal(int sig) {
  if (sig == SIGINT && g_sigint_count.fetch_add(1) >= 1) {
    hs_write("\ntrainer: second SIGINT, aborting without a checkpoint\n");
    ::_exit(128 + SIGINT);
  }
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    // the signal's own name (a scheduler's SIGUSR1 or SIGTERM is no Ctrl-C to repeat), and what
    // follows from the phase the process is in
    const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGHUP";
    const int phase = g_phase.load();
    const char* what = phase == static_cast<int>(StopPhase::Training)
                           ? " received; saving a checkpoint at the next step boundary (several ranks: the "
                             "next one they agree at, within 10 steps)"
                       : phase == static_cast<int>(StopPhase::Batches)
                           ? " received; stopping after the current batch or token, the output so far kept"
                       : phase == static_cast<int>(StopPhase::Ending)
                           ? " received after the run's loop ended; it exits with its own code"
                           : " received during start-up; the run stops before its first step";
    hs_write("\ntrainer: ");
    hs_write(name);
    hs_write(what);
    hs_write(sig == SIGINT ? " (SIGINT again to abort at once)\n" : "\n");
  }
}

}  // namespace

void install_stop_handlers() {
  if (g_installed) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads resume; the flag is polled at the next step boundary
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
  g_installed = true;
  unblock_stop_signals();  // one that arrived while blocked (the front's or trainer launch's start-up) is delivered now
}

void unblock_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kSignals) sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kSignals) sigaddset(&set, sig);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

void restore_stop_handlers() {
  if (!g_installed) return;
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

void set_stop_phase(StopPhase phase) { g_phase.store(static_cast<int>(phase)); }

bool stop_requested() { return g_signal.load() != 0; }

int stop_signal() { return g_signal.load(); }

std::string stop_signal_name() {
  switch (g_signal.load()) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "";
  }
}

void clear_stop_request() {
  g_signal.store(0);
  g_sigint_count.store(0);
}

namespace {

// TRAINER_INJECT_<X>=STEP: the step boundary at which a test's fault is raised, once (-1: none;
// kInjectAtEnd: `end`, after the training loop, where `end_allowed`)
int64_t injected_step(const char* var, bool end_allowed = false) {
  const char* v = std::getenv(var);
  if (!v || !*v) return -1;
  if (end_allowed && std::strcmp(v, "end") == 0) return kInjectAtEnd;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 0)
    throw std::invalid_argument(std::string(var) + ": '" + v + "' is not a step number (0, 1, ...)" +
                                (end_allowed ? " or end" : ""));
  return static_cast<int64_t>(n);
}

}  // namespace

void inject_stop_signal(int64_t step) {
  static const int64_t at = injected_step("TRAINER_INJECT_SIGNAL", /*end_allowed=*/true);
  static bool raised = false;
  if (raised || step != at) return;
  raised = true;
  ::raise(SIGTERM);  // the handler sets the flag the step boundary polls
}

void inject_crash(int64_t step) {
  static const int64_t at = injected_step("TRAINER_INJECT_CRASH");
  static bool raised = false;
  if (raised || step != at) return;
  raised = true;
  ::raise(SIGSEGV);  // obs/crash_report's handler writes the stack, then the process dies of it
}

}  // namespace trainer::engine
