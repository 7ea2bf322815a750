// The run's policies as enums: parsed once at config load (the schema binds each Choice key to its
// enum), so no component compares policy strings at run time. Each enum's values are in the order
// of its names in choices_of<E>(), which is also the order docs/CONFIG.md lists them in.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::config {

enum class Precision { Fp32, Bf16, Fp16, Auto };     // train.precision (auto: engine/startup/precision_auto.hpp)
enum class NonFinite { Skip, Rollback, Abort };      // train.nonfinite
enum class OnError { Warn, Abort };                  // checkpoint.on_error
enum class ScheduleKind { Constant, Step, Linear, Cosine };  // schedule.name
enum class OptimizerKind { Sgd, Adamw };             // optim.name
enum class Attention { Auto, Sdpa, Math };           // model.attention
enum class StopMode { Auto, Min, Max };              // train.early_stopping.mode
enum class Sharding { None, Optimizer, Gradients, Full };  // dist.sharding
enum class Recovery { Restart, InProcess };          // dist.recovery
enum class DataFormat { Idx, Cifar, ImageFolder, Text, Tokens, Synthetic };  // data.format
enum class NormalizeMode { MeanStd, Minmax, None };  // data.normalize.mode
enum class DeviceKind { Auto, Cpu, Cuda };           // train.device
enum class Backend { Auto, Gloo, Nccl };             // dist.backend
enum class OnChange { Error, Reload };               // data.on_change
enum class PipeSchedule { GPipe, OneFOneB, Interleaved1F1B, ZeroBubble };  // dist.pipeline.schedule

// The YAML names of an enum's values, index = the value. Specialised for each enum above.
template <class E>
const std::vector<std::string>& choices_of();
template <> const std::vector<std::string>& choices_of<Precision>();
template <> const std::vector<std::string>& choices_of<NonFinite>();
template <> const std::vector<std::string>& choices_of<OnError>();
template <> const std::vector<std::string>& choices_of<ScheduleKind>();
template <> const std::vector<std::string>& choices_of<OptimizerKind>();
template <> const std::vector<std::string>& choices_of<Attention>();
template <> const std::vector<std::string>& choices_of<StopMode>();
template <> const std::vector<std::string>& choices_of<Sharding>();
template <> const std::vector<std::string>& choices_of<Recovery>();
template <> const std::vector<std::string>& choices_of<DataFormat>();
template <> const std::vector<std::string>& choices_of<NormalizeMode>();
template <> const std::vector<std::string>& choices_of<DeviceKind>();
template <> const std::vector<std::string>& choices_of<Backend>();
template <> const std::vector<std::string>& choices_of<OnChange>();
template <> const std::vector<std::string>& choices_of<PipeSchedule>();

// What a data.format gives: images (idx, cifar, image_folder), tokens (text, tokens); synthetic
// gives either, as the model asks.
inline bool gives_images(DataFormat f) {
  return f == DataFormat::Idx || f == DataFormat::Cifar || f == DataFormat::ImageFolder;
}
inline bool gives_tokens(DataFormat f) { return f == DataFormat::Text || f == DataFormat::Tokens; }

// "bf16" for Precision::Bf16: for logs, records and files.
template <class E>
const std::string& name_of(E e) {
  return choices_of<E>().at(static_cast<size_t>(e));
}

// The value named `name`; std::invalid_argument "unknown <what> 'x'; known: a, b" otherwise.
template <class E>
E parse_enum(const std::string& name, const std::string& what) {
  const auto& names = choices_of<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown " + what + " '" + name + "'; known: " + known);
}

}  // namespace trainer::config
