// Pipeline schedules as data (issue 25). A schedule is a list of actions per rank, computed once from
// (schedule, P, M, v) before a job starts: forward / backward compute per (stage, microbatch) and the
// point-to-point messages between neighbouring stages. validate.hpp proves a list legal without any
// process; timeline.hpp simulates it (the timeline and bubble `trainer check` prints); the executor
// runs exactly this list, in this order, on every rank.
//
// Placement: P ranks hold P * v stages in model order, stage s on rank s % P (with v > 1 each rank
// holds v "virtual" stages r, r + P, r + 2P, ...: Megatron's interleaved placement). A microbatch
// flows forward through stages 0 .. S-1 and its gradient back from S-1 to 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::pipeline {

enum class Schedule { GPipe, OneFOneB, Interleaved1F1B, ZeroBubble };
const char* schedule_name(Schedule s);  // "gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"

// Compute: Forward; Backward (to the input and the weights at once); zero bubble splits it into
// BackwardInput (the gradient the previous stage needs) and BackwardWeight (the weights' gradient,
// free to run later). Messages: an activation goes to the next stage, a gradient to the previous one.
enum class Op { Forward, Backward, BackwardInput, BackwardWeight, SendActivation, RecvActivation, SendGrad, RecvGrad };
const char* op_name(Op op);  // "F", "B", "I", "W", "send_act", "recv_act", "send_grad", "recv_grad"
bool is_compute(Op op);

struct Action {
  Op op = Op::Forward;
  // compute: the stage that runs it; a message: the stage whose compute it feeds (the next stage's
  // forward for an activation, the previous stage's backward for a gradient), on both ends
  int64_t stage = 0;
  int64_t micro = 0;
  int64_t peer = -1;  // a message's other rank; -1 for compute
  bool operator==(const Action&) const = default;
};
std::string describe(const Action& a);  // "F s2 m3", "recv_act s2 m3 from rank 1"

struct PipelineShape {
  int64_t ranks = 1;           // P
  int64_t microbatches = 1;    // M
  int64_t virtual_stages = 1;  // v (interleaved_1f1b only)
  int64_t stages() const { return ranks * virtual_stages; }
  int64_t rank_of(int64_t stage) const { return stage % ranks; }
};

using Program = std::vector<std::vector<Action>>;  // one action list per rank, in execution order

// The action lists of `kind` at `shape`, messages included. Every order is produced by simulating the
// schedule's rule over the real dependencies, so it cannot wait on something that comes later.
// std::invalid_argument for P, M or v < 1, or v > 1 with a schedule that does not interleave.
Program make_schedule(Schedule kind, const PipelineShape& shape);

// The same with the messages left out: what a rank computes, in order (make_schedule's first half).
Program compute_order(Schedule kind, const PipelineShape& shape);
// Messages inserted into compute lists: a receive right before the compute that reads it, a send
// right after the compute that produced it (sends do not block: see validate.hpp).
Program with_messages(const Program& compute, const PipelineShape& shape);

}  // namespace trainer::pipeline
