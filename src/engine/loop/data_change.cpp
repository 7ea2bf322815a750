#include "engine/loop/data_change.hpp"

#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace trainer::engine {

std::optional<ReopenedData> reopen_changed_data(const config::RunConfig& cfg, const data::DataChanged& change,
                                                const data::Dataset& old_train, const data::LoaderState& pos,
                                                int64_t step, bool multi_rank) {
  if (cfg.data.on_change != config::OnChange::Reload) return std::nullopt;
  if (multi_rank) {
    spdlog::error("data.on_change: reload is for one-process runs; this multi-rank run stops instead");
    return std::nullopt;
  }
  ReopenedData r;
  try {
    r.data = data::create_datasets(cfg.data, cfg.model, cfg.run.seed);
    if (r.data.train->sample_shape() != old_train.sample_shape())
      throw data::DataError(fmt::format("{}: the reopened training samples have shape {}, before {}", cfg.data.path,
                                        fmt::join(r.data.train->sample_shape(), "x"),
                                        fmt::join(old_train.sample_shape(), "x")));
    if (r.data.train->size() < cfg.train.batch_size)
      throw data::DataError(fmt::format("{}: {} training samples now, fewer than one batch of {}", cfg.data.path,
                                        r.data.train->size(), cfg.train.batch_size));
  } catch (const data::DataError& e) {
    spdlog::error("data.on_change: reload: the changed data cannot be reopened: {}", e.what());
    return std::nullopt;
  }
  r.resume_at = {pos.samples_consumed > 0 ? pos.epoch + 1 : pos.epoch, 0};
  spdlog::warn("{}; data.on_change: reload: reopened the data ({}, was {} samples); training goes on at step {} "
               "from the start of epoch {} (the run keeps its length in steps)",
               change.what(), r.data.train->describe(), old_train.size(), step + 1, r.resume_at.epoch);
  return r;
}

}  // namespace trainer::engine
