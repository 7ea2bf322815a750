#include "engine/commands/predict_command.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/exit_codes.hpp"
#include "config/file_read.hpp"
#include "config/file_write.hpp"
#include "config/load.hpp"
#include "data/dataset.hpp"
#include "data/image_decode.hpp"
#include "data/image_inputs.hpp"
#include "device/device.hpp"
#include "dist/launch_env.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/commands/generate.hpp"
#include "engine/commands/inference.hpp"
#include "engine/eval/evaluator.hpp"
#include "obs/logging.hpp"

namespace trainer::engine {
namespace {

using PredictClock = std::chrono::steady_clock;

double predict_seconds_since(PredictClock::time_point t0) {
  return std::chrono::duration<double>(PredictClock::now() - t0).count();
}

std::string predict_read_file(const std::string& path, const char* what) {
  try {
    return RegularFile::open(path, 64u << 20, what).read_all();
  } catch (const FileReadError& e) {
    throw std::invalid_argument(e.what());
  }
}

// --labels (one name per line), else the image folder's class folders, else the indices.
std::vector<std::string> predict_class_names(const PredictArgs& a, const data::ImageInputSpec& spec, int64_t classes) {
  std::vector<std::string> names;
  if (!a.labels.empty()) {
    std::istringstream in(predict_read_file(a.labels, "a labels file"));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      names.push_back(line);
    }
    while (!names.empty() && names.back().empty()) names.pop_back();  // a trailing blank line
    if (static_cast<int64_t>(names.size()) != classes)
      throw std::invalid_argument("--labels " + a.labels + ": " + std::to_string(names.size()) +
                                  " names, but the model has " + std::to_string(classes) + " classes");
    for (const auto& n : names)
      if (config::first_invalid_utf8(n)) throw std::invalid_argument("--labels " + a.labels + ": not valid UTF-8");
    return names;
  }
  if (static_cast<int64_t>(spec.classes.size()) == classes) return spec.classes;
  for (int64_t i = 0; i < classes; ++i) names.push_back(std::to_string(i));
  return names;
}

// data.on_bad_sample: skip, a batch that held a file that does not decode: its images one at a time,
// the bad ones named in a warning and left out of `chunk`; `pixels` the good ones'. Returns how many
// were left out.
size_t load_good_images(std::vector<std::string>& chunk, const data::ImageInputSpec& spec, torch::Tensor& pixels) {
  std::vector<std::string> good;
  std::vector<torch::Tensor> parts;
  for (const auto& file : chunk) {
    try {
      parts.push_back(data::load_image_batch({file}, spec));
      good.push_back(file);
    } catch (const data::DataError& e) {
      spdlog::warn("{} (skipped: data.on_bad_sample: skip)", e.what());
    }
  }
  const size_t left_out = chunk.size() - good.size();
  chunk = std::move(good);
  if (!parts.empty()) pixels = torch::cat(parts);
  return left_out;
}

// A name that is not UTF-8 (a Latin-1 file name of an old dataset) prints with U+FFFD in JSON, so two
// names could print alike (found from outside): its bytes go beside it in hex (Python: bytes.fromhex).
void put_hex_if_not_utf8(nlohmann::json& j, const char* key, const std::string& name) {
  if (!config::first_invalid_utf8(name)) return;
  std::string hex;
  for (unsigned char ch : name) hex += fmt::format("{:02x}", ch);
  j[key] = hex;
}

void predict_images(const PredictArgs& a, const InferenceModel& m, std::ostream& out) {
  const auto& c = m.cfg;
  if (a.has_prompt || !a.prompt_file.empty())
    throw std::invalid_argument("--prompt / --prompt-file are for language models; model.arch " + c.model.arch +
                                " takes images (--input)");
  if (a.inputs.empty()) throw std::invalid_argument("--input: give image files or folders");
  const auto files = data::expand_image_inputs(a.inputs, c.data.on_bad_sample == "skip");
  const auto spec = data::image_input_spec(c.data, c.model, c.run.seed);
  check_same_classes(m.classes, spec.classes, "the weights of " + m.weights);
  const int64_t classes = c.model.num_classes;
  const auto names = predict_class_names(a, spec, classes);
  if (a.top_k == 0) throw std::invalid_argument("--top-k: an image model lists at least 1 class");
  const int64_t k = std::min<int64_t>(a.top_k < 0 ? 5 : a.top_k, classes);
  spdlog::info("predicting {} images with {} ({}); inputs {}x{}x{} normalised as {}", files.size(), m.weights,
               c.model.arch, spec.channels, spec.height, spec.width, spec.normalizer.describe());
  torch::NoGradGuard no_grad;
  const bool cl = c.model.channels_last;
  const auto t0 = PredictClock::now();
  size_t written = 0, skipped = 0;
  const bool skip_bad = c.data.on_bad_sample == "skip";
  for (size_t begin = 0; begin < files.size() && !stop_requested(); begin += static_cast<size_t>(a.batch_size)) {
    const size_t end = std::min(files.size(), begin + static_cast<size_t>(a.batch_size));
    std::vector<std::string> chunk(files.begin() + begin, files.begin() + end);
    written = end;
    torch::Tensor pixels;
    try {
      pixels = data::load_image_batch(chunk, spec);
    } catch (const data::DataError& e) {
      if (!skip_bad)  // the way on, named (found from outside: the error alone, nothing printed)
        throw data::DataError(std::string(e.what()) + " (data.on_bad_sample: error; `--set data.on_bad_sample=skip` "
                              "leaves such images out with a warning and predicts the others)");
      skipped += load_good_images(chunk, spec, pixels);  // this batch again, one image at a time
      if (chunk.empty()) continue;
    }
    auto x = to_model_device(pixels, m.device, cl);
    torch::Tensor logits;
    {
      AutocastScope autocast(m.precision, m.device);
      logits = m.model->forward(x);
    }
    const auto probs = torch::softmax(logits.to(torch::kCPU, torch::kFloat), 1);
    const auto [top_p, top_i] = probs.topk(k, 1);
    for (size_t i = 0; i < chunk.size(); ++i) {
      nlohmann::json j = {{"path", chunk[i]}, {"top", nlohmann::json::array()}};
      put_hex_if_not_utf8(j, "path_hex", chunk[i]);
      for (int64_t r = 0; r < k; ++r) {
        const int64_t idx = top_i[i][r].item<int64_t>();
        nlohmann::json t = {{"class", names[idx]}, {"index", idx}, {"prob", top_p[i][r].item<double>()}};
        put_hex_if_not_utf8(t, "class_hex", names[idx]);
        j["top"].push_back(std::move(t));
      }
      // a file name need not be UTF-8, JSON must be: stray bytes become U+FFFD instead of an exception
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    out.flush();  // each batch's lines as they are ready: a stopped or killed run keeps them
  }
  const double s = predict_seconds_since(t0);
  spdlog::info("{} images in {:.2f} s ({:.1f} images/s, batches of {}, {} threads)", written - skipped, s,
               s > 0 ? static_cast<double>(written - skipped) / s : 0.0, a.batch_size, at::get_num_threads());
  if (skipped > 0) {
    if (skipped == written) throw data::DataError(fmt::format("none of the {} images could be decoded", skipped));
    spdlog::warn("{} of {} images could not be decoded and were skipped (data.on_bad_sample: skip)", skipped, written);
  }
  if (written < files.size() && stop_requested())
    spdlog::warn("stopped by {}: {} of {} images written", stop_signal_name(), written, files.size());
}

// The prompt as token ids: its bytes for a byte-level model, else ids written as numbers.
std::vector<int64_t> predict_prompt_tokens(const std::string& text, bool byte_level, int64_t vocab) {
  std::vector<int64_t> ids;
  if (byte_level) {
    for (unsigned char ch : text) ids.push_back(ch);
    if (ids.empty()) {  // as nanoGPT's sample.py: a model continues a text of at least one token
      ids.push_back('\n');
      spdlog::info("the prompt is empty: the text starts from a newline");
    }
    return ids;
  }
  std::string t = text;
  for (char& ch : t)
    if (ch == ',') ch = ' ';
  std::istringstream in(t);
  for (std::string word; in >> word;) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= vocab)
      throw std::invalid_argument("the prompt of a token model is token ids in [0, " + std::to_string(vocab) +
                                  ") separated by spaces or commas; got '" + config::printable(word) + "'");
    ids.push_back(id);
  }
  if (ids.empty()) throw std::invalid_argument("the prompt has no token ids (a token model has no text encoding)");
  return ids;
}

void predict_text(const PredictArgs& a, const InferenceModel& m, std::ostream& out) {
  const auto& c = m.cfg;
  if (!a.inputs.empty())
    throw std::invalid_argument("--input is for image models; model.arch " + c.model.arch + " takes a --prompt");
  if (a.has_prompt == !a.prompt_file.empty())
    throw std::invalid_argument("give the prompt with exactly one of --prompt TEXT and --prompt-file FILE");
  const std::string text = a.has_prompt ? a.prompt : predict_read_file(a.prompt_file, "a prompt file");
  const bool byte_level = c.data.format == config::DataFormat::Text;  // the text reader's tokens are the file's bytes
  const auto prompt = predict_prompt_tokens(text, byte_level, c.model.vocab_size);
  SamplingOptions so;
  so.max_new_tokens = a.max_new_tokens;
  so.temperature = a.temperature;
  so.top_k = std::max<int64_t>(a.top_k, 0);
  so.seed = a.seed;
  // streamed: the prompt, then each token as it is drawn (a stop signal ends the text where it is)
  Utf8Stream text_out(out);
  bool first = true;
  auto put = [&](int64_t t) {
    if (byte_level) text_out.put(t);
    else out << (first ? "" : " ") << t << std::flush;
    first = false;
  };
  for (const auto t : prompt) put(t);
  int64_t drawn = 0;
  const auto t0 = PredictClock::now();
  generate_tokens(*m.model, prompt, c.model.block_size, so, m.device, m.precision, [&](int64_t t) {
    put(t);
    ++drawn;
    return !stop_requested();
  });
  const double s = predict_seconds_since(t0);
  text_out.finish();
  out << "\n" << std::flush;
  spdlog::info("{} new tokens in {:.2f} s ({:.1f} tokens/s; prompt {} tokens, context up to {}, seed {}, {} threads)",
               drawn, s, s > 0 ? static_cast<double>(drawn) / s : 0.0, prompt.size(), c.model.block_size, so.seed,
               at::get_num_threads());
  if (drawn < so.max_new_tokens)
    spdlog::warn("stopped by {}: {} of {} new tokens written", stop_signal_name(), drawn, so.max_new_tokens);
}

int predict_run(const PredictArgs& a) {
  if (a.batch_size < 1) throw std::invalid_argument("--batch-size: must be at least 1");
  if (a.max_new_tokens < 0) throw std::invalid_argument("--max-new-tokens: must be >= 0");
  if (!(a.temperature >= 0) || !std::isfinite(a.temperature))
    throw std::invalid_argument("--temperature: must be a finite number >= 0");
  if (!a.output.empty()) {  // before anything is read: a FIFO would block its open, an input be emptied
    std::vector<std::filesystem::path> inputs{a.config, a.checkpoint, a.prompt_file, a.labels};
    inputs.insert(inputs.end(), a.inputs.begin(), a.inputs.end());
    // inside an --input folder only a name predict reads as an image is refused (it empties an image
    // it is about to read, or adds one); preds.jsonl beside the photos is not read
    check_output_file("--output", a.output, inputs,
                      data::is_decodable_image_name(a.output)
                          ? std::vector<std::filesystem::path>(a.inputs.begin(), a.inputs.end())
                          : std::vector<std::filesystem::path>{});
  }
  const auto env = dist::detect_launch_env();
  const auto loaded = load_checked(a, env);
  // nor, by the same rule, into the config's data, which predict opens too (class names, statistics):
  // a training image was replaced by the lines, exit 0 (found from outside, 2026-12-07)
  if (!a.output.empty() && data::is_decodable_image_name(a.output))
    check_output_file("--output", a.output, {}, {loaded.cfg.data.path, loaded.cfg.data.val_path});
  obs::init_console_logging(loaded.cfg.log.level);
  if (env.rank != 0) {  // launched by mistake: one answer, not one per rank
    spdlog::info("trainer predict runs on rank 0 only; rank {} has nothing to do", env.rank);
    return kExitOk;
  }
  auto cfg = loaded.cfg;
  // the process settings take --threads, and so does their warning of a busy host (it said the config's)
  if (a.threads > 0) cfg.train.threads = a.threads;
  const InferenceModel m = load_inference_model(cfg, env, a.checkpoint);
  // --threads, else train.threads's rule (0: cores / ranks on this node); after the model is loaded,
  // whose process settings take the checkpoint's train.threads (the log said that count, not --threads)
  at::set_num_threads(static_cast<int>(a.threads > 0 ? a.threads
                                                     : device::default_threads(m.cfg.train.threads,
                                                                               env.local_world_size)));
  // --output is streamed (a long generation can be followed, and what a stop leaves is written), so
  // not written atomically as report's and eval's are
  std::ofstream file;
  if (!a.output.empty()) {
    file.open(a.output, std::ios::trunc);
    if (!file) throw std::runtime_error("--output " + a.output + ": cannot open for writing");
  }
  std::ostream& out = a.output.empty() ? std::cout : file;
  if (m.model->input_kind() == models::InputKind::Image) predict_images(a, m, out);
  else predict_text(a, m, out);
  if (!out) throw std::runtime_error("writing the results failed" + (a.output.empty() ? "" : ": " + a.output));
  // stopped: what was predicted so far is written; the exit says it is not all
  if (const int sig = stop_signal()) return 128 + sig;
  return kExitOk;
}

}  // namespace

int cmd_predict(const PredictArgs& args) { return run_command([&] { return predict_run(args); }); }

}  // namespace trainer::engine
