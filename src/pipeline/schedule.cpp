#include "pipeline/schedule.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <optional>
#include <stdexcept>

namespace trainer::pipeline {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
    case Schedule::Interleaved1F1B: return "interleaved_1f1b";
    case Schedule::ZeroBubble: return "zero_bubble";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Forward: return "F";
    case Op::Backward: return "B";
    case Op::BackwardInput: return "I";
    case Op::BackwardWeight: return "W";
    case Op::SendActivation: return "send_act";
    case Op::RecvActivation: return "recv_act";
    case Op::SendGrad: return "send_grad";
    case Op::RecvGrad: return "recv_grad";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::Forward || op == Op::Backward || op == Op::BackwardInput || op == Op::BackwardWeight;
}

std::string describe(const Action& a) {
  std::string s = std::string(op_name(a.op)) + " s" + std::to_string(a.stage) + " m" + std::to_string(a.micro);
  if (a.op == Op::SendActivation || a.op == Op::SendGrad) s += " to rank " + std::to_string(a.peer);
  if (a.op == Op::RecvActivation || a.op == Op::RecvGrad) s += " from rank " + std::to_string(a.peer);
  return s;
}

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// The order a rank takes its (stage, micro) pairs in, forward and backward. Without interleaving:
// microbatch order. Interleaved (Megatron): microbatches in groups of P, each group through the
// rank's stages in model order forward and in reverse order backward; the last group may be short.
std::vector<std::pair<int64_t, int64_t>> pair_order(const PipelineShape& sh, int64_t rank, bool backward) {
  const int64_t P = sh.ranks, M = sh.microbatches, v = sh.virtual_stages;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t g = 0; g < M; g += P)
    for (int64_t k = 0; k < v; ++k) {
      const int64_t chunk = backward ? v - 1 - k : k;
      for (int64_t m = g; m < std::min(g + P, M); ++m) out.emplace_back(chunk * P + rank, m);
    }
  return out;
}

// Simulates the schedule's rule at unit costs (F 1, B 2 = I 1 + W 1) over the real dependencies:
// an idle rank starts the action its rule picks among those whose inputs are complete. The order
// each rank started its actions in is the schedule.
class RuleSim {
 public:
  RuleSim(Schedule kind, const PipelineShape& sh) : kind_(kind), sh_(sh), S_(sh.stages()), M_(sh.microbatches) {
    const auto n = static_cast<size_t>(S_ * M_);
    f_.assign(n, kNever);
    b_.assign(n, kNever);
    w_.assign(n, kNever);
    for (int64_t r = 0; r < sh.ranks; ++r) ranks_.push_back(RankState{pair_order(sh, r, false), pair_order(sh, r, true)});
  }

  Program run() {
    Program out(static_cast<size_t>(sh_.ranks));
    const int64_t per_pair = split() ? 3 : 2;  // F, B or F, I, W
    int64_t left = S_ * M_ * per_pair;
    const int64_t bound = 4 * S_ * M_ * 3 + 16;  // far past any schedule's length: a stalled rule
    for (int64_t t = 0; left > 0; ++t) {
      if (t > bound) throw std::logic_error(std::string("pipeline schedule ") + schedule_name(kind_) + ": its rule stalled");
      bool started = false, busy = false;
      for (int64_t r = 0; r < sh_.ranks; ++r) {
        auto& st = ranks_[static_cast<size_t>(r)];
        if (st.busy_until > t) {
          busy = true;
          continue;
        }
        if (auto a = pick(r, t)) {
          out[static_cast<size_t>(r)].push_back(*a);
          --left;
          started = true;
        }
      }
      // Every rank idle and none can start its rule's next action: the fixed interleaved order
      // waits in a circle (it can, when M is not a multiple of P). Those ranks then take a ready
      // backward, else a ready forward, until one of them can follow the order again.
      if (relaxed_ && !started && !busy)
        throw std::logic_error(std::string("pipeline schedule ") + schedule_name(kind_) + ": no action can start");
      relaxed_ = !started && !busy && left > 0;
      if (relaxed_) --t;  // the same instant again, relaxed
    }
    return out;
  }

 private:
  struct RankState {
    std::vector<std::pair<int64_t, int64_t>> fwd, bwd;  // the rank's pair orders
    size_t fi = 0, bi = 0;                               // next forward / backward in those orders
    std::vector<std::pair<int64_t, int64_t>> pending_w;  // zero bubble: I done, W not started
    int64_t busy_until = 0, in_flight = 0;  // activations held: F started, B (zero bubble: W) not
    bool backward_next = false;             // interleaved, after the warm-up: F and B alternate
  };

  bool split() const { return kind_ == Schedule::ZeroBubble; }
  size_t at(int64_t s, int64_t m) const { return static_cast<size_t>(s * M_ + m); }
  bool f_ready(int64_t s, int64_t m, int64_t t) const { return s == 0 || f_[at(s - 1, m)] <= t; }
  bool b_ready(int64_t s, int64_t m, int64_t t) const {
    return f_[at(s, m)] <= t && (s == S_ - 1 || b_[at(s + 1, m)] <= t);
  }
  // the most activations rank r may hold (forwards whose backward, zero bubble: weight half, has
  // not started). 1F1B: P - r. Zero bubble (ZB-H1): P on every rank, the most 1F1B holds on any
  // rank, so the later ranks may put weight halves off and pass input gradients on at once.
  int64_t cap(int64_t r) const {
    switch (kind_) {
      case Schedule::GPipe: return kNever;
      case Schedule::ZeroBubble: return sh_.ranks;
      default: return sh_.ranks - r;
    }
  }
  // Interleaved 1F1B (Megatron): rank r runs this many forwards first, then one forward and one
  // backward in turn, then the backwards left.
  size_t warmup(int64_t r) const {
    const int64_t P = sh_.ranks, v = sh_.virtual_stages;
    return static_cast<size_t>(std::min(M_ * v, (P - r - 1) * 2 + (v - 1) * P));
  }

  std::optional<Action> take_backward(RankState& st, int64_t t) {
    const auto [s, m] = st.bwd[st.bi++];
    const int64_t cost = split() ? 1 : 2;
    b_[at(s, m)] = t + cost;
    if (split()) {
      st.pending_w.emplace_back(s, m);
      return start(Op::BackwardInput, s, m, t, cost, st);
    }
    --st.in_flight;
    return start(Op::Backward, s, m, t, cost, st);
  }
  std::optional<Action> take_forward(RankState& st, int64_t t) {
    const auto [s, m] = st.fwd[st.fi++];
    f_[at(s, m)] = t + 1;
    ++st.in_flight;
    return start(Op::Forward, s, m, t, 1, st);
  }

  Action start(Op op, int64_t s, int64_t m, int64_t t, int64_t cost, RankState& st) {
    st.busy_until = t + cost;
    return Action{op, s, m};
  }

  std::optional<Action> pick(int64_t r, int64_t t) {
    auto& st = ranks_[static_cast<size_t>(r)];
    const bool f_left = st.fi < st.fwd.size(), b_left = st.bi < st.bwd.size();
    const bool next_b = b_left && b_ready(st.bwd[st.bi].first, st.bwd[st.bi].second, t);
    const bool next_f = f_left && f_ready(st.fwd[st.fi].first, st.fwd[st.fi].second, t);
    if (kind_ == Schedule::Interleaved1F1B && relaxed_) {
      if (next_b) return take_backward(st, t);
      if (next_f) return take_forward(st, t);
      return std::nullopt;
    }
    if (kind_ == Schedule::Interleaved1F1B) {  // a fixed order: it waits for what comes next
      if (st.fi < warmup(r) || (!st.backward_next && f_left)) {
        if (!next_f) return std::nullopt;
        st.backward_next = st.fi >= warmup(r);
        return take_forward(st, t);
      }
      if (!next_b) return std::nullopt;
      st.backward_next = false;
      return take_backward(st, t);
    }
    // GPipe: every forward first; the others: a ready backward first, a forward while under the cap
    if (next_b && (kind_ != Schedule::GPipe || !f_left)) return take_backward(st, t);
    if (next_f && st.in_flight < cap(r)) return take_forward(st, t);
    if (split() && !st.pending_w.empty()) {  // zero bubble: a weight gradient fills the idle slot
      const auto [s, m] = st.pending_w.front();
      st.pending_w.erase(st.pending_w.begin());
      w_[at(s, m)] = t + 1;
      --st.in_flight;
      return start(Op::BackwardWeight, s, m, t, 1, st);
    }
    return std::nullopt;
  }

  Schedule kind_;
  PipelineShape sh_;
  int64_t S_, M_;
  std::vector<int64_t> f_, b_, w_;  // completion time per (stage, micro) in the simulation
  std::vector<RankState> ranks_;
  bool relaxed_ = false;  // see run()
};

void check_shape(Schedule kind, const PipelineShape& sh) {
  if (sh.ranks < 1 || sh.microbatches < 1 || sh.virtual_stages < 1)
    throw std::invalid_argument("pipeline: ranks, microbatches and virtual stages must each be at least 1");
  if (sh.virtual_stages > 1 && kind != Schedule::Interleaved1F1B)
    throw std::invalid_argument(std::string("pipeline: virtual stages > 1 need the interleaved_1f1b schedule, not ") +
                                schedule_name(kind));
}

}  // namespace

Program compute_order(Schedule kind, const PipelineShape& shape) {
  check_shape(kind, shape);
  return RuleSim(kind, shape).run();
}

namespace {

// A message a compute produces for another rank (an activation for the next stage, a gradient for
// the previous one), if any, as the send action.
std::vector<Action> produced(const Action& a, int64_t rank, const PipelineShape& sh) {
  const int64_t s = a.stage, m = a.micro, S = sh.stages();
  std::vector<Action> out;
  if (a.op == Op::Forward && s < S - 1 && sh.rank_of(s + 1) != rank) out.push_back({Op::SendActivation, s + 1, m, sh.rank_of(s + 1)});
  if ((a.op == Op::Backward || a.op == Op::BackwardInput) && s > 0 && sh.rank_of(s - 1) != rank)
    out.push_back({Op::SendGrad, s - 1, m, sh.rank_of(s - 1)});
  return out;
}

// The receive a compute needs first, if any.
std::vector<Action> needed(const Action& a, int64_t rank, const PipelineShape& sh) {
  const int64_t s = a.stage, m = a.micro, S = sh.stages();
  std::vector<Action> out;
  if (a.op == Op::Forward && s > 0 && sh.rank_of(s - 1) != rank) out.push_back({Op::RecvActivation, s, m, sh.rank_of(s - 1)});
  if ((a.op == Op::Backward || a.op == Op::BackwardInput) && s < S - 1 && sh.rank_of(s + 1) != rank)
    out.push_back({Op::RecvGrad, s, m, sh.rank_of(s + 1)});
  return out;
}

// (kind, stage, micro) of a message, the same on its send and its receive
std::tuple<bool, int64_t, int64_t> message_key(const Action& a) {
  return {a.op == Op::SendActivation || a.op == Op::RecvActivation, a.stage, a.micro};
}

}  // namespace

Program with_messages(const Program& compute, const PipelineShape& sh) {
  const auto P = static_cast<int64_t>(compute.size());
  // Receives go right before the compute that reads them. Between two ranks messages arrive in the
  // order they were sent (NCCL and Gloo pair them so), so each rank sends a peer its messages in the
  // order the peer receives them: a message waits, after the compute that made it, until every
  // message the peer takes before it has been made too. A send never blocks, so the wait only
  // moves a send later, after messages the peer needs first anyway: no new wait between ranks.
  Program out(compute.size());
  std::map<std::tuple<bool, int64_t, int64_t>, size_t> taken_at;  // message -> its receive's index on the peer
  size_t receives = 0;  // counts along each rank's list: the order within one peer's channel
  for (int64_t r = 0; r < P; ++r)
    for (const auto& a : compute[static_cast<size_t>(r)])
      for (const auto& recv : needed(a, r, sh)) taken_at[message_key(recv)] = receives++;
  for (int64_t r = 0; r < P; ++r) {
    const auto& list = compute[static_cast<size_t>(r)];
    // per peer: the messages for it in the peer's receive order, with the compute that made each
    std::map<int64_t, std::vector<std::pair<size_t, std::pair<size_t, Action>>>> for_peer;
    for (size_t i = 0; i < list.size(); ++i)
      for (const auto& send : produced(list[i], r, sh)) for_peer[send.peer].push_back({taken_at.at(message_key(send)), {i, send}});
    std::vector<std::vector<Action>> after(list.size());  // sends released after compute i
    for (auto& [peer, msgs] : for_peer) {
      std::sort(msgs.begin(), msgs.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      size_t release = 0;
      for (const auto& [order, made] : msgs) {
        release = std::max(release, made.first);
        after[release].push_back(made.second);
      }
    }
    auto& dst = out[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      for (const auto& recv : needed(list[i], r, sh)) dst.push_back(recv);
      dst.push_back(list[i]);
      for (const auto& send : after[i]) dst.push_back(send);
    }
  }
  return out;
}

Program make_schedule(Schedule kind, const PipelineShape& shape) {
  return with_messages(compute_order(kind, shape), shape);
}

}  // namespace trainer::pipeline
