#include "obs/run_log.hpp"

#include <spdlog/spdlog.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace trainer::obs {

RunLog::RunLog(const RunLogOptions& opts)
    : opts_(opts), progress_(opts.primary && opts.progress_bar, opts.total_steps) {
  if (!opts_.primary) return;
  if (opts_.jsonl) {
    // append: a resumed run continues the same file. A run killed mid-write may have left a torn
    // last line: it is ended first, so that it stays one bad line instead of eating the next record.
    bool torn = false;
    {
      std::ifstream prev(opts_.jsonl_path, std::ios::binary | std::ios::ate);
      if (prev && prev.tellg() > 0) {
        prev.seekg(-1, std::ios::end);
        torn = prev.get() != '\n';
      }
    }
    jsonl_.open(opts_.jsonl_path, std::ios::app);
    if (!jsonl_) throw std::runtime_error("cannot open " + opts_.jsonl_path + ": " + std::strerror(errno));
    if (torn) jsonl_ << '\n';
  }
  if (opts_.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(opts_.tensorboard_dir);
}

void RunLog::write_json(const nlohmann::json& j) {
  if (!jsonl_.is_open()) return;
  jsonl_ << j.dump() << "\n";
  jsonl_.flush();
}

void RunLog::train(const TrainRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
  if (tb_) {
    tb_->add_scalars(r.step, scalars(r));
    tb_->flush();
  }
  progress_.set_loss(r.loss);
  progress_.clear();
  spdlog::info(format_train_line(r, opts_.total_steps));
  progress_.update(r.step);
}

void RunLog::eval(const EvalRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
  if (tb_) {
    tb_->add_scalars(r.step, scalars(r));
    tb_->flush();
  }
  progress_.clear();
  spdlog::info(format_eval_line(r));
}

void RunLog::summary(const SummaryRecord& r) {
  if (!opts_.primary) return;
  write_json(to_json(r));
  progress_.clear();
}

}  // namespace trainer::obs
