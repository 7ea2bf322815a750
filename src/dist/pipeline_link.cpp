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
constexpr int64_t kHeader = 7 + kMaxDims;  // magic, kind, stage, micro, route, dtype, ndim, sizes
constexpr int kHeaderTag = 0, kAgreedTag = 1, kNewTag = 2;
// where a message's payload travels (the header's route field)
constexpr int64_t kSame = 1;     // tag 1, the shape both ends recorded for it
constexpr int64_t kNew = 2;      // tag 2: a message not sent before
constexpr int64_t kChanged = 3;  // a placeholder of the recorded size on tag 1, then the payload on tag 2

bool is_activation(Op op) { return op == Op::SendActivation || op == Op::RecvActivation; }

std::string message_name(bool activation, int64_t stage, int64_t micro) {
  return std::string(activation ? "activation" : "gradient") + " for stage " + std::to_string(stage) + " microbatch " +
         std::to_string(micro);
}

}  // namespace

void GroupPeerLink::send(const torch::Tensor& t, int64_t peer, const Action& what) {
  if (t.dim() > kMaxDims) throw std::invalid_argument("pipeline: a message of more than 10 dimensions");
  const Key key = key_of(peer, what);
  const Shape now{t.scalar_type(), t.sizes().vec()};
  const auto last = sent_.find(key);
  const int64_t route = last == sent_.end() ? kNew : last->second == now ? kSame : kChanged;
  auto header = torch::zeros({kHeader}, torch::kInt64);
  auto* h = header.data_ptr<int64_t>();
  h[0] = kMagic;
  h[1] = is_activation(what.op) ? 1 : 0;
  h[2] = what.stage;
  h[3] = what.micro;
  h[4] = route;
  h[5] = static_cast<int64_t>(t.scalar_type());
  h[6] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[7 + d] = t.size(d);
  const std::string label = pipeline::describe(what);
  auto post = [&](torch::Tensor x, int tag) { pending_.emplace_back(group_.send_async(x, peer, tag, label), x); };
  post(header.to(group_.device()), kHeaderTag);
  if (route == kChanged)  // what the peer's receive posted ahead expects: taken and dropped there
    post(torch::zeros(last->second.sizes, torch::TensorOptions().dtype(last->second.dtype).device(group_.device())),
         kAgreedTag);
  post(t.detach().to(group_.device()).contiguous(), route == kSame ? kAgreedTag : kNewTag);
  sent_[key] = now;
}

GroupPeerLink::Key GroupPeerLink::key_of(int64_t peer, const Action& what) {
  return {peer, is_activation(what.op), what.stage, what.micro};
}

GroupPeerLink::Incoming GroupPeerLink::post(int64_t peer, const Action& what) {
  const std::string label = pipeline::describe(what);
  const auto device = group_.device();
  Incoming in;
  in.what = what;
  in.head = torch::empty({kHeader}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  in.head_op = group_.recv_async(in.head, peer, kHeaderTag, label);
  const auto last = received_.find(key_of(peer, what));
  if (last != received_.end()) {  // sent before: a payload (or a placeholder) of that shape comes on tag 1
    in.body = torch::empty(last->second.sizes, torch::TensorOptions().dtype(last->second.dtype).device(device));
    in.body_op = group_.recv_async(in.body, peer, kAgreedTag, label);
  }
  return in;
}

torch::Tensor GroupPeerLink::finish(int64_t peer, Incoming& in) {
  const Action& what = in.what;
  const std::string label = pipeline::describe(what);
  in.head_op->wait();
  const auto header = in.head.cpu();
  const auto* h = header.data_ptr<int64_t>();
  const bool act = is_activation(what.op);
  if (h[0] != kMagic || h[4] < kSame || h[4] > kChanged || h[6] < 0 || h[6] > kMaxDims)
    throw std::runtime_error("pipeline: at " + label + " the message from rank " + std::to_string(peer) +
                             " is not a pipeline header");
  if ((h[1] == 1) != act || h[2] != what.stage || h[3] != what.micro)
    throw std::runtime_error("pipeline: at " + label + " the next message from rank " + std::to_string(peer) + " is the " +
                             message_name(h[1] == 1, h[2], h[3]) + ", not the " + message_name(act, what.stage, what.micro));
  const Shape shape{static_cast<torch::ScalarType>(h[5]), std::vector<int64_t>(h + 7, h + 7 + h[6])};
  const Key key = key_of(peer, what);
  const bool agreed = received_.count(key) > 0;
  if ((h[4] == kNew) == agreed)  // the two ends' records of this message differ: a bug, never a guess
    throw std::logic_error("pipeline: at " + label + " rank " + std::to_string(peer) + " and this rank disagree on whether " +
                           message_name(act, what.stage, what.micro) + " was sent before");
  received_[key] = shape;
  if (h[4] == kSame) {
    in.body_op->wait();
    return in.body;
  }
  if (h[4] == kChanged) in.body_op->wait();  // the placeholder: dropped
  auto body = torch::empty(shape.sizes, torch::TensorOptions().dtype(shape.dtype).device(group_.device()));
  group_.recv_async(body, peer, kNewTag, label)->wait();
  return body;
}

void GroupPeerLink::prepost(int64_t peer, const Action& what) {
  // Gloo only: NCCL runs a pair's point-to-point operations in one stream's order, so a receive
  // posted ahead would hold back this rank's later sends to that peer, which the peer's own receive
  // posted ahead waits for: a deadlock. There each receive is posted at its action.
  if (!group_.device().is_cpu()) return;
  incoming_[peer].push_back(post(peer, what));
}

torch::Tensor GroupPeerLink::recv(int64_t peer, const Action& what) {
  auto& queue = incoming_[peer];
  if (queue.empty()) {
    Incoming in = post(peer, what);
    return finish(peer, in);
  }
  if (!(queue.front().what == what))
    throw std::logic_error("pipeline: the receive " + pipeline::describe(what) + " from rank " + std::to_string(peer) +
                           " comes before the one posted ahead for it (" + pipeline::describe(queue.front().what) + ")");
  Incoming in = std::move(queue.front());
  queue.pop_front();
  return finish(peer, in);
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
  for (const auto& [peer, queue] : incoming_)
    if (!queue.empty())
      throw std::logic_error("pipeline: " + std::to_string(queue.size()) + " receive(s) from rank " + std::to_string(peer) +
                             " posted ahead were never taken (the first: " + pipeline::describe(queue.front().what) + ")");
}

}  // namespace trainer::dist
