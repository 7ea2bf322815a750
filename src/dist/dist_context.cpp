// DistContext: c10d store + process group + a watchdog. See dist_context.hpp.
#include "dist/dist_context.hpp"

#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "config/exit_codes.hpp"
#include "dist/dist_impl.hpp"
#include "dist/group.hpp"
#include "dist/nccl_backend.hpp"
#include "dist/rendezvous.hpp"
#include "dist/stop_aware_store.hpp"

namespace trainer::dist {

using Millis = std::chrono::milliseconds;

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                    int64_t world, const NetChoice& net, std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  // Gloo's pairs connect to the address each rank advertises: the one choose_interface picked
  // (loopback when the whole job is on this machine), else the address this host's name resolves to.
  opts->devices.push_back(net.address.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                              : c10d::ProcessGroupGloo::createDeviceForHostname(net.address));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(world), opts);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(pg);
}

std::unique_ptr<DistContext> DistContext::create(const LaunchEnv& env, const config::DistConfig& cfg,
                                                 const torch::Device& device, const std::string& config_hash) {
  std::unique_ptr<DistContext> ctx(new DistContext());
  ctx->rank_ = env.rank;
  ctx->world_size_ = env.world_size;
  ctx->local_rank_ = env.local_rank;
  ctx->device_ = device;
  ctx->timeout_s_ = cfg.timeout_s;
  ctx->impl_ = std::make_unique<Impl>();
  ctx->impl_->rank = env.rank;
  ctx->impl_->timeout_s = cfg.timeout_s;
  ctx->world_group_ = ctx->world_view("world");  // reads the context's rank, size and backend when used
  if (env.world_size <= 1) return ctx;
  if (cfg.recovery == config::Recovery::InProcess && !env.launcher_store)
    throw DistError("dist.recovery: in_process needs `trainer launch` (launched by " + env.launcher +
                    " here): it hosts the store that outlives every rank and keeps the survivors running when a "
                    "rank dies, where torchrun's agent, mpirun and srun stop every rank; use dist.recovery: restart");

  const bool nccl = cfg.backend == config::Backend::Nccl || (cfg.backend == config::Backend::Auto && device.is_cuda());
  if (nccl && !device.is_cuda())
    throw DistError("dist.backend nccl needs a CUDA device (run.device is " + device.str() + "); use gloo on CPU");
  const std::string backend = nccl ? "nccl" : "gloo";  // the process group's name, in logs and dist checks

  auto timeout = Millis(static_cast<int64_t>(cfg.timeout_s * 1000));
  ctx->net_ = choose_interface(env, cfg.interface, [](const char* k) { return std::getenv(k); });
  // NCCL picks its own socket interface unless told; dist.interface tells it the same one
  if (nccl && !cfg.interface.empty()) ::setenv("NCCL_SOCKET_IFNAME", cfg.interface.c_str(), 0);
  auto store = make_store(env, cfg, timeout);
  if (env.join_incarnation > 0) {  // a replacement: a world of one until join() (dist_regroup.cpp)
    if (cfg.recovery != config::Recovery::InProcess)
      throw DistError("TRAINER_JOIN is set (a replacement rank) but dist.recovery is not in_process");
    ctx->impl_->store = store;
    ctx->impl_->backend_name = backend;
    ctx->impl_->net = ctx->net_;
    ctx->impl_->rank = env.rank;
    ctx->start_recovery(env, key_namespace(env, cfg) + "recovery/");
    ctx->joining_ = true;
    ctx->join_incarnation_ = env.join_incarnation;
    ctx->world_size_ = 1;
    ctx->rank_ = 0;
    ctx->impl_->start_watchdog();
    return ctx;
  }
  // our own keys and the process group's never collide, nor do those of a torchrun restart
  // (the waits of its rendezvous end on a stop signal: stop_aware_store.hpp)
  auto pg_store = c10::make_intrusive<StopAwareStore>(
      c10::make_intrusive<c10d::PrefixStore>(key_namespace(env, cfg) + "pg0/", store));
  agree_on_membership(*store, env, key_namespace(env, cfg), *pg_store,
                      env.rank == 0 && !env.agent_store && !is_file_store(cfg), config_hash, ctx->net_);
  try {
    ctx->impl_->backend = nccl
                              ? make_nccl_backend(pg_store, static_cast<int>(env.rank),
                                                  static_cast<int>(env.world_size), timeout,
                                                  static_cast<int>(device.index() < 0 ? env.local_rank : device.index()))
                              : make_gloo_backend(pg_store, env.rank, env.world_size, ctx->net_, timeout);
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    if (is_rendezvous_stop(e)) throw RendezvousStopped(error_text(e));  // through Gloo or NCCL, maybe rewrapped
    throw DistError("rank " + std::to_string(env.rank) + ": creating the " + backend +
                    " process group failed: " + error_text(e) +
                    (is_file_store(cfg) ? " (dist.store " + cfg.store + ": if a job using this file crashed, delete "
                                          "the file and start again)"
                                        : ""));
  }
  ctx->impl_->store = store;
  ctx->impl_->backend_name = backend;
  ctx->impl_->net = ctx->net_;
  ctx->impl_->key_ns = key_namespace(env, cfg);
  if (cfg.recovery == config::Recovery::InProcess) ctx->start_recovery(env, key_namespace(env, cfg) + "recovery/");
  ctx->read_kill_injection();
  ctx->impl_->start_watchdog();
  ctx->check_config_hash(config_hash);
  return ctx;
}

DistContext::~DistContext() = default;

std::string DistContext::backend_name() const { return impl_ ? impl_->backend_name : "none"; }

void DistContext::set_stop_query(std::function<std::string()> asked) {
  if (!impl_) return;
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->stop_asked = std::move(asked);
}

void DistContext::check_config_hash(const std::string& config_hash) {
  constexpr int64_t kHashBytes = 128;  // a sha256 hex digest is 64
  if (static_cast<int64_t>(config_hash.size()) > kHashBytes)
    throw DistError("config hash longer than " + std::to_string(kHashBytes) + " bytes");
  auto mine = torch::zeros({kHashBytes}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), config_hash.data(), config_hash.size());
  auto all = all_gather(mine.to(device_), "config hash").cpu();  // (world, kHashBytes)
  auto text = [&](int64_t r) {
    auto row = all[r].contiguous();
    std::string s(reinterpret_cast<const char*>(row.data_ptr()), kHashBytes);
    return s.substr(0, s.find('\0'));
  };
  std::string root = text(0);
  for (int64_t r = 1; r < world_size_; ++r) {
    std::string other = text(r);
    if (other != root)
      throw DistError("config hash mismatch: rank 0 has " + root + ", rank " + std::to_string(r) + " has " + other +
                      "; every rank must run the same config (same file and --set overrides)");
  }
}

torch::Tensor DistContext::all_gather(const torch::Tensor& t, const std::string& what) {
  if (!active()) return t.unsqueeze(0);
  OpInfo info{"all_gather", seq_++, step_.load(), what};
  std::vector<at::Tensor> in{t.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t r = 0; r < world_size_; ++r) out[0].push_back(torch::empty_like(in[0]));
  auto work = impl_->launch(info, [&] { return impl_->backend->allgather(out, in); });
  impl_->wait(work, info);
  return torch::stack(out[0]);
}

std::shared_ptr<AsyncOp> DistContext::all_reduce_sum_async(torch::Tensor t, const std::string& what) {
  return world_group_->all_reduce_sum_async(std::move(t), what);
}

std::shared_ptr<AsyncOp> DistContext::reduce_scatter_sum_async(torch::Tensor out, torch::Tensor in,
                                                               const std::string& what) {
  return world_group_->reduce_scatter_sum_async(std::move(out), std::move(in), what);
}

std::shared_ptr<AsyncOp> DistContext::all_gather_into_async(torch::Tensor out, torch::Tensor in,
                                                            const std::string& what) {
  return world_group_->all_gather_into_async(std::move(out), std::move(in), what);
}

double DistContext::all_reduce_mean(double v) {
  if (!active()) return v;
  auto t = torch::full({1}, v, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  all_reduce_sum_async(t, "mean")->wait();
  return t.item<double>() / static_cast<double>(world_size_);
}

bool DistContext::any(bool flag) { return any_of({flag})[0]; }

void DistContext::barrier() {
  // an all-reduce of one element: works the same on Gloo and NCCL and carries a sequence number
  if (!active()) return;
  auto t = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(device_));
  all_reduce_sum_async(t, "barrier")->wait();
  (void)t.item<int32_t>();  // NCCL: wait() only orders streams; the host syncs here
}

void DistContext::broadcast_module(torch::nn::Module& m) { world_group_->broadcast_module(m); }

std::string DistContext::broadcast_text(const std::string& text, const std::string& what) {
  if (!active()) return text;
  auto len = torch::full({1}, static_cast<int64_t>(text.size()), torch::kInt64);
  broadcast_tensor(len, what + " (length)");
  auto bytes = torch::zeros({len.item<int64_t>()}, torch::kUInt8);
  if (rank_ == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  broadcast_tensor(bytes, what);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

void DistContext::broadcast_tensor(torch::Tensor& t, const std::string& what) { world_group_->broadcast(t, what); }

std::vector<bool> DistContext::any_of(const std::vector<bool>& flags) {
  if (!active()) return flags;
  auto t = torch::tensor(std::vector<int32_t>(flags.begin(), flags.end()), torch::kInt32).to(device_);
  all_reduce_sum_async(t, "any")->wait();
  t = t.cpu();  // NCCL: wait() only orders streams; the host syncs here
  const auto* sums = t.data_ptr<int32_t>();
  return std::vector<bool>(sums, sums + t.numel());
}


std::string DistContext::first_text(const std::string& mine, const std::string& what) {
  if (!active()) return mine;
  constexpr int64_t kTextBytes = 2048;  // a file path and what happened to it
  auto buf = torch::zeros({kTextBytes}, torch::kUInt8);
  std::memcpy(buf.data_ptr(), mine.data(), std::min<size_t>(mine.size(), kTextBytes - 1));
  auto all = all_gather(buf.to(device_), what).cpu();  // (world, kTextBytes)
  for (int64_t r = 0; r < world_size_; ++r) {
    auto row = all[r].contiguous();
    std::string s(reinterpret_cast<const char*>(row.data_ptr()), kTextBytes);
    s = s.substr(0, s.find('\0'));
    if (!s.empty()) return s;
  }
  return "";
}

namespace {
std::string note_key(const std::string& ns, int64_t rank) { return ns + "note/" + std::to_string(rank); }
}  // namespace

std::optional<std::pair<int64_t, std::string>> DistContext::differing_rank(const std::string& key,
                                                                          const std::string& mine) {
  if (!active() || !impl_ || !impl_->store) return std::nullopt;
  auto& store = *impl_->store;
  const std::string k = impl_->key_ns + "same/" + key + "/";
  store.set(k + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
  for (int64_t r = rank_ == 0 ? 1 : 0; r < (rank_ == 0 ? world_size_ : 1); ++r) {
    const auto v = store.get(k + std::to_string(r));  // waits for that rank, up to the store's time-out
    if (std::string theirs(v.begin(), v.end()); theirs != mine) return std::make_pair(r, theirs);
  }
  return std::nullopt;
}

void DistContext::leave_note(const std::string& text) {
  if (!active() || !impl_ || !impl_->store) return;
  try {
    impl_->store->set(note_key(impl_->key_ns, rank_), std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {  // the store is gone: the peers say "a peer was lost"
  }
}

std::string DistContext::peer_note() {
  if (!active() || !impl_ || !impl_->store) return "";
  // on a thread of its own, given up after a few seconds: a store host that is alive but does not
  // answer (rank 0 stopped, hung on a file system) blocked this read forever, after the collective
  // had timed out (a TCPStore check has no time-out). The thread holds the store, so one left blocked
  // touches nothing freed while the process ends.
  auto read = std::make_shared<std::packaged_task<std::string()>>(
      [store = impl_->store, ns = impl_->key_ns, world = world_size_, me = rank_]() -> std::string {
        try {
          for (int64_t r = 0; r < world; ++r) {
            if (r == me) continue;
            const auto key = note_key(ns, r);
            if (!store->check({key})) continue;
            const auto v = store->get(key);
            return "rank " + std::to_string(r) + ": " + std::string(v.begin(), v.end());
          }
        } catch (const std::exception&) {
        }
        return "";
      });
  auto note = read->get_future();
  std::thread([read] { (*read)(); }).detach();
  if (note.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return "";
  return note.get();
}

}  // namespace trainer::dist
