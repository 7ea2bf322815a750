// DeviceMesh and its layout (device_mesh.hpp).
#include "dist/device_mesh.hpp"

#include <stdexcept>

#include "dist/dist_context.hpp"

namespace trainer::dist {

const char* mesh_dim_name(MeshDim d) { return d == MeshDim::TP ? "tp" : "dp"; }

MeshLayout::MeshLayout(int64_t world, int64_t tp) : world_(world), tp_(tp), dp_(tp > 0 ? world / tp : 0) {
  if (world < 1 || tp < 1 || world % tp != 0)
    throw std::invalid_argument("device mesh: tensor parallel size " + std::to_string(tp) +
                                " does not divide the world of " + std::to_string(world) + " ranks");
}

MeshCoord MeshLayout::coord(int64_t rank) const { return {rank / tp_, rank % tp_}; }

int64_t MeshLayout::rank_of(MeshCoord c) const { return c.dp * tp_ + c.tp; }

std::vector<int64_t> MeshLayout::group_ranks(MeshDim d, int64_t rank) const {
  const auto c = coord(rank);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(d); ++i)
    out.push_back(d == MeshDim::TP ? rank_of({c.dp, i}) : rank_of({i, c.tp}));
  return out;
}

std::string MeshLayout::describe() const {
  std::string s = "dp " + std::to_string(dp_) + " x tp " + std::to_string(tp_) + ":";
  for (int64_t r = 0; r < world_; ++r) {
    const auto c = coord(r);
    s += std::string(r ? "," : "") + " rank " + std::to_string(r) + " (dp " + std::to_string(c.dp) + ", tp " +
         std::to_string(c.tp) + ")";
  }
  return s;
}

std::unique_ptr<DeviceMesh> DeviceMesh::create(DistContext& ctx, int64_t tp) {
  if (tp < 1 || ctx.world_size() % tp != 0)
    throw DistError("device mesh: tensor parallel size " + std::to_string(tp) + " does not divide the world of " +
                    std::to_string(ctx.world_size()) + " ranks");
  if (tp > 1 && ctx.recovery())
    throw DistError("device mesh: tensor parallel with dist.recovery in_process is not supported (a regroup "
                    "does not rebuild the mesh's groups); use dist.recovery: restart");
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(ctx.world_size(), tp, ctx.rank()));
  const auto& l = mesh->layout_;
  // every rank builds its tp group first, then its dp group: the groups' rendezvous never wait on
  // each other
  mesh->tp_ = ctx.new_group(l.group_ranks(MeshDim::TP, ctx.rank()), "tp");
  mesh->dp_ = ctx.new_group(l.group_ranks(MeshDim::DP, ctx.rank()), "dp");
  return mesh;
}

int64_t DeviceMesh::subgroups_built() const {
  return static_cast<int64_t>(tp_->owns_backend()) + static_cast<int64_t>(dp_->owns_backend());
}

}  // namespace trainer::dist
