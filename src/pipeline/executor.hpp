// Runs one rank's action list (schedule.hpp) for one optimizer step: the forwards and backwards of
// this rank's stages per microbatch, in the list's order, exchanging activations and gradients with
// the neighbouring ranks through a PeerLink. The loss over the step is the mean of the microbatch
// losses, so the gradients equal one process's gradient accumulation over the same M microbatches.
//
// A stage's input is cut from the previous stage's graph (detached, requiring grad), so each
// stage's autograd graph is its own: a backward runs that graph from the gradient the next stage
// sent back (or from the loss on the last stage) and hands the input's gradient to the previous
// stage. Zero bubble's halves: the input half takes only the input's gradient (the graph kept),
// the weight half later accumulates the parameters' gradients from it (a second pass over the
// stage's graph: this executor splits the work in time, not the arithmetic).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/schedule.hpp"

namespace trainer::pipeline {

// The other ranks of the pipeline, point to point. dist implements it over the pipeline group's
// process group; tests over in-process queues.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Posts `t` to `peer` and returns (a send never blocks); `t` stays alive until flush(). The
  // message carries what it is (`what`: kind, stage, microbatch), so the receiver can check it.
  virtual void send(const torch::Tensor& t, int64_t peer, const Action& what) = 0;
  // The next tensor from `peer` (blocks), which must be the message `what` (the receive action):
  // another message is an error naming both. PipelineStuck when it waits longer than its timeout.
  virtual torch::Tensor recv(int64_t peer, const Action& what) = 0;
  // Posts the receive of `what` ahead of its action, so that the message can arrive while this rank
  // computes (a rendezvous transport such as Gloo's moves the bytes only once both sides have
  // posted); recv() of the same action later completes it. Called in the order of the receives,
  // each before its recv(). May do nothing.
  virtual void prepost(int64_t /*peer*/, const Action& /*what*/) {}
  virtual void flush() = 0;  // every send posted so far has completed
  // Called inside a catch block: the error being handled, rethrown with `context` before its text,
  // as its own kind where the link knows the kind (dist's communicator errors stay dist::DistError,
  // which the run's handlers of lost peers catch); by default a std::runtime_error.
  [[noreturn]] virtual void rethrow_with(const std::string& context) const;
};

// A rank waited too long: names the rank, the action (stage, microbatch, peer) it waited at.
class PipelineStuck : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StageFn {
  int64_t stage = 0;
  // The stage's forward for microbatch `micro`: `input` is the microbatch's input on stage 0, else
  // the previous stage's activation. The last stage returns the microbatch's mean loss (a scalar).
  std::function<torch::Tensor(const torch::Tensor& input, int64_t micro)> forward;
  std::vector<torch::Tensor> params;  // what the weight half (and a whole backward) accumulates into
};

struct StepResult {
  // The last stage's microbatch losses summed in fp64 on their device, without a host sync (a GPU
  // stage enqueues its next microbatch while this one runs); undefined on the other ranks.
  torch::Tensor loss_sum;
  int64_t losses = 0;  // how many (M on the last stage's rank, else 0)
  double loss_value() const { return loss_sum.defined() ? loss_sum.item<double>() : 0.0; }  // a host sync
};

class Executor {
 public:
  static constexpr size_t kReceivesAhead = 4;  // receives posted ahead of their actions (PeerLink::prepost)

  // `stages`: this rank's stages (shape.rank_of(s) == rank for each); `input(micro)` gives stage 0's
  // input of a microbatch (asked on stage 0's rank only).
  Executor(const PipelineShape& shape, int64_t rank, std::vector<StageFn> stages, PeerLink& link);

  // Runs `actions` (this rank's list of make_schedule) once; gradients accumulate into the stages'
  // parameters, each microbatch's loss scaled by 1 / M. Errors name the rank and the action.
  // `after_action` (optional) runs after every action: what the run measures between them (the
  // activations the microbatches in flight hold).
  StepResult run(const std::vector<Action>& actions, const std::function<torch::Tensor(int64_t)>& input,
                 const std::function<void()>& after_action = {});

  // fp16's dynamic loss scale ((1,) or (), on the loss's device; undefined: none): the last stage's
  // backward starts from loss / M x scale, as one process's scaled accumulation, so every gradient
  // sent between the stages and accumulated into the parameters carries the scale until the
  // scaler's unscale. StepResult's losses stay unscaled.
  void set_loss_scale(torch::Tensor scale) { loss_scale_ = std::move(scale); }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (stage, micro)
  struct Saved {
    torch::Tensor input;   // the stage's input (a leaf requiring grad when it is an activation)
    torch::Tensor output;  // the activation it made, or the scaled loss on the last stage
  };

  const StageFn& stage(int64_t s) const;
  void forward(const Action& a, const std::function<torch::Tensor(int64_t)>& input, StepResult& out);
  void backward(const Action& a, bool input_half_only);
  void weight_half(const Action& a);
  torch::Tensor output_grad(const Action& a);  // the gradient that flows into the stage's output

  PipelineShape shape_;
  int64_t rank_;
  std::vector<StageFn> stages_;
  PeerLink& link_;
  torch::Tensor loss_scale_;
  std::map<Key, Saved> saved_;                     // forwards whose backward has not finished
  std::map<Key, torch::Tensor> act_in_, grad_in_;  // inputs arrived (received, or from a local stage)
  std::map<Key, torch::Tensor> grad_of_output_;    // zero bubble: kept from the input half for the weight half
  std::map<Key, torch::Tensor> act_out_, grad_out_;  // made here for another rank, waiting for their send
};

}  // namespace trainer::pipeline
