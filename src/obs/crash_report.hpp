// A fatal signal's last words. A rank that dies of SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT (an
// uncaught exception's std::terminate included) writes which signal, the faulting address and its
// stack (glibc's backtrace_symbols_fd) to stderr and to its own rank log, then dies of that same
// signal: the exit status (139 for SIGSEGV), a core dump and `trainer launch`'s report are what they
// would be without the handler. Everything the handler does is async-signal-safe (write, backtrace
// once loaded, raise). On the installing (main) thread it runs on an alternate stack, so that
// thread's stack overflow is reported too; another thread's overflow dies without the report.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::obs {

// Installs the handlers for this process (idempotent: a second call only changes the log file).
// `rank_log_file` is opened for appending now; "" reports on stderr alone.
void install_crash_report(int64_t rank, const std::string& rank_log_file);

}  // namespace trainer::obs
