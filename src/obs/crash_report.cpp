#include "obs/crash_report.hpp"

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace trainer::obs {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
volatile sig_atomic_t g_log_fd = -1;
volatile sig_atomic_t g_in_handler = 0;
int64_t g_rank = 0;
alignas(16) char g_alt_stack[64 * 1024];  // a stack overflow's SIGSEGV cannot run on the stack it overflowed

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error: a mapped file truncated under the process?)";
    case SIGFPE: return "SIGFPE (arithmetic fault)";
    case SIGILL: return "SIGILL (illegal instruction: a binary built for another CPU?)";
    case SIGABRT: return "SIGABRT (abort: an uncaught exception or a failed check)";
    default: return "a fatal signal";
  }
}

// Appends `s` to buf at *n (bounded): the handler formats without malloc or stdio.
void append_text(char* buf, size_t cap, size_t* n, const char* s) {
  while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
}

void append_number(char* buf, size_t cap, size_t* n, unsigned long long v, unsigned base) {
  char digits[24];
  int k = 0;
  do {
    digits[k++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v && k < 24);
  while (k && *n + 1 < cap) buf[(*n)++] = digits[--k];
}

void write_all(int fd, const char* s, size_t len) {
  while (fd >= 0 && len > 0) {
    const ssize_t w = ::write(fd, s, len);
    if (w <= 0) return;
    s += w;
    len -= static_cast<size_t>(w);
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  if (!g_in_handler) {  // a fault inside the report: no second report, just the default death
    g_in_handler = 1;
    char msg[512];
    size_t n = 0;
    append_text(msg, sizeof msg, &n, "\n[rank ");
    append_number(msg, sizeof msg, &n, static_cast<unsigned long long>(g_rank), 10);
    append_text(msg, sizeof msg, &n, "] fatal: ");
    append_text(msg, sizeof msg, &n, signal_name(sig));
    if (sig != SIGABRT && info && info->si_code > 0) {  // a fault the kernel found (not a raise or kill)
      append_text(msg, sizeof msg, &n, " at address 0x");
      append_number(msg, sizeof msg, &n, reinterpret_cast<unsigned long long>(info->si_addr), 16);
    }
    append_text(msg, sizeof msg, &n, " in thread ");
    append_number(msg, sizeof msg, &n, static_cast<unsigned long long>(::syscall(SYS_gettid)), 10);
    append_text(msg, sizeof msg, &n, "; the process ends with this signal. Stack:\n");
    void* frames[64];
    const int depth = ::backtrace(frames, 64);
    for (int fd : {2, static_cast<int>(g_log_fd)}) {
      if (fd < 0) continue;
      write_all(fd, msg, n);
      ::backtrace_symbols_fd(frames, depth, fd);
      constexpr char hint[] = "(a frame BINARY(+OFFSET): `addr2line -Cfe BINARY OFFSET` names its function and line)\n";
      write_all(fd, hint, sizeof hint - 1);
    }
  }
  // the default action, now: a fault re-raised by returning would loop on a handler-less restart
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

void install_crash_report(int64_t rank, const std::string& rank_log_file) {
  static bool installed = false;
  g_rank = rank;
  if (!rank_log_file.empty()) {
    const int fd = ::open(rank_log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    const int old = g_log_fd;
    g_log_fd = fd;  // -1 if it cannot be opened: stderr still gets the report
    if (old >= 0) ::close(old);
  }
  if (installed) return;
  installed = true;
  void* warm[2];
  ::backtrace(warm, 2);  // loads libgcc's unwinder now: its first use allocates, which a handler must not
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  ::sigaltstack(&ss, nullptr);  // this thread's; other threads' faults run on their own stacks
  for (int sig : kSignals) {
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace trainer::obs
