// The device mesh: the world's ranks laid out as (pp, dp, tp), tp fastest, so that the ranks of one
// tensor-parallel group are consecutive (one host, NVLink on GPUs) and pipeline parallel is the
// outermost dimension (its point-to-point traffic crosses hosts best): rank = (pp * D + dp) * T + tp.
// One process group per dimension for this rank (dist/group.hpp): a dimension of size one builds
// none and runs no collective; a dimension spanning the whole world uses the world's process
// group. So a single process and T = 1 are today's paths: nothing is built, nothing runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/group.hpp"

namespace trainer::dist {

class DistContext;

enum class MeshDim { DP, TP, PP };
const char* mesh_dim_name(MeshDim d);

struct MeshCoord {
  int64_t dp = 0, tp = 0, pp = 0;
  bool operator==(const MeshCoord&) const = default;
};

// The arithmetic of the layout alone, no processes: what `trainer check` prints and tests check.
class MeshLayout {
 public:
  // std::invalid_argument when tp or pp < 1 or tp x pp does not divide world
  MeshLayout(int64_t world, int64_t tp, int64_t pp = 1);
  int64_t world() const { return world_; }
  int64_t size(MeshDim d) const { return d == MeshDim::TP ? tp_ : d == MeshDim::PP ? pp_ : dp_; }
  MeshCoord coord(int64_t rank) const;
  int64_t rank_of(MeshCoord c) const;
  // The world ranks that share every coordinate but `d` with `rank`: its group along d, ascending.
  std::vector<int64_t> group_ranks(MeshDim d, int64_t rank) const;
  // "dp 2 x tp 2: rank 0 (dp 0, tp 0), rank 1 (dp 0, tp 1), ..."; "pp 2 x dp 1 x tp 2: rank 0 (pp 0, dp 0, tp 0), ..."
  std::string describe() const;

 private:
  int64_t world_, tp_, pp_, dp_;
};

class DeviceMesh {
 public:
  // Every rank of the world calls it with the same tp and pp (a collective: the mesh's groups).
  // DistError when tp x pp does not divide the world, or with dist.recovery in_process and a
  // dimension > 1 (its regroup does not rebuild the mesh).
  static std::unique_ptr<DeviceMesh> create(DistContext& ctx, int64_t tp, int64_t pp = 1);

  const MeshLayout& layout() const { return layout_; }
  MeshCoord coord() const { return layout_.coord(rank_); }
  int64_t size(MeshDim d) const { return layout_.size(d); }
  int64_t rank(MeshDim d) const {
    const auto c = coord();
    return d == MeshDim::TP ? c.tp : d == MeshDim::PP ? c.pp : c.dp;
  }
  Group& group(MeshDim d) { return d == MeshDim::TP ? *tp_ : d == MeshDim::PP ? *pp_ : *dp_; }
  int64_t subgroups_built() const;  // c10d backends this mesh built (0 for T = P = 1 or one process)

 private:
  DeviceMesh(int64_t world, int64_t tp, int64_t pp, int64_t rank) : layout_(world, tp, pp), rank_(rank) {}
  MeshLayout layout_;
  int64_t rank_;
  std::unique_ptr<Group> tp_, dp_, pp_;
};

}  // namespace trainer::dist
