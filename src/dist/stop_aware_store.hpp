// A c10d store whose blocking waits give up when a stop signal came. A process group's constructor
// waits in the store for every rank's address (Gloo's full mesh; NCCL's unique id at its first
// collective) for dist.timeout_s: a rank whose peer died at start-up sat there deaf to SIGTERM until
// the launcher's grace period ended in SIGKILL (found from outside, 2026-12-06). Waits here look at
// the store and at the stop query in short slices; peers that have not come 5 s after a stop signal
// are taken as gone, and RendezvousStopped is thrown, which the run command turns into "stopped during
// start-up" (exit 75: nothing to save yet). Live peers meet within the 5 s and stop together at the
// first step boundary.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/dist_context.hpp"

namespace trainer::dist {

// A stop signal's name ("SIGTERM") when one came, else "": what the waits below ask. Set once by the
// command that runs training, before its process groups exist; unset: waits are not interrupted.
void set_rendezvous_stop_query(std::function<std::string()> query);

class RendezvousStopped : public DistError {
  using DistError::DistError;
};
// `e` is (or wraps, in its text: Gloo and NCCL rethrow what a store threw in their own types) a
// RendezvousStopped.
bool is_rendezvous_stop(const std::exception& e);

// A wait for the other ranks that ends on a stop signal: check() throws RendezvousStopped once a stop
// came 5 s ago or more (live peers meet within that and stop together at the first step boundary);
// `what` names what is awaited in the message.
class StopGrace {
 public:
  void check(const std::string& what);

 private:
  std::optional<std::chrono::steady_clock::time_point> seen_;
};

// The key (in a StopAwareStore's own store) whose value, once set, calls the meeting off: a rank that
// finds the job cannot meet (its ranks disagree on the world size) sets it, and every wait here then
// throws DistError with that value as its text instead of waiting out dist.timeout_s, having first added
// 1 to kMeetingOffReadKey (a store host that called it off waits for one reader before it ends).
inline const std::string kMeetingOffKey = "meeting_off";
inline const std::string kMeetingOffReadKey = "meeting_off_read";

class StopAwareStore final : public c10d::Store {
 public:
  explicit StopAwareStore(c10::intrusive_ptr<c10d::Store> inner);

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override { inner_->set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& value) override {
    return inner_->compareSet(key, current, value);
  }
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { wait_for(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    wait_for(keys, timeout);
  }
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  void append(const std::string& key, const std::vector<uint8_t>& value) override { inner_->append(key, value); }
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<std::vector<uint8_t>>& values) override {
    inner_->multiSet(keys, values);
  }
  bool hasExtendedApi() const override { return inner_->hasExtendedApi(); }

 private:
  // Returns once every key is set; throws RendezvousStopped on a stop signal, DistError after `timeout`
  // (0: none).
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::Store> inner_;
};

}  // namespace trainer::dist
