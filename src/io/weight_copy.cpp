#include "io/weight_copy.hpp"

namespace trainer::io {
namespace {

std::string weight_dtype_name(torch::ScalarType t) {
  std::string s = c10::toString(t);  // "Float", "BFloat16", "ComplexFloat", ...
  const std::pair<const char*, const char*> names[] = {
      {"Float", "float32"}, {"Double", "float64"}, {"Half", "float16"},   {"BFloat16", "bfloat16"},
      {"Long", "int64"},    {"Int", "int32"},      {"Short", "int16"},    {"Char", "int8"},
      {"Byte", "uint8"},    {"Bool", "bool"},      {"ComplexFloat", "complex64"}, {"ComplexDouble", "complex128"}};
  for (const auto& [from, to] : names)
    if (s == from) return to;
  return s;
}

bool weight_is_integer(torch::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/false); }

}  // namespace

std::optional<std::string> weight_copy_problem(const torch::Tensor& file, const torch::Tensor& model) {
  const auto from = file.scalar_type(), to = model.scalar_type();
  if (from == to) return std::nullopt;
  auto a = [](const std::string& name) { return (name[0] == 'i' || name[0] == 'u' ? "an " : "a ") + name; };
  const std::string what = a(weight_dtype_name(from)) + " tensor into " + a(weight_dtype_name(to)) + " tensor";
  if (c10::isComplexType(from) && !c10::isComplexType(to)) return what + ": the imaginary part would be lost";
  if (from == torch::kBool || to == torch::kBool)
    return what + ": a mask of true/false is not a tensor of values (save the tensor the model holds)";
  if (c10::isFloatingType(from) && c10::isFloatingType(to)) {
    const auto converted = file.to(to);
    if ((torch::isfinite(file) & ~torch::isfinite(converted)).any().item<bool>())
      return what + ": finite values beyond " + weight_dtype_name(to) + "'s range would become infinite";
    return std::nullopt;
  }
  if (weight_is_integer(from) && weight_is_integer(to)) {
    if (!torch::equal(file.to(to).to(from), file)) return what + ": values that do not fit would wrap around";
    return std::nullopt;
  }
  return what + ": not a conversion that keeps the values' meaning (save the tensor in the model's dtype)";
}

std::string weight_conversion(const torch::Tensor& file, const torch::Tensor& model) {
  if (file.scalar_type() == model.scalar_type()) return "";
  return weight_dtype_name(file.scalar_type()) + " -> " + weight_dtype_name(model.scalar_type());
}

void release_weight(torch::Tensor& t) {
  if (t.numel() <= 1) return;  // nothing to gain, and is_released could not tell it apart
  torch::NoGradGuard no_grad;
  t.set_(torch::zeros({1}, t.options()).expand(t.sizes()));
}

bool is_released(const torch::Tensor& t) {
  // zero strides on every dimension that has a step: release_weight's form, not a sharded run's
  // freed storage (dist.sharding full keeps the strides and empties the storage)
  if (!t.defined() || t.numel() <= 1) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != 0) return false;
  return true;
}

void move_weights(torch::nn::Module& m, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  auto move = [&device](torch::Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    if (is_released(t))
      t.set_data(torch::zeros({1}, t.options().device(device)).expand(t.sizes()));
    else
      t.set_data(t.to(device));
  };
  for (auto& p : m.parameters(/*recurse=*/true)) move(p);
  for (auto& b : m.buffers(/*recurse=*/true)) move(b);
}

}  // namespace trainer::io
