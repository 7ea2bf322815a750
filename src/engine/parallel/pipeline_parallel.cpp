// Pipeline parallel in a run (pipeline_parallel.hpp).
#include "engine/parallel/pipeline_parallel.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>

#include "config/file_read.hpp"
#include "config/load.hpp"
#include "device/host_alloc_probe.hpp"
#include "dist/pipeline_link.hpp"
#include "engine/parallel/data_parallel_over.hpp"
#include "io/weight_copy.hpp"
#include "pipeline/executor.hpp"
#include "pipeline/plan.hpp"

namespace trainer::engine {

namespace {

using Clock = std::chrono::steady_clock;

// The executor's messages through `inner`, the time its receives wait counted: the bubble's measure.
class TimedLink final : public pipeline::PeerLink {
 public:
  TimedLink(pipeline::PeerLink& inner, double& waited) : inner_(inner), waited_(waited) {}
  void send(const torch::Tensor& t, int64_t peer, const pipeline::Action& what) override { inner_.send(t, peer, what); }
  torch::Tensor recv(int64_t peer, const pipeline::Action& what) override {
    const auto t0 = Clock::now();
    auto t = inner_.recv(peer, what);
    waited_ += std::chrono::duration<double>(Clock::now() - t0).count();
    return t;
  }
  void prepost(int64_t peer, const pipeline::Action& what) override { inner_.prepost(peer, what); }
  void flush() override { inner_.flush(); }
  [[noreturn]] void rethrow_with(const std::string& context) const override {
    inner_.rethrow_with(context);
    std::terminate();  // not reached: rethrow_with throws (the compiler cannot see it through a virtual call)
  }

 private:
  pipeline::PeerLink& inner_;
  double& waited_;
};

}  // namespace

struct PipelineStages::Impl {
  std::string describe() const;
  dist::DistContext& dist;
  dist::Group& pp;
  dist::MeshLayout layout;
  bool dp_rank0 = true;
  int64_t dp_rank = 0, dp_size = 1;
  pipeline::Plan plan;
  int64_t rank = 0;                    // pp coordinate
  std::vector<int64_t> stages;         // this rank's, ascending
  std::map<std::string, int64_t> owner;  // parameter / buffer name -> the pp rank that writes it
  std::set<std::string> shared;        // parameters trained on more than one pp rank (tied)
  // the first and last stage's ranks of every dp coordinate (this tp coordinate's), when they share
  // a parameter: its gradient is summed over all of them in one collective (PipelineOver)
  std::unique_ptr<dist::Group> tied;
  double waited_s = 0;
  int64_t act_peak = 0;                // the most bytes the step's microbatches held between actions
  bool batch_known = true;             // false until train.batch_size auto picked the micro-batch (set_batch)
  std::map<int64_t, pipeline::Program> programs;  // by microbatches of a step

  Impl(dist::DistContext& d, dist::DeviceMesh& mesh, const config::RunConfig& cfg)
      : dist(d), pp(mesh.group(dist::MeshDim::PP)), layout(mesh.layout()), plan(pipeline::make_plan(cfg)) {
    rank = mesh.rank(dist::MeshDim::PP);
    dp_rank = mesh.rank(dist::MeshDim::DP);
    dp_rank0 = dp_rank == 0;
    dp_size = mesh.size(dist::MeshDim::DP);
    batch_known = cfg.train.batch_size > 0;
    for (int64_t s = rank; s < plan.shape.stages(); s += plan.shape.ranks) stages.push_back(s);
  }

  int64_t stage_of_unit(int64_t u) const {
    for (size_t s = 0; s < plan.stages.size(); ++s)
      if (u >= plan.stages[s].first && u <= plan.stages[s].last) return static_cast<int64_t>(s);
    throw std::logic_error("pipeline: unit " + std::to_string(u) + " is in no stage");
  }

  // The pp rank that writes `name` in a checkpoint: the owner of the parameter or buffer, or of the
  // parameter "<p>" of an optimizer field "<p>.<field>"; rank 0 for anything else (no unit's).
  int64_t owner_of(const std::string& name) const {
    if (auto it = owner.find(name); it != owner.end()) return it->second;
    const auto dot = name.rfind('.');
    if (dot != std::string::npos)
      if (auto it = owner.find(name.substr(0, dot)); it != owner.end()) return it->second;
    return 0;
  }

  const pipeline::Program& program(int64_t micro) {
    auto it = programs.find(micro);
    if (it != programs.end()) return it->second;
    auto sh = plan.shape;
    sh.microbatches = micro;
    return programs.emplace(micro, pipeline::make_schedule(plan.schedule, sh)).first->second;
  }
};

PipelineStages::PipelineStages(dist::DistContext& dist, dist::DeviceMesh& mesh, const config::RunConfig& cfg)
    : impl_(std::make_unique<Impl>(dist, mesh, cfg)) {
  if (impl_->plan.shape.ranks != mesh.size(dist::MeshDim::PP))
    throw std::logic_error("pipeline: the plan's ranks are not the mesh's pp size");
}

PipelineStages::~PipelineStages() = default;

int64_t PipelineStages::stage_rank() const { return impl_->rank; }
double PipelineStages::wait_seconds() const { return impl_->waited_s; }
int64_t PipelineStages::activation_peak_bytes() const { return impl_->act_peak; }

std::string PipelineStages::Impl::describe() const {
  std::string s;
  for (int64_t st : stages)
    s += (s.empty() ? "" : ", ") + std::to_string(st) + " (units " + config::stage_entry_text(plan.stages[static_cast<size_t>(st)]) + ")";
  return "stage" + std::string(stages.size() > 1 ? "s " : " ") + s + " on pp rank " + std::to_string(rank) + " of " +
         std::to_string(plan.shape.ranks) + ", " + pipeline::schedule_name(plan.schedule) + ", " +
         (batch_known ? std::to_string(plan.shape.microbatches) + " microbatches a batch"
                      : std::string("the microbatches a batch follow train.batch_size auto's pick"));
}

std::string PipelineStages::describe() const { return impl_->describe(); }

void PipelineStages::set_batch(const config::RunConfig& cfg) {
  impl_->plan.shape.microbatches = config::pipeline_microbatches(cfg);
  impl_->batch_known = true;
  impl_->programs.clear();
  spdlog::info("pipeline: {}", describe());
}

bool PipelineStages::holds_unit(int64_t unit) const {
  const auto& m = *impl_;
  const int64_t s = m.stage_of_unit(unit);
  return std::find(m.stages.begin(), m.stages.end(), s) != m.stages.end();
}

void PipelineStages::keep_stages(models::Model& model) {
  auto& m = *impl_;
  const auto units = model.units();
  if (units.size() != m.plan.units.size())
    throw std::logic_error("pipeline: the model has " + std::to_string(units.size()) + " units, its config " +
                           std::to_string(m.plan.units.size()));
  std::map<std::string, std::set<int64_t>> trained_by;  // parameter -> the pp ranks whose stages read it
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const int64_t u = models::unit_of(units, p.key());
    if (u < 0) throw std::logic_error("pipeline: parameter " + p.key() + " belongs to no unit of the model");
    const int64_t r = m.plan.shape.rank_of(m.stage_of_unit(u));
    m.owner[p.key()] = r;
    trained_by[p.key()].insert(r);
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    const int64_t u = models::unit_of(units, b.key());
    m.owner[b.key()] = u < 0 ? 0 : m.plan.shape.rank_of(m.stage_of_unit(u));
  }
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& name : units[u].reads) {
      if (!trained_by.count(name)) throw std::logic_error("pipeline: unit " + units[u].name + " reads no parameter " + name);
      trained_by[name].insert(m.plan.shape.rank_of(m.stage_of_unit(static_cast<int64_t>(u))));
    }
  const int64_t last = m.plan.shape.ranks - 1;
  bool tied_here = false, any_tied = false;
  for (const auto& [name, ranks] : trained_by) {
    if (ranks.size() < 2) continue;
    if (ranks != std::set<int64_t>{0, last})
      throw std::logic_error("pipeline: parameter " + name + " is read on pp ranks other than the first and last");
    m.shared.insert(name);
    any_tied = true;
    tied_here = tied_here || ranks.count(m.rank);
  }
  int64_t released = 0, kept = 0, released_bytes = 0;
  std::set<const void*> seen;  // a tensor registered under two names counts once
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    if (trained_by[p.key()].count(m.rank)) {
      ++kept;
      continue;
    }
    // never read here: no gradient, and no values (the model was built on the CPU so that every rank
    // draws one process's initial weights; a family that can released them as it drew them
    // (BuildContext::keeps_unit), the rest go here, before the model moves to the device)
    p.value().set_requires_grad(false);
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
    released_bytes += p.value().numel() * static_cast<int64_t>(p.value().element_size());
    if (!io::is_released(p.value())) io::release_weight(p.value());
    ++released;
  }
  // the first and last stage's ranks of every dp coordinate of this tp coordinate sum the tied
  // gradients in one collective (PipelineOver::after_backward says why not per dp coordinate)
  if (any_tied && tied_here) {
    std::vector<int64_t> members;
    for (const int64_t q : m.layout.group_ranks(dist::MeshDim::DP, m.dist.rank())) {
      const auto line = m.layout.group_ranks(dist::MeshDim::PP, q);
      members.push_back(line.front());
      members.push_back(line.back());
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    m.tied = m.dist.new_group(members, "pp-tied");
  }
  spdlog::info("pipeline: {}; {} parameter tensors read here, {} of the other stages released ({}){}", describe(), kept,
               released, trainer::human_bytes(static_cast<uint64_t>(released_bytes)),
               m.shared.empty() ? "" : fmt::format(", {} tied with the other end of the pipeline", m.shared.size()));
}

void PipelineStages::check_tied(const models::Model& model) const {
  const auto& m = *impl_;
  if (!m.tied) return;
  torch::NoGradGuard no_grad;
  std::string names;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (!m.shared.count(p.key())) continue;
    auto theirs = p.value().detach().clone().to(m.tied->device());
    m.tied->broadcast(theirs, "tied check");  // the first stage's copy
    auto differs = torch::tensor({torch::equal(theirs.to(p.value().device()), p.value()) ? 0.0 : 1.0}, torch::kFloat64)
                       .to(m.tied->device());
    m.tied->all_reduce(differs, dist::Reduce::Sum, "tied check");
    if (differs.item<double>() != 0)
      throw std::runtime_error("pipeline: the copies of the tied parameter " + p.key() +
                               " on the first and last stage differ (their gradients were not summed alike)");
    names += (names.empty() ? "" : ", ") + p.key();
  }
  spdlog::info("pipeline: the tied copies on the first and last stage are bit for bit equal ({})", names);
}

PipelineStages::StepLoss PipelineStages::forward_backward(
    models::Model& model, const torch::Tensor& input, const torch::Tensor& target, int64_t accum, Precision precision,
    const torch::Device& device, const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& loss,
    const torch::Tensor& loss_scale) {
  auto& m = *impl_;
  const int64_t M = accum * m.plan.shape.microbatches, B = input.size(0);
  if (B % M != 0)
    throw std::invalid_argument("pipeline: a step's " + std::to_string(B) + " samples do not split into " +
                                std::to_string(M) + " microbatches");
  const int64_t micro = B / M, per_batch = m.plan.shape.microbatches;
  // microbatch mb's place among the global batch's microbatches, as one process at this microbatch
  // size counts them: piece mb % M' of this dp rank's share of batch mb / M' (data/sampler.hpp)
  auto global_micro = [&m, per_batch](int64_t mb) {
    return (mb / per_batch) * m.dp_size * per_batch + m.dp_rank * per_batch + mb % per_batch;
  };
  auto shape = m.plan.shape;
  shape.microbatches = M;
  const auto units = model.units();
  std::vector<pipeline::StageFn> fns;
  for (int64_t s : m.stages) {
    const auto range = m.plan.stages[static_cast<size_t>(s)];
    const bool last = s == shape.stages() - 1;
    pipeline::StageFn f;
    f.stage = s;
    f.forward = [&, range, last](const torch::Tensor& in, int64_t mb) {
      AutocastScope autocast(precision, device);
      model.set_microbatch(global_micro(mb));  // dropout: one process's masks for these samples
      auto h = model.forward_units(in, range.first, range.last);
      return last ? loss(h, target.narrow(0, mb * micro, micro)) : h;
    };
    std::set<std::string> reads;
    for (int64_t u = range.first; u <= range.last; ++u)
      for (const auto& n : units[static_cast<size_t>(u)].reads) reads.insert(n);
    for (const auto& p : model.named_parameters(/*recurse=*/true)) {
      const int64_t u = models::unit_of(units, p.key());
      if (p.value().requires_grad() && ((u >= range.first && u <= range.last) || reads.count(p.key())))
        f.params.push_back(p.value());
    }
    fns.push_back(std::move(f));
  }
  // the gradients exist before the first backward (zeros where absent: 0 + g is g, bit for bit), so
  // the bytes held between actions are what the microbatches in flight keep, not the gradients'
  // first allocation
  {
    torch::NoGradGuard no_grad;
    for (auto& f : fns)
      for (auto& p : f.params)
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  dist::GroupPeerLink link(m.pp);
  TimedLink timed(link, m.waited_s);
  pipeline::Executor ex(shape, m.rank, std::move(fns), timed);
  ex.set_loss_scale(loss_scale);  // fp16: an overflow on any stage is voted over the world (PipelineOver::agree_flag)
  device::HeldBytesMeter held(device);
  const auto r = ex.run(
      m.program(M)[static_cast<size_t>(m.rank)], [&](int64_t mb) { return input.narrow(0, mb * micro, micro); },
      [&held] { held.sample(); });
  m.act_peak = std::max(m.act_peak, held.peak());
  timed.flush();
  // the last stage's losses to every rank of the pp group (rank 0 records them)
  auto sum = r.loss_sum.defined() ? r.loss_sum.reshape({1}).to(m.pp.device())
                                  : torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(m.pp.device()));
  m.pp.all_reduce(sum, dist::Reduce::Sum, "pipeline loss");
  return {sum.reshape({}).to(device, torch::kFloat32), M};
}

torch::Tensor PipelineStages::forward(models::Model& model, const torch::Tensor& input) {
  auto& m = *impl_;
  const auto& sh = m.plan.shape;
  const int64_t S = sh.stages();
  dist::GroupPeerLink link(m.pp);
  torch::Tensor here, out;
  for (int64_t s : m.stages) {
    torch::Tensor in;
    if (s == 0) {
      in = input;
    } else if (sh.rank_of(s - 1) == m.rank) {
      in = here;
    } else {
      const int64_t from = sh.rank_of(s - 1);
      in = link.recv(from, pipeline::Action{pipeline::Op::RecvActivation, s, 0, from});
    }
    const auto range = m.plan.stages[static_cast<size_t>(s)];
    auto h = model.forward_units(in, range.first, range.last);
    if (s == S - 1) {
      out = h;
    } else if (sh.rank_of(s + 1) == m.rank) {
      here = h;
    } else {
      const int64_t to = sh.rank_of(s + 1);
      link.send(h, to, pipeline::Action{pipeline::Op::SendActivation, s + 1, 0, to});
    }
  }
  link.flush();
  // the last stage's output to every rank: its shape first, then the values (fp32: exact for bf16)
  constexpr int64_t kMaxDims = 8;
  auto head = torch::zeros({kMaxDims + 1}, torch::kInt64);
  if (out.defined()) {
    head[0] = out.dim();
    for (int64_t d = 0; d < out.dim(); ++d) head[d + 1] = out.size(d);
  }
  head = head.to(m.pp.device());
  m.pp.all_reduce(head, dist::Reduce::Sum, "pipeline output shape");
  head = head.cpu();
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < head[0].item<int64_t>(); ++d) sizes.push_back(head[d + 1].item<int64_t>());
  auto values = out.defined() ? out.detach().to(torch::kFloat32).contiguous().to(m.pp.device())
                              : torch::zeros(sizes, torch::TensorOptions().dtype(torch::kFloat32).device(m.pp.device()));
  m.pp.all_reduce(values, dist::Reduce::Sum, "pipeline output");
  return values.to(input.device());
}

namespace {

// The checkpoint part of a pipeline run: each stage's rank of dp rank 0 writes the tensors it owns
// (a tied parameter once, by the first stage's rank), with the inner part's tp slices, as part
// pp_rank x T + tp_rank of P x T (checkpointing's tp_parts, io/tensor_parts.hpp); restoring, every
// rank loads the whole model (it holds it) and the optimizer state of the parameters it trains.
class PipelineCheckpoint final : public CheckpointPartOver {
 public:
  PipelineCheckpoint(const DataParallel& inner, const PipelineStages::Impl& pipe) : CheckpointPartOver(inner), pipe_(pipe) {}
  bool writes_tp_part() const override { return pipe_.dp_rank0 && in().writes_tp_part(); }
  int64_t pipeline_rank() const override { return pipe_.rank; }
  int64_t pipeline_size() const override { return pipe_.plan.shape.ranks; }
  bool owns(const std::string& name) const override { return pipe_.owner_of(name) == pipe_.rank; }
  void load_optimizer(torch::optim::Optimizer& opt, const torch::nn::Module& model,
                      const io::NamedTensors& full) const override {
    // the parameters this rank trains (keep_stages froze the others; a sharded inner strategy's
    // optimizer steps pieces of them, so the names come from the model, not the optimizer)
    std::set<std::string> mine;
    for (const auto& p : model.named_parameters(/*recurse=*/true))
      if (p.value().requires_grad()) mine.insert(p.key());
    io::NamedTensors kept;
    for (const auto& [name, t] : full) {
      const auto dot = name.rfind('.');
      if (dot != std::string::npos && mine.count(name.substr(0, dot))) kept.emplace_back(name, t);
    }
    in().load_optimizer(opt, model, kept);
  }

 private:
  const PipelineStages::Impl& pipe_;
};

// The strategy of a pipeline run: the data-parallel one over the dp group (each rank's replicas are
// its dp peers of the same stages), then the tied gradients summed between the first and last stage;
// the gradient norm is every stage's (each stage's squared norm over its dp and tp groups, summed over
// pp, a tied parameter counted once: by the rank that owns it); the fp16 vote is the world's.
class PipelineOver final : public DataParallelOver {
 public:
  PipelineOver(PipelineStages::Impl& pipe, std::unique_ptr<DataParallel> inner)
      : DataParallelOver(std::move(inner)), pipe_(pipe), checkpoint_(*inner_, pipe) {}
  std::string name() const override {
    return "pipeline parallel " + std::to_string(pipe_.plan.shape.ranks) + " (data parallel " +
           std::to_string(pipe_.dp_size) + (pipe_.dp_size > 1 ? ": " + inner_->name() : "") + ")";
  }
  void prepare(torch::nn::Module& module, const std::vector<torch::Tensor>& params) override {
    std::set<const void*> copy_params;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      if (!pipe_.shared.count(p.key()) || !p.value().requires_grad()) continue;
      tied_.push_back(p.value());
      if (pipe_.owner_of(p.key()) != pipe_.rank) copy_params.insert(p.value().unsafeGetTensorImpl());
    }
    // a sharded inner strategy cuts the tied tensors into other pieces on the first and last stage:
    // aligned pieces are stepped by the same kernel code element by element, so the copies stay equal
    inner_->align_pieces(tied_);
    inner_->prepare(module, params);
    spdlog::info("{}: {}", name(), pipe_.describe());
    // what the optimizer steps: the parameters, or a sharded strategy's pieces of them
    const auto& steps = inner_->step_params(params);
    const auto sources = inner_->step_param_sources(params);
    for (size_t i = 0; i < steps.size(); ++i)
      if (copy_params.count(sources[i].unsafeGetTensorImpl())) copies_.insert(steps[i].unsafeGetTensorImpl());
  }
  // The tied sum first, on whole gradients: no bucket launched inside the stages' backwards
  // (StepRunner's before_backward(false)), so the inner strategy's reduction starts here, after it.
  // The two ends reduce over dp in their own buckets, which hold the tied tensor at other places:
  // with 3 or more dp ranks a sum's order follows the place, and the copies would differ. So the
  // tied gradient is summed over both ends and every dp rank in one collective (the same bits on
  // every member), and kept by dp rank 0 alone: the dp reduction adds zeros to it, exact in any
  // order, and both ends hold the same mean. A sharded inner strategy (ZeRO-1/2/3), whose buckets cut
  // the tied tensor differently on the first and last stage, then steps equal copies: with equal
  // gradients, and pieces aligned (prepare) so that no element is in a kernel's vector body on one
  // end and in its scalar tail on the other.
  void after_backward() override {
    if (pipe_.tied) {
      torch::NoGradGuard no_grad;
      for (auto& p : tied_) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        auto g = p.grad();
        pipe_.tied->all_reduce(g, dist::Reduce::Sum, "tied gradient");
        if (pipe_.dp_rank != 0) g.zero_();
      }
    }
    inner_->after_backward();  // the mean over dp (sharded: of this rank's slices)
  }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) override {
    std::vector<torch::Tensor> counted;
    for (const auto& p : step_params)
      if (!copies_.count(p.unsafeGetTensorImpl())) counted.push_back(p);
    auto stage = inner_->clip_grad_norm(counted, 0.0).to(torch::kFloat64);  // over this stage's dp and tp
    auto sq = (stage * stage).reshape({1}).to(pipe_.pp.device());
    pipe_.pp.all_reduce(sq, dist::Reduce::Sum, "grad norm");
    auto total = sq.sqrt().reshape({}).to(torch::kFloat32);
    if (max_norm > 0) {
      std::vector<torch::Tensor> grads;
      for (const auto& p : step_params)
        if (p.grad().defined()) grads.push_back(p.grad());
      if (!grads.empty()) {
        auto coef = (max_norm / (total.to(grads.front().device()) + 1e-6)).clamp_max(1.0);
        at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
      }
    }
    return total;
  }
  void agree_flag(torch::Tensor& flag) override { pipe_.dist.all_reduce_sum_async(flag, "fp16 overflow")->wait(); }
  const CheckpointPart& checkpoint_part() const override { return checkpoint_; }

 private:
  PipelineStages::Impl& pipe_;
  PipelineCheckpoint checkpoint_;
  std::vector<torch::Tensor> tied_;     // this rank's parameters shared with the other end of the pipeline
  std::set<const void*> copies_;        // the step params of those another rank owns: left out of the norm
};

}  // namespace

std::unique_ptr<DataParallel> PipelineStages::wrap(std::unique_ptr<DataParallel> inner) {
  return std::make_unique<PipelineOver>(*impl_, std::move(inner));
}

}  // namespace trainer::engine
