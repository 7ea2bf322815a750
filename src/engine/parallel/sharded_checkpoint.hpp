// The optimizer state of a sharded run in a checkpoint (docs/CHECKPOINTS.md):
//
//   optimizer-shard-<r>-of-<N>.safetensors   rank r's pieces: "<param>.<field>" 1-D tensors (its
//                                            elements of the parameter in storage order) and
//                                            "<param>.step" (AdamW), written by rank r in parallel
//   state.json "optimizer_shards"            world size, the files, and per parameter its global
//                                            shape and strides and every rank's [begin, begin+len)
//
// r and N are the dp group's rank and size (ShardSync's group): the world's without tensor parallel;
// "world_size" in state.json is that N.
//
// Tensor or pipeline parallel over a sharded strategy (a checkpoint in parts, io/tensor_parts.hpp):
//
//   optimizer-part<k>of<P>-shard-<r>-of-<N>.safetensors
//                                            rank r's pieces of what part k holds (the tensors of its
//                                            (pp, tp) coordinate), written by every rank in parallel;
//                                            no rank gathers the state. Its metadata: the pieces'
//                                            layout (shard_layout's "params", of the rank's local
//                                            tensors, padding included), where the sliced ones sit
//                                            in their global tensors (ranges, by parameter) and
//                                            whether the part holds the whole (replicated) tensors
//   state.json "optimizer_part_shards"       {"parts": P, "world_size": N}
//
// The store's manifest holds each shard file's sha256 and size, so a missing or corrupt shard is
// refused naming the file. Loading always goes through the replicated layout (whole tensors per
// parameter name, optimizer.safetensors' format): a sharded checkpoint is assembled into it, and a
// sharded run slices its pieces out of it, so any world size and either layout resume exactly.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "dist/shard_sync.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "io/checkpoint.hpp"
#include "io/tensor_parts.hpp"

namespace trainer::engine {

std::string shard_group_name(int64_t rank, int64_t world);  // "optimizer-shard-<r>-of-<N>": dp rank, dp size

// This rank's optimizer state, one entry per piece field (see above).
io::NamedTensors shard_optimizer_tensors(const dist::ShardSync& sync, const torch::optim::Optimizer& opt,
                                         const torch::nn::Module& model);

// The "optimizer_shards" document: computed from the layout, the same on every rank.
nlohmann::json shard_layout(const dist::ShardSync& sync, const torch::nn::Module& model);

// Part k of P's shard of this rank (the shards' rank and size: `part.shard_of()`): its pieces of the
// parameters in `held` (by name), `ranges` saying where the sliced ones sit in their global tensors
// (local_part's, engine/optim/tp_state.hpp); `whole`: the part holds the replicated tensors, and so
// AdamW's step counts. No collective.
struct PartShard {
  std::string group;  // optimizer-part<k>of<P>-shard-<r>-of-<N>
  io::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};
std::string part_shard_group_name(int64_t part, int64_t parts, int64_t rank, int64_t world);
PartShard part_shard(const CheckpointPart& part, const torch::optim::Optimizer& opt, const torch::nn::Module& model,
                     int64_t k, int64_t parts, const std::set<std::string>& held,
                     const std::map<std::string, io::PartRanges>& ranges, bool whole);

// The optimizer state of `content` in the replicated layout: its optimizer group, or its shards
// assembled by their layout (and a checkpoint in parts' shards by theirs, then by their ranges).
// Throws io::CheckpointError naming the file that lacks a piece.
io::NamedTensors full_optimizer_state(const io::CheckpointContent& content, const std::filesystem::path& from);

// This rank's whole parameters' optimizer state in the replicated layout ("<param>.<field>" in the
// parameter's shape, "<param>.step"), the pieces of every rank of the sync's group `dp` all-gathered
// bucket by bucket: a collective of `dp`. Tensor parallel writes these (gathered over tp) instead of
// shard files, so the checkpoint holds global tensors whatever the layout.
io::NamedTensors gather_shard_optimizer(const dist::ShardSync& sync, dist::Group& dp, const torch::optim::Optimizer& opt,
                                        const torch::nn::Module& model);

// Replaces the optimizer's state (keyed by the pieces) by this rank's slices of `full`.
void load_shard_optimizer(const dist::ShardSync& sync, torch::optim::Optimizer& opt, const torch::nn::Module& model,
                          const io::NamedTensors& full);

// A sharded strategy's part of a checkpoint (DataParallel::checkpoint_part): the functions above over
// its sync and the sync's group `dp` (the world without tensor parallel, both outlive this).
class ShardedCheckpoint final : public CheckpointPart {
 public:
  ShardedCheckpoint(const dist::ShardSync& sync, dist::Group& dp)
      : sync_(sync), dp_(dp), rank_(dp.rank()), world_(dp.size()) {}
  bool sharded_state() const override { return true; }
  std::string shard_group() const override { return shard_group_name(rank_, world_); }
  io::NamedTensors shard_tensors(const torch::optim::Optimizer& opt, const torch::nn::Module& model) const override {
    return shard_optimizer_tensors(sync_, opt, model);
  }
  nlohmann::json shard_layout(const torch::nn::Module& model) const override {
    return engine::shard_layout(sync_, model);
  }
  std::pair<int64_t, int64_t> shard_of() const override { return {rank_, world_}; }
  void load_optimizer(torch::optim::Optimizer& opt, const torch::nn::Module& model,
                      const io::NamedTensors& full) const override {
    load_shard_optimizer(sync_, opt, model, full);
  }
  io::NamedTensors whole_optimizer_state(const torch::optim::Optimizer& opt, const torch::nn::Module& model) const override {
    return gather_shard_optimizer(sync_, dp_, opt, model);
  }

 private:
  const dist::ShardSync& sync_;
  dist::Group& dp_;
  int64_t rank_, world_;  // in the dp group, as the shard files are named
};

}  // namespace trainer::engine
