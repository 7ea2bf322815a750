// `trainer report RUN_DIR [--out FILE.html]`: one self-contained HTML page (inline SVG, no scripts,
// no network) with plots of a run's metrics.jsonl and a summary table.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::obs {

struct ReportSeries {
  std::string name;
  std::string color;
  std::vector<double> x, y;
  bool dashed = false;
};

// A vertical line across a chart at step `x` (a resumed attempt, a change of the world size), its
// `title` shown on hover.
struct ChartMarker {
  double x = 0;
  std::string title;
};

// Text for HTML/SVG: & < > " escaped.
std::string html_escape(const std::string& s);

// An SVG line chart with axes, ticks and a legend above the plot. Empty series are left out; a
// series whose steps go back (a resumed run logging steps again) is drawn as separate lines; a
// series equal to an earlier one is dashed and its legend says "= <the earlier one>" (peak RSS that
// is the RSS would hide under it); the step axis has whole-number ticks. `markers` are vertical lines
// (where resumed attempts start, where the world size changed). A log axis says "(log scale)".
std::string svg_line_chart(const std::string& title, const std::string& y_label, const std::vector<ReportSeries>& series,
                           bool log_y = false, const std::vector<ChartMarker>& markers = {});

// Tick labels of one axis, all in one format: fixed with the decimals the ticks need, or (values
// from 1e5 up, or below 1e-3) scientific with one mantissa length. `log_axis`: 1-2-5 x 10^k ticks.
std::vector<std::string> axis_labels(const std::vector<double>& ticks, bool log_axis);

// config.yaml text without the model keys of the other model families (schema's applies_to):
// a GPT run's page lists no ResNet keys.
std::string config_for_model_family(const std::string& config_yaml);

// The page's head: <!DOCTYPE html> to <body>, with the title and the style every page shares.
std::string page_start(const std::string& title);

// A record's numeric field (nullopt: absent or not a number), for the report's pages.
std::optional<double> record_number(const nlohmann::json& r, const char* key);
// A record's field as text or as a number, `fallback` when it is absent or of another type (a
// hand-edited or foreign metrics.jsonl: a string loss, a null, must not end the report).
std::string record_text(const nlohmann::json& r, const char* key, const std::string& fallback);
double record_value(const nlohmann::json& r, const char* key, double fallback);

// The page for `records` (metrics.jsonl lines, "attempt" records make an Attempts table) and `config_yaml` (the run's config.yaml text).
std::string render_report(const std::string& run_name, const std::vector<nlohmann::json>& records,
                          const std::string& config_yaml);

// One run directory's records and config.
struct RunRecords {
  std::string name;  // the folder's name
  std::filesystem::path dir;
  std::vector<nlohmann::json> records;
  std::string config_yaml;  // "" when the run has none
};

// Reads RUN_DIR/metrics.jsonl and RUN_DIR/config.yaml into `run`. Returns the exit code, the error
// printed: 0, 2 when RUN_DIR or its metrics.jsonl is missing, 1 when a line is not valid JSON (the
// message names the file and line). A last line cut short (a kill) is skipped with a warning.
int read_run(const std::filesystem::path& dir, RunRecords& run);

// Several runs on shared axes (report_compare.cpp): per metric one chart with a line per run, a table
// of their final figures, and the config keys whose values differ between them.
std::string render_comparison(const std::vector<RunRecords>& runs);

// One run directory: its page (`out` "" = RUN_DIR/report.html). Several, or a folder of run folders
// (a sweep's: in sweep.json's order): the comparison (`out` "" = SWEEP/report.html for one sweep
// folder, else ./compare.html). Returns read_run's exit codes, or 1 when the page cannot be written.
int cmd_report(const std::vector<std::string>& dirs, const std::string& out);
inline int cmd_report(const std::string& dir, const std::string& out) { return cmd_report(std::vector{dir}, out); }

}  // namespace trainer::obs
