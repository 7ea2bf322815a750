// Internal to src/dist/dist_context*.cpp and dist_regroup.cpp: the c10d objects behind DistContext.
// No other file includes this (c10d's and gloo's headers stay out of the rest of the project).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/exit_codes.hpp"
#include "dist/dist_context.hpp"

namespace trainer::dist {

inline std::string error_text(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// How often a waiting rank looks for a peer's failure notice (dist.recovery in_process).
inline constexpr std::chrono::milliseconds kPollSlice{50};
// How long a wait goes on after a stop signal before the watchdog says why the run does not stop
// yet, and how often it looks.
inline constexpr std::chrono::seconds kStopNoticeAfter{5};
inline constexpr std::chrono::seconds kWatchdogTick{1};
// How many slices of a stalled commit vote pass between looks for the launcher's death marks of the
// generation's members (one store check per member: about a second between them).
inline constexpr int64_t kDeadScanSlices = 20;

// dist.recovery in_process: who is in the job now. Members are named by the RANK the launcher gave
// them at start (stable over regroups); generation g's members, in rank order, form its process group
// (store prefix <ns>gen_<g>/). Keys (all under `prefix`, which the launcher knows too):
//   gen_<g>/abort          a member of g failed in a collective (value: what it saw)
//   gen_<g>/alive/<id>     a survivor of g checked in (value: the steps it has committed)
//   gen_<g>/next           the members of g+1 (compare-and-set: the first proposal wins)
//   gen_<g>/step_<s>/ok    how many members finished step s's gradient sync (the commit vote)
//   gen_<g>/step_<s>/go    set by the last voter: every member steps the optimizer
//   gen_<g>/ready/<id>     a member of a grown generation g checked in before its process group forms
//   gen_<g>/formed         go | off: whether grown generation g forms (compare-and-set: decided once)
//   join_list              replacements signed up: "<id>@<incarnation>[.<try>],"...
//   join/<entry>/admitted  the generation a replacement was admitted to
//   dead/<id>              the launcher saw member id's process end (cleared when a replacement of
//                          id is admitted); dead/<id>@<incarnation>: which process of it
struct RecoveryState {
  bool on = false;
  std::string prefix;
  int64_t generation = 0;
  int64_t id = 0;
  std::vector<int64_t> members;

  std::string gen_key(const std::string& k) const { return prefix + "gen_" + std::to_string(generation) + "/" + k; }
  bool abort_seen(c10d::Store& s) const { return s.check({gen_key("abort")}); }
  std::string abort_reason(c10d::Store& s) const {
    auto v = s.get(gen_key("abort"));
    return std::string(v.begin(), v.end());
  }
  // A member of this generation (not this one) whose process the launcher saw end, or -1.
  int64_t dead_member(c10d::Store& s) const {
    for (int64_t m : members)
      if (m != id && s.check({prefix + "dead/" + std::to_string(m)})) return m;
    return -1;
  }
};

// What one collective is, for failure messages: captured when it is launched.
struct OpInfo {
  std::string op;    // all_reduce | all_gather | broadcast
  uint64_t seq = 0;  // the same on every rank for the same collective
  int64_t step = 0;
  std::string what;  // "grad bucket 2/5", "loss", ...
};

struct DistContext::Impl {
  int64_t rank = 0;
  std::string backend_name = "none";
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::atomic<bool> failed{false};
  double timeout_s = 300.0;
  RecoveryState rec;  // dist.recovery in_process: membership generations (dist_regroup.cpp)
  std::string key_ns;  // this attempt's store prefix (subgroups meet under <key_ns>group/...)
  // TRAINER_INJECT_KILL (fault injection for tests and drills): this process SIGKILLs itself just
  // before launching collective #seq, or right after its commit vote of step vote_step (1-based), or
  // just before casting the vote of step unvoted_step,
  // of the job's first generation, or at an engine moment (kill_point). "-1": not asked.
  struct KillAt {
    int64_t seq = -1, vote_step = -1, unvoted_step = -1;
    std::string moment;  // save | eval | share | grow: DistContext::kill_point, at `at`, in any generation
    int64_t at = -1;
    int64_t grows = 0;  // grow() calls so far (grow:N counts them)
  } kill;
  void die(const char* where, uint64_t n) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "TRAINER_INJECT_KILL: rank %lld SIGKILLs itself at %s %llu (unix time %.3f)\n",
                 static_cast<long long>(rank), where, static_cast<unsigned long long>(n), now);
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
  NetChoice net;

  // Watchdog: one blocking wait at a time is watched (waits happen on the training thread). A wait
  // that outlives timeout_s + kWatchdogMarginS means the backend itself did not time out: report
  // and end the process, since nothing else would.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool armed = false;
  std::chrono::steady_clock::time_point armed_at, deadline;
  std::string armed_text;
  bool stop_noticed = false;  // the notice below, said once per wait
  std::function<std::string()> stop_asked;  // DistContext::set_stop_query
  std::thread watchdog;

  std::string describe(const OpInfo& i) const {
    return "rank " + std::to_string(rank) + ": " + i.op + " #" + std::to_string(i.seq) +
           (i.what.empty() ? "" : " (" + i.what + ")") + " at step " + std::to_string(i.step);
  }

  void start_watchdog() {
    watchdog = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu);
      while (!stop) {
        const auto now = std::chrono::steady_clock::now();
        if (armed && now >= deadline) {
          std::fprintf(stderr, "error: %s did not finish within dist.timeout_s=%g s + %g s; giving up\n",
                       armed_text.c_str(), timeout_s, kWatchdogMarginS);
          std::fflush(stderr);
          std::_Exit(kExitFailure);
        }
        if (armed && !stop_noticed && stop_asked && now - armed_at >= kStopNoticeAfter) notice_stop(now);
        if (armed)
          cv.wait_until(lk, std::min(deadline, now + kWatchdogTick));
        else
          cv.wait(lk);
      }
    });
  }

  // A stop signal (preemption) while a wait stalls on a peer: the stop and its checkpoint need every
  // rank, so the wait goes on until dist.timeout_s. Said once, so that minutes of silence after
  // "saving a checkpoint at the next step boundary" have a reason on screen.
  void notice_stop(std::chrono::steady_clock::time_point now) {
    const std::string sig = stop_asked();
    if (sig.empty()) return;
    stop_noticed = true;
    const double waited = std::chrono::duration<double>(now - armed_at).count();
    std::fprintf(stderr,
                 "%s has waited %.0f s for its peers, and %s asks the run to stop: stopping (and the checkpoint it "
                 "saves) needs every rank, so this rank waits on, up to dist.timeout_s=%g s in all; past that the "
                 "run ends with an error and no new checkpoint (a peer hung or gone?)\n",
                 armed_text.c_str(), waited, sig.c_str(), timeout_s);
    std::fflush(stderr);
  }

  // One blocking wait is watched at a time (waits happen on the training thread).
  void arm(std::string text) {
    {
      std::lock_guard<std::mutex> lk(mu);
      armed = true;
      stop_noticed = false;
      armed_text = std::move(text);
      armed_at = std::chrono::steady_clock::now();
      deadline = armed_at + std::chrono::milliseconds(static_cast<int64_t>((timeout_s + kWatchdogMarginS) * 1000));
    }
    cv.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lk(mu);
    armed = false;
  }

  // arm() for its lifetime: disarmed however the wait ends.
  struct Watched {
    Impl& impl;
    Watched(Impl& i, std::string text) : impl(i) { impl.arm(std::move(text)); }
    ~Watched() { impl.disarm(); }
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;
  };

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const OpInfo& info) {
    const Watched watched(*this, describe(info));
    try {
      if (rec.on)
        wait_or_abandon(work, info);
      else
        work->wait();
    } catch (const DistError&) {
      failed = true;
      throw;
    } catch (const std::exception& e) {
      failed = true;
      throw DistError(describe(info) + " failed: " + error_text(e));
    }
  }

  // dist.recovery in_process: waits in short slices and gives up on the collective as soon as a peer
  // has announced a failure in the store (a rank whose neighbour in a ring died would otherwise wait
  // for a live peer that has already abandoned the step, until dist.timeout_s).
  void wait_or_abandon(const c10::intrusive_ptr<c10d::Work>& work, const OpInfo& info) {
    for (;;) {
      try {
        if (work->wait(kPollSlice)) return;
      } catch (const std::exception&) {
        // the slice ran out ("Operation timed out!"), or the collective failed; it may also have
        // completed just after the slice ran out: only a wait on a completed work tells
      }
      if (work->isCompleted()) {
        work->wait();  // throws the collective's own error, if any
        return;
      }
      if (rec.abort_seen(*store))
        throw DistError(describe(info) + " abandoned: a peer failed (" + rec.abort_reason(*store) + ")");
    }
  }

  // Launches one collective; a failure to launch is a DistError. `world`: one of the world's
  // collectives (their sequence numbers are the ones TRAINER_INJECT_KILL names); a subgroup's are not.
  template <typename Launch>
  c10::intrusive_ptr<c10d::Work> launch(const OpInfo& info, Launch&& fn, bool world = true) {
    if (world && rec.generation == 0 && kill.seq >= 0 && info.seq == static_cast<uint64_t>(kill.seq))
      die("collective", info.seq);
    try {
      return fn();
    } catch (const std::exception& e) {
      failed = true;
      throw DistError(describe(info) + " could not be launched: " + error_text(e));
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    if (failed) {
      // A broken process group may block forever in its destructor (worker threads stuck on a dead
      // peer): leak it, the process is about to exit with an error anyway.
      (void)backend.release();
      (void)store.release();
    }
  }
};

// A launched collective, waited for under the watchdog (Impl::wait).
class WorkOp : public AsyncOp {
 public:
  WorkOp(DistContext::Impl* impl, c10::intrusive_ptr<c10d::Work> work, OpInfo info)
      : impl_(impl), work_(std::move(work)), info_(std::move(info)) {}
  void wait() override {
    if (done_) return;
    impl_->wait(work_, info_);
    done_ = true;
  }

 private:
  DistContext::Impl* impl_;
  c10::intrusive_ptr<c10d::Work> work_;
  OpInfo info_;
  bool done_ = false;
};

// What an inactive group "launches": its result is there already.
class DoneOp : public AsyncOp {
 public:
  void wait() override {}
};

// Defined in dist_context.cpp: a Gloo process group of `world` ranks meeting in `store`.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                    int64_t world, const NetChoice& net, std::chrono::milliseconds timeout);

}  // namespace trainer::dist
