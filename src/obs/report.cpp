#include "obs/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "config/exit_codes.hpp"
#include "config/file_read.hpp"
#include "config/file_write.hpp"
#include "config/schema.hpp"

namespace trainer::obs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


std::string fmt_num(double v) {
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}


ReportSeries series_of(const std::vector<json>& recs, const std::string& kind, const char* key, const std::string& name,
                       const std::string& color) {
  ReportSeries s{name, color, {}, {}};
  for (const auto& r : recs) {
    if (record_text(r, "kind", "") != kind) continue;
    auto x = record_number(r, "step"), y = record_number(r, key);
    if (x && y && std::isfinite(*y)) {
      s.x.push_back(*x);
      s.y.push_back(*y);
    }
  }
  return s;
}

bool any_points(const std::vector<ReportSeries>& ss) {
  return std::any_of(ss.begin(), ss.end(), [](const ReportSeries& s) { return !s.x.empty(); });
}

// The "attempt" records (one per start: a fresh run or a resume) as table rows, the "world" records
// and the resumes on another number of ranks as rows of the world-size table, and the charts'
// markers for both.
struct Attempts {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::vector<std::string>> world_rows;
  std::vector<ChartMarker> markers;
};

Attempts attempts_of(const std::vector<json>& recs, const json* summary, const json* last_train) {
  std::vector<const json*> as;
  std::vector<std::optional<double>> ranks_before;  // per attempt: the world size the records last said
  std::optional<double> world_now;
  for (const auto& r : recs) {
    const std::string kind = record_text(r, "kind", "");
    if (kind == "attempt") {
      as.push_back(&r);
      ranks_before.push_back(world_now);
    }
    if (kind == "attempt" || kind == "world" || kind == "train")
      if (auto w = record_number(r, "world_size")) world_now = w;
  }
  Attempts out;
  auto text = [](std::optional<double> v, const char* f) { return v ? fmt::format(fmt::runtime(f), *v) : "?"; };
  for (size_t i = 0; i < as.size(); ++i) {
    const json& a = *as[i];
    const auto start = record_number(a, "start_step");
    std::optional<double> end = i + 1 < as.size() ? record_number(*as[i + 1], "start_step")
                                : summary          ? record_number(*summary, "steps")
                                : last_train       ? record_number(*last_train, "step")
                                                   : std::nullopt;
    std::string from = "fresh start";
    if (a.contains("resumed_from") && a.at("resumed_from").is_string()) from = a.at("resumed_from").get<std::string>();
    else if (a.contains("resumed_from") && !a.at("resumed_from").is_null()) from = a.at("resumed_from").dump();
    const auto world = record_number(a, "world_size");
    const auto& ranks = ranks_before[i];
    out.rows.push_back({text(record_number(a, "attempt"), "{:.0f}"), text(start, "{:.0f}"),
                        i + 1 < as.size() || summary ? text(end, "{:.0f}") : text(end, "{:.0f}") + " (last record)",
                        text(record_number(a, "time_s"), "{:.1f} s"), from, text(world, "{:.0f}")});
    if (start && i > 0) {
      std::string title = fmt::format("resumed at step {}", *start);
      if (world && ranks && *world != *ranks) {
        title += fmt::format(" on {:.0f} ranks (was {:.0f})", *world, *ranks);
        out.world_rows.push_back({text(start, "{:.0f}"), text(ranks, "{:.0f}") + " -> " + text(world, "{:.0f}"),
                                  fmt::format("resumed (attempt {})", text(record_number(a, "attempt"), "{:.0f}"))});
      }
      out.markers.push_back({*start, title});
    }
  }
  return out;
}

// dist.recovery in_process: the "world" records (a group that shrank or grew during an attempt).
void add_world_changes(const std::vector<json>& recs, Attempts& out) {
  std::optional<std::pair<double, double>> last;  // (step, size): a new writer may write a change again
  for (const auto& r : recs) {
    if (record_text(r, "kind", "") != "world") continue;
    const auto step = record_number(r, "step"), now = record_number(r, "world_size"), before = record_number(r, "previous_world_size");
    if (!step || !now) continue;
    if (last && last->first == *step && last->second == *now) continue;
    last = {*step, *now};
    std::string reason = r.contains("reason") && r.at("reason").is_string() ? r.at("reason").get<std::string>() : "";
    const std::string change = (before ? fmt::format("{:.0f}", *before) : "?") + fmt::format(" -> {:.0f}", *now);
    out.world_rows.push_back({fmt::format("{:.0f}", *step), change, reason.empty() ? "in process" : reason});
    out.markers.push_back({*step, fmt::format("world size {} after step {:.0f}{}", change, *step,
                                              reason.empty() ? "" : ": " + reason)});
  }
  auto step_of = [](const std::vector<std::string>& row) {
    return std::strtod(row[0].c_str(), nullptr);  // "?" sorts as 0
  };
  std::stable_sort(out.world_rows.begin(), out.world_rows.end(),
                   [&](const auto& a, const auto& b) { return step_of(a) < step_of(b); });
}

}  // namespace

// The dump lists the model keys of every family; keep the family of model.arch and the shared ones.
std::string config_for_model_family(const std::string& config_yaml) {
  auto unquote = [](std::string v) {
    v = v.substr(0, v.find(" #"));
    while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.pop_back();
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    return v;
  };
  config::RunConfig scratch;
  std::map<std::string, config::FieldInfo> family;  // model key leaf -> its field (the archs it applies to)
  for (const auto& f : config::describe_fields(scratch))
    if (f.key.rfind("model.", 0) == 0 && !f.applies_to.empty()) family.emplace(f.key.substr(6), f);
  std::vector<std::string> lines;
  std::istringstream in(config_yaml);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string arch;
  bool in_model = false;
  for (const auto& l : lines) {
    if (!l.empty() && l[0] != ' ') in_model = l.rfind("model:", 0) == 0;
    else if (in_model && l.rfind("  arch:", 0) == 0) arch = unquote(l.substr(7 + (l.size() > 7 && l[7] == ' ')));
  }
  if (arch.empty()) return config_yaml;
  std::string out;
  in_model = false;
  for (const auto& l : lines) {
    if (!l.empty() && l[0] != ' ') in_model = l.rfind("model:", 0) == 0;
    if (in_model && l.size() > 2 && l.rfind("  ", 0) == 0 && l[2] != ' ') {
      auto it = family.find(l.substr(2, l.find(':') - 2));
      if (it != family.end() && !config::applies_to_arch(it->second, arch)) continue;
    }
    out += l + "\n";
  }
  return out;
}

std::string page_start(const std::string& title) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
    << "</title>\n<style>\n"
       "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fff}\n"
       "h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:24px 0 8px}\n"
       "table{border-collapse:collapse;font-size:14px}td{padding:3px 12px;border-bottom:1px solid #e5e5e5}\n"
       "td:first-child{color:#555}.charts{display:flex;flex-wrap:wrap;gap:12px}\n"
       "svg{border:1px solid #ddd;border-radius:4px;background:#fff}.f{fill:#fcfcfc;stroke:#bbb}\n"
       ".g{stroke:#e8e8e8}.t{font-size:14px;font-weight:600;text-anchor:middle}\n"
       ".yt{font-size:11px;text-anchor:end;fill:#555}.xt{font-size:11px;text-anchor:middle;fill:#555}\n"
       ".xl{font-size:12px;text-anchor:middle;fill:#333}.lg{font-size:12px;fill:#333}.n{text-anchor:middle;fill:#999}\n"
       ".m{stroke:#888;stroke-dasharray:4 3}th{text-align:left;padding:3px 12px;font-weight:600}\n"
       "pre{background:#f6f8fa;padding:12px;border-radius:4px;font-size:12px;overflow:auto;max-height:480px}\n"
       "</style></head><body>\n";
  return h.str();
}

std::string render_report(const std::string& run_name, const std::vector<json>& recs, const std::string& config_yaml) {
  const char* kBlue = "#1f77b4";
  const char* kOrange = "#ff7f0e";
  const char* kGreen = "#2ca02c";
  const char* kRed = "#d62728";
  const char* kPurple = "#9467bd";
  const json* summary = nullptr;
  const json* last_train = nullptr;
  const json* last_eval = nullptr;
  for (const auto& r : recs) {
    const std::string k = record_text(r, "kind", "");
    if (k == "summary") summary = &r;
    if (k == "train") last_train = &r;
    if (k == "eval") last_eval = &r;
  }
  Attempts attempts = attempts_of(recs, summary, last_train);
  add_world_changes(recs, attempts);
  std::vector<std::string> charts;
  auto add = [&](const std::string& title, const std::string& unit, std::vector<ReportSeries> ss, bool log_y = false) {
    if (any_points(ss)) charts.push_back(svg_line_chart(title, unit, ss, log_y, attempts.markers));
  };
  add("Loss", "nats", {series_of(recs, "train", "loss", "train", kBlue), series_of(recs, "eval", "loss", "val", kOrange)});
  add("Validation accuracy", "fraction",
      {series_of(recs, "eval", "accuracy", "top-1", kGreen), series_of(recs, "eval", "top5", "top-5", kPurple)});
  add("Validation bits per byte", "bits", {series_of(recs, "eval", "bpb", "val bpb", kOrange)});
  add("Learning rate", "lr", {series_of(recs, "train", "lr", "lr", kBlue)});
  add("Throughput", "samples/s", {series_of(recs, "train", "samples_per_s", "samples/s", kGreen)});
  add("Token throughput", "tokens/s", {series_of(recs, "train", "tokens_per_s", "tokens/s", kGreen)});
  add("Step time", "ms per step",
      {series_of(recs, "train", "step_ms", "total", kBlue), series_of(recs, "train", "data_wait_ms", "data", kOrange),
       series_of(recs, "train", "compute_ms", "compute", kGreen), series_of(recs, "train", "comm_ms", "comm", kRed),
       series_of(recs, "train", "optim_ms", "optim", kPurple)});
  add("Host memory", "MB", {series_of(recs, "train", "rss_mb", "RSS", kBlue),
                            series_of(recs, "train", "peak_rss_mb", "peak RSS", kOrange)});
  add("CUDA memory", "MB", {series_of(recs, "train", "cuda_allocated_mb", "allocated", kBlue),
                            series_of(recs, "train", "cuda_reserved_mb", "reserved", kOrange),
                            series_of(recs, "train", "cuda_peak_allocated_mb", "peak", kRed)});
  add("Gradient norm", "L2 norm", {series_of(recs, "train", "grad_norm", "grad norm", kBlue)}, true);

  // summary table: the summary record, the last train and eval records
  std::vector<std::pair<std::string, std::string>> rows;
  auto row = [&](const std::string& k, const std::string& v) { rows.emplace_back(k, v); };
  if (summary) {
    const auto& s = *summary;
    row("status", "finished (" + record_text(s, "stop_reason", "?") + ")");
    row("steps", fmt_num(record_value(s, "steps", 0.0)));
    row("epochs", fmt::format("{:.3f}", record_value(s, "epochs", 0.0)));
    row("samples seen", fmt::format("{}", static_cast<int64_t>(record_value(s, "samples", 0.0))));
    const auto n_attempts = record_number(s, "attempts");
    row("wall time", fmt::format("{:.1f} s", record_number(s, "wall_s").value_or(0.0)) +
                         (n_attempts && *n_attempts > 1 ? fmt::format(" over {:.0f} attempts", *n_attempts) : ""));
    if (n_attempts) row("attempts", fmt::format("{:.0f}", *n_attempts));
    row("parameters", fmt::format("{}", static_cast<int64_t>(record_value(s, "num_parameters", 0.0))));
    row("device / precision / ranks",
        record_text(s, "device", "?") + " / " + record_text(s, "precision", "?") + " / " +
            std::to_string(static_cast<int64_t>(record_value(s, "world_size", 1.0))));
    if (auto b = record_number(s, "best_value"))
      row("best " + record_text(s, "best_metric", "?"), fmt::format("{:.4f} at step {}", *b, static_cast<int64_t>(record_value(s, "best_step", 0.0))));
  } else {
    row("status", "no summary record: the run has not finished (or was stopped)");
    if (last_train) {
      row("steps", fmt_num(record_value(*last_train, "step", 0.0)));
      row("samples seen", fmt::format("{}", static_cast<int64_t>(record_value(*last_train, "samples", 0.0))));
      row("wall time", fmt::format("{:.1f} s", record_value(*last_train, "time_s", 0.0)));
    }
  }
  if (last_train) {
    row("final train loss", fmt::format("{:.4f}", record_value(*last_train, "loss", 0.0)));
    row("final throughput", fmt::format("{:.1f} samples/s", record_value(*last_train, "samples_per_s", 0.0)));
    if (auto m = record_number(*last_train, "peak_rss_mb")) row("peak host RSS", fmt::format("{:.0f} MB", *m));
    if (auto m = record_number(*last_train, "cuda_peak_allocated_mb")) row("peak CUDA allocated", fmt::format("{:.0f} MB", *m));
    if (auto m = record_number(*last_train, "mfu")) row("MFU", fmt::format("{:.1f} %", *m * 100));
  }
  if (last_eval) {
    row("final val loss", fmt::format("{:.4f}", record_value(*last_eval, "loss", 0.0)));
    if (auto a = record_number(*last_eval, "accuracy")) row("final val accuracy", fmt::format("{:.2f} %", *a * 100));
    if (auto a = record_number(*last_eval, "top5")) row("final val top-5", fmt::format("{:.2f} %", *a * 100));
    if (auto b = record_number(*last_eval, "bpb")) row("final val bits per byte", fmt::format("{:.4f}", *b));
    if (auto p = record_number(*last_eval, "ppl")) row("final val perplexity", fmt::format("{:.3f}", *p));
  }

  std::ostringstream h;
  h << page_start("trainer report: " + run_name);
  h << "<h1>trainer report: " << html_escape(run_name) << "</h1>\n<h2>Summary</h2>\n<table>\n";
  for (const auto& [k, v] : rows) h << "<tr><td>" << html_escape(k) << "</td><td>" << html_escape(v) << "</td></tr>\n";
  h << "</table>\n";
  if (!attempts.rows.empty()) {
    h << "<h2>Attempts</h2>\n<table>\n<tr><th>attempt</th><th>from step</th><th>to step</th>"
         "<th>training time before</th><th>resumed from</th><th>ranks</th></tr>\n";
    for (const auto& r : attempts.rows) {
      h << "<tr>";
      for (const auto& c : r) h << "<td>" << html_escape(c) << "</td>";
      h << "</tr>\n";
    }
    h << "</table>\n";
  }
  if (!attempts.world_rows.empty()) {
    h << "<h2>World size changes</h2>\n<table>\n<tr><th>after step</th><th>ranks</th><th>why</th></tr>\n";
    for (const auto& r : attempts.world_rows) {
      h << "<tr>";
      for (const auto& c : r) h << "<td>" << html_escape(c) << "</td>";
      h << "</tr>\n";
    }
    h << "</table>\n";
  }
  h << "<h2>Curves</h2>\n<div class=\"charts\">\n";
  for (const auto& c : charts) h << c << "\n";
  h << "</div>\n<h2>Configuration</h2>\n<pre>" << html_escape(config_yaml.empty() ? "(config.yaml not found)" : config_for_model_family(config_yaml))
    << "</pre>\n</body></html>\n";
  return h.str();
}

int read_run(const fs::path& dir, RunRecords& run) {
  const fs::path metrics = dir / "metrics.jsonl";
  if (std::error_code ec; !fs::is_directory(dir, ec)) {
    std::cerr << "error: " << dir.string() << ": not a run directory ("
              << (fs::exists(dir, ec) ? "a file, not a folder" : "no such folder") << ")\n";
    return kExitUsage;
  }
  std::istringstream in;
  try {  // regular files only: a FIFO would block
    in.str(RegularFile::open(metrics.string()).read_all());
  } catch (const FileReadError& e) {
    std::cerr << "error: " << e.what() << " (is log.jsonl off, or has the run not started?)\n";
    return kExitUsage;
  }
  run.dir = dir;
  run.records.clear();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string())
        throw std::runtime_error("not a record with a \"kind\"");
      run.records.push_back(std::move(j));
    } catch (const json::parse_error& e) {
      if (e.byte < line.size()) {  // the run itself reads past such a line: the report draws the others
        std::cerr << "warning: " << metrics.string() << ":" << n << ": invalid record, skipped: " << e.what() << "\n";
        continue;
      }
      // valid up to its end: a record cut short by a run killed while writing it
      std::cerr << "warning: " << metrics.string() << ":" << n << ": skipping a record cut short (killed while "
                << "writing it?)\n";
    } catch (const std::exception& e) {
      std::cerr << "warning: " << metrics.string() << ":" << n << ": invalid record, skipped: " << e.what() << "\n";
    }
  }
  if (run.records.empty() && in.str().find_first_not_of(" \t\r\n") != std::string::npos) {
    std::cerr << "error: " << metrics.string() << ": no valid record in it\n";
    return kExitFailure;
  }
  run.config_yaml.clear();
  try {
    run.config_yaml = RegularFile::open((dir / "config.yaml").string(), 16u << 20).read_all();
  } catch (const FileReadError&) {  // the report is still useful without the config
  }
  fs::path canon = fs::weakly_canonical(dir);
  if (canon.filename().empty()) canon = canon.parent_path();  // "runs/x/" names the run "x" too
  run.name = canon.filename().string();
  return kExitOk;
}

namespace {

int write_page(const fs::path& target, const std::string& html, const std::string& what) {
  try {  // atomically: a failed write (a full disk) leaves an earlier page as it was
    write_file_atomic(target, html);
  } catch (const std::exception& e) {
    std::cerr << "error: cannot write " << target.string() << ": " << e.what() << "\n";
    return kExitFailure;
  }
  std::cout << "report written to " << target.string() << " (" << what << ")\n";
  return kExitOk;
}

// A sweep's folder (or any folder of run folders): its runs, in sweep.json's order when it has one;
// `missing`: the sweep's points that have no records to draw, "name (status)" (a point that failed at
// start-up was left out of the page in silence: found from outside).
std::vector<fs::path> runs_in(const fs::path& dir, std::vector<std::string>& missing) {
  std::vector<fs::path> runs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && fs::is_regular_file(e.path() / "metrics.jsonl", ec)) runs.push_back(e.path());
  std::sort(runs.begin(), runs.end());
  try {
    const auto sweep = json::parse(RegularFile::open((dir / "sweep.json").string(), 64u << 20).read_all());
    std::vector<fs::path> ordered;
    for (const auto& p : sweep.at("points")) {
      const auto path = dir / p.at("name").get<std::string>();
      if (std::find(runs.begin(), runs.end(), path) != runs.end()) ordered.push_back(path);
      else missing.push_back(p.at("name").get<std::string>() + " (" + p.value("status", std::string("not run")) + ")");
    }
    if (ordered.size() == runs.size()) return ordered;
  } catch (const std::exception&) {  // no sweep.json (or not one of ours): by name
  }
  return runs;
}

}  // namespace

int cmd_report(const std::vector<std::string>& dirs, const std::string& out) {
  if (!out.empty()) {  // a device, a FIFO, the records it reads, a run's saved files: refused
    std::vector<fs::path> inputs;
    for (const auto& d : dirs) inputs.insert(inputs.end(), {fs::path(d) / "metrics.jsonl", fs::path(d) / "config.yaml"});
    try {
      check_output_file("--out", out, inputs);
    } catch (const std::invalid_argument& e) {
      std::cerr << "error: " << e.what() << "\n";
      return kExitUsage;
    }
  }
  std::vector<fs::path> run_dirs;
  std::vector<std::string> missing;  // a sweep's points with nothing to draw
  fs::path default_out = "compare.html";
  std::error_code ec;
  for (const auto& d : dirs) {
    const fs::path dir(d);
    if (fs::is_directory(dir, ec) && !fs::exists(dir / "metrics.jsonl", ec)) {
      const auto inside = runs_in(dir, missing);  // a sweep's folder: its points
      if (!inside.empty()) {
        run_dirs.insert(run_dirs.end(), inside.begin(), inside.end());
        if (dirs.size() == 1) default_out = dir / "report.html";
        continue;
      }
    }
    run_dirs.push_back(dir);
  }
  std::vector<RunRecords> runs(run_dirs.size());
  for (size_t i = 0; i < run_dirs.size(); ++i)
    if (const int rc = read_run(run_dirs[i], runs[i]); rc != kExitOk) return rc;
  if (runs.size() == 1 && dirs.size() == 1 && fs::path(dirs[0]) == run_dirs[0]) {
    const fs::path target = out.empty() ? run_dirs[0] / "report.html" : fs::path(out);
    return write_page(target, render_report(runs[0].name, runs[0].records, runs[0].config_yaml),
                      std::to_string(runs[0].records.size()) + " records");
  }
  const fs::path target = out.empty() ? default_out : fs::path(out);
  auto page = render_comparison(runs);
  std::string not_drawn;
  for (const auto& m : missing) not_drawn += (not_drawn.empty() ? "" : ", ") + m;
  if (const auto body = page.find("<body>\n"); !missing.empty() && body != std::string::npos)  // not in silence
    page.insert(body + 7, "<p>Not drawn: " + std::to_string(missing.size()) + " point(s) of the sweep with no records: " +
                              html_escape(not_drawn) + "</p>\n");
  return write_page(target, page, std::to_string(runs.size()) + " runs" +
                                      (missing.empty() ? "" : "; not drawn, no records: " + not_drawn));
}

std::optional<double> record_number(const json& r, const char* key) {
  if (!r.contains(key) || !r.at(key).is_number()) return std::nullopt;
  return r.at(key).get<double>();
}

std::string record_text(const json& r, const char* key, const std::string& fallback) {
  if (!r.contains(key) || !r.at(key).is_string()) return fallback;
  return r.at(key).get<std::string>();
}

double record_value(const json& r, const char* key, double fallback) { return record_number(r, key).value_or(fallback); }

}  // namespace trainer::obs
