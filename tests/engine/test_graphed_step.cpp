// train.cuda_graphs: what rules a graph out, the optimizer hooks a graph needs, the fallback paths
// (on every machine) and, on a GPU, graphed steps against eager ones.
#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "device/cuda_graph.hpp"
#include "engine/step/graphed_step.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optim.hpp"
#include "engine/optim/train_state.hpp"
#include "skip.hpp"
#include "test_util.hpp"

using namespace trainer;
using namespace trainer::engine;

TEST_CASE("graph_blocker names the setting that rules a graph out, and nothing when none does", "[unit]") {
  GraphConditions ok;
  ok.cuda = true;
  CHECK(graph_blocker(ok).empty());
  ok.precision = Precision::Bf16;
  ok.world_size = 1;
  CHECK(graph_blocker(ok).empty());

  auto with = [&](auto edit) {
    GraphConditions c = ok;
    edit(c);
    return graph_blocker(c);
  };
  CHECK(with([](GraphConditions& c) { c.cuda = false; }) ==
        "CUDA graphs need a CUDA device, and this run trains on the CPU");
  CHECK(with([](GraphConditions& c) { c.world_size = 4; }) ==
        "the gradient all-reduce of a multi-process run (world size 4) is not captured");
  CHECK(with([](GraphConditions& c) { c.precision = Precision::Fp16; }) ==
        "fp16's loss scaler decides on the host, every step, whether the optimizer steps");
  CHECK(with([](GraphConditions& c) { c.nonfinite = config::NonFinite::Rollback; }) ==
        "train.nonfinite: rollback checks the gradient norm on the host every step");
  CHECK(with([](GraphConditions& c) { c.fused_optimizer = false; }) ==
        "optim.fused: false steps parameters in a host loop with host-side step counts");
  CHECK(with([](GraphConditions& c) { c.activation_checkpointing = true; }).find("activation checkpointing") == 0);
  CHECK(with([](GraphConditions& c) { c.fault_injection = true; }).find("TRAINER_INJECT_NONFINITE_GRAD") == 0);
}

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

config::OptimConfig adamw_config() {
  config::OptimConfig c;
  c.name = config::OptimizerKind::Adamw;
  c.lr = 0.01;
  c.weight_decay = 0.1;
  c.betas = {0.9, 0.95};
  return c;
}

void copy_weights(Net& from, Net& to) {
  torch::NoGradGuard ng;
  auto a = from.parameters(), b = to.parameters();
  for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
}

double max_diff(Net& a, Net& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// The step body of a graph: forward, backward, clip, step (no zero_grad).
StepTensors body_for(Net& net, torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
  auto loss = torch::mse_loss(net.forward(x[0]), y[0]);
  loss.backward();
  auto norm = clip_grad_norm(params, 1.0);
  opt.step();
  return {loss.detach(), norm};
}

// The same step, eagerly, as the Trainer runs it without graphs.
void eager_step(Net& net, torch::optim::Optimizer& opt, const torch::Tensor& x, const torch::Tensor& y, double lr) {
  set_learning_rate(opt, lr);
  torch::mse_loss(net.forward(x), y).backward();
  clip_grad_norm(net.parameters(), 1.0);
  opt.step();
  opt.zero_grad(true);
}

}  // namespace

TEST_CASE("fused optimizers read the learning rate from a tensor when given one", "[unit]") {
  for (const std::string name : {"adamw", "sgd"}) {
    INFO(name);
    auto c = adamw_config();
    c.name = config::parse_enum<config::OptimizerKind>(name, "optimizer");
    c.momentum = 0.9;
    torch::manual_seed(2);
    Net a, b, control;
    copy_weights(a, b);
    copy_weights(a, control);
    auto oa = build_optimizer(c, a), ob = build_optimizer(c, b), oc = build_optimizer(c, control);
    auto* hooks = dynamic_cast<GraphableOptimizer*>(ob.get());
    REQUIRE(hooks != nullptr);
    auto lr = torch::zeros({}, torch::kFloat32);
    hooks->read_lr_from(lr);
    const double rates[] = {0.01, 0.05, 0.002, 0.03};
    for (double r : rates) {
      auto x = torch::randn({4, 6}), y = torch::randn({4, 3});
      eager_step(a, *oa, x, y, r);
      lr.fill_(r);  // b's options keep 0.01: only the tensor carries the rate
      eager_step(b, *ob, x, y, 0.01);
      eager_step(control, *oc, x, y, 0.01);
    }
    CHECK(max_diff(a, b) < 1e-6);        // float32 rates vs double ones: rounding only
    CHECK(max_diff(a, control) > 1e-3);  // the rates did matter
    hooks->read_lr_from({});             // the options again
    auto x = torch::randn({4, 6}), y = torch::randn({4, 3});
    eager_step(a, *oa, x, y, 0.02);
    eager_step(b, *ob, x, y, 0.02);
    CHECK(max_diff(a, b) < 1e-6);
  }
}

TEST_CASE("fused AdamW counts replayed steps only for the parameters its last step updated", "[unit]") {
  torch::manual_seed(4);
  Net net;
  auto opt = build_optimizer(adamw_config(), net);
  auto* hooks = dynamic_cast<GraphableOptimizer*>(opt.get());
  REQUIRE(hooks != nullptr);
  auto steps_of = [&](const std::string& param) {
    for (auto& [name, t] : optimizer_state_tensors(*opt, net))
      if (name == param + ".step") return t.item<int64_t>();
    return int64_t{-1};
  };
  eager_step(net, *opt, torch::randn({4, 6}), torch::randn({4, 3}), 0.01);
  // a step in which fc2.bias has no gradient (as if it were unused)
  torch::mse_loss(net.forward(torch::randn({4, 6})), torch::randn({4, 3})).backward();
  net.fc2->bias.mutable_grad() = torch::Tensor();
  opt->step();
  opt->zero_grad(true);
  CHECK(hooks->last_step_fused());
  REQUIRE(steps_of("fc1.weight") == 2);
  REQUIRE(steps_of("fc2.bias") == 1);
  hooks->count_steps(+3);
  CHECK(steps_of("fc1.weight") == 5);
  CHECK(steps_of("fc2.weight") == 5);
  CHECK(steps_of("fc2.bias") == 1);
  hooks->count_steps(-3);
  CHECK(steps_of("fc1.weight") == 2);

  // a gradient laid out unlike its parameter goes through the host loop: a graph cannot replay that
  torch::mse_loss(net.forward(torch::randn({4, 6})), torch::randn({4, 3})).backward();
  net.fc1->weight.mutable_grad() = net.fc1->weight.grad().t().contiguous().t();
  opt->step();
  CHECK_FALSE(hooks->last_step_fused());
}

TEST_CASE("GraphedStep refuses an optimizer without graph hooks", "[unit]") {
  Net net;
  auto c = adamw_config();
  c.fused = false;
  auto opt = build_optimizer(c, net);
  REQUIRE_THROWS_WITH(GraphedStep(*opt, net.parameters(), torch::kCPU, {}),
                      "GraphedStep needs a fused optimizer (optim.fused: true)");
}

TEST_CASE("a capture that cannot happen leaves the optimizer as it was, for an eager step", "[unit]") {
  if (torch::cuda::is_available()) {
    TRAINER_SKIP("this machine has a GPU (the [gpu] cases cover captures)");
  }
  torch::manual_seed(6);
  Net net, ref;
  copy_weights(net, ref);
  auto opt = build_optimizer(adamw_config(), net), ref_opt = build_optimizer(adamw_config(), ref);
  const auto params = net.parameters();
  GraphedStep graphed(*opt, params, torch::kCPU, [&](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
    return body_for(net, *opt, params, x, y);
  });
  auto x = torch::randn({4, 6}), y = torch::randn({4, 3});
  eager_step(net, *opt, x, y, 0.01);
  eager_step(ref, *ref_opt, x, y, 0.01);
  auto out = graphed.capture_and_run({torch::randn({4, 6})}, {torch::randn({4, 3})}, 0.5);
  CHECK_FALSE(out.has_value());
  CHECK_FALSE(graphed.captured());
  CHECK(graphed.failure().find("CUDA") != std::string::npos);
  for (const auto& p : params) CHECK_FALSE(p.grad().defined());
  // the failed capture's rate (0.5) and step count are gone: the next eager steps match the reference
  for (int s = 0; s < 2; ++s) {
    x = torch::randn({4, 6});
    y = torch::randn({4, 3});
    eager_step(net, *opt, x, y, 0.02);
    eager_step(ref, *ref_opt, x, y, 0.02);
  }
  CHECK(max_diff(net, ref) < 1e-7);
}

// --- end to end ------------------------------------------------------------------------------------

namespace {

// The largest relative difference of `key` between two runs' train records, step by step.
double worst_relative(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                      const std::string& key) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].at("step") == b[i].at("step"));
    const double x = a[i].at(key).get<double>(), y = b[i].at(key).get<double>();
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(x), 1e-12));
  }
  return worst;
}

std::string gpt_config(const std::string& device, const std::string& precision, int64_t max_steps,
                       const std::string& extra = "") {
  return "run: {name: g, out_dir: runs, seed: 5, deterministic: true}\n"
         "model: {arch: gpt, vocab_size: 64, block_size: 32, n_layer: 2, n_head: 2, n_embd: 32}\n"
         "data: {format: synthetic, workers: 1, synthetic: {num_samples: 512, val_samples: 32}}\n"
         "train: {batch_size: 8, grad_accum: 2, max_steps: " + std::to_string(max_steps) +
         ", log_every: 1, threads: 1, grad_clip: 1.0, device: " + device + ", precision: " + precision + "}\n"
         "optim: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
         "schedule: {name: cosine, warmup_steps: 3}\n"
         "log: {progress: off}\n" + extra;
}

struct Run {
  test::CommandResult result;
  std::vector<nlohmann::json> records;
};

Run run_config(const std::filesystem::path& dir, const std::string& name, const std::string& yaml,
               const std::string& args = "") {
  test::write_file(dir / (name + ".yaml"), yaml);
  Run r;
  r.result = test::run_trainer("run " + (dir / (name + ".yaml")).string() + " --set run.name=" + name + " --out-dir " +
                               (dir / "runs").string() + " " + args);
  if (r.result.exit_code == 0) r.records = test::records(dir / "runs" / name / "metrics.jsonl", "train");
  return r;
}

}  // namespace

TEST_CASE("train.cuda_graphs on a CPU logs why it is not used and trains exactly as without it", "[e2e]") {
  auto dir = test::scratch_dir("graphs_cpu");
  auto eager = run_config(dir, "eager", gpt_config("cpu", "fp32", 5));
  auto graphs = run_config(dir, "graphs", gpt_config("cpu", "fp32", 5), "--set train.cuda_graphs=true");
  INFO(graphs.result.output);
  REQUIRE(eager.result.exit_code == 0);
  REQUIRE(graphs.result.exit_code == 0);
  CHECK(graphs.result.output.find("train.cuda_graphs: not used, every step runs eagerly: CUDA graphs need a CUDA "
                                  "device, and this run trains on the CPU") != std::string::npos);
  REQUIRE(graphs.records.size() == 5);
  CHECK(worst_relative(eager.records, graphs.records, "loss") == 0.0);
}

// --- on a GPU ----------------------------------------------------------------------------------------

TEST_CASE("on a GPU, GraphedStep replays take the eager steps, and a failed capture falls back", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(8);
  Net net, ref;
  copy_weights(net, ref);
  net.to(cuda);
  ref.to(cuda);
  auto opt = build_optimizer(adamw_config(), net), ref_opt = build_optimizer(adamw_config(), ref);
  const auto params = net.parameters();
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < 8; ++s) {
    xs.push_back(torch::randn({16, 6}).pin_memory());
    ys.push_back(torch::randn({16, 3}).pin_memory());
  }
  const double rates[] = {0.01, 0.02, 0.03, 0.02, 0.01, 0.005, 0.002, 0.001};
  {
    device::CudaSideStream side(0);
    GraphedStep graphed(*opt, params, cuda, [&](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
      return body_for(net, *opt, params, x, y);
    });
    std::vector<double> losses, ref_losses;
    for (int s = 0; s < 8; ++s) {
      auto x = xs[s].to(cuda), y = ys[s].to(cuda);
      if (s > 0) {
        torch::NoGradGuard ng;
        ref_losses.push_back(torch::mse_loss(ref.forward(x), y).item<double>());
      }
      if (s == 0) {
        eager_step(net, *opt, x, y, rates[s]);  // warm-up: the optimizer creates its state
      } else if (s == 1) {
        set_learning_rate(*opt, rates[s]);
        auto out = graphed.capture_and_run({x}, {y}, rates[s]);
        INFO(graphed.failure());
        REQUIRE(out.has_value());
        losses.push_back(out->loss.item<double>());
      } else {
        set_learning_rate(*opt, rates[s]);
        auto out = graphed.replay({xs[s]}, {ys[s]}, rates[s]);
        REQUIRE(out.has_value());
        losses.push_back(out->loss.item<double>());
      }
      eager_step(ref, *ref_opt, x, y, rates[s]);
    }
    REQUIRE(losses.size() == ref_losses.size());
    for (size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == Approx(ref_losses[i]).epsilon(1e-5));
    CHECK(max_diff(net, ref) < 1e-5);
    // a batch of another shape is refused: the caller steps eagerly
    CHECK_FALSE(graphed.replay({torch::randn({8, 6})}, {torch::randn({8, 3})}, 0.01).has_value());
  }
  for (auto& [name, t] : optimizer_state_tensors(*opt, net))
    if (name.ends_with(".step")) CHECK(t.item<int64_t>() == 8);

  // a body that reads a value on the host cannot be captured: nothing of it happens
  Net other;
  other.to(cuda);
  auto other_opt = build_optimizer(adamw_config(), other);
  const auto other_params = other.parameters();
  device::CudaSideStream side(0);
  GraphedStep bad(*other_opt, other_params, cuda, [&](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
    auto r = body_for(other, *other_opt, other_params, x, y);
    (void)r.loss.item<double>();  // a host synchronisation inside the capture
    return r;
  });
  auto x = xs[0].to(cuda), y = ys[0].to(cuda);
  eager_step(other, *other_opt, x, y, 0.01);
  auto before = other.parameters()[0].clone();
  CHECK_FALSE(bad.capture_and_run({x}, {y}, 0.01).has_value());
  CHECK_FALSE(bad.failure().empty());
  CHECK(torch::equal(before, other.parameters()[0]));
  for (auto& [name, t] : optimizer_state_tensors(*other_opt, other))
    if (name.ends_with(".step")) CHECK(t.item<int64_t>() == 1);
  eager_step(other, *other_opt, x, y, 0.01);  // the CUDA context is usable after the failed capture
  CHECK_FALSE(torch::equal(before, other.parameters()[0]));
}

TEST_CASE("on a GPU, graphed runs take the eager runs' steps (ResNet fp32, GPT bf16) and resume exactly", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  auto dir = test::scratch_dir("graphs_gpu");
  const std::string resnet =
      "run: {name: r, out_dir: runs, seed: 5, deterministic: true}\n"
      "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 10, channels_last: true}\n"
      "data: {format: synthetic, workers: 2, synthetic: {num_samples: 1024, val_samples: 64, image_size: 28}}\n"
      "train: {batch_size: 32, grad_accum: 2, max_steps: 12, log_every: 1, grad_clip: 1.0, device: cuda, precision: fp32,\n"
      "        tf32: false}\n"
      "optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005}\n"
      "schedule: {name: cosine, warmup_steps: 3}\nlog: {progress: off}\n";
  // deterministic runs (cuDNN and cuBLAS pick fixed algorithms), so the graphed steps must match the
  // eager ones to rounding; the GPT uses the explicit attention path (the flash backward accumulates
  // in a nondeterministic order)
  const std::string math = "--set model.attention=math ";
  for (const auto& [name, yaml, args] : {std::tuple{std::string("resnet"), resnet, std::string()},
                                         std::tuple{std::string("gpt"), gpt_config("cuda", "bf16", 12), math}}) {
    INFO(name);
    const double tolerance = 1e-5;
    auto eager = run_config(dir, name + "-eager", yaml, args);
    auto graphs = run_config(dir, name + "-graphs", yaml, args + "--set train.cuda_graphs=true");
    INFO(graphs.result.output);
    REQUIRE(eager.result.exit_code == 0);
    REQUIRE(graphs.result.exit_code == 0);
    CHECK(graphs.result.output.find("train.cuda_graphs: step 4 captured") != std::string::npos);
    REQUIRE(graphs.records.size() == 12);
    CHECK(worst_relative(eager.records, graphs.records, "loss") < tolerance);
    CHECK(worst_relative(eager.records, graphs.records, "grad_norm") < 10 * tolerance);
    CHECK(worst_relative(eager.records, graphs.records, "lr") == 0.0);
  }
  // resume: a graphed run started from the step-4 checkpoint of another graphed run continues like it
  const std::string ckpt = "checkpoint: {every_steps: 4, keep_last: 10}\n";
  auto a = run_config(dir, "a", gpt_config("cuda", "bf16", 12, ckpt), math + "--set train.cuda_graphs=true");
  REQUIRE(a.result.exit_code == 0);
  namespace fs = std::filesystem;
  fs::create_directories(dir / "runs" / "b" / "checkpoints");
  fs::copy(dir / "runs" / "a" / "checkpoints" / "step-4", dir / "runs" / "b" / "checkpoints" / "step-4",
           fs::copy_options::recursive);
  auto b = run_config(dir, "b", gpt_config("cuda", "bf16", 12, ckpt), math + "--set train.cuda_graphs=true");
  INFO(b.result.output);
  REQUIRE(b.result.exit_code == 0);
  CHECK(b.result.output.find("train.cuda_graphs: step 8 captured") != std::string::npos);
  REQUIRE(b.records.size() == 8);
  std::vector<nlohmann::json> a_tail(a.records.begin() + 4, a.records.end());
  CHECK(worst_relative(a_tail, b.records, "loss") < 1e-5);
}
