// Record serialisation, memory probes, MFU and console formatting.
#include <catch2/catch.hpp>

#include "obs/memory.hpp"
#include "obs/mfu.hpp"
#include "obs/progress.hpp"
#include "obs/records.hpp"

using namespace trainer::obs;

TEST_CASE("a train record leaves out what was not measured", "[unit]") {
  TrainRecord r;
  r.step = 10;
  r.loss = 1.25;
  auto j = to_json(r);
  CHECK(j.at("kind") == "train");
  CHECK(j.at("step") == 10);
  CHECK(j.at("loss") == 1.25);
  for (const char* k : {"loss_scale", "tokens_per_s", "comm_ms", "rss_mb", "cuda_allocated_mb", "mfu"})
    CHECK_FALSE(j.contains(k));
  r.loss_scale = 1024.0;
  r.mfu = 0.4;
  j = to_json(r);
  CHECK(j.at("loss_scale") == 1024.0);
  CHECK(j.at("mfu") == 0.4);
}

TEST_CASE("an eval record carries the metrics of its kind only", "[unit]") {
  EvalRecord r;
  r.accuracy = 0.9;
  r.top5 = 1.0;
  auto j = to_json(r);
  CHECK(j.at("kind") == "eval");
  CHECK(j.at("accuracy") == 0.9);
  CHECK_FALSE(j.contains("bpb"));
  auto s = scalars(r);
  REQUIRE(s.size() == 3);
  CHECK(s[1] == std::pair<std::string, double>{"eval/accuracy", 0.9});
}

namespace {

// an eval record at `step` whose best is this evaluation's `metric`
EvalRecord eval_record_at(int64_t step, double loss, const std::string& metric, double best, double ms) {
  EvalRecord r;
  r.step = step;
  r.loss = loss;
  r.best_metric = metric;
  r.best_value = best;
  r.best_step = step;
  r.eval_ms = ms;
  return r;
}

}  // namespace

TEST_CASE("the eval line gives the flip TTA and EMA figures beside the plain ones", "[unit]") {
  EvalRecord r = eval_record_at(8424, 0.2336, "accuracy", 0.9469, 3300);
  r.accuracy = 0.9469;
  CHECK(format_eval_line(r) == "eval step 8424 | loss 0.2336 | accuracy 94.69% | best accuracy 0.9469 at step 8424 | 3300 ms");
  r.tta_loss = 0.2278;
  r.tta_accuracy = 0.9473;
  r.ema_loss = 0.2312;
  r.ema_accuracy = 0.9463;
  CHECK(format_eval_line(r) ==
        "eval step 8424 | loss 0.2336 | accuracy 94.69% | flip TTA loss 0.2278 accuracy 94.73% | EMA loss 0.2312 "
        "accuracy 94.63% | best accuracy 0.9469 at step 8424 | 3300 ms");
  // a language model's: perplexity and bits per byte for both weights
  EvalRecord t = eval_record_at(500, 1.25, "loss", 1.25, 120);
  t.ppl = 3.490;
  t.bpb = 1.8034;
  t.ema_loss = 1.2;
  t.ema_ppl = 3.320;
  t.ema_bpb = 1.7312;
  CHECK(format_eval_line(t) == "eval step 500 | loss 1.2500 | ppl 3.490 | bpb 1.8034 | EMA loss 1.2000 ppl 3.320 bpb 1.7312 | "
                               "best loss 1.2500 at step 500 | 120 ms");
}

TEST_CASE("VmRSS and VmHWM are read from /proc status text", "[unit]") {
  auto m = parse_proc_status("Name:\ttrainer\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t3\n");
  REQUIRE(m);
  CHECK(m->rss_mb == 100.0);
  CHECK(m->peak_rss_mb == 200.0);
  CHECK_FALSE(parse_proc_status("Name:\tx\nVmRSS:\t1 kB\n"));  // no VmHWM: not measured
  auto live = host_memory();
  REQUIRE(live);
  CHECK(live->rss_mb > 1.0);
  CHECK(live->peak_rss_mb >= live->rss_mb);
}

TEST_CASE("MFU is achieved FLOP/s over the devices' peak", "[unit]") {
  // 1e9 FLOPs per sample at 1000 samples/s on 2 devices of 1 TFLOP/s: 1e12 / 2e12
  CHECK(*compute_mfu(1e9, 1000, 2, 1.0) == Approx(0.5));
  CHECK_FALSE(compute_mfu(1e9, 1000, 1, 0.0));
  CHECK(*known_peak_tflops("NVIDIA H100 80GB HBM3", trainer::config::Precision::Bf16) == 989.0);
  CHECK(*known_peak_tflops("NVIDIA A100-SXM4-40GB", trainer::config::Precision::Fp32) == 156.0);
  // train.tf32 off: fp32 matmuls run on the FP32 units, whose peak is far lower than TF32's
  CHECK(*known_peak_tflops("NVIDIA A100-SXM4-40GB", trainer::config::Precision::Fp32, /*tf32=*/false) == 19.5);
  CHECK(*known_peak_tflops("NVIDIA H200", trainer::config::Precision::Fp32, /*tf32=*/false) == 66.9);
  CHECK(*known_peak_tflops("NVIDIA H200", trainer::config::Precision::Bf16, /*tf32=*/false) == 989.0);  // tf32 says nothing about bf16
  CHECK_FALSE(known_peak_tflops("cpu", trainer::config::Precision::Fp32));
}

TEST_CASE("progress line and durations", "[unit]") {
  CHECK(format_duration(65) == "01:05");
  CHECK(format_duration(3725) == "1:02:05");
  CHECK(format_progress_line(50, 100, 10.0, 1.5, 10) == "[#####.....] 50/100 steps  10.00 it/s  ETA 00:05  loss 1.5000");
  // before the first log step there is no loss to show (not 0.0000)
  CHECK(format_progress_line(3, 100, 1.0, std::nullopt, 10) == "[..........] 3/100 steps  1.00 it/s  ETA 01:37  loss --");
  // the ETA line: 20 steps from step 1 (t = 4 s) to step 21 (t = 14 s) is 0.5 s a step; 179 steps left
  // end 89.5 s after 2026-12-03 07:00:00 UTC (1796281200)
  CHECK(format_eta_line(1, 4.0, 21, 14.0, 200, 1796281200.0) ==
        "ETA: 179 of 200 steps left at 0.500 s/step (measured over steps 1-21): 01:30 more, ending about 2026-12-03 "
        "07:01 UTC");
  auto xterm = [](const char* n) -> const char* { return std::string(n) == "TERM" ? "xterm" : nullptr; };
  CHECK(progress_bar_wanted("auto", true, xterm));
  CHECK_FALSE(progress_bar_wanted("auto", false, xterm));
  CHECK(progress_bar_wanted("on", false, xterm));
  CHECK_FALSE(progress_bar_wanted("off", true, xterm));
}
