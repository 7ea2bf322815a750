#include "pipeline/validate.hpp"

#include <deque>
#include <map>
#include <set>
#include <utility>

namespace trainer::pipeline {

std::string Validation::summary() const {
  if (ok) return "legal";
  std::string s;
  for (const auto& e : errors) s += (s.empty() ? "" : "\n") + e;
  return s;
}

namespace {

std::string where(int64_t rank, size_t index, const Action& a) {
  return "rank " + std::to_string(rank) + ", action " + std::to_string(index) + " (" + describe(a) + ")";
}

// Pass 1: each action on its own: in range, on the rank of its stage, its peer the neighbour's rank.
std::string static_error(const Action& a, int64_t r, const PipelineShape& sh) {
  const int64_t S = sh.stages(), s = a.stage;
  if (s < 0 || s >= S || a.micro < 0 || a.micro >= sh.microbatches) return "stage or microbatch out of range";
  auto peer_is = [&](int64_t want) -> std::string {
    if (want == r) return "a message to its own rank";
    return a.peer == want ? "" : "its peer should be rank " + std::to_string(want);
  };
  switch (a.op) {
    case Op::SendActivation:  // feeds stage s's forward: sent by the rank of stage s - 1
      if (s == 0) return "nothing sends an activation to stage 0";
      if (sh.rank_of(s - 1) != r) return "stage " + std::to_string(s - 1) + " is not on this rank";
      return peer_is(sh.rank_of(s));
    case Op::RecvActivation:
      if (s == 0) return "stage 0 reads its input, not a message";
      if (sh.rank_of(s) != r) return "stage " + std::to_string(s) + " is not on this rank";
      return peer_is(sh.rank_of(s - 1));
    case Op::SendGrad:  // feeds stage s's backward: sent by the rank of stage s + 1
      if (s == S - 1) return "nothing sends a gradient to the last stage";
      if (sh.rank_of(s + 1) != r) return "stage " + std::to_string(s + 1) + " is not on this rank";
      return peer_is(sh.rank_of(s));
    case Op::RecvGrad:
      if (s == S - 1) return "the last stage starts its backward from the loss, not a message";
      if (sh.rank_of(s) != r) return "stage " + std::to_string(s) + " is not on this rank";
      return peer_is(sh.rank_of(s + 1));
    default:
      return sh.rank_of(s) == r ? "" : "stage " + std::to_string(s) + " runs on rank " + std::to_string(sh.rank_of(s));
  }
}

// Each (stage, micro): one forward, and one backward or one input half and one weight half.
void check_counts(const Program& prog, const PipelineShape& sh, Validation& v) {
  std::map<std::pair<int64_t, int64_t>, std::map<Op, int>> n;
  for (const auto& list : prog)
    for (const auto& a : list)
      if (is_compute(a.op)) ++n[{a.stage, a.micro}][a.op];
  for (int64_t s = 0; s < sh.stages(); ++s)
    for (int64_t m = 0; m < sh.microbatches; ++m) {
      auto c = n[{s, m}];
      const std::string at = "stage " + std::to_string(s) + " microbatch " + std::to_string(m) + ": ";
      if (c[Op::Forward] != 1) v.errors.push_back(at + std::to_string(c[Op::Forward]) + " forwards (want 1)");
      const bool whole = c[Op::Backward] == 1 && c[Op::BackwardInput] == 0 && c[Op::BackwardWeight] == 0;
      const bool halves = c[Op::Backward] == 0 && c[Op::BackwardInput] == 1 && c[Op::BackwardWeight] == 1;
      if (!whole && !halves)
        v.errors.push_back(at + std::to_string(c[Op::Backward]) + " backward, " + std::to_string(c[Op::BackwardInput]) +
                           " input half and " + std::to_string(c[Op::BackwardWeight]) +
                           " weight half (want one backward, or one of each half)");
    }
}

// Pass 2: runs the lists under the execution model until nothing moves.
class DryRun {
 public:
  DryRun(const Program& prog, const PipelineShape& sh) : prog_(prog), sh_(sh), pc_(prog.size(), 0) {}

  void run(Validation& v) {
    for (bool moved = true; moved && v.errors.empty();) {
      moved = false;
      for (size_t r = 0; r < prog_.size() && v.errors.empty(); ++r)
        while (pc_[r] < prog_[r].size() && v.errors.empty() && step(static_cast<int64_t>(r), v)) {
          ++pc_[r];
          moved = true;
        }
    }
    if (!v.errors.empty()) return;
    for (size_t r = 0; r < prog_.size(); ++r)
      if (pc_[r] < prog_[r].size()) {
        const auto& a = prog_[r][pc_[r]];
        v.errors.push_back("deadlock: " + where(static_cast<int64_t>(r), pc_[r], a) + " waits for " + waits_for(a) +
                           ", which never comes");
      }
    for (const auto& [ch, q] : channels_)
      if (!q.empty())
        v.errors.push_back("rank " + std::to_string(ch.first) + " sends " + std::to_string(q.size()) +
                           " message(s) rank " + std::to_string(ch.second) + " never receives, first " + describe(q.front()));
  }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (stage, micro)

  // Runs prog_[r][pc_[r]] when it can; false when it must wait. Records an error when it is wrong.
  bool step(int64_t r, Validation& v) {
    const Action& a = prog_[static_cast<size_t>(r)][pc_[static_cast<size_t>(r)]];
    const Key k{a.stage, a.micro};
    const int64_t S = sh_.stages();
    switch (a.op) {
      case Op::SendActivation:
      case Op::SendGrad: {
        const Key src = a.op == Op::SendActivation ? Key{a.stage - 1, a.micro} : Key{a.stage + 1, a.micro};
        const bool made = a.op == Op::SendActivation ? f_done_.count(src) : in_done_.count(src);
        if (!made) return false;  // sends what this rank computes later (a deadlock if never)
        channels_[{r, a.peer}].push_back(a);
        return true;
      }
      case Op::RecvActivation:
      case Op::RecvGrad: {
        auto& q = channels_[{a.peer, r}];
        if (q.empty()) return false;
        const Op want = a.op == Op::RecvActivation ? Op::SendActivation : Op::SendGrad;
        if (q.front().op != want || q.front().stage != a.stage || q.front().micro != a.micro) {
          v.errors.push_back(where(r, pc_[static_cast<size_t>(r)], a) + ": the next message from rank " +
                             std::to_string(a.peer) + " is " + describe(q.front()) + " (a send/receive pair out of order)");
          return false;
        }
        q.pop_front();
        (a.op == Op::RecvActivation ? act_in_ : grad_in_).insert(k);
        return true;
      }
      case Op::Forward:
        if (a.stage > 0 && !act_in_.count(k)) return false;
        f_done_.insert(k);
        if (a.stage + 1 < S && sh_.rank_of(a.stage + 1) == r) act_in_.insert({a.stage + 1, a.micro});
        return true;
      case Op::Backward:
      case Op::BackwardInput:
        if (!f_done_.count(k) || (a.stage < S - 1 && !grad_in_.count(k))) return false;
        in_done_.insert(k);
        if (a.stage > 0 && sh_.rank_of(a.stage - 1) == r) grad_in_.insert({a.stage - 1, a.micro});
        return true;
      case Op::BackwardWeight:
        return in_done_.count(k) > 0;
    }
    return false;
  }

  std::string waits_for(const Action& a) const {
    const std::string m = " m" + std::to_string(a.micro);
    switch (a.op) {
      case Op::RecvActivation:
      case Op::RecvGrad: return "a message from rank " + std::to_string(a.peer);
      case Op::SendActivation: return "its own F s" + std::to_string(a.stage - 1) + m;
      case Op::SendGrad: return "its own backward of s" + std::to_string(a.stage + 1) + m;
      case Op::Forward: return "the activation of s" + std::to_string(a.stage - 1) + m;
      case Op::BackwardWeight: return "its input half I s" + std::to_string(a.stage) + m;
      default: return "its forward and the gradient of s" + std::to_string(a.stage + 1) + m;
    }
  }

  const Program& prog_;
  const PipelineShape& sh_;
  std::vector<size_t> pc_;
  std::map<Key, std::deque<Action>> channels_;  // (from, to) -> messages posted, not yet received
  std::set<Key> act_in_, grad_in_;              // inputs present on their stage's rank
  std::set<Key> f_done_, in_done_;              // forwards, backwards (or input halves) done
};

}  // namespace

Validation validate(const Program& prog, const PipelineShape& sh) {
  Validation v;
  if (static_cast<int64_t>(prog.size()) != sh.ranks) {
    v.ok = false;
    v.errors.push_back(std::to_string(prog.size()) + " action lists for " + std::to_string(sh.ranks) + " ranks");
    return v;
  }
  for (size_t r = 0; r < prog.size(); ++r)
    for (size_t i = 0; i < prog[r].size(); ++i)
      if (auto e = static_error(prog[r][i], static_cast<int64_t>(r), sh); !e.empty())
        v.errors.push_back(where(static_cast<int64_t>(r), i, prog[r][i]) + ": " + e);
  if (v.errors.empty()) check_counts(prog, sh, v);
  if (v.errors.empty()) DryRun(prog, sh).run(v);
  v.ok = v.errors.empty();
  return v;
}

}  // namespace trainer::pipeline
