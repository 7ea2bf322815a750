#include "obs/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <vector>

namespace trainer::obs {

void init_console_logging(const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_pattern("%^[%Y-%m-%d %H:%M:%S] [%l]%$ %v");
  auto logger = std::make_shared<spdlog::logger>("trainer", console);
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

void init_run_logging(int64_t rank, const std::string& level, const std::string& rank_log_file) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (rank == 0) {
    console->set_pattern("%^[%Y-%m-%d %H:%M:%S] [%l]%$ %v");
  } else {
    console->set_level(spdlog::level::err);  // other ranks speak on the console only to report errors
    console->set_pattern("%^[rank " + std::to_string(rank) + "] [%l]%$ %v");
  }
  sinks.push_back(console);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(rank_log_file, /*truncate=*/false);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%l] %v");
  file->set_level(spdlog::level::debug);
  sinks.push_back(file);
  auto logger = std::make_shared<spdlog::logger>("trainer", sinks.begin(), sinks.end());
  logger->set_level(std::min(spdlog::level::from_str(level), spdlog::level::debug));
  console->set_level(rank == 0 ? spdlog::level::from_str(level) : spdlog::level::err);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace trainer::obs
