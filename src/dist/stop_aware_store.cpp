// StopAwareStore: stop_aware_store.hpp.
#include "dist/stop_aware_store.hpp"

#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

namespace trainer::dist {
namespace {

std::mutex g_mu;
std::function<std::string()> g_query;

std::string stop_asked() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_query ? g_query() : std::string();
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 3; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > 3) out += ", ...";
  return out;
}

}  // namespace

constexpr const char* kStopped = " received while this rank waited for the others to meet (";
constexpr std::chrono::seconds kStopGrace{5};  // under trainer launch's 10 s before its SIGKILL

bool is_rendezvous_stop(const std::exception& e) {
  return dynamic_cast<const RendezvousStopped*>(&e) != nullptr || std::string(e.what()).find(kStopped) != std::string::npos;
}

// Live peers that got the same signal are meeting too: they finish the meeting and stop together at
// the first step boundary. Leaving at once broke the meeting under a peer already connecting to this
// rank (Gloo's pairs wait dist.timeout_s); peers that do not come within the grace are gone.
void StopGrace::check(const std::string& what) {
  const auto sig = stop_asked();
  if (sig.empty()) return;
  if (!seen_) seen_ = std::chrono::steady_clock::now();
  if (std::chrono::steady_clock::now() - *seen_ >= kStopGrace)
    throw RendezvousStopped(sig + kStopped + what + "), and they did not come within " +
                            std::to_string(kStopGrace.count()) + " s of it: stopping before the first step");
}

void set_rendezvous_stop_query(std::function<std::string()> query) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_query = std::move(query);
}

StopAwareStore::StopAwareStore(c10::intrusive_ptr<c10d::Store> inner) : inner_(std::move(inner)) {
  timeout_ = inner_->getTimeout();
}

c10::intrusive_ptr<c10d::Store> StopAwareStore::clone() { return c10::make_intrusive<StopAwareStore>(inner_->clone()); }

std::vector<uint8_t> StopAwareStore::get(const std::string& key) {
  wait_for({key}, timeout_);
  return inner_->get(key);
}

std::vector<std::vector<uint8_t>> StopAwareStore::multiGet(const std::vector<std::string>& keys) {
  wait_for(keys, timeout_);
  return inner_->multiGet(keys);
}

void StopAwareStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  inner_->setTimeout(timeout);
}

void StopAwareStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  StopGrace grace;
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    if (inner_->check(keys)) return;
    if (inner_->check({kMeetingOffKey})) {
      const auto why = inner_->get(kMeetingOffKey);
      try {
        inner_->add(kMeetingOffReadKey, 1);
      } catch (const std::exception&) {  // its host has gone: the text is all that matters
      }
      throw DistError(std::string(why.begin(), why.end()));
    }
    grace.check(key_list(keys));
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (timeout.count() > 0 && waited >= timeout)
      throw DistError("waited " + std::to_string(waited.count() / 1000) + " s (dist.timeout_s) for the other ranks to "
                      "meet (" + key_list(keys) + "): a rank did not start, or died at start-up (its log says why)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace trainer::dist
