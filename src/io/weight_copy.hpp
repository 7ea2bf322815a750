// The one rule for copying a weight file's tensor into a model's tensor, whatever read the file
// (model.init: safetensors or torch.save; a checkpoint restore; export; inference). The shape must
// be the model's (checked by the callers, which list every mismatch); the dtype must be the model's,
// or convert without changing what the values mean:
//   - between floating types (fp16, bf16, fp32, fp64): allowed and reported as a conversion, unless a
//     finite value would become infinite (fp32 3e38 into fp16);
//   - between integer types: allowed when every value fits;
//   - complex into real (the imaginary part would go), bool into or from anything else (a mask is not
//     weights), integer into floating or floating into integer: refused.
// PyTorch's load_state_dict copies all of these silently; the difference is deliberate (RELIABILITY.md).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace trainer::io {

// Why `file` cannot be copied into `model` faithfully ("a complex64 tensor into a float32 tensor:
// the imaginary part would be lost"), or nothing.
std::optional<std::string> weight_copy_problem(const torch::Tensor& file, const torch::Tensor& model);

// "float16 -> float32" when the copy converts, else "".
std::string weight_conversion(const torch::Tensor& file, const torch::Tensor& model);

// A released weight: a model's tensor that keeps its name, shape and dtype but no values (one
// element, broadcast to the shape by zero strides), for a weight this process never reads (a
// pipeline rank's other stages). Reading it gives zeros; writing into it fails loudly (PyTorch
// refuses in-place writes where elements share memory). Loading a weight file skips it, the start-up
// broadcast and the EMA leave it alone, and its bytes are not held.
void release_weight(torch::Tensor& t);
bool is_released(const torch::Tensor& t);
// Module::to(device) for the parameters and buffers of `m` (recursively), except that a released
// tensor stays released on the device (Module::to would allocate and fill its whole shape).
void move_weights(torch::nn::Module& m, const torch::Device& device);

}  // namespace trainer::io
