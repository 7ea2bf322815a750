#include "dist/pipeline_link.hpp"

#include <stdexcept>
#include <string>

#include "dist/dist_context.hpp"

namespace trainer::dist {

namespace {

using pipeline::Action;
using pipeline::Op;

constexpr int64_t kMagic = 0x7069706531LL;  // "pipe1": a header, not a stray payload
constexpr int64_t kMaxDims = 10;
constexpr int64_t kHeader = 6 + kMaxDims;  // magic, kind, stage, micro, dtype, ndim, sizes
constexpr int kHeaderTag = 0, kPayloadTag = 1;

bool is_activation(Op op) { return op == Op::SendActivation || op == Op::RecvActivation; }

std::string message_name(bool activation, int64_t stage, int64_t micro) {
  return std::string(activation ? "activation" : "gradient") + " for stage " + std::to_string(stage) + " microbatch " +
         std::to_string(micro);
}

}  // namespace

void GroupPeerLink::send(const torch::Tensor& t, int64_t peer, const Action& what) {
  if (t.dim() > kMaxDims) throw std::invalid_argument("pipeline: a message of more than 10 dimensions");
  auto header = torch::zeros({kHeader}, torch::kInt64);
  auto* h = header.data_ptr<int64_t>();
  h[0] = kMagic;
  h[1] = is_activation(what.op) ? 1 : 0;
  h[2] = what.stage;
  h[3] = what.micro;
  h[4] = static_cast<int64_t>(t.scalar_type());
  h[5] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[6 + d] = t.size(d);
  const std::string label = pipeline::describe(what);
  auto head = header.to(group_.device());
  auto body = t.detach().to(group_.device()).contiguous();
  pending_.emplace_back(group_.send_async(head, peer, kHeaderTag, label), head);
  pending_.emplace_back(group_.send_async(body, peer, kPayloadTag, label), body);
}

torch::Tensor GroupPeerLink::recv(int64_t peer, const Action& what) {
  const std::string label = pipeline::describe(what);
  auto head = torch::empty({kHeader}, torch::TensorOptions().dtype(torch::kInt64).device(group_.device()));
  group_.recv_async(head, peer, kHeaderTag, label)->wait();
  const auto header = head.cpu();
  const auto* h = header.data_ptr<int64_t>();
  const bool act = is_activation(what.op);
  if (h[0] != kMagic || h[5] < 0 || h[5] > kMaxDims)
    throw std::runtime_error("pipeline: at " + label + " the message from rank " + std::to_string(peer) +
                             " is not a pipeline header");
  if ((h[1] == 1) != act || h[2] != what.stage || h[3] != what.micro)
    throw std::runtime_error("pipeline: at " + label + " the next message from rank " + std::to_string(peer) + " is the " +
                             message_name(h[1] == 1, h[2], h[3]) + ", not the " + message_name(act, what.stage, what.micro));
  std::vector<int64_t> sizes(h + 6, h + 6 + h[5]);
  auto body = torch::empty(sizes, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(h[4])).device(group_.device()));
  group_.recv_async(body, peer, kPayloadTag, label)->wait();
  return body;
}

void GroupPeerLink::rethrow_with(const std::string& context) const {
  try {
    throw;
  } catch (const DistError& e) {
    throw DistError(context + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(context + e.what());
  }
}

void GroupPeerLink::flush() {
  for (auto& [op, keep] : pending_) op->wait();
  pending_.clear();
}

}  // namespace trainer::dist
