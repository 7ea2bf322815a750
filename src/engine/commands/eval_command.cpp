#include "engine/commands/eval_command.hpp"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/exit_codes.hpp"
#include "config/file_write.hpp"
#include "config/load.hpp"
#include "data/dataset.hpp"
#include "dist/dist_context.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/commands/inference.hpp"
#include "engine/eval/evaluator.hpp"
#include "io/checkpoint.hpp"
#include "obs/logging.hpp"

namespace trainer::engine {
namespace {

nlohmann::json eval_json(const EvalResult& r, const InferenceModel& m, double seconds, bool tokens) {
  nlohmann::json j = {{"kind", "eval"}, {"step", m.step}, {"checkpoint", m.weights}, {"loss", r.loss},
                      {"count", r.count}};
  if (r.accuracy) j["accuracy"] = *r.accuracy;
  if (r.top5) j["top5"] = *r.top5;
  if (r.ppl) j["ppl"] = *r.ppl;
  if (r.bpb) j["bpb"] = *r.bpb;
  if (r.tta_loss) j["tta_loss"] = *r.tta_loss;
  if (r.tta_accuracy) j["tta_accuracy"] = *r.tta_accuracy;
  if (r.tta_top5) j["tta_top5"] = *r.tta_top5;
  j["eval_s"] = seconds;
  // `count` is tokens for a language model: the rate is too, and named so
  j[tokens ? "tokens_per_s" : "samples_per_s"] = seconds > 0 ? static_cast<double>(r.count) / seconds : 0.0;
  return j;
}

std::string eval_line(const EvalResult& r, const InferenceModel& m, double seconds, bool tokens) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(4) << "eval " << m.weights << (m.step >= 0 ? " (step " + std::to_string(m.step) + ")" : "")
    << ": loss " << r.loss;
  if (r.accuracy) s << ", accuracy " << std::setprecision(2) << 100 * *r.accuracy << " %";
  if (r.top5) s << ", top-5 " << std::setprecision(2) << 100 * *r.top5 << " %";
  if (r.bpb) s << ", " << std::setprecision(3) << *r.bpb << " bits per byte";
  if (r.ppl) s << ", perplexity " << std::setprecision(2) << *r.ppl;
  if (r.tta_accuracy)
    s << "; flip TTA: loss " << std::setprecision(4) << *r.tta_loss << ", accuracy " << std::setprecision(2)
      << 100 * *r.tta_accuracy << " %";
  s << "; " << r.count << (tokens ? " tokens" : " samples") << " in " << std::setprecision(2) << seconds << " s ("
    << std::setprecision(0) << (seconds > 0 ? static_cast<double>(r.count) / seconds : 0.0) << "/s)";
  return s.str();
}

int eval_run(const EvalArgs& args) {
  if (!args.output.empty()) check_output_file("--output", args.output, {args.config, args.checkpoint});
  // the record is written after the evaluation: a folder that is not there failed it only then
  if (!args.output.empty())
    if (const auto folder = std::filesystem::absolute(args.output).parent_path(); !std::filesystem::is_directory(folder))
      throw std::invalid_argument("--output " + args.output + ": its folder " + folder.string() + " does not exist");
  const auto env = dist::detect_launch_env();
  const auto loaded = load_checked(args, env);
  // not into the data it reads (a validation image replaced by the record)
  if (!args.output.empty()) check_output_file("--output", args.output, {}, {loaded.cfg.data.path, loaded.cfg.data.val_path});
  obs::init_console_logging(loaded.cfg.log.level);
  const InferenceModel m = load_inference_model(loaded.cfg, env, args.checkpoint);
  const auto& c = m.cfg;
  if (c.train.batch_size == 0)
    throw std::invalid_argument(m.weights + " does not record the micro-batch train.batch_size auto chose; give it "
                                "with --set train.batch_size=N");
  auto dist = dist::DistContext::create(env, c.dist, m.device, config::config_hash(c));
  auto datasets = data::create_datasets(c.data, c.model, c.run.seed);
  check_same_classes(m.classes, datasets.train->class_names(), "the weights of " + m.weights);
  if (!datasets.val)
    throw std::invalid_argument("the config's data has no validation split to evaluate (data.val_path, or "
                                "data.val_fraction for text)");
  const bool tokens = datasets.val->kind() == data::SampleKind::Tokens;
  Evaluator evaluator(datasets.val, run_eval_setup(c, env, m.precision, m.device, tokens), dist.get(),
                      env.world_size);
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult r = evaluator.run(*m.model);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.count == 0) throw std::runtime_error("the validation split gave no samples to evaluate");
  if (env.rank != 0) return kExitOk;
  std::cout << eval_line(r, m, seconds, tokens) << "\n";
  // the checkpoint's path need not be UTF-8, JSON must be: stray bytes become U+FFFD
  const std::string record = eval_json(r, m, seconds, tokens).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (args.output.empty()) {
    std::cout << record << "\n" << std::flush;
  } else {
    try {  // atomically: a failed write leaves an earlier record as it was
      write_file_atomic(args.output, record + "\n");
    } catch (const std::exception& e) {
      throw std::runtime_error("--output " + args.output + ": cannot write the record: " + e.what());
    }
  }
  return kExitOk;
}

}  // namespace

int cmd_eval(const EvalArgs& args) { return run_command([&] { return eval_run(args); }); }

}  // namespace trainer::engine
