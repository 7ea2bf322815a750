#include "engine/loop/peer_state.hpp"

#include <nlohmann/json.hpp>


namespace trainer::engine {

SharedState share_run_state(dist::DistContext& dist, const config::RunConfig& cfg, const std::string& hash,
                            const RunObjects& objs, const RunPosition& here, int64_t grad_accum,
                            int64_t target_global, bool restore) {
  std::vector<torch::Tensor> sent;  // rank 0: the tensors in the header's order
  nlohmann::json header;
  if (dist.rank() == 0) {
    const auto content = capture_checkpoint(cfg, objs, here);
    header["state"] = content.state;
    header["config_hash"] = hash;
    header["grad_accum"] = grad_accum;
    header["target_global"] = target_global;
    header["from_joiner"] = restore;  // never: the group's rank 0 is a member with the run's state
    for (const auto& [group, tensors] : content.groups)
      for (const auto& [name, t] : tensors) {
        header["tensors"].push_back({group, name, static_cast<int>(t.scalar_type()), t.sizes().vec()});
        sent.push_back(t.contiguous());
      }
  }
  header = nlohmann::json::parse(dist.broadcast_text(header.dump(), "run state header"));
  if (header.at("config_hash") != hash)
    throw dist::DistError("rank " + std::to_string(dist.rank()) + " joins a group that runs another config (hash " +
                          header.at("config_hash").get<std::string>().substr(0, 12) + ", this rank's " +
                          hash.substr(0, 12) + "): every rank must run the same config");
  // a rank that is itself joining has nothing to send (grown_membership keeps the state's holder at
  // rank 0); the accumulation must be a real one
  if (header.value("from_joiner", false) || header.at("grad_accum").get<int64_t>() < 1)
    throw dist::DistError("rank " + std::to_string(dist.rank()) + ": the run state came from a rank that does not "
                          "hold it (a replacement at rank 0, accumulation " + header.at("grad_accum").dump() +
                          "): refusing it");
  static int64_t sent_count = 0;  // TRAINER_INJECT_KILL share:N counts the transfers this process sent
  if (dist.rank() == 0) dist.kill_point("share", ++sent_count);  // tests: rank 0 lost mid-transfer
  io::CheckpointContent received;
  received.state = header.at("state");
  for (size_t k = 0; k < header.at("tensors").size(); ++k) {
    const auto& e = header.at("tensors").at(k);
    const auto group = e.at(0).get<std::string>(), name = e.at(1).get<std::string>();
    auto t = dist.rank() == 0 ? sent[k]
                              : torch::empty(e.at(3).get<std::vector<int64_t>>(),
                                             torch::TensorOptions().dtype(static_cast<torch::ScalarType>(e.at(2).get<int>())));
    dist.broadcast_tensor(t, "run state " + group + "/" + name);
    if (restore) received.groups[group].push_back({name, t.cpu()});
  }
  SharedState out;
  out.grad_accum = header.at("grad_accum").get<int64_t>();
  out.target_global = header.value("target_global", int64_t{0});
  out.pos = restore ? restore_checkpoint(received, "rank 0 of the group", cfg, objs) : here;
  return out;
}

}  // namespace trainer::engine
