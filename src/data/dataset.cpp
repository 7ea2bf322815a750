// create_datasets(): the format -> reader dispatch, the checks of data against model, the
// normalisation statistics, and data.limit_samples.
#include "data/dataset.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/schema.hpp"
#include "config/sha256.hpp"
#include "data/image_dataset.hpp"
#include "data/readers.hpp"

namespace trainer::data {
namespace {

// The first `limit` samples of another dataset (data.limit_samples).
class LimitedDataset : public Dataset {
 public:
  LimitedDataset(std::shared_ptr<Dataset> inner, int64_t limit) : inner_(std::move(inner)), limit_(limit) {}
  int64_t size() const override { return std::min(limit_, inner_->size()); }
  SampleKind kind() const override { return inner_->kind(); }
  std::vector<int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::string describe() const override { return inner_->describe() + fmt::format(" (first {} used)", size()); }
  torch::ScalarType raw_dtype() const override { return inner_->raw_dtype(); }
  std::vector<int64_t> target_shape() const override { return inner_->target_shape(); }
  bool fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const override {
    return inner_->fill(index, epoch, augment, input, target);
  }
  torch::Tensor finish(const torch::Tensor& raw, bool pin) const override { return inner_->finish(raw, pin); }
  bool finishes_anywhere() const override { return inner_->finishes_anywhere(); }
  torch::Tensor finish_tensor(const torch::Tensor& raw, bool channels_last) const override {
    return inner_->finish_tensor(raw, channels_last);
  }
  void check_unchanged() const override { inner_->check_unchanged(); }
  const NormalizeValues* normalization() const override { return inner_->normalization(); }
  std::vector<std::string> class_names() const override { return inner_->class_names(); }
  Audit audit(const AuditOptions& o) const override {
    AuditOptions mine = o;
    mine.limit = o.limit < 0 ? size() : std::min(o.limit, size());
    return inner_->audit(mine);
  }

 private:
  std::shared_ptr<Dataset> inner_;
  int64_t limit_;
};

// An image folder is sorted by class: its first N images may be a few classes' (found from outside: a
// one-class model trained in silence). Said, with the classes that get no sample.
void warn_classes_left_out(const Dataset& train, int64_t limit) {
  const auto labels = train.first_labels(limit);
  const auto names = train.class_names();
  if (labels.empty() || names.empty()) return;
  std::vector<bool> seen(names.size(), false);
  for (const auto l : labels)
    if (l >= 0 && l < static_cast<int64_t>(seen.size())) seen[l] = true;
  std::vector<std::string> missing;
  for (size_t c = 0; c < names.size(); ++c)
    if (!seen[c]) missing.push_back(names[c]);
  if (missing.empty()) return;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", " : "") + missing[i];
  if (missing.size() > 5) list += ", ...";
  spdlog::warn("data.limit_samples {} keeps the first {} images of {}, which is sorted by class: {} of its {} classes "
               "get no training sample ({}). Make a smaller folder with some images of every class instead",
               limit, limit, train.describe(), missing.size(), names.size(), list);
}

// Per-channel values from the config: one per channel, or one for all.
std::vector<double> per_channel(const std::vector<double>& v, int64_t channels, const char* key) {
  if (static_cast<int64_t>(v.size()) == channels) return v;
  if (v.size() == 1) return std::vector<double>(channels, v[0]);
  throw DataError(fmt::format("data.normalize.{} has {} values; the images have {} channels", key, v.size(), channels));
}

void setup_normalizer(const config::NormalizeConfig& cfg, const DatasetPair& pair) {
  auto* train = dynamic_cast<ImageDataset*>(pair.train.get());
  if (!train) return;
  const int64_t c = train->sample_shape()[0];
  Normalizer n;
  if (cfg.mode == config::NormalizeMode::MeanStd) {
    if (!cfg.mean.empty() && !cfg.std.empty()) {
      n = Normalizer("mean_std", c, per_channel(cfg.mean, c, "mean"), per_channel(cfg.std, c, "std"));
    } else {
      ChannelStats s = train->compute_stats(train->stats_samples());
      n = Normalizer("mean_std", c, cfg.mean.empty() ? s.mean : per_channel(cfg.mean, c, "mean"),
                     cfg.std.empty() ? s.std : per_channel(cfg.std, c, "std"));
    }
  } else if (cfg.mode == config::NormalizeMode::Minmax) {
    ChannelStats s = train->compute_stats(train->stats_samples());
    n = Normalizer("minmax", c, s.min, s.max);
  }
  train->set_normalizer(n);
  if (auto* val = dynamic_cast<ImageDataset*>(pair.val.get())) val->set_normalizer(n);  // the training statistics
}

// The reader of data.format (readers.hpp).
DatasetPair open_reader(const config::DataConfig& data, const config::ModelConfig& model, const ImageOptions& io,
                        bool lm, int64_t seed) {
  using F = config::DataFormat;
  switch (data.format) {
    case F::Idx: return open_idx(data, io, model.num_classes);
    case F::Cifar: return open_cifar(data, io);
    case F::ImageFolder:
      if (model.in_channels != 1 && model.in_channels != 3)
        throw DataError(fmt::format("{}: image_folder decodes to 1 (grey) or 3 (RGB) channels, model.in_channels is {}",
                                    data.path, model.in_channels));
      return open_image_folder(data, io, model.in_channels);
    case F::Text: return open_text(data, model.block_size);
    case F::Tokens: return open_tokens(data, model.block_size, model.vocab_size);
    case F::Synthetic:
      return lm ? open_synthetic_tokens(data, model.block_size, model.vocab_size, seed)
                : open_synthetic_images(data, io, model.in_channels, model.num_classes);
  }
  throw DataError("unknown data.format (idx | cifar | image_folder | text | tokens | synthetic)");  // a bad cast
}

void check_against_model(const DatasetPair& pair, const config::DataConfig& data, const config::ModelConfig& model) {
  const Dataset& t = *pair.train;
  if (t.kind() == SampleKind::Image) {
    int64_t c = t.sample_shape()[0];
    if (c != model.in_channels)
      throw DataError(fmt::format("{}: the images have {} channel(s) but model.in_channels is {}", data.path, c,
                                  model.in_channels));
    if (t.num_classes() != model.num_classes)
      throw DataError(fmt::format("{}: the data has {} classes but model.num_classes is {}", data.path,
                                  t.num_classes(), model.num_classes));
    const auto* arch = config::find_arch(model.arch);
    const int64_t h = t.sample_shape()[1], w = t.sample_shape()[2];
    if (arch && arch->fixed_image_size && (h != model.image_size || w != model.image_size))
      throw DataError(fmt::format("{}: the images are {}x{} but model.arch {} takes model.image_size {}x{} "
                                  "(set data.image_size to resize)",
                                  data.path, h, w, model.arch, model.image_size, model.image_size));
    const int64_t least = arch && arch->min_image_side ? arch->min_image_side(model) : 0;
    if (h < least || w < least)
      throw DataError(fmt::format("{}: the images are {}x{} but model.arch {} takes images of at least {}x{} with these "
                                  "model settings (set data.image_size to resize)",
                                  data.path, h, w, model.arch, least, least));
  } else if (t.num_classes() > model.vocab_size) {
    throw DataError(fmt::format("{}: the data has a vocabulary of {} tokens but model.vocab_size is {}", data.path,
                                t.num_classes(), model.vocab_size));
  }
  if (pair.val && pair.val->sample_shape() != t.sample_shape())
    throw DataError(fmt::format("{}: validation samples have shape {} but training samples {}",
                                data.val_path.empty() ? pair.val->describe() : data.val_path,  // the format's own files
                                fmt::join(pair.val->sample_shape(), "x"), fmt::join(t.sample_shape(), "x")));
}

}  // namespace

Dataset::Audit Dataset::audit_each(int64_t n, const AuditOptions& o,
                                   const std::function<std::function<std::string(int64_t)>()>& reader) {
  if (o.limit >= 0) n = std::min(n, o.limit);
  const int threads = static_cast<int>(std::clamp<int64_t>(o.threads, 1, std::max<int64_t>(n, 1)));
  std::atomic<int64_t> next{0}, done{0};
  std::vector<std::vector<std::pair<int64_t, std::string>>> bad(threads);  // each thread's, merged in order
  std::mutex m;
  std::condition_variable cv;
  int running = threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const auto read = reader();
      constexpr int64_t kChunk = 32;  // claimed at once: the counter is touched once per chunk
      for (int64_t i0; (i0 = next.fetch_add(kChunk)) < n;) {
        for (int64_t i = i0; i < std::min(n, i0 + kChunk); ++i) {
          std::string why;
          try {
            why = read(i);
          } catch (const std::exception& e) {  // not one a reader names itself: still this sample's, not a crash
            why = e.what();
          }
          if (!why.empty()) bad[t].emplace_back(i, std::move(why));
        }
        done.fetch_add(std::min(n, i0 + kChunk) - i0);
      }
      std::lock_guard<std::mutex> lock(m);
      --running;
      cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lock(m);
    while (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return running == 0; }))
      if (o.progress) o.progress(done.load(), n);
  }
  for (auto& th : pool) th.join();
  std::vector<std::pair<int64_t, std::string>> all;
  for (auto& b : bad) all.insert(all.end(), std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()));
  std::sort(all.begin(), all.end());
  Audit a;
  a.read = n;
  for (auto& [i, why] : all) a.bad.push_back(std::move(why));
  return a;
}

torch::Tensor Dataset::finish_tensor(const torch::Tensor&, bool) const {
  throw std::logic_error(describe() + ": this dataset finishes its batches on the host only");
}

Example Dataset::get(int64_t index, int64_t epoch, bool augment) const {
  if (index < 0 || index >= size())
    throw DataError(fmt::format("sample index {} out of range [0, {}) in {}", index, size(), describe()));
  std::vector<int64_t> shape = sample_shape();
  shape.insert(shape.begin(), 1);
  auto raw = torch::empty(shape, torch::TensorOptions().dtype(raw_dtype()));  // (1, ...)
  std::vector<int64_t> tshape = target_shape();
  auto target = torch::empty(tshape, torch::kInt64);
  if (!fill(index, epoch, augment, raw.data_ptr(), target.data_ptr<int64_t>()))
    throw DataError(fmt::format("sample {} was skipped as bad (data.on_bad_sample: skip) in {}", index, describe()));
  return {finish(raw, false)[0], target};
}

std::string Dataset::content_digest(int64_t n) const {
  const int64_t total = size();
  if (total <= 0) return sha256_hex("empty");
  std::vector<int64_t> shape = sample_shape(), tshape = target_shape();
  auto raw = torch::empty(shape, torch::TensorOptions().dtype(raw_dtype()));
  auto target = torch::empty(tshape, torch::kInt64);
  std::string bytes;
  const int64_t take = std::min(n, total);
  for (int64_t k = 0; k < take; ++k) {
    const int64_t index = take == 1 ? 0 : k * (total - 1) / (take - 1);
    bool good = false;
    try {
      good = fill(index, 0, false, raw.data_ptr(), target.data_ptr<int64_t>());
    } catch (const DataError&) {  // on_bad_sample: error says so when the loader reaches it, as before
    }
    if (!good) {
      bytes += "bad";
      continue;
    }
    bytes.append(static_cast<const char*>(raw.data_ptr()), raw.nbytes());
    bytes.append(static_cast<const char*>(target.data_ptr()), target.nbytes());
  }
  return sha256_hex(bytes);
}

torch::TensorOptions host_options(torch::ScalarType dtype, bool pin) {
  auto o = torch::TensorOptions().dtype(dtype);
  if (pin && torch::cuda::is_available()) o = o.pinned_memory(true);
  return o;
}

torch::Tensor maybe_pinned(const torch::Tensor& t, bool pin) {
  auto opts = host_options(t.scalar_type(), pin);
  if (!opts.pinned_memory()) return t;
  auto out = torch::empty(t.sizes(), opts);
  std::memcpy(out.data_ptr(), t.contiguous().data_ptr(), t.nbytes());
  return out;
}

DataRecord record_of(const Dataset& d) {
  const NormalizeValues* v = d.normalization();
  return {v ? std::optional<NormalizeValues>(*v) : std::nullopt, d.class_names()};
}

DatasetPair create_datasets(const config::DataConfig& data, const config::ModelConfig& model, int64_t seed,
                            ModelChecks checks, std::string* mismatch) {
  const config::ArchRules* arch = config::find_arch(model.arch);
  if (!arch) throw DataError(fmt::format("model.arch '{}' is not a registered model family", model.arch));
  const bool lm = arch->input == config::ArchInput::Tokens;
  const std::string& format = config::name_of(data.format);
  if (lm && config::gives_images(data.format))
    throw DataError(fmt::format("{}: data.format {} gives images but model.arch {} takes tokens", data.path,
                                format, model.arch));
  if (!lm && config::gives_tokens(data.format))
    throw DataError(fmt::format("{}: data.format {} gives tokens but model.arch {} takes images", data.path,
                                format, model.arch));
  ImageOptions io;
  io.size = data.image_size;
  io.val_resize = data.val_resize;
  io.augment = data.augment;
  io.seed = seed;
  io.skip_bad = data.on_bad_sample == "skip";
  DatasetPair pair = open_reader(data, model, io, lm, seed);
  try {
    check_against_model(pair, data, model);
  } catch (const DataError& e) {
    if (checks == ModelChecks::Enforce) throw;
    if (mismatch) *mismatch = e.what();
  }
  setup_normalizer(data.normalize, pair);
  if (auto* img = dynamic_cast<ImageDataset*>(pair.train.get()))
    spdlog::debug("data normalisation: {}", img->normalizer().describe());
  if (data.limit_samples > 0 && data.limit_samples < pair.train->size()) {
    warn_classes_left_out(*pair.train, data.limit_samples);
    pair.train = std::make_shared<LimitedDataset>(pair.train, data.limit_samples);
  }
  return pair;
}

}  // namespace trainer::data
