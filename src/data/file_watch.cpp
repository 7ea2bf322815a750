#include "data/file_watch.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace trainer::data {
namespace {

FileStamp from_stat(const struct stat& st) {
  FileStamp s;
  s.dev = static_cast<uint64_t>(st.st_dev);
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.size = static_cast<int64_t>(st.st_size);
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return s;
}

// The guarded region of this thread: where a SIGBUS jumps back to. Plain data (no constructor), so
// reading it from the signal handler is safe; it is set before the region's first read.
struct Guard {
  sigjmp_buf jump;
  const void* lo;
  const void* hi;
};
// volatile, and signal fences around the guarded call: the compiler sees no reader of these stores
// (the handler is invisible to it) and would drop or move them otherwise
thread_local Guard* volatile t_guard = nullptr;
struct sigaction g_previous_sigbus;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  Guard* g = t_guard;
  if (g && info && info->si_addr >= g->lo && info->si_addr < g->hi) siglongjmp(g->jump, 1);
  // not a guarded read: what SIGBUS did before this handler was installed
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_sigaction) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // returning re-executes the faulting access, which now ends the process
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    // SA_NODEFER: SIGBUS stays unblocked in the handler, so the siglongjmp out of it (which does
    // not restore the signal mask) leaves the thread able to catch the next one
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

struct CopyArgs {
  void* dst;
  const void* src;
  size_t n;
};

void copy_fn(void* ctx) {
  auto* a = static_cast<CopyArgs*>(ctx);
  std::memcpy(a->dst, a->src, a->n);
}

}  // namespace

FileStamp stamp_fd(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return {};
  return from_stat(st);
}

FileStamp stamp_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  return from_stat(st);
}

std::string describe_change(const std::string& path, const FileStamp& then) {
  if (then.size < 0) return "";
  const FileStamp now = stamp_path(path);
  if (now == then) return "";
  if (now.size < 0) return "it was deleted";
  if (now.dev != then.dev || now.ino != then.ino) return "it was replaced by another file";
  if (now.size < then.size) return fmt::format("it was truncated from {} to {} bytes", then.size, now.size);
  if (now.size > then.size) return fmt::format("it grew from {} to {} bytes", then.size, now.size);
  return "it was modified (its mtime changed)";
}

bool guarded_run(void (*fn)(void*), void* ctx, const void* lo, const void* hi) {
  install_sigbus_handler();
  Guard g;
  g.lo = lo;
  g.hi = hi;
  Guard* volatile outer = t_guard;  // read after a jump: volatile
  if (sigsetjmp(g.jump, 0) != 0) {  // 0: no mask to save (SA_NODEFER left it as it was)
    t_guard = outer;
    return false;
  }
  t_guard = &g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(ctx);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

bool guarded_copy(void* dst, const void* src, size_t n) {
  if (n == 0) return true;  // nothing to read (an empty file maps to no address: memcpy's null source)
  CopyArgs a{dst, src, n};
  return guarded_run(copy_fn, &a, src, static_cast<const uint8_t*>(src) + n);
}

}  // namespace trainer::data
