// pipeline::PeerLink over one process group (the pipeline dimension of the mesh, or the world):
// each message is a header (what it is: activation or gradient, stage, microbatch; dtype, shape)
// and then the tensor, and a receive checks the header against the action it expects, so a list
// out of step with its peer's is an error naming both, never a silent mix-up. A send is waited for
// at flush() (the executor's end of step: sends never block the list), a receive at once, both under
// the watchdog: a wait past dist.timeout_s is a DistError naming the action and the peer.
#pragma once

#include <torch/torch.h>

#include <memory>
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
  void flush() override;
  // a DistError (a send or receive that failed or timed out, a collective inside a stage) stays one
  [[noreturn]] void rethrow_with(const std::string& context) const override;

 private:
  Group& group_;
  std::vector<std::pair<std::shared_ptr<AsyncOp>, torch::Tensor>> pending_;  // sends in flight, their tensors kept
};

}  // namespace trainer::dist
