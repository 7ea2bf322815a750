// pipeline::PeerLink over one process group (the pipeline dimension of the mesh, or the world):
// each message is a header (what it is: activation or gradient, stage, microbatch; dtype, shape)
// and then the tensor, and a receive checks the header against the action it expects, so a list
// out of step with its peer's is an error naming both, never a silent mix-up. A send is waited for
// at flush() (the executor's end of step: sends never block the list), a receive at its action,
// both under the watchdog: a wait past dist.timeout_s is a DistError naming the action and the peer.
//
// Receiving ahead. Gloo moves a message's bytes only once both ends have posted it, so a receive
// posted at its action costs a round trip per message at the moment the data is needed. A payload
// can only be posted ahead when its size is known, and a step's messages have the shapes of the
// previous step's (the same microbatches). So each end keeps the shape each message (peer, kind,
// stage, microbatch) had last time, and both ends agree on it without asking: the sender's record
// of what it sent is the receiver's record of what it received.
//  - A message seen before whose shape is unchanged: its payload travels on tag 1, which prepost()
//    posts at the start of the step with the recorded shape (Gloo matches one peer's messages of
//    one tag first come, first served, and both ends order them by the action lists).
//  - A new message, or one whose shape changed (an evaluation's batch, a short last batch): its
//    payload travels on tag 2, posted once its header is read; a changed one also sends a
//    placeholder of the recorded size on tag 1, which the receive posted ahead takes and drops.
// NCCL matches a pair's messages in order whatever their tags: the same order holds there; its
// receives are not posted ahead (see prepost in the .cpp).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "dist/group.hpp"
#include "pipeline/executor.hpp"

namespace trainer::dist {

class AsyncOp;

class GroupPeerLink final : public pipeline::PeerLink {
 public:
  explicit GroupPeerLink(Group& group) : group_(group) {}
  void send(const torch::Tensor& t, int64_t peer, const pipeline::Action& what) override;
  torch::Tensor recv(int64_t peer, const pipeline::Action& what) override;
  void prepost(int64_t peer, const pipeline::Action& what) override;
  void flush() override;
  // a DistError (a send or receive that failed or timed out, a collective inside a stage) stays one
  [[noreturn]] void rethrow_with(const std::string& context) const override;

 private:
  using Key = std::tuple<int64_t, bool, int64_t, int64_t>;  // (peer, activation?, stage, microbatch)
  struct Shape {
    torch::ScalarType dtype = torch::kFloat32;
    std::vector<int64_t> sizes;
    bool operator==(const Shape&) const = default;
  };
  struct Incoming {  // one receive: its header, and its payload on tag 1 when posted ahead
    pipeline::Action what;
    torch::Tensor head, body;
    std::shared_ptr<AsyncOp> head_op, body_op;
  };
  static Key key_of(int64_t peer, const pipeline::Action& what);  // a send's or a receive's record
  Incoming post(int64_t peer, const pipeline::Action& what);  // the header, and the tag-1 payload if agreed
  torch::Tensor finish(int64_t peer, Incoming& in);           // reads the header, returns the payload

  Group& group_;
  std::vector<std::pair<std::shared_ptr<AsyncOp>, torch::Tensor>> pending_;  // sends in flight, their tensors kept
  std::map<int64_t, std::deque<Incoming>> incoming_;  // by peer: receives posted ahead, in action order
  std::map<Key, Shape> sent_, received_;              // each message's shape the last time it went
};

}  // namespace trainer::dist
