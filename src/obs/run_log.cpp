#include "obs/run_log.hpp"

#include <ctime>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace trainer::obs {
namespace {

// A file that does not end in a newline ends in a line torn by a kill mid-write: cut it off (the
// record it began is lost either way; left there, it would swallow the next record).
void drop_torn_last_line(int fd, const std::string& path) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) return;
  off_t end = st.st_size;
  char c = 0;
  if (::pread(fd, &c, 1, end - 1) != 1 || c == '\n') return;
  // back to just after the last newline, reading backwards in blocks
  char buf[4096];
  off_t keep = 0;
  for (off_t pos = end; pos > 0 && keep == 0;) {
    const off_t from = pos > static_cast<off_t>(sizeof(buf)) ? pos - static_cast<off_t>(sizeof(buf)) : 0;
    const ssize_t n = ::pread(fd, buf, static_cast<size_t>(pos - from), from);
    if (n <= 0) return;
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        keep = from + i + 1;
        break;
      }
    pos = from;
  }
  if (::ftruncate(fd, keep) != 0) throw std::runtime_error(path + ": cannot remove a torn last line: " + std::strerror(errno));
  spdlog::warn("{}: removed a torn last line ({} bytes) left by an interrupted run", path, end - keep);
}

}  // namespace

RunLog::RunLog(const RunLogOptions& opts)
    : opts_(opts), progress_(opts.primary && opts.progress_bar, opts.total_steps) {
  if (!opts_.primary) return;
  if (opts_.jsonl) {
    // append: a resumed run continues the same file
    jsonl_fd_ = ::open(opts_.jsonl_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    if (jsonl_fd_ < 0) throw std::runtime_error("cannot open " + opts_.jsonl_path + ": " + std::strerror(errno));
    struct stat st{};
    if (::fstat(jsonl_fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(jsonl_fd_);
      jsonl_fd_ = -1;
      throw std::runtime_error(opts_.jsonl_path + ": not a regular file");
    }
    drop_torn_last_line(jsonl_fd_, opts_.jsonl_path);
  }
  if (opts_.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(opts_.tensorboard_dir);
}

RunLog::~RunLog() {
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
  if (write_failures_ > 0)
    spdlog::error("{}: {} record(s) could not be written and are missing from the file", opts_.jsonl_path,
                  write_failures_);
}

void RunLog::write_json(const nlohmann::json& j) {
  if (jsonl_fd_ < 0) return;
  // replace: a string that is not UTF-8 (a path from the file system) must not lose the record
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  struct stat st{};
  const off_t before = ::fstat(jsonl_fd_, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(jsonl_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (done == line.size()) return;
  if (done > 0 && before >= 0 && ::ftruncate(jsonl_fd_, before) != 0) {
    // the part written stays: end it so that the next record starts on a line of its own
    [[maybe_unused]] auto n = ::write(jsonl_fd_, "\n", 1);
  }
  if (write_failures_++ == 0)
    spdlog::warn("{}: cannot write a record ({}); training goes on, later failures are counted and reported at "
                 "the end",
                 opts_.jsonl_path, std::strerror(err));
}

void RunLog::store(const nlohmann::json& record, int64_t step,
                   const std::vector<std::pair<std::string, double>>& tb_scalars) {
  write_json(record);
  if (tb_) {
    tb_->add_scalars(step, tb_scalars);
    tb_->flush();
  }
}

void RunLog::train(const TrainRecord& r) {
  if (!opts_.primary) return;
  // a step the previous attempt logged (the resume check compared it) goes to the console only
  const bool replayed = r.step <= replay_train_until_;
  if (!replayed) store(to_json(r), r.step, scalars(r));
  progress_.set_loss(r.loss);
  progress_.clear();
  spdlog::info("{}{}", format_train_line(r, opts_.total_steps),
               replayed ? " (recomputed after the resume; not logged again)" : "");
  // the ETA, once: from the first record this process logged (its start-up left out) to the first
  // one at least kEtaAfterSteps later, unless the run is over by then
  if (eta_from_step_ < 0) {
    eta_from_step_ = r.step;
    eta_from_s_ = r.time_s;
  } else if (!eta_logged_ && r.step - eta_from_step_ >= kEtaAfterSteps && r.step < opts_.total_steps) {
    eta_logged_ = true;
    spdlog::info("{}", format_eta_line(eta_from_step_, eta_from_s_, r.step, r.time_s, opts_.total_steps,
                                       static_cast<double>(std::time(nullptr))));
  }
  progress_.update(r.step);
}

void RunLog::eval(const EvalRecord& r) {
  if (!opts_.primary) return;
  const bool replayed = r.step <= replay_eval_until_;
  if (!replayed) store(to_json(r), r.step, scalars(r));
  progress_.clear();
  spdlog::info("{}{}", format_eval_line(r), replayed ? " (recomputed after the resume; not logged again)" : "");
}

void RunLog::attempt(const AttemptRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
}

void RunLog::hparams(const std::vector<HParam>& hparams, const std::vector<std::string>& metric_tags) {
  if (opts_.primary && tb_) tb_->add_hparams(hparams, metric_tags);
}

void RunLog::world(const WorldRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
}

void RunLog::summary(const SummaryRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
  if (tb_) tb_->end_session(/*success=*/true);
  progress_.clear();
}

}  // namespace trainer::obs
