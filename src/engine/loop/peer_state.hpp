// Rank 0's run state to every rank, over the process group instead of a file: what a replacement
// rank needs to join a running group (dist.recovery in_process, growing back). The state is what a
// checkpoint holds (engine/checkpoint/checkpointing.hpp: weights, optimizer state, loss scale, generators, EMA,
// early-stopping record, loader position), captured and restored by the same code as a checkpoint,
// so a joined rank continues exactly as a resumed one would.
#pragma once

#include <string>

#include "config/config.hpp"
#include "dist/dist_context.hpp"
#include "engine/checkpoint/checkpointing.hpp"

namespace trainer::engine {

struct SharedState {
  RunPosition pos;         // rank 0's position
  int64_t grad_accum = 1;  // rank 0's accumulation at the new world size
  int64_t target_global = 0;  // rank 0's samples per step every world size aims at (world_recovery.hpp)
};

// Every rank of the group calls it at the same step boundary. Rank 0 sends its state (`here`,
// `grad_accum`, `target_global`); a rank with `restore` loads what it receives into `objs` (the joiner), the others
// receive and drop it. Throws dist::DistError when the receiver's config differs from rank 0's.
// `config_hash`: of the config as loaded (rank 0's and the receiver's must be equal).
SharedState share_run_state(dist::DistContext& dist, const config::RunConfig& cfg, const std::string& config_hash,
                            const RunObjects& objs, const RunPosition& here, int64_t grad_accum,
                            int64_t target_global, bool restore);

}  // namespace trainer::engine
