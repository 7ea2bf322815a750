// print_dist_check and its pieces. See dist_check.hpp.
#include "dist/dist_check.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "device/cuda_seam.hpp"
#include "dist/dist_context.hpp"

namespace trainer::dist {
namespace {

constexpr int64_t kRowBytes = 256;  // one rank's "local_rank\thost\tdevice", zero-padded

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

std::string device_text(const torch::Device& device) {
  if (!device.is_cuda()) return device.str();
  for (const auto& d : device::cuda_devices())
    if (d.index == device.index()) return device.str() + " (" + d.name + ")";
  return device.str();
}

std::vector<std::string> split_tabs(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, '\t');) out.push_back(part);
  return out;
}

// Every rank's row, gathered to all: (rank, local rank, host, device, network).
std::vector<std::vector<std::string>> gather_rows(DistContext& ctx, const torch::Device& device) {
  std::string mine = std::to_string(ctx.local_rank()) + "\t" + host_name() + "\t" + device_text(device) + "\t" +
                     describe(ctx.net());
  mine.resize(std::min<size_t>(mine.size(), kRowBytes - 1));
  auto t = torch::zeros({kRowBytes}, torch::kUInt8);
  std::memcpy(t.data_ptr(), mine.data(), mine.size());
  auto all = ctx.all_gather(t.to(device), "rank table").cpu();  // (world, kRowBytes)
  std::vector<std::vector<std::string>> rows;
  for (int64_t r = 0; r < all.size(0); ++r) {
    auto row = all[r].contiguous();
    std::string s(reinterpret_cast<const char*>(row.data_ptr()), kRowBytes);
    auto cols = split_tabs(s.substr(0, s.find('\0')));
    cols.resize(4, "?");
    cols.insert(cols.begin(), std::to_string(r));
    rows.push_back(cols);
  }
  return rows;
}

// Seconds of each timed all-reduce of kBandwidthBytes, after one warm-up. A barrier before each
// iteration starts the ranks together, so the time is the collective's, not a straggler's.
std::vector<double> time_all_reduce(DistContext& ctx, const torch::Device& device) {
  auto buf = torch::ones({kBandwidthBytes / 4}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  std::vector<double> seconds;
  for (int i = 0; i <= kBandwidthIters; ++i) {
    ctx.barrier();
    auto t0 = std::chrono::steady_clock::now();
    ctx.all_reduce_sum_async(buf, "bandwidth probe")->wait();
    (void)buf[0].item<float>();  // CUDA: the host waits for the reduction itself, not its launch
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) seconds.push_back(s);
    buf.fill_(1.0f);  // keep the values finite however many iterations run
  }
  return seconds;
}

}  // namespace

double allreduce_bus_bandwidth(double bytes, int64_t world, double seconds) {
  if (world <= 1 || seconds <= 0) return 0.0;
  const double n = static_cast<double>(world);
  return 2.0 * (n - 1.0) / n * bytes / seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.at(v.size() / 2);
}

std::optional<std::string> store_exposure_warning(const LaunchEnv& env, const config::DistConfig& cfg) {
  if (env.world_size <= 1 || env.local_world_size != env.world_size) return std::nullopt;
  if (cfg.store.rfind("file://", 0) == 0) return std::nullopt;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  if (env.launcher_store) return std::nullopt;  // trainer launch on one node listens on 127.0.0.1 only
  if (env.agent_store)
    return "the rendezvous store at " + where + " is hosted by torchrun's agent, which listens on every network "
           "interface, although all " + std::to_string(env.world_size) + " ranks run on this node; `trainer launch -n " +
           std::to_string(env.world_size) + "` keeps it on 127.0.0.1";
  if (!is_loopback(env.master_addr))
    return "the rendezvous store at " + where + " listens on every network interface (MASTER_ADDR is not a loopback "
           "address), although all " + std::to_string(env.world_size) + " ranks run on this node; set "
           "MASTER_ADDR=127.0.0.1 to keep it on loopback";
  return std::nullopt;
}

void print_dist_check(const LaunchEnv& env, const config::DistConfig& cfg, const torch::Device& device,
                      const std::string& config_hash, std::ostream& out) {
  if (auto w = store_exposure_warning(env, cfg)) out << "warning: " << *w << "\n";
  auto ctx = DistContext::create(env, cfg, device, config_hash);
  auto rows = ctx->active() ? gather_rows(*ctx, device)
                            : std::vector<std::vector<std::string>>{
                                  {"0", std::to_string(env.local_rank), host_name(), device_text(device), "-"}};
  std::vector<double> seconds;
  if (ctx->active()) seconds = time_all_reduce(*ctx, device);
  if (ctx->rank() != 0) return;

  std::string store = cfg.store.empty() ? "tcp://" + env.master_addr + ":" + std::to_string(env.master_port) : cfg.store;
  out << "distributed: " << env.world_size << " rank" << (env.world_size == 1 ? "" : "s") << " (" << env.launcher
      << "), backend " << ctx->backend_name();
  // the store's host: torchrun's agent, or `trainer launch` itself (it hosts one the same way)
  if (ctx->active())
    out << ", store " << store
        << (env.agent_store ? (env.launcher == "trainer launch" ? " (hosted by trainer launch)" : " (torchrun's agent)") : "");
  out << "\n";
  size_t host_w = 4, dev_w = 6;
  for (const auto& r : rows) {
    host_w = std::max(host_w, r[2].size());
    dev_w = std::max(dev_w, r[3].size());
  }
  out << "  " << std::left << std::setw(6) << "rank" << std::setw(7) << "local" << std::setw(static_cast<int>(host_w) + 2)
      << "host" << std::setw(static_cast<int>(dev_w) + 2) << "device" << "network\n";
  for (const auto& r : rows)
    out << "  " << std::left << std::setw(6) << r[0] << std::setw(7) << r[1] << std::setw(static_cast<int>(host_w) + 2)
        << r[2] << std::setw(static_cast<int>(dev_w) + 2) << r[3] << r[4] << "\n";
  if (!ctx->active()) {
    out << "all_reduce bandwidth: not measured (a single rank has nothing to exchange)\n";
    return;
  }
  const double t = median(seconds);
  const double bytes = static_cast<double>(kBandwidthBytes);
  std::ostringstream line;
  line << std::fixed << std::setprecision(2) << "all_reduce of " << (kBandwidthBytes >> 20) << " MiB float32 over "
       << env.world_size << " ranks: median " << t * 1e3 << " ms of " << seconds.size() << ", algbw "
       << bytes / t / 1e9 << " GB/s, busbw " << allreduce_bus_bandwidth(bytes, env.world_size, t) / 1e9 << " GB/s\n";
  out << line.str();
}

}  // namespace trainer::dist
