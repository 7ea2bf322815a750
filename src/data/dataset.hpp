// The Dataset interface every reader implements, and create_datasets(), which picks the reader for
// data.format and checks the data against the model (channels, classes, vocabulary).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/transforms.hpp"

namespace trainer::data {

// Bad or missing data. The message names the file (and the sample index when there is one).
class DataError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A data file changed while the run was using it (data/file_watch.hpp): truncated, deleted,
// replaced or modified. The run saves a checkpoint and exits kExitDataChanged, or with
// data.on_change: reload reopens its data.
class DataChanged : public DataError {
 public:
  DataChanged(std::string file, const std::string& what)
      : DataError(file + ": the data file changed while the run was using it: " + what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

enum class SampleKind { Image, Tokens };

struct Example {
  torch::Tensor input;   // image: (C, H, W) float; tokens: (T) int64
  torch::Tensor target;  // image: int64 scalar; tokens: (T) int64
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual SampleKind kind() const = 0;
  virtual std::vector<int64_t> sample_shape() const = 0;  // (C, H, W) or (T)
  virtual int64_t num_classes() const = 0;                 // classes, or vocab size for tokens
  virtual std::string describe() const = 0;
  // One sample, collated and finished like a batch of one. Augmentation random choices are a pure
  // function of (seed, epoch, index). A sample skipped by on_bad_sample=skip throws DataError here.
  virtual Example get(int64_t index, int64_t epoch, bool augment) const;

  // --- the loader's fast path: samples are written straight into a preallocated batch ----------
  // dtype of the raw collated input: uint8 for images (augmented as bytes, converted once per
  // batch), int64 for tokens.
  virtual torch::ScalarType raw_dtype() const = 0;
  virtual std::vector<int64_t> target_shape() const = 0;  // {} (a class) or (T)
  // Writes sample `index` into `input` (numel(sample_shape) elements of raw_dtype) and `target`
  // (numel(target_shape) int64). Returns false when the sample is bad and on_bad_sample=skip
  // (counted in skipped()); throws DataError naming the file and index otherwise.
  virtual bool fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const = 0;
  // Turns a raw collated input (B, ...) into the model input: images become normalised float.
  // `pin` asks for the result in pinned host memory (only honoured when CUDA is available).
  virtual torch::Tensor finish(const torch::Tensor& raw, bool pin) const = 0;
  // finish() as tensor operations on whatever device `raw` is on, for a loader that copies raw batches
  // to a GPU and finishes them there (LoaderOptions::finish_on_device): images cross as uint8, a
  // quarter of the float's bytes. The values are finish()'s bit for bit; `channels_last` asks for
  // that memory format (images). Datasets without it answer false and throw.
  virtual bool finishes_anywhere() const { return false; }
  virtual torch::Tensor finish_tensor(const torch::Tensor& raw, bool channels_last) const;
  // Throws DataChanged when a file the dataset holds changed since it was opened (the loader asks
  // at each epoch boundary). Datasets that hold no file (synthetic) never throw.
  virtual void check_unchanged() const {}
  // Images: how the bytes become the model's input (the training split's statistics); nullptr otherwise.
  virtual const NormalizeValues* normalization() const { return nullptr; }
  // The class names when the reader knows them (image_folder: the class folders, sorted); else empty.
  virtual std::vector<std::string> class_names() const { return {}; }
  // The labels of the first `n` samples, when the reader knows them without reading (image_folder);
  // else empty. (data.limit_samples of a folder sorted by class keeps the first classes only.)
  virtual std::vector<int64_t> first_labels(int64_t n) const { (void)n; return {}; }
  // What `trainer check` reads of every sample before a run does: the samples read and the bad ones,
  // each "file: why" (image_folder: every header: readable, within the size limit, and one size when
  // data.image_size is 0; `decode` decodes each image whole too). Formats read whole when opened
  // (tokens, CIFAR, IDX, synthetic) have nothing left to check: {0, {}}.
  struct Audit {
    int64_t read = 0;
    std::vector<std::string> bad;  // in sample order
  };
  struct AuditOptions {
    bool decode = false;
    int threads = 1;      // files read at once (a header read waits on the disk more than on a core)
    int64_t limit = -1;   // the first `limit` samples only (data.limit_samples); -1 all
    // called every few seconds while it reads (not for a read of a few seconds); may be empty
    std::function<void(int64_t done, int64_t total)> progress;
  };
  virtual Audit audit(const AuditOptions& o) const { (void)o; return {}; }
  // Samples skipped so far because they were bad (on_bad_sample=skip).
  int64_t skipped() const { return skipped_.load(); }
  // A digest (hex) of `n` samples spread evenly over the dataset, the first and last among them: their
  // raw bytes and targets as validation reads them (no augmentation), a bad one as "bad". Ranks compare
  // it to find node-local copies that hold the same number of samples with other content.
  std::string content_digest(int64_t n = 16) const;

 protected:
  // Audit's loop for readers with something to read: `reader()` gives each thread its own reader of a
  // sample ("" good, else "file: why"); `n` samples, o.threads at once, o.progress as it goes.
  static Audit audit_each(int64_t n, const AuditOptions& o,
                          const std::function<std::function<std::string(int64_t)>()>& reader);
  mutable std::atomic<int64_t> skipped_{0};
};

// What a checkpoint records of the training data, for eval, predict, export and resume: image data's
// normalisation (nullopt for other data) and class names (empty when the reader knows none).
struct DataRecord {
  std::optional<NormalizeValues> normalize;
  std::vector<std::string> classes;
};
DataRecord record_of(const Dataset& d);

struct DatasetPair {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> val;  // nullptr when the format has no validation data and none is configured
};

// block_size comes from model.block_size for token formats; image channels, classes and sizes are
// checked against the model (ModelChecks::Enforce), or their first mismatch is returned in
// `*mismatch` instead (ModelChecks::Report: bench-data measures the pipeline without a model).
// Throws DataError (bad data) naming the path.
enum class ModelChecks { Enforce, Report };
DatasetPair create_datasets(const config::DataConfig& data, const config::ModelConfig& model, int64_t seed,
                            ModelChecks checks = ModelChecks::Enforce, std::string* mismatch = nullptr);

// Tensor options for a host batch buffer, pinned when asked and CUDA is available.
torch::TensorOptions host_options(torch::ScalarType dtype, bool pin);
// `t` itself, or a copy in pinned memory when `pin` and CUDA is available (a plain memcpy: loader
// workers must not run intra-op-parallel ATen ops).
torch::Tensor maybe_pinned(const torch::Tensor& t, bool pin);

}  // namespace trainer::data
