// DeviceMesh and its layout (device_mesh.hpp).
#include "dist/device_mesh.hpp"

#include <stdexcept>

#include "dist/dist_context.hpp"

namespace trainer::dist {

const char* mesh_dim_name(MeshDim d) { return d == MeshDim::TP ? "tp" : d == MeshDim::PP ? "pp" : "dp"; }

namespace {
std::string fit_problem(int64_t world, int64_t tp, int64_t pp) {
  if (world >= 1 && tp >= 1 && pp >= 1 && world % (tp * pp) == 0) return "";
  if (pp == 1)
    return "device mesh: tensor parallel size " + std::to_string(tp) + " does not divide the world of " +
           std::to_string(world) + " ranks";
  return "device mesh: pipeline parallel " + std::to_string(pp) + " x tensor parallel " + std::to_string(tp) +
         " does not divide the world of " + std::to_string(world) + " ranks";
}
}  // namespace

MeshLayout::MeshLayout(int64_t world, int64_t tp, int64_t pp)
    : world_(world), tp_(tp), pp_(pp), dp_(tp > 0 && pp > 0 ? world / (tp * pp) : 0) {
  if (const auto why = fit_problem(world, tp, pp); !why.empty()) throw std::invalid_argument(why);
}

MeshCoord MeshLayout::coord(int64_t rank) const {
  return {.dp = (rank / tp_) % dp_, .tp = rank % tp_, .pp = rank / (tp_ * dp_)};
}

int64_t MeshLayout::rank_of(MeshCoord c) const { return (c.pp * dp_ + c.dp) * tp_ + c.tp; }

std::vector<int64_t> MeshLayout::group_ranks(MeshDim d, int64_t rank) const {
  const auto c = coord(rank);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(d); ++i) {
    auto o = c;
    (d == MeshDim::TP ? o.tp : d == MeshDim::PP ? o.pp : o.dp) = i;
    out.push_back(rank_of(o));
  }
  return out;
}

std::string MeshLayout::describe() const {
  const bool pp = pp_ > 1;
  std::string s = (pp ? "pp " + std::to_string(pp_) + " x " : std::string()) + "dp " + std::to_string(dp_) + " x tp " +
                  std::to_string(tp_) + ":";
  for (int64_t r = 0; r < world_; ++r) {
    const auto c = coord(r);
    s += std::string(r ? "," : "") + " rank " + std::to_string(r) + " (" +
         (pp ? "pp " + std::to_string(c.pp) + ", " : std::string()) + "dp " + std::to_string(c.dp) + ", tp " +
         std::to_string(c.tp) + ")";
  }
  return s;
}

std::unique_ptr<DeviceMesh> DeviceMesh::create(DistContext& ctx, int64_t tp, int64_t pp) {
  if (const auto why = fit_problem(ctx.world_size(), tp, pp); !why.empty()) throw DistError(why);
  if ((tp > 1 || pp > 1) && ctx.recovery())
    throw DistError(std::string("device mesh: ") + (pp > 1 ? "pipeline" : "tensor") +
                    " parallel with dist.recovery in_process is not supported (a regroup does not rebuild the "
                    "mesh's groups); use dist.recovery: restart");
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(ctx.world_size(), tp, pp, ctx.rank()));
  const auto& l = mesh->layout_;
  // every rank builds its tp group first, then its dp group, then its pp group: the groups'
  // rendezvous never wait on each other
  mesh->tp_ = ctx.new_group(l.group_ranks(MeshDim::TP, ctx.rank()), "tp");
  mesh->dp_ = ctx.new_group(l.group_ranks(MeshDim::DP, ctx.rank()), "dp");
  mesh->pp_ = ctx.new_group(l.group_ranks(MeshDim::PP, ctx.rank()), "pp");
  return mesh;
}

int64_t DeviceMesh::subgroups_built() const {
  return static_cast<int64_t>(tp_->owns_backend()) + static_cast<int64_t>(dp_->owns_backend()) +
         static_cast<int64_t>(pp_->owns_backend());
}

}  // namespace trainer::dist
