// `trainer report RUN_DIR [--out FILE.html]`: one self-contained HTML page (inline SVG, no scripts,
// no network) with plots of a run's metrics.jsonl and a summary table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::obs {

struct ReportSeries {
  std::string name;
  std::string color;
  std::vector<double> x, y;
};

// Text for HTML/SVG: & < > " escaped.
std::string html_escape(const std::string& s);

// An SVG line chart with axes, ticks and a legend above the plot. Empty series are left out; a
// series whose steps go back (a resumed run logging steps again) is drawn as separate lines;
// `x_markers` are vertical lines (where resumed attempts start). A log axis says "(log scale)".
std::string svg_line_chart(const std::string& title, const std::string& y_label, const std::vector<ReportSeries>& series,
                           bool log_y = false, const std::vector<double>& x_markers = {});

// Tick labels of one axis, all in one format: fixed with the decimals the ticks need, or (values
// from 1e5 up, or below 1e-3) scientific with one mantissa length. `log_axis`: 1-2-5 x 10^k ticks.
std::vector<std::string> axis_labels(const std::vector<double>& ticks, bool log_axis);

// config.yaml text without the model keys of the other model families (schema's applies_to):
// a GPT run's page lists no ResNet keys.
std::string config_for_model_family(const std::string& config_yaml);

// The page for `records` (metrics.jsonl lines, "attempt" records make an Attempts table) and `config_yaml` (the run's config.yaml text).
std::string render_report(const std::string& run_name, const std::vector<nlohmann::json>& records,
                          const std::string& config_yaml);

// Reads RUN_DIR/metrics.jsonl and RUN_DIR/config.yaml, writes `out` ("" = RUN_DIR/report.html).
// Returns the exit code: 0, 2 when RUN_DIR or its metrics.jsonl is missing, 1 when a line is not
// valid JSON (the message names the file and line) or the page cannot be written.
int cmd_report(const std::string& run_dir, const std::string& out);

}  // namespace trainer::obs
