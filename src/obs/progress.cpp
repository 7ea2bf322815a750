#include "obs/progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

namespace trainer::obs {

bool progress_bar_wanted(const std::string& mode, bool stdout_is_tty, const GetEnvFn& getenv_fn) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  return stdout_is_tty && terminal_env_interactive(getenv_fn);
}

bool progress_bar_wanted(const std::string& mode, bool stdout_is_tty) {
  return progress_bar_wanted(mode, stdout_is_tty, [](const char* n) -> const char* { return std::getenv(n); });
}

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

std::string format_progress_line(int64_t step, int64_t total, double steps_per_s, std::optional<double> loss,
                                 int width) {
  const double frac = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  std::string eta = steps_per_s > 0 ? format_duration(static_cast<double>(total - step) / steps_per_s) : "--:--";
  return fmt::format("[{}] {}/{} steps  {:.2f} it/s  ETA {}  loss {}", bar, step, total, steps_per_s, eta,
                     loss ? fmt::format("{:.4f}", *loss) : std::string("--"));
}

std::string format_eta_line(int64_t from_step, double from_s, int64_t step, double time_s, int64_t total,
                            double now) {
  const double per_step = (time_s - from_s) / static_cast<double>(std::max<int64_t>(step - from_step, 1));
  const double left = per_step * static_cast<double>(std::max<int64_t>(total - step, 0));
  const auto end = static_cast<std::time_t>(now + left);
  std::tm utc{};
  gmtime_r(&end, &utc);
  char at[32];
  std::strftime(at, sizeof at, "%Y-%m-%d %H:%M UTC", &utc);
  return fmt::format("ETA: {} of {} steps left at {:.3f} s/step (measured over steps {}-{}): {} more, ending about {}",
                     std::max<int64_t>(total - step, 0), total, per_step, from_step, step, format_duration(left), at);
}

std::string format_train_line(const TrainRecord& r, int64_t total_steps) {
  std::string s = fmt::format("step {}/{} | epoch {:.2f} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.1f} samples/s",
                              r.step, total_steps, r.epoch, r.loss, r.lr, r.grad_norm, r.samples_per_s);
  if (r.tokens_per_s) s += fmt::format(" | {:.0f} tok/s", *r.tokens_per_s);
  s += fmt::format(" | step {:.1f} ms (data {:.1f}, compute {:.1f}, optim {:.1f}", r.step_ms, r.data_wait_ms,
                   r.compute_ms, r.optim_ms);
  if (r.comm_ms) s += fmt::format(", comm {:.1f}", *r.comm_ms);
  s += ")";
  if (r.mfu) s += fmt::format(" | MFU {:.1f}%", *r.mfu * 100);
  if (r.loss_scale) s += fmt::format(" | scale {:g}", *r.loss_scale);
  if (r.rss_mb) s += fmt::format(" | rss {:.0f} MB (peak {:.0f})", *r.rss_mb, r.peak_rss_mb.value_or(0));
  if (r.cuda_allocated_mb)
    s += fmt::format(" | cuda {:.0f}/{:.0f} MB (peak {:.0f})", *r.cuda_allocated_mb, r.cuda_reserved_mb.value_or(0),
                     r.cuda_peak_allocated_mb.value_or(0));
  return s;
}

std::string format_eval_line(const EvalRecord& r) {
  std::string s = fmt::format("eval step {} | loss {:.4f}", r.step, r.loss);
  if (r.accuracy) s += fmt::format(" | accuracy {:.2f}%", *r.accuracy * 100);
  if (r.top5) s += fmt::format(" | top5 {:.2f}%", *r.top5 * 100);
  if (r.ppl) s += fmt::format(" | ppl {:.3f}", *r.ppl);
  if (r.bpb) s += fmt::format(" | bpb {:.4f}", *r.bpb);
  if (r.tta_accuracy) s += fmt::format(" | flip TTA loss {:.4f} accuracy {:.2f}%", *r.tta_loss, *r.tta_accuracy * 100);
  if (r.ema_loss) {  // train.ema.eval: the averaged weights' figures, beside the trained weights'
    s += fmt::format(" | EMA loss {:.4f}", *r.ema_loss);
    if (r.ema_accuracy) s += fmt::format(" accuracy {:.2f}%", *r.ema_accuracy * 100);
    if (r.ema_ppl) s += fmt::format(" ppl {:.3f}", *r.ema_ppl);
    if (r.ema_bpb) s += fmt::format(" bpb {:.4f}", *r.ema_bpb);
  }
  s += fmt::format(" | best {} {:.4f} at step {} | {:.0f} ms", r.best_metric, r.best_value, r.best_step, r.eval_ms);
  return s;
}

ProgressDisplay::ProgressDisplay(bool enabled, int64_t total_steps, FILE* out)
    : enabled_(enabled), total_(total_steps), out_(out) {
  if (enabled_) set_console_overlay(this);
}

ProgressDisplay::~ProgressDisplay() {
  if (!enabled_) return;
  release_console_overlay(this);  // waits for a log line being written
  std::lock_guard<std::mutex> lk(mu_);
  if (drawn_) {
    std::fputc('\n', out_);  // the last bar stays in the scrollback
    std::fflush(out_);
  }
}

void ProgressDisplay::update(int64_t step) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto now = std::chrono::steady_clock::now();
  if (start_step_ < 0) {
    start_step_ = step;
    start_ = now;
  }
  if (drawn_ && step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double el = std::chrono::duration<double>(now - start_).count();
  const double rate = el > 0 ? static_cast<double>(step - start_step_) / el : 0.0;
  line_ = format_progress_line(step, total_, rate, loss_);
  std::fprintf(out_, "\r%s\x1b[K", line_.c_str());
  std::fflush(out_);
  drawn_ = true;
  hidden_ = false;
}

void ProgressDisplay::erase_locked() {
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

void ProgressDisplay::clear() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (drawn_) erase_locked();
  hidden_ = false;
}

void ProgressDisplay::hide() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!drawn_) return;
  erase_locked();
  hidden_ = true;
}

void ProgressDisplay::show() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!hidden_) return;
  std::fprintf(out_, "\r%s\x1b[K", line_.c_str());
  std::fflush(out_);
  drawn_ = true;
  hidden_ = false;
}

}  // namespace trainer::obs
