// Local spawner: see launcher.hpp. One poll loop watches the ranks' output pipes, a self-pipe fed by
// the signal handler (forwarded signals and SIGCHLD) and the kill deadline.
#include "dist/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "config/exit_codes.hpp"
#include "device/device.hpp"
#include "dist/launch_env.hpp"
#include "dist/launch_output.hpp"
#include "dist/net_iface.hpp"
#include "dist/store_host.hpp"

extern char** environ;

namespace trainer::dist {
namespace {

int g_signal_pipe[2] = {-1, -1};
// SIGHUP too: a closed terminal must stop the ranks with a checkpoint, not kill the launcher (and,
// through PDEATHSIG, every rank without one)
constexpr int kNumForwarded = 4;
constexpr int kForwarded[kNumForwarded] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};
constexpr int kDefaultMasterPort = 29500;  // torchrun's
constexpr double kDefaultLingerS = 330;     // dist.timeout_s's default and 30 s, when the config was not read

void on_signal(int sig) {
  int saved = errno;
  unsigned char s = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &s, 1);
  errno = saved;
}

struct Child {
  pid_t pid = -1;
  bool running = false;
  int code = 0;
};

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::vector<std::string> child_environment(const LaunchOptions& o, int local_rank, int port, int attempt) {
  static const char* kOurs[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                "MASTER_PORT=", "GROUP_RANK=", "ROLE_RANK=", "TORCHELASTIC_RESTART_COUNT=",
                                "TORCHELASTIC_USE_AGENT_STORE=", "TRAINER_LAUNCH_STORE="};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    bool ours = false;
    for (const char* k : kOurs) ours = ours || std::strncmp(*e, k, std::strlen(k)) == 0;
    if (!ours) env.emplace_back(*e);
  }
  env.push_back("RANK=" + std::to_string(o.node_rank * o.nprocs + local_rank));
  env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("WORLD_SIZE=" + std::to_string(o.nnodes * o.nprocs));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nprocs));
  env.push_back("GROUP_RANK=" + std::to_string(o.node_rank));
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  // as torchrun: a restarted group's store keys never meet the failed group's (dist/launch_env.hpp)
  env.push_back("TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt));
  // node 0's launcher hosts the store: the ranks connect as clients (dist/store_host.hpp)
  if (o.nnodes * o.nprocs > 1) {
    env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
    env.push_back("TRAINER_LAUNCH_STORE=1");
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The child side of a spawn, between fork and exec: never returns.
[[noreturn]] void become_rank(std::vector<char*>& argv, std::vector<char*>& envp, int out_fd, int err_fd,
                              pid_t launcher, bool block_until_handled) {
  // no orphans: the rank dies with the launcher, even if the launcher is SIGKILLed
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kExitFailure);
  ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the launcher only; it forwards exactly once
  for (int sig : kForwarded) ::signal(sig, SIG_DFL);
  ::signal(SIGCHLD, SIG_DFL);
  // `trainer run` ranks: the stop signals stay blocked across exec until the rank's handlers are
  // in place (its main() unblocks them), so one forwarded during start-up is neither lost nor
  // fatal. Any other command starts with nothing blocked.
  sigset_t mask;
  sigemptyset(&mask);
  if (block_until_handled)
    for (int sig : kForwarded) sigaddset(&mask, sig);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execve(argv[0], argv.data(), envp.data());
  const char msg[] = "launch: execve failed\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
  ::_exit(127);
}

// One attempt of this node's ranks: starts them, prefixes their output lines, forwards stop
// signals, and applies the policy as each one ends: under dist.recovery in_process a lost rank is
// marked dead (and replaced while --max-restarts allows), otherwise the first failure terminates
// the others, SIGKILL after the grace period.
class RankGroup {
 public:
  RankGroup(const LaunchOptions& o, const std::vector<std::string>& child_args, int port, int attempt,
            RankStore& store, int& replacements, double node0_lost_s)
      : o_(o), port_(port), attempt_(attempt), store_(store), replacements_(replacements),
        block_until_handled_(child_args.front() == "run"), launcher_(::getpid()),
        children_(static_cast<size_t>(o.nprocs)), joins_(children_.size(), o.join ? 1 : 0) {
    node0_lost_s_ = node0_lost_s;
    linger_s_ = o.linger_s > 0 ? o.linger_s : node0_lost_s > 0 ? node0_lost_s : kDefaultLingerS;
    argv_.push_back(o.exe);
    for (const auto& a : child_args) argv_.push_back(a);
    // a stop signal while many ranks start (a mistyped -n): those started get it, no more start (it
    // went on forking for as long as -n asked, found from outside)
    int started = 0;
    for (; started < o.nprocs && !stopped_; ++started) {
      spawn(started, o.join ? 1 : 0);
      take_signals();
    }
    if (started < o.nprocs)
      write_all(2, "launch: a stop signal while starting the ranks: " + std::to_string(started) + " of " +
                       std::to_string(o.nprocs) + " started, no more are\n");
  }

  // Until every rank ended and its output is read: the first failing rank's exit code, else 0.
  int wait() {
    while (any_running() || any_open()) {
      pump_output_and_signals();
      reap();
      watch_node0();
      watch_stragglers();
      if (terminating_ && !killed_ && Clock::now() >= kill_at_ && any_running()) {
        write_all(2, "launch: ranks still running after the grace period; sending SIGKILL\n");
        signal_all(SIGKILL);
        killed_ = true;
      }
      if (!any_running()) close_streams();
    }
    // every rank of this node lost (in process) and none finished: that is this node's failure
    if (result_ == 0 && succeeded_ == 0 && lost_code_ != 0) result_ = lost_code_;
    return result_;
  }

  bool stopped() const { return stopped_; }  // a stop signal was forwarded: the user ends the job

 private:
  using Clock = std::chrono::steady_clock;

  // local rank r's process; `join` > 0: the join-th replacement of a rank lost in process
  void spawn(int r, int join) {
    auto env_store = child_environment(o_, r, port_, attempt_);
    if (join > 0) env_store.push_back("TRAINER_JOIN=" + std::to_string(join));
    auto envp = c_strings(env_store);
    auto argv = c_strings(argv_);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error("launch: pipe2(): " + std::string(std::strerror(errno)));
    // the stop signals blocked across fork: the child starts with them blocked, so one forwarded
    // before it set its own mask stays pending instead of running this process's handler in it or
    // (after its SIG_DFL) killing it; here, one that arrived meanwhile is delivered after the fork
    sigset_t forwarded, before;
    sigemptyset(&forwarded);
    for (int sig : kForwarded) sigaddset(&forwarded, sig);
    ::pthread_sigmask(SIG_BLOCK, &forwarded, &before);
    pid_t pid = ::fork();
    if (pid == 0) become_rank(argv, envp, out[1], err[1], launcher_, block_until_handled_);
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (pid < 0) throw std::runtime_error("launch: fork(): " + std::string(std::strerror(fork_errno)));
    ::close(out[1]);
    ::close(err[1]);
    children_[static_cast<size_t>(r)] = {pid, true, 0};
    std::string prefix = "[rank" + std::to_string(o_.node_rank * o_.nprocs + r) + "] ";
    for (int fd : {out[0], err[0]}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      streams_.push_back({fd, fd == out[0] ? 1 : 2, prefix, ""});
    }
  }

  // One poll over the signal self-pipe and the ranks' pipes (200 ms at most): forwards the stop
  // signals received, writes the complete lines the ranks wrote.
  void pump_output_and_signals() {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    std::vector<Stream*> owners{nullptr};
    for (auto& s : streams_)
      if (s.fd >= 0) {
        fds.push_back({s.fd, POLLIN, 0});
        owners.push_back(&s);
      }
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents & POLLIN) take_signals();
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) owners[i]->pump();
  }

  // Not node 0: node 0's launcher hosts the job's store and outlives its ranks. When it has not answered
  // for node0_lost_s (the ranks' dist.timeout_s and 30 s) while ranks of this node still run, the job
  // ended or lost node 0 without them: a rank that hangs (stopped, its peers regrouped without it)
  // held this node until its allocation ended (found from outside). They are ended, exit 1.
  void watch_node0() {
    if (o_.node_rank == 0 || node0_lost_s_ <= 0 || terminating_ || !any_running() || Clock::now() < next_probe_) return;
    next_probe_ = Clock::now() + std::chrono::seconds(2);
    const auto why = tcp_unreachable(o_.master_addr, port_, std::chrono::milliseconds(200));
    if (why.empty()) {
      node0_silent_since_.reset();
      return;
    }
    if (!node0_silent_since_) node0_silent_since_ = Clock::now();
    const double silent = std::chrono::duration<double>(Clock::now() - *node0_silent_since_).count();
    if (silent < node0_lost_s_) return;
    write_all(2, "launch: node 0's launcher, which hosts the job's store at " + o_.master_addr + ":" +
                     std::to_string(port_) + ", has not answered for " + std::to_string(static_cast<int>(silent)) +
                     " s (" + why + ") while ranks of this node still run: the job ended or lost node 0 without them "
                     "(a rank stopped or hung?); terminating them\n");
    if (result_ == 0) result_ = kExitFailure;
    terminating_ = true;
    kill_at_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
    signal_all(SIGTERM);
  }

  // Ranks that outlive what they can be waiting for, by linger_s_ (the ranks' dist.timeout_s and 30 s):
  // after a forwarded stop signal (their stop vote and checkpoint are bounded by that time-out), and, on
  // node 0, after rank 0 (the writer: the final checkpoint and records are its) ended with 0. A rank
  // stopped (SIGSTOP) or hung after its last collective held the launcher forever, and a forwarded
  // SIGTERM it could not act on was never followed by SIGKILL (found from outside).
  void watch_stragglers() {
    if (killed_ || !any_running()) return;
    const auto now = Clock::now();
    const auto linger = std::chrono::milliseconds(static_cast<int64_t>(linger_s_ * 1000));
    if (stop_at_ && now >= *stop_at_ + linger) {
      write_all(2, "launch: ranks still running " + std::to_string(static_cast<int>(linger_s_)) + " s after the stop "
                   "signal (the ranks' dist.timeout_s and 30 s): stopped or hung; sending SIGKILL\n");
      if (result_ == 0) result_ = kExitFailure;
      signal_all(SIGKILL);
      killed_ = true;
      return;
    }
    if (o_.node_rank != 0 || terminating_ || children_[0].running || children_[0].code != 0 || !writer_done_at_) return;
    if (now < *writer_done_at_ + linger) return;
    write_all(2, "launch: rank 0 finished " + std::to_string(static_cast<int>(linger_s_)) + " s ago (the ranks' "
                 "dist.timeout_s and 30 s) and ranks of this node still run: stopped or hung after their last "
                 "collective; terminating them\n");
    if (result_ == 0) result_ = kExitFailure;
    terminating_ = true;
    kill_at_ = now + std::chrono::milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
    signal_all(SIGTERM);
    signal_all(SIGCONT);  // a stopped rank acts on it
  }

  // The stop signals received (the self-pipe is non-blocking): forwarded to every rank.
  void take_signals() {
    unsigned char sigs[64];
    ssize_t n;
    while ((n = ::read(g_signal_pipe[0], sigs, sizeof(sigs))) > 0)
      for (ssize_t i = 0; i < n; ++i)
        if (sigs[i] != SIGCHLD) {
          signal_all(sigs[i]);
          signal_all(SIGCONT);  // a rank stopped by job control acts on it instead of holding the job
          stopped_ = true;      // the user stops the job: no restart
          if (!stop_at_) stop_at_ = Clock::now();
        }
  }

  // The ranks that ended since the last look, each through the policy (a stop signal first).
  void reap() {
    take_signals();
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0)
      for (size_t r = 0; r < children_.size(); ++r)
        if (children_[r].pid == pid) {
          children_[r].running = false;
          children_[r].code = exit_code_of(status);
          rank_ended(r, children_[r].code);
        }
  }

  void rank_ended(size_t r, int code) {
    const int rank = o_.node_rank * o_.nprocs + static_cast<int>(r);
    if (code == 0) ++succeeded_;
    if (code == 0 && rank == 0) writer_done_at_ = Clock::now();
    // dist.recovery in_process: the survivors regroup without this rank (the mark tells them at
    // once); the group's result is then theirs
    if (code != 0 && code != kExitSavedAfterSignal && !terminating_ && store_.in_process(attempt_)) {
      lost_in_process(r, rank, code);
      return;
    }
    // 75 = saved a checkpoint after a (forwarded) signal: the other ranks got it too, let them finish;
    // a replacement still waiting to join the stopping group stops too (it waited dist.timeout_s)
    for (size_t i = 0; i < children_.size() && code == kExitSavedAfterSignal; ++i)
      if (children_[i].running && joins_[i] > 0) ::kill(children_[i].pid, SIGTERM);
    if (code != 0 && result_ == 0) {
      result_ = code;
      if (code != kExitSavedAfterSignal && !terminating_) {
        write_all(2, "launch: rank " + std::to_string(rank) + " exited with code " + std::to_string(code) +
                         "; terminating the other ranks\n");
        terminating_ = true;
        kill_at_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
        signal_all(SIGTERM);
      }
    } else if (code != 0 && terminating_) {  // each rank's own ending after a failure (65 on every rank, ...)
      write_all(2, "launch: rank " + std::to_string(rank) + " exited with code " + std::to_string(code) + "\n");
    }
  }

  void lost_in_process(size_t r, int rank, int code) {
    store_.mark_dead(attempt_, rank, joins_[r]);
    write_all(2, "launch: rank " + std::to_string(rank) + " exited with code " + std::to_string(code) +
                     "; dist.recovery in_process: the other ranks go on without it\n");
    if (lost_code_ == 0) lost_code_ = code;
    // --max-restarts under in_process: a replacement joins the running group (not a stopping one). On
    // one node with no rank left running there is no group to join (a replacement waited dist.timeout_s
    // and failed, found from outside): the group ends, and --max-restarts starts it again instead.
    bool others = o_.nnodes > 1;
    for (size_t i = 0; i < children_.size(); ++i) others = others || (i != r && children_[i].running);
    if (replacements_ < o_.max_restarts && !stopped_ && others) {
      ++replacements_;
      write_all(2, "launch: starting a replacement for rank " + std::to_string(rank) + " (" +
                       std::to_string(replacements_) + " of " + std::to_string(o_.max_restarts) +
                       "); it joins the running group\n");
      spawn(static_cast<int>(r), ++joins_[r]);
    }
  }

  // a grandchild holding a pipe open must not keep the launcher alive once every rank is gone
  void close_streams() {
    for (auto& s : streams_)
      if (s.fd >= 0) {
        ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
        if (s.pump()) {
          if (!s.pending.empty()) write_all(s.out_fd, s.prefix + s.pending + "\n");
          ::close(s.fd);
          s.fd = -1;
        }
      }
  }

  void signal_all(int sig) {
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, sig);
  }
  bool any_running() const {
    for (const auto& c : children_)
      if (c.running) return true;
    return false;
  }
  bool any_open() const {
    for (const auto& s : streams_)
      if (s.fd >= 0) return true;
    return false;
  }

  const LaunchOptions& o_;
  const int port_, attempt_;
  RankStore& store_;
  int& replacements_;  // of the whole launch: --max-restarts counts them under in_process
  const bool block_until_handled_;
  const pid_t launcher_;
  std::vector<std::string> argv_;  // the trainer and the command the ranks run
  std::vector<Child> children_;    // per local rank, its current process
  std::vector<int> joins_;         // joining processes started per local rank
  std::vector<Stream> streams_;
  int result_ = 0, succeeded_ = 0, lost_code_ = 0;  // lost_code_: the first code of a rank lost in process
  bool stopped_ = false, terminating_ = false, killed_ = false;
  Clock::time_point kill_at_;
  double node0_lost_s_ = 0;  // 0: not watched (node 0, or the ranks' config not read)
  double linger_s_ = 0;      // watch_stragglers: LaunchOptions::linger_s, node0_lost_s_, or kDefaultLingerS
  std::optional<Clock::time_point> stop_at_, writer_done_at_;
  Clock::time_point next_probe_;
  std::optional<Clock::time_point> node0_silent_since_;
};

}  // namespace

int launch_local(const LaunchOptions& o, const std::vector<std::string>& child_args) {
  if (o.nprocs < 1) throw std::invalid_argument("launch: -n must be at least 1");
  if (o.nnodes < 1) throw std::invalid_argument("launch: --nnodes must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw std::invalid_argument("launch: --node-rank " + std::to_string(o.node_rank) + " is not in [0, " +
                                std::to_string(o.nnodes) + ")");
  if (o.nnodes > 1 && o.master_addr.empty())
    throw std::invalid_argument("launch: --nnodes " + std::to_string(o.nnodes) +
                                " needs --master-addr (the address of node 0, reachable from every node)");
  if (o.max_restarts < 0) throw std::invalid_argument("launch: --max-restarts must be >= 0");
  if (o.join && (o.nnodes < 2 || o.node_rank == 0))
    throw std::invalid_argument("launch: --join is for a node other than node 0 (--nnodes 2 or more, --node-rank 1 "
                                "or more): node 0's launcher hosts the running job's store");
  if (child_args.empty()) throw std::invalid_argument("launch: nothing to run; usage: trainer launch -n N -- run CONFIG");
  const int64_t cores = device::usable_cpus();
  if (!o.oversubscribe && o.nprocs > std::max<int64_t>(kMinRankLimit, kMaxRanksPerCore * cores))
    throw std::invalid_argument(fmt::format("launch: -n {} ranks on {} usable core(s) is more than {} per core: refused "
                                            "as a likely typo (each rank is a process with its own copy of the model); "
                                            "pass --oversubscribe to start them anyway", o.nprocs, cores, kMaxRanksPerCore));
  // every node must name the same port: a free one is only for a job on one node
  const int port = o.master_port > 0 ? o.master_port : o.nnodes > 1 ? kDefaultMasterPort : free_local_port();
  double rank_timeout_s = 0;  // the ranks' dist.timeout_s, when the preflight read their config
  if (o.preflight) {
    const auto vars = child_environment(o, 0, port, 0);
    const auto rank_env = detect_launch_env([&vars](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      for (const auto& v : vars)
        if (v.size() > n && v[n] == '=' && v.compare(0, n, name) == 0) return v.c_str() + n + 1;
      return nullptr;
    });
    if (const auto code = o.preflight(rank_env, &rank_timeout_s)) return *code;
  }
  // more ranks than cores runs (each gets one intra-op thread), but slowly: said, not refused, as
  // checking a layout on a laptop is a use (far more is refused above)
  if (o.nprocs > cores)
    write_all(2, "launch: note: " + std::to_string(o.nprocs) + " ranks on " + std::to_string(cores) +
                     " usable core(s) share them (one intra-op thread each): fine to check a layout, slow to "
                     "train\n");
  RankStore store(o.master_addr, port, o.nnodes, o.node_rank, o.nprocs);  // before the first rank starts: they connect to it

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("launch: pipe2(): " + std::string(std::strerror(errno)));
  struct sigaction sa{}, old[kNumForwarded + 1];
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < kNumForwarded; ++i) ::sigaction(kForwarded[i], &sa, &old[i]);
  ::sigaction(SIGCHLD, &sa, &old[kNumForwarded]);
  // main() keeps the stop signals blocked up to here: one that came during start-up reaches the
  // pipe now and is forwarded to the ranks as soon as they exist
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);

  // --max-restarts: a failed group starts again (its `trainer run` ranks resume from the newest
  // complete checkpoint); not after a stop signal, a clean end, a signal's checkpoint (75), a usage
  // or config error (2: nothing was started, and the same command would fail the same way), a rank's
  // second SIGINT (130: the user stops it now) or a data file that changed (65: the user puts it back
  // or goes on with the new data; found from outside: both were restarted and trained on)
  int result = 0;
  int replacements = 0;  // under dist.recovery in_process, --max-restarts counts replacement ranks
  for (int attempt = 0;; ++attempt) {
    RankGroup group(o, child_args, port, attempt, store, replacements, rank_timeout_s > 0 ? rank_timeout_s + 30 : 0);
    result = group.wait();
    if (result == 0 || result == kExitSavedAfterSignal || result == kExitUsage || result == 128 + SIGINT ||
        result == kExitDataChanged || group.stopped() || attempt + replacements >= o.max_restarts)
      break;
    write_all(2, "launch: restarting the group (restart " + std::to_string(attempt + 1) + " of " +
                     std::to_string(o.max_restarts) + ") after exit code " + std::to_string(result) + "\n");
  }

  for (int i = 0; i < kNumForwarded; ++i) ::sigaction(kForwarded[i], &old[i], nullptr);
  ::sigaction(SIGCHLD, &old[kNumForwarded], nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  return result;
}

int cmd_launch(LaunchOptions o, const std::vector<std::string>& child_args) {
  try {
    return launch_local(o, child_args);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace trainer::dist
