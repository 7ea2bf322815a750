// Device selection and what the machine offers. CUDA-only queries sit behind cuda_seam.hpp.
#pragma once

#include <torch/types.h>

#include <string>
#include <thread>
#include <vector>

#include "config/enums.hpp"

namespace trainer::device {

bool cuda_available();
int cuda_device_count();

// train.device: auto picks CUDA device `local_rank` when CUDA is available.
// Throws std::runtime_error when cuda is asked for and none exists.
torch::Device select_device(config::DeviceKind want, int64_t local_rank);

// The hardware threads this process may run on: its CPU affinity mask's (a cgroup's cpuset, taskset,
// a scheduler's binding), else std::thread::hardware_concurrency().
int64_t usable_cpus();

// Intra-op threads for this process: `configured` when > 0, else the usable hardware threads / local
// ranks (a `taskset -c 0` run took both of a 2-core host's threads onto its one core).
int64_t default_threads(int64_t configured, int64_t local_world_size);

// The host's 1-minute load average (/proc/loadavg), or a negative number when it cannot be read.
double load_average_1m();

// data.workers auto (`configured` < 0): on CUDA the host's job is the input pipeline (a ResNet-50 on
// one H200 ate 4,600 JPEG images/s, 12 workers' worth), so every hardware thread of this rank's share
// (the threads the process may run on, divided by the local ranks) but one (the step's own), at
// least 2 and at most 16; on a CPU the cores train, so 2. `configured` >= 0 is kept. `why` says how
// auto chose (empty when configured).
struct WorkersChoice {
  int64_t workers = 2;
  std::string why;
};
WorkersChoice choose_workers(int64_t configured, bool cuda, int64_t local_world_size,
                             int64_t hardware_threads = usable_cpus());

// CPU math libraries as LibTorch reports them (MKL, oneDNN, OpenMP, BLAS, capability).
std::string cpu_math_summary();

// The native bf16 instruction sets among the CPU's flags: "avx512_bf16" and "amx_bf16", in that order,
// those that the first `flags` line of /proc/cpuinfo lists (empty: none, or no /proc/cpuinfo). Without
// them bf16 matmuls and convolutions are emulated, usually slower than fp32.
std::vector<std::string> cpu_bf16_flags();
// The same of a /proc/cpuinfo text (whole flag names only: "avx512_bf16x" is not avx512_bf16).
std::vector<std::string> bf16_flags_in(const std::string& cpuinfo);

// train.reuse_host_memory: glibc malloc keeps freed blocks for reuse instead of handing them back
// to the kernel (mmap threshold 32 MiB, glibc's maximum, and no trimming of the heap top). Every
// training step frees and reallocates the same activation buffers; with glibc's defaults the large
// ones come from fresh mmap()s whose pages fault in (and are zeroed) again every step. Returns a
// line for the log; "" where malloc is not glibc's.
std::string keep_host_memory_for_reuse();

// Hands the free memory of malloc's heaps back to the kernel once (glibc malloc_trim): at the end of
// start-up, where building the model, broadcasting it and moving it into buckets or shards (which
// dist.sharding frees) leave hundreds of MB free but resident that no step reuses. Returns the bytes
// the resident set shrank by (0 where malloc is not glibc's).
int64_t release_free_host_memory();

}  // namespace trainer::device
