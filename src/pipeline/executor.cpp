#include "pipeline/executor.hpp"

namespace trainer::pipeline {

namespace {

torch::Tensor take(std::map<std::pair<int64_t, int64_t>, torch::Tensor>& from, std::pair<int64_t, int64_t> k,
                   const char* what) {
  auto it = from.find(k);
  if (it == from.end())
    throw std::logic_error(std::string("its ") + what + " is not here (the action list is out of order)");
  auto t = std::move(it->second);
  from.erase(it);
  return t;
}

// an activation that arrives becomes the stage's leaf input, so its gradient can go back
torch::Tensor as_input(torch::Tensor t) {
  t = t.detach();
  if (t.is_floating_point()) t.requires_grad_(true);
  return t;
}

}  // namespace

Executor::Executor(const PipelineShape& shape, int64_t rank, std::vector<StageFn> stages, PeerLink& link)
    : shape_(shape), rank_(rank), stages_(std::move(stages)), link_(link) {
  for (const auto& st : stages_)
    if (shape_.rank_of(st.stage) != rank_)
      throw std::invalid_argument("pipeline: stage " + std::to_string(st.stage) + " runs on rank " +
                                  std::to_string(shape_.rank_of(st.stage)) + ", not on rank " + std::to_string(rank_));
}

const StageFn& Executor::stage(int64_t s) const {
  for (const auto& st : stages_)
    if (st.stage == s) return st;
  throw std::logic_error("stage " + std::to_string(s) + " is not on this rank");
}

void Executor::forward(const Action& a, const std::function<torch::Tensor(int64_t)>& input, StepResult& out) {
  const Key k{a.stage, a.micro};
  torch::Tensor in = a.stage == 0 ? input(a.micro) : take(act_in_, k, "input activation");
  torch::Tensor y = stage(a.stage).forward(in, a.micro);
  if (a.stage == shape_.stages() - 1) {  // the loss of the microbatch; the step's loss is their mean
    const auto l = y.detach().to(torch::kFloat64).reshape({});
    out.loss_sum = out.loss_sum.defined() ? out.loss_sum + l : l;
    ++out.losses;
    y = y / static_cast<double>(shape_.microbatches);
    if (loss_scale_.defined()) y = y * loss_scale_.to(y.dtype()).reshape({});  // LossScaler::scale_loss's order
  } else if (shape_.rank_of(a.stage + 1) == rank_) {
    act_in_[{a.stage + 1, a.micro}] = as_input(y);
  } else {
    act_out_[{a.stage + 1, a.micro}] = y.detach();
  }
  saved_[k] = Saved{in, y};
}

torch::Tensor Executor::output_grad(const Action& a) {
  if (a.stage == shape_.stages() - 1) return {};  // the loss: d loss / d loss = 1
  return take(grad_in_, {a.stage, a.micro}, "output gradient");
}

void Executor::backward(const Action& a, bool input_half_only) {
  const Key k{a.stage, a.micro};
  auto it = saved_.find(k);
  if (it == saved_.end()) throw std::logic_error("its forward has not run");
  const Saved& sv = it->second;
  const torch::Tensor g = output_grad(a);
  if (!sv.output.requires_grad()) {
    // no graph: the first stage with every parameter frozen (train.freeze) and an input that takes no
    // gradient: nothing to compute and nothing to send back
    if (input_half_only)
      grad_of_output_[k] = g;
    else
      saved_.erase(it);
    return;
  }
  const std::vector<torch::Tensor> grads = g.defined() ? std::vector<torch::Tensor>{g} : std::vector<torch::Tensor>{};
  const bool wants_input_grad = sv.input.requires_grad();
  torch::Tensor gin;
  if (input_half_only) {
    if (wants_input_grad)
      gin = torch::autograd::grad({sv.output}, {sv.input}, grads, /*retain_graph=*/true)[0];
    grad_of_output_[k] = g;  // the weight half runs the same graph from the same gradient
  } else {
    torch::autograd::backward({sv.output}, grads);
    if (wants_input_grad) gin = sv.input.grad();
    saved_.erase(it);
  }
  if (a.stage == 0 || !gin.defined()) return;
  if (shape_.rank_of(a.stage - 1) == rank_)
    grad_in_[{a.stage - 1, a.micro}] = gin;
  else
    grad_out_[{a.stage - 1, a.micro}] = gin;
}

void Executor::weight_half(const Action& a) {
  const Key k{a.stage, a.micro};
  auto it = saved_.find(k);
  if (it == saved_.end() || !grad_of_output_.count(k)) throw std::logic_error("its input half has not run");
  const torch::Tensor g = grad_of_output_.at(k);
  const auto& params = stage(a.stage).params;
  if (!params.empty() && it->second.output.requires_grad())
    torch::autograd::backward({it->second.output}, g.defined() ? std::vector<torch::Tensor>{g} : std::vector<torch::Tensor>{},
                              /*retain_graph=*/false, /*create_graph=*/false, params);
  grad_of_output_.erase(k);
  saved_.erase(it);
}

void PeerLink::rethrow_with(const std::string& context) const {
  try {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(context + e.what());
  }
}

StepResult Executor::run(const std::vector<Action>& actions, const std::function<torch::Tensor(int64_t)>& input,
                         const std::function<void()>& after_action) {
  StepResult out;
  // The next kReceivesAhead receives are posted ahead, in the list's order, and one more each time
  // one is taken: a message moves as soon as its sender posts it, while this rank computes, instead
  // of starting its rendezvous at its action (torch.distributed.pipelining posts its receives ahead
  // too). A window, not the whole step: a posted receive holds its buffer, and 1F1B bounds what a
  // rank holds at once.
  std::vector<size_t> receives;  // positions of the receive actions
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].op == Op::RecvActivation || actions[i].op == Op::RecvGrad) receives.push_back(i);
  size_t posted = 0, taken = 0;
  auto post_ahead = [&] {
    for (; posted < receives.size() && posted < taken + kReceivesAhead; ++posted)
      link_.prepost(actions[receives[posted]].peer, actions[receives[posted]]);
  };
  post_ahead();
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    try {
      switch (a.op) {
        case Op::Forward: forward(a, input, out); break;
        case Op::Backward: backward(a, false); break;
        case Op::BackwardInput: backward(a, true); break;
        case Op::BackwardWeight: weight_half(a); break;
        case Op::SendActivation: link_.send(take(act_out_, {a.stage, a.micro}, "activation"), a.peer, a); break;
        case Op::SendGrad: link_.send(take(grad_out_, {a.stage, a.micro}, "gradient"), a.peer, a); break;
        case Op::RecvActivation: act_in_[{a.stage, a.micro}] = as_input(link_.recv(a.peer, a)); break;
        case Op::RecvGrad: grad_in_[{a.stage, a.micro}] = link_.recv(a.peer, a); break;
      }
      if (a.op == Op::RecvActivation || a.op == Op::RecvGrad) {
        ++taken;
        post_ahead();
      }
    } catch (const PipelineStuck&) {
      throw;  // it names the rank and the action already
    } catch (const std::exception&) {
      link_.rethrow_with("pipeline rank " + std::to_string(rank_) + ", action " + std::to_string(i) + " (" +
                         describe(a) + "): ");
    }
    if (after_action) after_action();
  }
  link_.flush();
  if (!saved_.empty() || !act_in_.empty() || !grad_in_.empty() || !act_out_.empty() || !grad_out_.empty())
    throw std::logic_error("pipeline rank " + std::to_string(rank_) +
                           ": the step ended with work left (a forward without backward, or a message never used)");
  return out;
}

}  // namespace trainer::pipeline
