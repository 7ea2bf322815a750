// `trainer check --memory` at dist.pipeline_parallel P > 1 (pipeline_memory.hpp).
#include "engine/startup/pipeline_memory.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>

#include <fmt/format.h>

#include "device/host_alloc_probe.hpp"
#include "engine/optim/precision.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "config/load.hpp"
#include "engine/startup/memory_plan.hpp"
#include "engine/step/train_step.hpp"
#include "pipeline/plan.hpp"

namespace trainer::engine {
namespace {

int64_t param_bytes(const torch::Tensor& p) { return p.numel() * static_cast<int64_t>(p.element_size()); }

// A microbatch of random inputs and targets as the data would give them.
std::pair<torch::Tensor, torch::Tensor> random_batch(const models::Model& model, const std::vector<int64_t>& sample,
                                                     int64_t micro, int64_t vocab_or_classes, const torch::Device& device) {
  std::vector<int64_t> shape = {micro};
  shape.insert(shape.end(), sample.begin(), sample.end());
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  if (model.input_kind() == models::InputKind::Tokens)
    return {torch::randint(0, vocab_or_classes, shape, ids), torch::randint(0, vocab_or_classes, shape, ids)};
  return {torch::randn(shape, torch::TensorOptions().device(device)), torch::randint(0, vocab_or_classes, {micro}, ids)};
}

// One microbatch through each stage: the bytes held after its forward (see the header).
std::vector<double> stage_bytes(models::Model& model, const pipeline::Plan& plan, const config::RunConfig& c,
                                const std::vector<int64_t>& sample, int64_t micro, int64_t vocab_or_classes,
                                const torch::Device& device) {
  model.train();
  auto [input, target] = random_batch(model, sample, micro, vocab_or_classes, device);
  const auto last = static_cast<int64_t>(plan.stages.size()) - 1;
  std::vector<double> out;
  torch::Tensor x = input;
  for (int64_t s = 0; s <= last; ++s) {
    const auto range = plan.stages[static_cast<size_t>(s)];
    {
      auto in = x.detach();
      if (in.is_floating_point()) in.requires_grad_(true);
      AutocastScope autocast(c.train.precision, device);
      device::HeldBytesMeter held(device);
      auto y = model.forward_units(in, range.first, range.last);
      if (s == last) y = models_loss(model, y, target, c.train.label_smoothing);
      held.sample();
      // a later stage's input arrives as a message: held as long as the microbatch is
      out.push_back(static_cast<double>(held.peak() + (s > 0 ? param_bytes(in) : 0)));
    }
    if (s < last) {
      torch::NoGradGuard no_grad;
      AutocastScope autocast(c.train.precision, device);
      x = model.forward_units(x, range.first, range.last);
    }
  }
  return out;
}

// The parameters rank r's stages train (their units' and those the units read: GPT's tied wte on
// the last stage), as PipelineStages::keep_stages keeps them.
std::set<std::string> trained_by(const models::Model& model, const pipeline::Plan& plan, int64_t r) {
  const auto units = model.units();
  std::set<std::string> names;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.shape.rank_of(static_cast<int64_t>(s)) != r) continue;
    for (int64_t u = plan.stages[s].first; u <= plan.stages[s].last; ++u) {
      for (const auto& p : model.named_parameters(/*recurse=*/true))
        if (models::unit_of(units, p.key()) == u) names.insert(p.key());
      for (const auto& n : units[static_cast<size_t>(u)].reads) names.insert(n);
    }
  }
  return names;
}

// Rank `rm`'s action list replayed: a stage's bytes held from its forward to its backward (zero
// bubble: to the weight half); the most bytes and microbatches held at once.
void replay(const std::vector<pipeline::Action>& actions, const std::vector<double>& stage_bytes, PipelineRankMemory& rm) {
  double held = 0;
  int64_t flying = 0;
  rm.activations = 0;
  rm.in_flight = 0;
  for (const auto& a : actions) {
    const double b = stage_bytes[static_cast<size_t>(a.stage)];
    if (a.op == pipeline::Op::Forward) held += b, ++flying;
    if (a.op == pipeline::Op::Backward || a.op == pipeline::Op::BackwardWeight) held -= b, --flying;
    rm.activations = std::max(rm.activations, held);
    rm.in_flight = std::max(rm.in_flight, flying);
  }
}

}  // namespace

PipelineMemory measure_pipeline_memory(const config::RunConfig& c, int64_t dp_size, const torch::Device& device,
                                       const std::vector<int64_t>& sample_shape, int64_t vocab_or_classes) {
  const auto plan = pipeline::make_plan(c);
  PipelineMemory m;
  m.micro = c.train.batch_size / plan.shape.microbatches;
  m.microbatches = c.train.grad_accum * plan.shape.microbatches;
  m.how = device.is_cuda() ? "CUDA caching allocator" : "CPU counting allocator";
  if (m.micro < 1) throw std::invalid_argument("--memory: train.batch_size gives no sample a microbatch");
  torch::manual_seed(c.run.seed);
  auto probe = build_probe_model(c, device);  // at tensor parallel: one rank's slices
  auto& model = *probe.model;
  m.stage_bytes = stage_bytes(model, plan, c, sample_shape, m.micro, vocab_or_classes, device);
  auto shape = plan.shape;
  shape.microbatches = m.microbatches;
  const auto program = pipeline::make_schedule(plan.schedule, shape);
  const auto units = model.units();
  for (int64_t r = 0; r < shape.ranks; ++r) {
    PipelineRankMemory rm;
    rm.rank = r;
    for (int64_t s = r; s < shape.stages(); s += shape.ranks) rm.stages.push_back(s);
    replay(program[static_cast<size_t>(r)], m.stage_bytes, rm);
    // the strategy's rows over the parameters this rank trains; the others are held, never trained
    const auto mine = trained_by(model, plan, r);
    std::vector<torch::Tensor> frozen;
    std::map<int64_t, int64_t> other_units;  // unit -> bytes of its parameters this rank does not keep
    for (auto& p : model.named_parameters(/*recurse=*/true))
      if (p.value().requires_grad() && !mine.count(p.key())) {
        p.value().set_requires_grad(false);
        frozen.push_back(p.value());
        other_units[models::unit_of(units, p.key())] += param_bytes(p.value());
      }
    // models/partial_build.hpp: a unit this rank does not keep is held on the host only while it is
    // drawn, one at a time (at tensor parallel: this rank's slices of it)
    for (const auto& [u, bytes] : other_units) rm.untrained = std::max(rm.untrained, bytes);
    rm.plan = strategy_memory_plan(c.dist, dp_size, model, c.optim);
    if (c.dist.sharding == config::Sharding::Full) {
      // a pipeline holds its stages' units gathered for the whole schedule (step_runner.cpp), and
      // their gradients whole until the schedule's end: not one unit at a time
      int64_t whole = 0;
      for (const auto& p : model.parameters()) whole += p.requires_grad() ? param_bytes(p) : 0;
      rm.plan.fixed.gathered = rm.plan.fixed.gradients = whole;
      for (auto& row : rm.plan.rows) {
        if (row.label.rfind("gathered units", 0) == 0) row = {"gathered units (all, for the schedule)", whole};
        if (row.label.rfind("gradients", 0) == 0) row.bytes = whole;
      }
    }
    for (auto& p : frozen) p.set_requires_grad(true);
    m.ranks.push_back(std::move(rm));
  }
  return m;
}

int64_t pipeline_auto_micro_batch(const config::RunConfig& c, int64_t dp_size, int64_t per_rank, double budget,
                                  const torch::Device& device, const std::vector<int64_t>& sample_shape,
                                  int64_t vocab_or_classes, PipelineMemory* at_pick) {
  auto with_batch = [&](int64_t b) {
    auto cb = c;
    cb.train.batch_size = b;
    cb.train.grad_accum = per_rank / b;
    return cb;
  };
  std::vector<int64_t> splits;  // the candidates whose batch cuts into the schedule's microbatches
  for (int64_t b : micro_batch_candidates(per_rank))
    if (b % config::pipeline_microbatches(with_batch(b)) == 0) splits.push_back(b);
  if (splits.empty()) return 0;
  const auto base = measure_pipeline_memory(with_batch(splits.back()), dp_size, device, sample_shape, vocab_or_classes);
  for (int64_t b : splits) {
    const auto cb = with_batch(b);
    const auto plan = pipeline::make_plan(cb);
    auto shape = plan.shape;
    shape.microbatches = cb.train.grad_accum * plan.shape.microbatches;
    PipelineMemory m = base;
    m.micro = b / plan.shape.microbatches;
    m.microbatches = shape.microbatches;
    // a microbatch's activations grow with its samples: the measure scaled
    for (auto& x : m.stage_bytes) x *= static_cast<double>(m.micro) / static_cast<double>(base.micro);
    const auto program = pipeline::make_schedule(plan.schedule, shape);
    bool fits = true;
    for (auto& rm : m.ranks) {
      replay(program[static_cast<size_t>(rm.rank)], m.stage_bytes, rm);
      fits = fits && rm.total() <= budget;
    }
    if (fits) {
      if (at_pick) *at_pick = std::move(m);
      return b;
    }
  }
  if (at_pick) *at_pick = base;
  return 0;
}

void print_pipeline_memory(const PipelineMemory& m, const config::RunConfig& c, std::ostream& out) {
  out << "memory per process, pipeline parallel " << m.ranks.size() << " (" << config::name_of(c.train.precision)
      << ", fp32 weights and optimizer state): one microbatch of " << m.micro
      << " samples through each stage measured by the " << m.how << ", then each rank's "
      << config::name_of(c.dist.pipeline.schedule) << " list of " << m.microbatches
      << " microbatches a step replayed (a stage's activations held from its forward to its backward)\n";
  out << "  one microbatch's activations:";
  for (size_t s = 0; s < m.stage_bytes.size(); ++s)
    out << (s ? ", " : " ") << "stage " << s << " " << bytes_text(m.stage_bytes[s]);
  out << "\n";
  auto row = [&](const std::string& name, auto value) {
    out << "  " << std::left << std::setw(44) << name;
    for (const auto& r : m.ranks) out << std::right << std::setw(16) << value(r);
    out << "\n";
  };
  row("", [](const PipelineRankMemory& r) { return fmt::format("pp rank {}", r.rank); });
  row("stages", [](const PipelineRankMemory& r) {
    std::string s;
    for (auto st : r.stages) s += fmt::format("{}{}", s.empty() ? "" : ",", st);
    return s;
  });
  for (size_t i = 0; i < m.ranks.front().plan.rows.size(); ++i)  // the same strategy on every rank: the same rows
    row(m.ranks.front().plan.rows[i].label + " (its stages)",
        [&](const PipelineRankMemory& r) { return bytes_text(static_cast<double>(r.plan.rows[i].bytes)); });
  row("largest other unit (host, at start-up)",
      [](const PipelineRankMemory& r) { return bytes_text(static_cast<double>(r.untrained)); });
  row("microbatches held at the peak", [](const PipelineRankMemory& r) { return std::to_string(r.in_flight); });
  row("activations at the peak (measured x held)", [](const PipelineRankMemory& r) { return bytes_text(r.activations); });
  row("total", [](const PipelineRankMemory& r) { return bytes_text(r.total()); });
}

}  // namespace trainer::engine
