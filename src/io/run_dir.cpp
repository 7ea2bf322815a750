#include "io/run_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <time.h>

#include <cerrno>
#include <ctime>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "config/load.hpp"

namespace trainer::io {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail(const fs::path& p, const std::string& what, int err) {
  throw std::runtime_error(p.string() + ": " + what + ": " + std::strerror(err));
}

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);  // returns false without error when it already exists
  if (ec) throw std::runtime_error(p.string() + ": cannot create folder: " + ec.message());
  if (!fs::is_directory(p)) throw std::runtime_error(p.string() + ": exists and is not a folder");
}

// "superseded-20261207T183000Z" (UTC), a suffix when that name is taken (two starts in one second)
fs::path fresh_aside_folder(const fs::path& in) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  fs::path p = in / (std::string("superseded-") + stamp);
  std::error_code ec;
  for (int k = 2; fs::exists(p, ec); ++k) p = in / (std::string("superseded-") + stamp + "-" + std::to_string(k));
  return p;
}

// Moves each of `names` that exists in `from` into `to` (created when the first one moves). Returns
// whether anything moved.
bool move_into(const fs::path& from, const std::vector<std::string>& names, const fs::path& to) {
  bool moved = false;
  for (const auto& n : names) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(from / n, ec))) continue;
    if (!moved) make_dirs(to);
    moved = true;
    fs::rename(from / n, to / n, ec);
    if (ec) throw std::runtime_error((from / n).string() + ": cannot move it aside to " + to.string() + ": " + ec.message());
  }
  return moved;
}

// --resume never over a run directory that holds a run: its records and checkpoints moved aside.
// Left in place, the earlier run's newer step folders were resumed by the next --resume auto (with
// the other config's weights), and its records counted in this run's attempts and time (found from
// outside). Nothing is deleted.
std::vector<std::string> set_aside_earlier_run(const config::RunConfig& cfg, const RunDir& d) {
  std::vector<std::string> where;
  const fs::path aside = fresh_aside_folder(d.root);
  if (move_into(d.root, {"metrics.jsonl", "config.yaml", "config.sha256", "autotune.json", "init_report.json", "tb",
                         "profile"},
                aside))
    where.push_back(aside.string());
  const bool own = cfg.checkpoint.dir.empty();
  const fs::path ckpts = own ? d.checkpoints_dir() : fs::path(cfg.checkpoint.dir);
  std::vector<std::string> saved;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpts, ec))
    if (const auto n = e.path().filename().string(); n != ".lock" && n.rfind("superseded-", 0) != 0) saved.push_back(n);
  const fs::path ckpts_aside = own ? aside / "checkpoints" : fresh_aside_folder(ckpts);
  if (move_into(ckpts, saved, ckpts_aside) && (!own || where.empty())) where.push_back(ckpts_aside.string());
  return where;
}

}  // namespace

fs::path run_dir_path(const config::RunConfig& cfg) { return fs::path(cfg.run.out_dir) / cfg.run.name; }

RunDir prepare_run_dir(const config::RunConfig& cfg, int64_t rank, bool writer, bool start_over) {
  RunDir d{run_dir_path(cfg)};
  make_dirs(d.root);
  make_dirs(d.logs_dir());
  if (::access(d.root.c_str(), W_OK) != 0) fail(d.root, "run directory is not writable", errno);
  // locked before anything is written: a second run must not touch config.yaml, logs or checkpoints
  if (writer) {
    take_writer_locks(cfg, d);
  } else {
    d.lock = std::make_shared<RunLock>(d.logs_dir() / (".rank" + std::to_string(rank) + ".lock"),
                                       "rank " + std::to_string(rank) + "'s log in " + d.root.string());
  }
  make_dirs(d.checkpoints_dir());
  if (writer && start_over) d.set_aside = set_aside_earlier_run(cfg, d);
  if (writer) {
    write_file_atomic(d.config_file(), config::dump_yaml(cfg));
    write_file_atomic(d.root / "config.sha256", config::config_hash(cfg) + "\n");
  }
  return d;
}

void take_writer_locks(const config::RunConfig& cfg, RunDir& d) {
  auto lock = std::make_shared<RunLock>(d.lock_file(), "run directory " + d.root.string());
  // the checkpoint folder too, its own or the run's: another run's checkpoint.dir may name this
  // run's checkpoints/ (it pruned and resumed them)
  std::shared_ptr<RunLock> checkpoint_lock;
  if (!cfg.checkpoint.dir.empty()) {
    make_dirs(cfg.checkpoint.dir);
    checkpoint_lock = std::make_shared<RunLock>(fs::path(cfg.checkpoint.dir) / ".lock", "checkpoint.dir " + cfg.checkpoint.dir);
  } else {
    make_dirs(d.checkpoints_dir());
    checkpoint_lock = std::make_shared<RunLock>(d.checkpoints_dir() / ".lock", "checkpoints of " + d.root.string());
  }
  d.log_lock = d.lock;  // a rank that became the writer keeps its log's lock too
  d.lock = std::move(lock);
  d.checkpoint_lock = std::move(checkpoint_lock);
}

}  // namespace trainer::io
