// `trainer check` in a launched job: who is where (the rank table), how fast the process group
// all-reduces, and whether the rendezvous store is exposed beyond what the job needs.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dist/launch_env.hpp"

namespace trainer::dist {

inline constexpr int64_t kBandwidthBytes = int64_t{64} << 20;  // the all-reduce probe: 64 MiB of float32
inline constexpr int kBandwidthIters = 5;                       // timed iterations after one warm-up

// Bus bandwidth of an all-reduce of `bytes` over `world` ranks taking `seconds` (NCCL-tests'
// definition: each rank sends and receives 2(n-1)/n of the buffer, so the figure is comparable
// across world sizes). Bytes per second; 0 for a single rank.
double allreduce_bus_bandwidth(double bytes, int64_t world, double seconds);

// The median of `v` (upper median for an even count); `v` must not be empty.
double median(std::vector<double> v);

// A warning when the TCPStore of this job listens beyond loopback although every rank runs on this
// node (LOCAL_WORLD_SIZE == WORLD_SIZE): a non-loopback MASTER_ADDR makes rank 0 bind every
// interface, and torchrun's agent store always does. nullopt when nothing is exposed (FileStore,
// loopback store, multi-node job, single process).
std::optional<std::string> store_exposure_warning(const LaunchEnv& env, const config::DistConfig& cfg);

// Joins the process group (as `trainer run` would), then rank 0 prints the rank table (rank, local
// rank, host, device) and the measured all-reduce bandwidth of a 64 MiB tensor (median of
// kBandwidthIters); every rank prints the store warning, if any. Throws DistError.
void print_dist_check(const LaunchEnv& env, const config::DistConfig& cfg, const torch::Device& device,
                      const std::string& config_hash, std::ostream& out);

}  // namespace trainer::dist
