// trainer's front: the `trainer` users, schedulers and launchers start. It blocks the four stop
// signals (SIGTERM, SIGUSR1, SIGINT, SIGHUP) and execs the real program, libexec/trainer beside it.
//
// Why a second program: the real one links LibTorch, so the dynamic loader maps and relocates about
// a gigabyte of libraries and runs their static initialisers before main() (0.2 s on a quiet host,
// seconds at load 8). A stop signal in that window would take its default action (exit 143 for
// SIGTERM) although the run promises exit 75 to a scheduler that requeues it. This program has no
// dynamic loader (it is linked statically) and, on x86-64, blocks the signals in its entry point,
// before the C library's own start-up; exec keeps the mask, the pending signals and the PID, so
// torchrun, mpirun, srun and `timeout` signal the same process throughout. The real main() installs
// its handlers and then unblocks the signals: one that arrived meanwhile is delivered to the handler
// and becomes a graceful stop (docs/RELIABILITY.md, "Stop signals").
//
// Only the C library here (no LibTorch, no C++ runtime objects): it must start in microseconds.
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <climits>

// The kernel's signal set word: signal n is bit n - 1 (what rt_sigprocmask takes, 8 bytes).
constexpr uint64_t sig_bit(int sig) { return uint64_t{1} << (sig - 1); }
extern "C" const uint64_t trainer_front_mask = sig_bit(SIGTERM) | sig_bit(SIGUSR1) | sig_bit(SIGINT) | sig_bit(SIGHUP);

#if defined(__x86_64__)
// The entry point (linked with -e trainer_front_entry): rt_sigprocmask(SIG_BLOCK, &mask, NULL, 8),
// then the C library's _start with the registers and stack as the kernel left them (%rdx = 0: a
// static program has no loader's exit function; the stack is untouched).
asm(R"(
  .text
  .globl trainer_front_entry
  .type trainer_front_entry, @function
trainer_front_entry:
  mov $14, %eax
  xor %edi, %edi
  lea trainer_front_mask(%rip), %rsi
  xor %edx, %edx
  mov $8, %r10d
  syscall
  xor %edx, %edx
  jmp _start
  .size trainer_front_entry, .-trainer_front_entry
)");
#endif

int main(int, char** argv) {
  // again, for hosts without the entry stub (a few microseconds after exec there); idempotent
  sigset_t set;
  sigemptyset(&set);
  for (int sig = 1; sig < 64; ++sig)
    if (trainer_front_mask & sig_bit(sig)) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  // the real program sits at libexec/trainer next to this file, wherever the build or install put it
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) {
    fprintf(stderr, "trainer: cannot read /proc/self/exe: %s\n", strerror(errno));
    return 1;
  }
  path[n] = '\0';
  char* slash = strrchr(path, '/');
  constexpr char kReal[] = "/libexec/trainer";
  if (!slash || static_cast<size_t>(slash - path) + sizeof(kReal) > sizeof(path)) {
    fprintf(stderr, "trainer: unexpected program path %s\n", path);
    return 1;
  }
  memcpy(slash, kReal, sizeof(kReal));
  execv(path, argv);  // the same argv (argv[0] as typed) and environment
  fprintf(stderr, "trainer: cannot start %s: %s\n", path, strerror(errno));
  return 1;
}
