// Logging through spdlog: rank 0 prints to the console, every rank writes logs/rank<k>.log.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace trainer::obs {

// Console only (before the run directory exists). Level: trace|debug|info|warn|error.
void init_console_logging(const std::string& level = "info");

// Console on rank 0 (errors on every rank, prefixed with the rank) plus the rank's own file.
void init_run_logging(int64_t rank, const std::string& level, const std::string& rank_log_file);

}  // namespace trainer::obs
