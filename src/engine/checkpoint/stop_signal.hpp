// Graceful stop on SIGTERM / SIGUSR1 / SIGINT / SIGHUP (preemption, scancel, Ctrl-C, a closed
// terminal). `trainer` installs them first thing in main(); before that, from the first instruction of
// the program, its front (apps/trainer/front.cpp) keeps them blocked, so a stop signal at any moment
// of start-up, the dynamic loader's included, is handled like one during training. The handlers only set an
// atomic flag (async-signal-safe); the training loop polls stop_requested() at step boundaries, agrees
// with the other ranks, saves one checkpoint and exits with kExitSavedAfterSignal. A second SIGINT
// means "now": the process exits at once with 130 (128 + SIGINT), without saving.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::engine {

// Installs the four handlers (idempotent) and unblocks the signals. The previous handlers are
// remembered for restore.
void install_stop_handlers();
// Unblocks the four signals (trainer launch starts its ranks with them blocked until their handlers
// are in place; a command without handlers unblocks them and takes the default action).
void unblock_stop_signals();
// Blocks them again (`trainer launch`: kept pending until its forwarding handlers are in place).
void block_stop_signals();
// Puts the previous handlers back (tests; the end of a run inside a longer-lived process).
void restore_stop_handlers();

// What the handler says a signal will do (it cannot ask the loop): start-up (the default: a run
// stops before its first step, saving nothing new), training (a checkpoint at the next step
// boundary), batches (`trainer predict`: it stops between batches or tokens, its output so far kept),
// or ending (the run's loop is over: the process exits with the run's own code, not of the signal).
enum class StopPhase { StartUp, Training, Batches, Ending };
void set_stop_phase(StopPhase phase);

bool stop_requested();
int stop_signal();                // the first signal received (SIGTERM, ...), 0 when none
std::string stop_signal_name();   // "SIGTERM" | "SIGUSR1" | "SIGINT" | "SIGHUP" | "" when none
void clear_stop_request();        // forget a received signal (tests; after a handled stop)

// TRAINER_INJECT_SIGNAL=STEP (fault injection for tests and drills): at the step boundary before step
// STEP + 1 this process raises SIGTERM at itself, once, as a preemption arriving there would (every
// rank of a launched job reads the same variable). STEP may be the step a run resumes at. Throws
// std::invalid_argument naming the variable when its value is not a step number. STEP `end`: the
// signal is raised once the training loop has ended (the call with kInjectAtEnd), as a scheduler's
// SIGTERM arriving while a finished run tears down would.
constexpr int64_t kInjectAtEnd = -3;
void inject_stop_signal(int64_t step);
// TRAINER_INJECT_CRASH=STEP (tests): SIGSEGV at that step boundary, once (obs/crash_report.hpp reports it).
void inject_crash(int64_t step);

}  // namespace trainer::engine
