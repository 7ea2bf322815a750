#include "obs/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace trainer::obs {
namespace {

std::mutex g_overlay_mu;  // held while a console line is written between hide() and show()
ConsoleOverlay* g_overlay = nullptr;

// The console sink with the overlay hidden around every line it writes.
class OverlayAwareSink : public spdlog::sinks::sink {
 public:
  explicit OverlayAwareSink(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lk(g_overlay_mu);
    if (g_overlay) g_overlay->hide();
    inner_->log(msg);
    inner_->flush();
    if (g_overlay) g_overlay->show();
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override { inner_->set_formatter(std::move(f)); }

 private:
  spdlog::sink_ptr inner_;
};

spdlog::sink_ptr console_sink() {
  const auto mode = interactive_terminal(STDERR_FILENO) ? spdlog::color_mode::automatic : spdlog::color_mode::never;
  return std::make_shared<OverlayAwareSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>(mode));
}

}  // namespace

bool terminal_env_interactive(const GetEnvFn& getenv_fn) {
  const char* term = getenv_fn("TERM");
  if (!term || !*term || std::strcmp(term, "dumb") == 0) return false;
  for (const char* launcher_var : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"})
    if (const char* v = getenv_fn(launcher_var); v && *v) return false;
  return true;
}

bool interactive_terminal(int fd) {
  return ::isatty(fd) != 0 && terminal_env_interactive([](const char* n) -> const char* { return std::getenv(n); });
}

void set_console_overlay(ConsoleOverlay* overlay) {
  std::lock_guard<std::mutex> lk(g_overlay_mu);
  g_overlay = overlay;
}

void release_console_overlay(ConsoleOverlay* overlay) {
  std::lock_guard<std::mutex> lk(g_overlay_mu);
  if (g_overlay == overlay) g_overlay = nullptr;
}

void init_console_logging(const std::string& level) {
  auto console = console_sink();
  console->set_pattern("%^[%Y-%m-%d %H:%M:%S] [%l]%$ %v");
  auto logger = std::make_shared<spdlog::logger>("trainer", console);
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

void init_run_logging(int64_t rank, const std::string& level, const std::string& rank_log_file) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = console_sink();
  if (rank == 0) {
    console->set_pattern("%^[%Y-%m-%d %H:%M:%S] [%l]%$ %v");
  } else {
    console->set_pattern("%^[rank " + std::to_string(rank) + "] [%l]%$ %v");
  }
  sinks.push_back(console);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(rank_log_file, /*truncate=*/false);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%l] %v");
  file->set_level(spdlog::level::debug);
  sinks.push_back(file);
  auto logger = std::make_shared<spdlog::logger>("trainer", sinks.begin(), sinks.end());
  logger->set_level(std::min(spdlog::level::from_str(level), spdlog::level::debug));
  // other ranks speak on the console only to report errors
  console->set_level(rank == 0 ? spdlog::level::from_str(level) : spdlog::level::err);
  // every line reaches the file when it is logged: a rank that dies of a signal (obs/crash_report)
  // keeps the lines before its last words (a few lines a log step: the writes cost nothing measurable)
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

void speak_on_console(const std::string& level) {
  auto logger = spdlog::default_logger();
  if (!logger || logger->sinks().empty()) return;
  logger->sinks().front()->set_level(spdlog::level::from_str(level));  // the console, first (init_run_logging)
}

}  // namespace trainer::obs
