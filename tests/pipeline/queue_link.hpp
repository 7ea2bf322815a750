// The ranks of a pipeline as threads of one process: per-pair queues with a timeout, what a dist
// PeerLink does over c10d (tests of the executor, with an MLP and with the model families' stages).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/executor.hpp"

namespace trainer::test {

using pipeline::Action;
using pipeline::Op;
using pipeline::PeerLink;
using pipeline::PipelineStuck;
using pipeline::describe;

// Queues between the ranks of one process: what a dist PeerLink does over c10d, with a timeout.
class Mailboxes {
 public:
  void put(int64_t from, int64_t to, torch::Tensor t, const Action& what) {
    std::lock_guard<std::mutex> lock(mu_);
    q_[{from, to}].push_back({what, t.clone()});  // a send copies: the sender may reuse its tensor
    cv_.notify_all();
  }
  torch::Tensor get(int64_t from, int64_t to, const Action& what, double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = q_[{from, to}];
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !q.empty(); }))
      throw PipelineStuck("pipeline rank " + std::to_string(to) + " waited " + std::to_string(timeout_s) + " s at " +
                          describe(what));
    auto [sent, t] = q.front();
    q.pop_front();
    const bool act = what.op == Op::RecvActivation;
    if (sent.op != (act ? Op::SendActivation : Op::SendGrad) || sent.stage != what.stage || sent.micro != what.micro)
      throw std::runtime_error("pipeline rank " + std::to_string(to) + " at " + describe(what) + " received the message of " +
                               describe(sent));
    return t;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, int64_t>, std::deque<std::pair<Action, torch::Tensor>>> q_;
};

class QueueLink final : public PeerLink {
 public:
  QueueLink(Mailboxes& box, int64_t rank, double timeout_s) : box_(box), rank_(rank), timeout_s_(timeout_s) {}
  void send(const torch::Tensor& t, int64_t peer, const Action& what) override { box_.put(rank_, peer, t, what); }
  torch::Tensor recv(int64_t peer, const Action& what) override { return box_.get(peer, rank_, what, timeout_s_); }
  void flush() override {}

 private:
  Mailboxes& box_;
  int64_t rank_;
  double timeout_s_;
};

}  // namespace trainer::test
