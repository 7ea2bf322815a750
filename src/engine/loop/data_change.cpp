#include "engine/loop/data_change.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/exit_codes.hpp"

namespace trainer::engine {
namespace {

// This rank's reopened data: the datasets, or the error that stops the run.
data::DatasetPair reopen_here(const config::RunConfig& cfg, const data::Dataset& old_train) {
  auto fresh = data::create_datasets(cfg.data, cfg.model, cfg.run.seed);
  if (fresh.train->sample_shape() != old_train.sample_shape())
    throw data::DataError(fmt::format("{}: the reopened training samples have shape {}, before {}", cfg.data.path,
                                      fmt::join(fresh.train->sample_shape(), "x"),
                                      fmt::join(old_train.sample_shape(), "x")));
  if (fresh.train->size() < cfg.train.batch_size)
    throw data::DataError(fmt::format("{}: {} training samples now, fewer than one batch of {}", cfg.data.path,
                                      fresh.train->size(), cfg.train.batch_size));
  return fresh;
}

// Several ranks: every one reopened, and they count and read the same samples (a file that changed
// again between their reopens would give their samplers different orders or content). "" agreed, else why not.
std::string reopen_disagreement(dist::DistContext& dist, bool ok, const data::Dataset* train) {
  if (!dist.active()) return "";
  const int64_t size = ok ? train->size() : 0;
  const int64_t digest = ok ? static_cast<int64_t>(std::stoull(train->content_digest().substr(0, 15), nullptr, 16)) : 0;
  auto mine = torch::tensor({ok ? int64_t{1} : int64_t{0}, size, digest}, torch::kInt64).to(dist.device());
  const auto all = dist.all_gather(mine, "data reload").cpu();
  for (int64_t r = 0; r < dist.world_size(); ++r) {
    if (all[r][0].item<int64_t>() == 0) return fmt::format("rank {} could not reopen the data (its log says why)", r);
    if (all[r][1].item<int64_t>() != all[0][1].item<int64_t>())
      return fmt::format("rank {} counts {} training samples, rank 0 {}", r, all[r][1].item<int64_t>(),
                         all[0][1].item<int64_t>());
    if (all[r][2].item<int64_t>() != all[0][2].item<int64_t>())
      return fmt::format("rank {} reads other training samples than rank 0 (the same count, {}, but a digest of a few "
                         "samples differs: node-local copies that differ?)",
                         r, all[r][1].item<int64_t>());
  }
  return "";
}

// A job that rewrites a data set renames its new files over the old ones one at a time (IDX: the
// images, then the labels): a change found between two renames reopens a half-replaced set, whose
// files disagree. So a failed reopen is tried again after a pause, kReopenTries times in all, before
// the run stops (a deleted file costs these seconds before exit 65).
constexpr int kReopenTries = 4;
constexpr int kReopenPauseMs = 1000;

data::DatasetPair reopen_settled(const config::RunConfig& cfg, const data::Dataset& old_train) {
  for (int attempt = 1;; ++attempt) {
    try {
      return reopen_here(cfg, old_train);
    } catch (const data::DataError& e) {
      if (attempt == kReopenTries) {
        spdlog::error("data.on_change: reload: the changed data cannot be reopened: {} ({} tries, {} s apart)", e.what(),
                      kReopenTries, kReopenPauseMs / 1000);
        return {};
      }
      spdlog::warn("data.on_change: reload: try {} of {} to reopen the data failed ({}); trying again in {} s, in case "
                   "its files are still being replaced",
                   attempt, kReopenTries, e.what(), kReopenPauseMs / 1000);
      std::this_thread::sleep_for(std::chrono::milliseconds(kReopenPauseMs));
    }
  }
}

}  // namespace

data::DatasetPair open_run_datasets(const config::RunConfig& cfg, dist::DistContext& dist) {
  auto sets = data::create_datasets(cfg.data, cfg.model, cfg.run.seed);
  if (!dist.active()) return sets;
  // the counts, and a digest of a few samples of each split: node-local copies of one length whose
  // content differs (another version of a file, another shuffle of a folder's images) trained in silence
  const auto digest = [](const data::Dataset* d) { return d ? d->content_digest().substr(0, 12) : std::string("-"); };
  const std::string mine = fmt::format("{} training and {} validation samples, content digest {}/{}",
                                       sets.train->size(), sets.val ? sets.val->size() : 0, digest(sets.train.get()),
                                       digest(sets.val.get()));
  if (const auto other = dist.differing_rank("data", mine))
    throw data::DataError(fmt::format("the ranks read different data at the same paths: rank {} reads {} ({}), rank {} "
                                      "{}. Every node must see the same files (node-local copies that differ?)",
                                      dist.rank(), mine, sets.train->describe(), other->first, other->second));
  return sets;
}

std::optional<ReopenedData> reopen_changed_data(const config::RunConfig& cfg, const std::string& change,
                                                const data::Dataset& old_train, const data::LoaderState& pos,
                                                int64_t step, dist::DistContext& dist) {
  if (cfg.data.on_change != config::OnChange::Reload) return std::nullopt;
  ReopenedData r;
  r.data = reopen_settled(cfg, old_train);
  const bool ok = r.data.train != nullptr;
  if (const auto why = reopen_disagreement(dist, ok, r.data.train.get()); !why.empty()) {
    if (ok) spdlog::error("data.on_change: reload: the ranks cannot go on together: {}", why);
    return std::nullopt;
  }
  if (!ok) return std::nullopt;
  r.resume_at = {pos.samples_consumed > 0 ? pos.epoch + 1 : pos.epoch, 0};
  const std::string ranks = dist.active() ? fmt::format(" on all {} ranks together", dist.world_size()) : "";
  spdlog::warn("{}; data.on_change: reload: reopened the data ({}, was {} samples){}; training goes on at step {} "
               "from the start of epoch {} (the run keeps its length in steps)",
               change, r.data.train->describe(), old_train.size(), ranks, step + 1, r.resume_at.epoch);
  return r;
}

std::string look_at_files(const data::Dataset& train, const data::Dataset* val) {
  try {
    train.check_unchanged();
    if (val) val->check_unchanged();
    return "";
  } catch (const data::DataChanged& e) {
    return e.what();
  }
}

int stop_alone_for_data_change(dist::DistContext& dist, const std::string& what, int64_t step) {
  dist.leave_note(what);
  spdlog::error("{}; found inside step {} on this rank, while the other ranks may be in the step's collectives: no "
                "checkpoint can be agreed here, the last saved one stays (the run resumes from it); exiting with code "
                "{}, and the other ranks too",
                what, step + 1, kExitDataChanged);
  return kExitDataChanged;
}

std::optional<int> stop_after_peer_data_change(dist::DistContext& dist, const std::string& failure, int64_t step) {
  const std::string note = dist.peer_note();
  if (note.empty()) return std::nullopt;
  spdlog::error("{}; that rank stopped inside step {} and this rank's collective failed ({}): no checkpoint can be "
                "agreed here, the last saved one stays (the run resumes from it); exiting with code {}",
                note, step + 1, failure, kExitDataChanged);
  return kExitDataChanged;
}

}  // namespace trainer::engine
