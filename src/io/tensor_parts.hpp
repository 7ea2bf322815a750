// Checkpoint groups written in parts (a tensor-parallel run: every rank of the tp group writes the
// slices it holds, no rank gathers the model). Part k of P of group "model" is the file
// "model-part<k>of<P>.safetensors". Every tensor is stored under its global name; a part that holds a
// slice says in its metadata (kRangesKey, JSON) the tensor's global shape and the ranges along one
// dimension its slice covers, in the order they are concatenated in the file:
//
//   {"transformer.h.0.attn.c_attn.weight": {"dim": 0, "shape": [96, 32], "ranges": [[0, 16], [32, 48], [64, 80]]}}
//
// A tensor without ranges is whole and held by exactly one part (replicated over tp: tp rank 0's part
// of the pipeline stage that owns it; part 0 without pipeline parallel). state.json's "tensor_parts"
// ({"parts": P, "groups": ["model", ...]}) says which groups are in parts. Reading assembles the
// global tensors, so nothing downstream (resume at any layout, export, eval) knows a checkpoint was
// written in parts; every element must be covered exactly once.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"

namespace trainer::io {

inline constexpr const char* kRangesKey = "tensor_ranges";  // a part's safetensors metadata
inline constexpr const char* kStateTensorParts = "tensor_parts";  // state.json

// Where one part's slice sits in its global tensor.
struct PartRanges {
  int64_t dim = 0;
  std::vector<int64_t> shape;                          // the global tensor's
  std::vector<std::pair<int64_t, int64_t>> ranges;     // [begin, end) along dim, concatenated in order
};

// "model-part1of2"
std::string part_group_name(const std::string& group, int64_t part, int64_t parts);

std::string encode_ranges(const std::map<std::string, PartRanges>& ranges);

// The global tensors of one group from its parts (in part order), each file's metadata describing
// its slices. CheckpointError naming the file and the tensor for anything that does not fit (an
// unknown name, a shape or range outside the global tensor, an element covered twice or never).
NamedTensors assemble_parts(const std::vector<SafetensorsFile>& parts);

// load_checkpoint's step: the groups `state` lists under kStateTensorParts, assembled from the part
// files among `files` (by stem; their metadata kept) into plain groups; the part groups removed.
// First every file's metadata (step, checkpoint_group) must name this save and its own name: a
// CheckpointError names a file from another checkpoint.
void assemble_checkpoint_parts(CheckpointContent& c, std::map<std::string, SafetensorsFile>& files,
                               const std::filesystem::path& dir);

// One group of a checkpoint folder as one file would hold it: "<group>.safetensors", or its parts
// assembled (state.json says how many). Throws CheckpointError when neither is there.
SafetensorsFile load_checkpoint_group(const std::filesystem::path& dir, const std::string& group);

}  // namespace trainer::io
