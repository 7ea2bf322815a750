// `trainer report A B ...` (or a sweep's folder): several runs on shared axes. One chart per metric
// with a line per run (a colour each; dashed from the eleventh on), a table of the runs' final
// figures, and the config keys whose values differ between them (the rest is the same for all).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "obs/report.hpp"

namespace trainer::obs {
namespace {

using nlohmann::json;

// matplotlib's tab10: ten colours told apart on screen and in print
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};


// The last record of `kind` (nullptr: none).
const json* last_of(const std::vector<json>& recs, const char* kind) {
  const json* out = nullptr;
  for (const auto& r : recs)
    if (record_text(r, "kind", "") == kind) out = &r;
  return out;
}

ReportSeries run_series(const RunRecords& run, size_t i, const char* kind, const char* key) {
  ReportSeries s{run.name, kPalette[i % 10], {}, {}, i >= 10};
  for (const auto& r : run.records) {
    if (record_text(r, "kind", "") != kind) continue;
    const auto x = record_number(r, "step"), y = record_number(r, key);
    if (x && y && std::isfinite(*y)) {
      s.x.push_back(*x);
      s.y.push_back(*y);
    }
  }
  return s;
}

// config.yaml as "section.key" -> value text (the dump is two levels deep; a deeper value, a list
// of groups, is kept as its lines joined).
std::map<std::string, std::string> flat_config(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::istringstream in(yaml);
  std::string section, key;
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    if (l[0] != ' ') {
      section = l.substr(0, l.find(':'));
      key.clear();
      continue;
    }
    if (l.rfind("  ", 0) == 0 && l.size() > 2 && l[2] != ' ' && l[2] != '-') {
      const auto colon = l.find(':');
      key = section + "." + l.substr(2, colon - 2);
      std::string v = colon + 1 < l.size() ? l.substr(colon + 1) : "";
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      out[key] = v;
    } else if (!key.empty()) {
      auto t = l;
      while (!t.empty() && t.front() == ' ') t.erase(0, 1);
      out[key] += (out[key].empty() ? "" : " ") + t;
    }
  }
  return out;
}

std::string cell(std::optional<double> v, const char* f, double scale = 1) {
  return v ? fmt::format(fmt::runtime(f), *v * scale) : "";
}

}  // namespace

std::string render_comparison(const std::vector<RunRecords>& runs) {
  std::vector<std::string> charts;
  auto add = [&](const std::string& title, const std::string& unit, const char* kind, const char* key,
                 bool log_y = false) {
    std::vector<ReportSeries> ss;
    bool any = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      ss.push_back(run_series(runs[i], i, kind, key));
      any = any || !ss.back().x.empty();
    }
    if (any) charts.push_back(svg_line_chart(title, unit, ss, log_y));
  };
  add("Training loss", "nats", "train", "loss");
  add("Validation loss", "nats", "eval", "loss");
  add("Validation accuracy", "fraction", "eval", "accuracy");
  add("Validation bits per byte", "bits", "eval", "bpb");
  add("Learning rate", "lr", "train", "lr");
  add("Throughput", "samples/s", "train", "samples_per_s");
  add("Gradient norm", "L2 norm", "train", "grad_norm", true);

  std::ostringstream h;
  h << page_start(fmt::format("trainer report: {} runs", runs.size()));
  h << "<h1>trainer report: " << runs.size() << " runs</h1>\n<h2>Runs</h2>\n<table>\n<tr><th>run</th><th>status</th>"
       "<th>steps</th><th>train loss</th><th>val loss</th><th>val accuracy %</th><th>val bpb</th><th>best</th>"
       "<th>wall s</th><th>samples/s</th><th>folder</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& recs = runs[i].records;
    const json* summary = last_of(recs, "summary");
    const json* train = last_of(recs, "train");
    const json* eval = last_of(recs, "eval");
    std::string best;
    if (summary && record_number(*summary, "best_value"))
      best = fmt::format("{} {:.4f}", record_text(*summary, "best_metric", "?"), *record_number(*summary, "best_value"));
    const std::vector<std::string> row = {
        summary ? "finished" : "not finished",
        summary ? cell(record_number(*summary, "steps"), "{:.0f}") : train ? cell(record_number(*train, "step"), "{:.0f}") : "",
        train ? cell(record_number(*train, "loss"), "{:.4f}") : "",
        eval ? cell(record_number(*eval, "loss"), "{:.4f}") : "",
        eval ? cell(record_number(*eval, "accuracy"), "{:.2f}", 100) : "",
        eval ? cell(record_number(*eval, "bpb"), "{:.4f}") : "",
        best,
        summary ? cell(record_number(*summary, "wall_s"), "{:.1f}") : "",
        train ? cell(record_number(*train, "samples_per_s"), "{:.1f}") : "",
        runs[i].dir.string()};
    h << "<tr><td><span style=\"color:" << kPalette[i % 10] << "\">&#9632;</span> " << html_escape(runs[i].name)
      << "</td>";
    for (const auto& c : row) h << "<td>" << html_escape(c) << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";

  // the keys that tell the runs apart (run.name always does: left out)
  std::vector<std::map<std::string, std::string>> configs;
  std::set<std::string> keys;
  for (const auto& r : runs) {
    configs.push_back(flat_config(r.config_yaml));
    for (const auto& [k, v] : configs.back()) keys.insert(k);
  }
  std::vector<std::string> differing;
  for (const auto& k : keys) {
    if (k == "run.name" || k == "run.out_dir") continue;
    std::set<std::string> values;
    for (const auto& c : configs) values.insert(c.count(k) ? c.at(k) : "(absent)");
    if (values.size() > 1) differing.push_back(k);
  }
  h << "<h2>Config keys that differ</h2>\n";
  if (differing.empty()) {
    h << "<p>none: every run has the same config.yaml (apart from run.name and run.out_dir)</p>\n";
  } else {
    h << "<table>\n<tr><th>run</th>";
    for (const auto& k : differing) h << "<th>" << html_escape(k) << "</th>";
    h << "</tr>\n";
    for (size_t i = 0; i < runs.size(); ++i) {
      h << "<tr><td>" << html_escape(runs[i].name) << "</td>";
      for (const auto& k : differing)
        h << "<td>" << html_escape(configs[i].count(k) ? configs[i].at(k) : "(absent)") << "</td>";
      h << "</tr>\n";
    }
    h << "</table>\n";
  }
  h << "<h2>Curves</h2>\n<div class=\"charts\">\n";
  for (const auto& c : charts) h << c << "\n";
  h << "</div>\n</body></html>\n";
  return h.str();
}

}  // namespace trainer::obs
