#include "engine/commands/bench_data.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/format.h>

#include "config/config_diff.hpp"
#include "config/exit_codes.hpp"
#include "config/file_read.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/stage_clock.hpp"
#include "data/vector_cap.hpp"
#include "device/device.hpp"
#include "engine/commands/command_common.hpp"
#include "obs/logging.hpp"

namespace trainer::engine {
namespace {

struct Measured {
  int64_t workers = 0, samples = 0;
  double seconds = 0;
  std::array<int64_t, data::kStages> stage_ns{};
  double samples_per_s() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
  double per_worker() const { return samples_per_s() / static_cast<double>(std::max<int64_t>(1, workers)); }
};

// `batches` batches of the pipeline after a warm-up: the wall time, and the stages' thread time
// over the timed part. The warm-up starts the threads and drains what they queued before the first
// batch was asked for (the buffer plus one batch in flight per worker). The workers refill the
// buffer whenever this thread is not asking (a busy host deschedules it), so the batches already
// built when the clock starts are handed over first and not counted: the counted ones were built
// while timing. Without that, they were counted at the rate of popping a queue (millions of
// samples/s, no stage time at all).
Measured measure(const std::shared_ptr<data::Dataset>& ds, const config::RunConfig& cfg, int64_t workers,
                 int64_t batches, bool train) {
  data::LoaderOptions o;
  o.batch_size = cfg.train.batch_size;
  o.workers = workers;
  o.prefetch = cfg.data.prefetch;  // as the run's loader: every worker busy, data.prefetch batches waiting
  o.seed = cfg.run.seed;
  o.train = train;
  data::DataLoader loader(ds, o);
  Measured m;
  m.workers = workers;
  const int64_t warm_up = std::max<int64_t>(2, loader.in_flight_limit() + 1);  // the whole in-flight bound, and one
  for (int64_t k = 0; k < warm_up; ++k)
    if (!loader.next())
      throw std::invalid_argument(fmt::format(
          "the {} split has fewer than the {} warm-up batches that {} worker(s) need at batch {}",
          train ? "training" : "validation", warm_up, workers, o.batch_size));
  data::StageClock::enable(true);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t built_before = loader.ready_batches();  // after t0: one finished in between is not counted
  for (int64_t k = 0; k < built_before + batches; ++k) {
    auto b = loader.next();
    if (!b) break;  // the end of a validation pass
    if (k >= built_before) m.samples += b->input.size(0);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.stage_ns = data::StageClock::totals();
  data::StageClock::enable(false);
  if (m.samples == 0)  // a validation pass that ended within the batches already built
    throw std::invalid_argument(fmt::format(
        "the {} split ended before a batch was built while timing ({} worker(s) at batch {} build {} ahead): "
        "it needs more batches", train ? "training" : "validation", workers, o.batch_size, warm_up + built_before));
  return m;
}

// "read 3 %, decode 71 %, augment 20 %, collate 6 %" of the stages' summed thread time. Data with no
// file to decode names a sample's time by what it is: token windows are read (copied out of the
// file's pages), synthetic images generated.
std::string split_text(const Measured& m, config::DataFormat format) {
  using data::Stage;
  auto at = [&](Stage s) { return static_cast<double>(m.stage_ns[static_cast<size_t>(s)]); };
  const double read = at(Stage::Read), decode = std::max(0.0, at(Stage::Decode) - read),
               augment = std::max(0.0, at(Stage::Sample) - at(Stage::Decode)), collate = at(Stage::Collate);
  const double total = read + decode + augment + collate;
  if (total <= 0) return "-";
  auto pct = [&](double v) { return static_cast<int>(std::lround(100 * v / total)); };
  if (format == config::DataFormat::Text || format == config::DataFormat::Tokens)
    return fmt::format("read {} % (token windows), collate {} %", pct(read + decode + augment), pct(collate));
  if (format == config::DataFormat::Synthetic)
    return fmt::format("generate {} %, collate {} %", pct(read + decode + augment), pct(collate));
  return fmt::format("read {} %, decode {} %, augment {} %, collate {} %", pct(read), pct(decode), pct(augment),
                     pct(collate));
}

// The run's rate without its data wait: median over its train records (the first one left out: it
// holds start-up) of samples_per_s x step_ms / (step_ms - data_wait_ms), and how many records gave
// it. Read before minutes of measuring, so a file that cannot answer is an error up front: a line
// that is not a JSON object (except an unterminated last one, which a killed run can leave), or no
// usable train record after the first.
std::pair<double, size_t> step_rate(const std::string& run_dir) {
  const std::string path = run_dir + "/metrics.jsonl";
  if (std::error_code ec; !std::filesystem::exists(path, ec))
    throw std::invalid_argument(fmt::format("--run {}: no metrics.jsonl there ({})", run_dir, path));
  // a FIFO, a device or a folder is refused, not read (a FIFO would block, /dev/zero never end)
  std::istringstream in;
  try {
    in.str(RegularFile::open(path, 4ull << 30, "a run's metrics").read_all());
  } catch (const FileReadError& e) {
    throw std::invalid_argument("--run " + run_dir + ": " + e.what());
  }
  std::vector<double> rates;
  std::string line;
  int64_t train_records = 0, line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const bool terminated = !in.eof();  // getline stopped at a newline, not at the end of the file
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      if (!terminated) break;  // cut off mid-write
      throw std::invalid_argument(fmt::format("--run {}: {}:{}: not a JSON record: {}", run_dir, path, line_no,
                                              line.substr(0, 60)));
    }
    if (j.value("kind", "") != "train") continue;
    if (train_records++ == 0) continue;
    auto num = [&](const char* key) {
      const auto it = j.find(key);
      return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
    };
    const double sps = num("samples_per_s"), step = num("step_ms"), wait = num("data_wait_ms");
    if (!(sps > 0 && step > 0 && step > wait && wait >= 0)) continue;
    const double rate = sps * step / (step - wait);
    // a rate no machine reaches (1e30 samples/s, or an overflow) is a damaged or forged record
    if (!std::isfinite(rate) || rate > 1e12)
      throw std::invalid_argument(fmt::format("--run {}: {}:{}: samples_per_s {} with step_ms {} and data_wait_ms {} "
                                              "is not a rate a run measures",
                                              run_dir, path, line_no, sps, step, wait));
    rates.push_back(rate);
  }
  if (rates.empty())
    throw std::invalid_argument(fmt::format(
        "--run {}: {} has {} train record(s) and none after the first (start-up) with samples_per_s, step_ms > "
        "data_wait_ms: nothing to read a step rate from (a longer run, or a smaller train.log_every, gives some)",
        run_dir, path, train_records));
  std::sort(rates.begin(), rates.end());
  return {rates[rates.size() / 2], rates.size()};
}

// What the step rate of the run in `run_dir` is worth for `cfg`: "" when the run was trained with
// it (its config.yaml, keys that change training), else a note naming the differing keys, or that
// the run's config cannot be read. A note, not an error: a new pipeline measured against an old
// model's step is a fair question, but it must not pass as the config's own answer.
std::string run_config_note(const std::string& run_dir, const config::RunConfig& cfg) {
  const std::string file = run_dir + "/config.yaml";
  try {
    const auto saved =
        config::load_config_text(RegularFile::open(file, 16u << 20, "a run's config").read_all(), file);
    const auto changes = config::training_changes(saved.cfg, cfg);
    if (changes.empty()) return "";
    return fmt::format("note: the run in {} was trained with another config ({} -> this one: {}): its step rate is "
                       "that config's model and batch",
                       run_dir, file, config::changes_text(changes));
  } catch (const std::exception& e) {
    return fmt::format("note: the run in {} has no config this build reads ({}): the step rate may be another "
                       "config's",
                       run_dir, e.what());
  }
}

int bench(const BenchDataArgs& args) {
  const auto env = dist::detect_launch_env();
  const auto loaded = load_checked(args, env);
  obs::init_console_logging(loaded.cfg.log.level);
  const auto& cfg = loaded.cfg;
  if (cfg.train.batch_size <= 0)
    throw std::invalid_argument("train.batch_size is auto (chosen by measuring the model): give one with "
                                "--set train.batch_size=N");
  if (args.batches < 1) throw std::invalid_argument("--batches must be at least 1");
  // malloc as a run of this config sets it (engine/startup configure_process): libjpeg's per-image
  // buffers and the scratch above the mmap threshold are then reused, not mapped and faulted again
  if (cfg.train.reuse_host_memory) device::keep_host_memory_for_reuse();
  // data.workers auto: what a run of this config on this machine would start
  const bool cuda = cfg.train.device == config::DeviceKind::Cuda ||
                    (cfg.train.device == config::DeviceKind::Auto && device::cuda_available());
  const auto run_workers = device::choose_workers(cfg.data.workers, cuda, env.local_world_size);
  std::vector<int64_t> workers = args.workers;
  if (workers.empty()) workers = {1, 2, run_workers.workers};
  for (int64_t w : workers)
    if (w < 0 || w > 256) throw std::invalid_argument(fmt::format("--workers {}: give 0 to 256", w));
  std::sort(workers.begin(), workers.end());
  workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
  std::optional<std::pair<double, size_t>> rate;  // read before minutes of measuring
  if (!args.run_dir.empty()) {
    if (workers.back() == 0)
      throw std::invalid_argument("--run: give --workers a count of at least 1: the workers a run needs are its rate "
                                  "over a worker's");
    rate = step_rate(args.run_dir);
    if (const std::string note = run_config_note(args.run_dir, cfg); !note.empty()) std::cout << note << "\n";
  }
  std::string mismatch;  // the data against model.*: measured all the same (no model here), said once
  auto sets = data::create_datasets(cfg.data, cfg.model, cfg.run.seed, data::ModelChecks::Report, &mismatch);
  if (!mismatch.empty())
    std::cout << "note: `trainer run` would refuse this config's data for its model: " << mismatch
              << "\n(bench-data measures the input pipeline alone, so it goes on)\n";
  auto ds = args.validation ? sets.val : sets.train;
  if (!ds) throw std::invalid_argument("the config's data has no validation split (data.val_path, data.val_fraction)");
  // the kernels this pipeline runs: validation has no augmentation
  const auto& aug = cfg.data.augment;
  const bool augments = !args.validation;
  const std::string kernels = data::kernel_paths(
      augments && (aug.brightness > 0 || aug.contrast > 0 || aug.saturation > 0), augments && aug.hue > 0);
  std::cout << fmt::format("bench-data {} ({} pipeline): {}; batch {}, {} timed batches per worker count\n",
                           args.config, args.validation ? "validation" : "training", ds->describe(),
                           cfg.train.batch_size, args.batches)
            << "(rates are this machine's now: other processes' load counts; stages are thread time, summed over "
               "the workers; kernels: " << kernels << ")\n"
            << fmt::format("{:>7}  {:>11}  {:>12}  {}\n", "workers", "samples/s", "per worker", "where the time goes");
  Measured best;
  for (int64_t w : workers) {
    // at least 3 batches a worker: the clock runs from one batch's completion to another's, and with
    // fewer batches than workers that interval is the workers' phase, not their rate (2 workers
    // timed over 1 batch read 0.4x and 1.5x their rate over 10 on a 2-core host)
    const int64_t timed = std::max<int64_t>(args.batches, 3 * w);
    if (timed > args.batches)
      std::cout << fmt::format("(--batches {} raised to {} for {} worker(s): at least 3 a worker)\n", args.batches,
                               timed, w);
    const Measured m = measure(ds, cfg, w, timed, !args.validation);
    std::cout << fmt::format("{:>7}  {:>11.1f}  {:>12.1f}  {}\n", w, m.samples_per_s(), m.per_worker(), split_text(m, cfg.data.format))
              << std::flush;
    if (w > 0 && m.per_worker() > best.per_worker()) best = m;
  }
  if (rate && best.workers > 0) {
    const auto needed = static_cast<int64_t>(std::ceil(rate->first / best.per_worker()));
    std::cout << fmt::format("the run in {} consumes {:.1f} samples/s without its data wait (median of {} "
                             "records); at {:.1f} samples/s a worker (measured with {}) about {} worker(s) keep "
                             "it fed (data.workers: {}{})\n",
                             args.run_dir, rate->first, rate->second, best.per_worker(), best.workers, needed,
                             run_workers.workers, cfg.data.workers < 0 ? ", auto" : "");
  }
  return kExitOk;
}

}  // namespace

int cmd_bench_data(const BenchDataArgs& args) {
  return run_command([&] { return bench(args); });
}

}  // namespace trainer::engine
