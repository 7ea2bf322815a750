#include "device/device.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/cuda.h>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#endif

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace trainer::device {

bool cuda_available() { return torch::cuda::is_available(); }
int cuda_device_count() { return cuda_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

torch::Device select_device(config::DeviceKind want, int64_t local_rank) {
  if (want == config::DeviceKind::Cpu) return torch::Device(torch::kCPU);
  const int n = cuda_device_count();
  if (n == 0) {
    if (want == config::DeviceKind::Cuda) throw std::runtime_error("train.device is 'cuda' but no CUDA device is available");
    return torch::Device(torch::kCPU);
  }
  if (local_rank >= n)
    throw std::runtime_error("local rank " + std::to_string(local_rank) + " has no GPU: this node has " +
                             std::to_string(n) + " CUDA device(s)");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

int64_t default_threads(int64_t configured, int64_t local_world_size) {
  if (configured > 0) return configured;
  return std::max<int64_t>(1, usable_cpus() / std::max<int64_t>(1, local_world_size));
}

double load_average_1m() {
  std::ifstream f("/proc/loadavg");
  double load = -1;
  if (!(f >> load)) return -1;
  return load;
}

int64_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

WorkersChoice choose_workers(int64_t configured, bool cuda, int64_t local_world_size, int64_t hardware_threads) {
  if (configured >= 0) return {configured, ""};
  if (!cuda) return {2, "on a CPU the cores train: 2 loader threads"};
  const int64_t share = std::max<int64_t>(1, hardware_threads) / std::max<int64_t>(1, local_world_size);
  const int64_t n = std::clamp<int64_t>(share - 1, 2, 16);
  return {n, std::to_string(hardware_threads) + " usable hardware threads / " + std::to_string(local_world_size) +
                 " local rank(s) = " + std::to_string(share) + ", one kept for the step (at least 2, at most 16)"};
}

std::string cpu_math_summary() {
  auto& ctx = at::globalContext();
  std::ostringstream s;
  s << "MKL " << (ctx.hasMKL() ? "yes" : "no") << ", oneDNN " << (ctx.hasMKLDNN() ? "yes" : "no") << ", OpenMP "
    << (ctx.hasOpenMP() ? "yes" : "no") << ", LAPACK " << (ctx.hasLAPACK() ? "yes" : "no");
  // BLAS_INFO and the CPU capability come from LibTorch's own build summary
  std::string cfg = at::show_config();
  for (const char* k : {"BLAS_INFO=", "CPU capability usage: "}) {
    auto p = cfg.find(k);
    if (p == std::string::npos) continue;
    p += std::string(k).size();
    auto e = cfg.find_first_of(",\n", p);
    s << ", " << std::string(k).substr(0, std::string(k).find_first_of("=:")) << " " << cfg.substr(p, e - p);
  }
  return s.str();
}

std::vector<std::string> bf16_flags_in(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1));
    std::vector<std::string> have;
    for (std::string w; words >> w;) have.push_back(w);
    std::vector<std::string> found;
    for (const char* flag : {"avx512_bf16", "amx_bf16"})
      if (std::find(have.begin(), have.end(), flag) != have.end()) found.push_back(flag);
    return found;  // every core lists the same flags: the first line tells
  }
  return {};
}

std::vector<std::string> cpu_bf16_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream text;
  text << f.rdbuf();
  return bf16_flags_in(text.str());
}

int64_t release_free_host_memory() {
#if defined(__GLIBC__)
  auto rss = [] {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    return static_cast<int64_t>(resident) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  };
  const int64_t before = rss();
  ::malloc_trim(0);
  return std::max<int64_t>(0, before - rss());
#else
  return 0;
#endif
}

std::string keep_host_memory_for_reuse() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 32 << 20;  // glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
  const bool ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  if (!ok) return "";
  return "host memory: freed blocks are kept for reuse (malloc mmap threshold 32 MiB, no trimming)";
#else
  return "";
#endif
}

}  // namespace trainer::device
