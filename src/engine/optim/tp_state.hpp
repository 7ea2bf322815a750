// Checkpoints of a tensor-parallel run hold the GLOBAL (T = 1) tensors: each sharded parameter, and
// each optimizer state tensor of its shape (Adam's moments), is all-gathered over the tp group and its
// vocabulary padding dropped before rank 0 writes it (the replicated writer); on load every rank
// reads the full tensors and keeps its slice exactly as at initialisation. So a checkpoint written at
// tp 2 resumes at tp 1 or tp 4, and `trainer export` writes plain nanoGPT names and shapes.
// The names are the model's state names (tied aliases included) and the optimizer's
// "<parameter>.<field>"; a tensor without a spec (replicated, or a scalar such as "<p>.step") passes
// through unchanged.
#pragma once

#include <map>
#include <string>

#include "io/checkpoint.hpp"
#include "io/tensor_parts.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// True when some parameter of `m` is a slice (shard_specs() holds a non-replicated spec).
bool tp_sharded(const models::Model& m);

// This rank's tensors -> the global ones, on the tensors' device. A collective over m.tp_comm(): every
// rank of the tp group calls it with the same names in the same order.
io::NamedTensors gather_global(const models::Model& m, const io::NamedTensors& local);

// This rank's part of the global tensors, for a checkpoint written in parts (io/tensor_parts.hpp):
// each sharded tensor as the rank holds it, less the vocabulary's padding rows, with its global
// shape and ranges; a tensor without a spec (replicated, "<p>.step") only when `with_whole` (tp rank
// 0 writes those). No collective.
struct LocalPart {
  io::NamedTensors tensors;
  std::map<std::string, io::PartRanges> ranges;
};
LocalPart local_part(const models::Model& m, const io::NamedTensors& local, bool with_whole);

// Global tensors (as a checkpoint or model.init file holds them) -> this rank's slices: the padding
// rows of the vocabulary added back as zeros. A global tensor whose shape is not the parameter's
// global shape: std::runtime_error naming it and both shapes.
io::NamedTensors take_local(const models::Model& m, const io::NamedTensors& global);

}  // namespace trainer::engine
