#include "pipeline/timeline.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace trainer::pipeline {

namespace {

int64_t cost(Op op) { return op == Op::Backward ? 2 : 1; }

struct Message {
  Action action;
  int64_t time = 0;  // when it was posted
};

}  // namespace

Timeline simulate(const Program& prog, const PipelineShape& sh) {
  const size_t P = prog.size();
  Timeline t;
  t.ranks.resize(P);
  t.peak_activations.assign(P, 0);
  std::vector<size_t> pc(P, 0);
  std::vector<int64_t> now(P, 0), held(P, 0);
  std::map<std::pair<size_t, size_t>, std::deque<Message>> channels;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < P; ++r)
      for (; pc[r] < prog[r].size(); ++pc[r], moved = true) {
        const Action& a = prog[r][pc[r]];
        if (a.op == Op::SendActivation || a.op == Op::SendGrad) {
          channels[{r, static_cast<size_t>(a.peer)}].push_back({a, now[r]});
        } else if (a.op == Op::RecvActivation || a.op == Op::RecvGrad) {
          auto& q = channels[{static_cast<size_t>(a.peer), r}];
          if (q.empty()) break;  // its sender has not got there yet
          now[r] = std::max(now[r], q.front().time);
          q.pop_front();
        } else {
          t.ranks[r].push_back({a, now[r], now[r] + cost(a.op)});
          now[r] += cost(a.op);
          // a forward's activations stay until its backward (zero bubble: until the weight half)
          if (a.op == Op::Forward) t.peak_activations[r] = std::max(t.peak_activations[r], ++held[r]);
          if (a.op == Op::Backward || a.op == Op::BackwardWeight) --held[r];
        }
      }
  }
  int64_t busy = 0;
  for (size_t r = 0; r < P; ++r) {
    if (pc[r] < prog[r].size()) throw std::logic_error("pipeline timeline: rank " + std::to_string(r) + " waits forever at " +
                                                       describe(prog[r][pc[r]]) + " (validate the schedule first)");
    t.makespan = std::max(t.makespan, now[r]);
    for (const auto& s : t.ranks[r]) busy += s.end - s.start;
  }
  const double total = static_cast<double>(P) * static_cast<double>(t.makespan);
  t.bubble = total > 0 ? 1.0 - static_cast<double>(busy) / total : 0.0;
  return t;
}

std::string render(const Timeline& t, const PipelineShape& sh, int64_t max_width) {
  std::string out;
  const int64_t width = std::min(t.makespan, max_width);
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::string row(static_cast<size_t>(2 * width), '.');
    for (const auto& s : t.ranks[r]) {
      char letter = op_name(s.action.op)[0];
      if ((s.action.stage / sh.ranks) % 2 == 1) letter = static_cast<char>(std::tolower(letter));
      for (int64_t u = s.start; u < s.end && u < width; ++u) {
        row[static_cast<size_t>(2 * u)] = letter;
        row[static_cast<size_t>(2 * u + 1)] = static_cast<char>('0' + s.action.micro % 10);
      }
    }
    out += fmt::format("  rank {:>2} |{}{}| peak activations {}\n", r, row, t.makespan > width ? "..." : "",
                       t.peak_activations[r]);
  }
  out += fmt::format("  {} units of one forward; bubble {:.1f} % of rank-time", t.makespan, 100.0 * t.bubble);
  return out;
}

}  // namespace trainer::pipeline
