// What a sweep point's run directory says about it (its metrics.jsonl), and the sweep's final table.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trainer::engine {

struct PointRecords {
  bool finished = false;   // a summary record after the last attempt record: the run is complete
  bool started = false;    // any record at all
  std::optional<int64_t> steps;             // the summary's, else the last train record's step
  std::optional<double> train_loss;         // the last train record's
  std::optional<double> val_loss, val_accuracy, val_bpb;  // the last eval record's
  std::string best_metric;                  // the summary's (early_stopping.metric, or loss / accuracy)
  std::optional<double> best_value;
  std::optional<double> wall_s;             // the summary's: all attempts
};

// Reads RUN_DIR/metrics.jsonl (missing: nothing started). Lines that are not JSON objects are skipped:
// a run killed while writing leaves a torn last line.
PointRecords read_point_records(const std::filesystem::path& run_dir);

struct SweepRow {
  std::string name;
  std::vector<std::pair<std::string, std::string>> values;  // the point's axis values
  std::string status;    // "done", "done before", "failed (exit 1)", "stopped", "not run"
  PointRecords records;
};

// The rows as JSON (sweep.json's "points"): name, values, status and the figures that were measured.
nlohmann::json rows_json(const std::vector<SweepRow>& rows);

// A text table, one line per point: its axis values, status, steps, the final losses and accuracy,
// the best tracked metric and the wall time; a column no point has is left out.
std::string rows_table(const std::vector<SweepRow>& rows);

}  // namespace trainer::engine
