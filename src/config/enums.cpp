#include "config/enums.hpp"

namespace trainer::config {

template <> const std::vector<std::string>& choices_of<Precision>() {
  static const std::vector<std::string> n = {"fp32", "bf16", "fp16", "auto"};
  return n;
}
template <> const std::vector<std::string>& choices_of<NonFinite>() {
  static const std::vector<std::string> n = {"skip", "rollback", "abort"};
  return n;
}
template <> const std::vector<std::string>& choices_of<OnError>() {
  static const std::vector<std::string> n = {"warn", "abort"};
  return n;
}
template <> const std::vector<std::string>& choices_of<ScheduleKind>() {
  static const std::vector<std::string> n = {"constant", "step", "linear", "cosine"};
  return n;
}
template <> const std::vector<std::string>& choices_of<OptimizerKind>() {
  static const std::vector<std::string> n = {"sgd", "adamw"};
  return n;
}
template <> const std::vector<std::string>& choices_of<Attention>() {
  static const std::vector<std::string> n = {"auto", "sdpa", "math"};
  return n;
}
template <> const std::vector<std::string>& choices_of<StopMode>() {
  static const std::vector<std::string> n = {"auto", "min", "max"};
  return n;
}
template <> const std::vector<std::string>& choices_of<Sharding>() {
  static const std::vector<std::string> n = {"none", "optimizer", "gradients", "full"};
  return n;
}
template <> const std::vector<std::string>& choices_of<PipeSchedule>() {
  static const std::vector<std::string> n = {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"};
  return n;
}
template <> const std::vector<std::string>& choices_of<Recovery>() {
  static const std::vector<std::string> n = {"restart", "in_process"};
  return n;
}
template <> const std::vector<std::string>& choices_of<DataFormat>() {
  static const std::vector<std::string> n = {"idx", "cifar", "image_folder", "text", "tokens", "synthetic"};
  return n;
}
template <> const std::vector<std::string>& choices_of<NormalizeMode>() {
  static const std::vector<std::string> n = {"mean_std", "minmax", "none"};
  return n;
}
template <> const std::vector<std::string>& choices_of<DeviceKind>() {
  static const std::vector<std::string> n = {"auto", "cpu", "cuda"};
  return n;
}
template <> const std::vector<std::string>& choices_of<Backend>() {
  static const std::vector<std::string> n = {"auto", "gloo", "nccl"};
  return n;
}
template <> const std::vector<std::string>& choices_of<OnChange>() {
  static const std::vector<std::string> n = {"error", "reload"};
  return n;
}

}  // namespace trainer::config
