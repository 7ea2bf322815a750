// Device selection and what the machine offers. CUDA-only queries sit behind cuda_seam.hpp.
#pragma once

#include <torch/types.h>

#include <string>

namespace trainer::device {

bool cuda_available();
int cuda_device_count();

// "auto" | "cpu" | "cuda": auto picks CUDA device `local_rank` when CUDA is available.
// Throws std::runtime_error when "cuda" is asked for and none exists.
torch::Device select_device(const std::string& want, int64_t local_rank);

// Intra-op threads for this process: `configured` when > 0, else hardware cores / local ranks.
int64_t default_threads(int64_t configured, int64_t local_world_size);

// CPU math libraries as LibTorch reports them (MKL, oneDNN, OpenMP, BLAS, capability).
std::string cpu_math_summary();

}  // namespace trainer::device
