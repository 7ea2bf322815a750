#include "obs/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "config/exit_codes.hpp"
#include "config/file_read.hpp"

namespace trainer::obs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kW = 560, kH = 300;                                  // chart size in px
constexpr double kLeft = 64, kRight = 16, kTop = 32, kBottom = 40;  // plot margins

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// About `n` round tick values covering [lo, hi] (1, 2, 5 x 10^k steps).
std::vector<double> nice_ticks(double lo, double hi, int n = 5) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string fmt_num(double v) {
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}

std::optional<double> num(const json& r, const char* key) {
  if (!r.contains(key) || !r.at(key).is_number()) return std::nullopt;
  return r.at(key).get<double>();
}

ReportSeries series_of(const std::vector<json>& recs, const std::string& kind, const char* key, const std::string& name,
                       const std::string& color) {
  ReportSeries s{name, color, {}, {}};
  for (const auto& r : recs) {
    if (r.value("kind", "") != kind) continue;
    auto x = num(r, "step"), y = num(r, key);
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

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& y_label, const std::vector<ReportSeries>& series,
                           bool log_y) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (log_y && s.y[i] <= 0) continue;
      double y = log_y ? std::log10(s.y[i]) : s.y[i];
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", kW,
                   kH, kW, kH);
  o << fmt::format(R"(<text x="{}" y="20" class="t">{}</text>)", kW / 2, escape(title));
  if (!std::isfinite(x0)) {
    o << fmt::format(R"(<text x="{}" y="{}" class="n">no data</text></svg>)", kW / 2, kH / 2);
    return o.str();
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = std::max(std::abs(y0) * 0.05, 1e-9);
    y0 -= pad, y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
    if (!log_y && y0 < 0 && y0 + pad >= 0) y0 = 0;  // non-negative data keeps a non-negative axis
  }
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };

  o << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" class="f"/>)", kLeft, kTop, pw, ph);
  for (double t : nice_ticks(y0, y1)) {
    o << fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="g"/>)", kLeft, kLeft + pw, py(t), py(t));
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="yt">{}</text>)", kLeft - 4, py(t) + 4,
                     fmt_num(log_y ? std::pow(10.0, t) : t));
  }
  for (double t : nice_ticks(x0, x1, 6)) {
    o << fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="g"/>)", px(t), px(t), kTop, kTop + ph);
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="xt">{}</text>)", px(t), kTop + ph + 14, fmt_num(t));
  }
  o << fmt::format(R"(<text x="{}" y="{}" class="xl">step</text>)", kLeft + pw / 2, kH - 6);
  o << fmt::format(R"svg(<text transform="translate(14 {}) rotate(-90)" class="xl">{}</text>)svg", kTop + ph / 2,
                   escape(y_label));
  double lx = kLeft + 8;
  for (const auto& s : series) {
    if (s.x.empty()) continue;
    std::string pts;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (log_y && s.y[i] <= 0) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(log_y ? std::log10(s.y[i]) : s.y[i]));
    }
    o << fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.8"/>)", pts, s.color);
    if (s.x.size() <= 40)  // few points (evaluations): mark each one
      for (size_t i = 0; i < s.x.size(); ++i)
        if (!log_y || s.y[i] > 0)
          o << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"><title>step {}: {}</title></circle>)",
                           px(s.x[i]), py(log_y ? std::log10(s.y[i]) : s.y[i]), s.color, fmt_num(s.x[i]),
                           fmt_num(s.y[i]));
    o << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="10" height="3" fill="{}"/>)", lx, kTop + 8, s.color);
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="lg">{}</text>)", lx + 14, kTop + 12, escape(s.name));
    lx += 22 + 7.0 * static_cast<double>(s.name.size());
  }
  o << "</svg>";
  return o.str();
}

std::string render_report(const std::string& run_name, const std::vector<json>& recs, const std::string& config_yaml) {
  const char* kBlue = "#1f77b4";
  const char* kOrange = "#ff7f0e";
  const char* kGreen = "#2ca02c";
  const char* kRed = "#d62728";
  const char* kPurple = "#9467bd";
  std::vector<std::string> charts;
  auto add = [&](const std::string& title, const std::string& unit, std::vector<ReportSeries> ss, bool log_y = false) {
    if (any_points(ss)) charts.push_back(svg_line_chart(title, unit, ss, log_y));
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
  const json* summary = nullptr;
  const json* last_train = nullptr;
  const json* last_eval = nullptr;
  for (const auto& r : recs) {
    const std::string k = r.value("kind", "");
    if (k == "summary") summary = &r;
    if (k == "train") last_train = &r;
    if (k == "eval") last_eval = &r;
  }
  std::vector<std::pair<std::string, std::string>> rows;
  auto row = [&](const std::string& k, const std::string& v) { rows.emplace_back(k, v); };
  if (summary) {
    const auto& s = *summary;
    row("status", "finished (" + s.value("stop_reason", "?") + ")");
    row("steps", fmt_num(s.value("steps", 0.0)));
    row("epochs", fmt::format("{:.3f}", s.value("epochs", 0.0)));
    row("samples seen", fmt::format("{}", s.value("samples", int64_t{0})));
    row("wall time", fmt::format("{:.1f} s", s.value("wall_s", 0.0)));
    row("parameters", fmt::format("{}", s.value("num_parameters", int64_t{0})));
    row("device / precision / ranks",
        s.value("device", "?") + " / " + s.value("precision", "?") + " / " + std::to_string(s.value("world_size", 1)));
    if (auto b = num(s, "best_value"))
      row("best " + s.value("best_metric", "?"), fmt::format("{:.4f} at step {}", *b, s.value("best_step", int64_t{0})));
  } else {
    row("status", "no summary record: the run has not finished (or was stopped)");
    if (last_train) {
      row("steps", fmt_num(last_train->value("step", 0.0)));
      row("samples seen", fmt::format("{}", last_train->value("samples", int64_t{0})));
      row("wall time", fmt::format("{:.1f} s", last_train->value("time_s", 0.0)));
    }
  }
  if (last_train) {
    row("final train loss", fmt::format("{:.4f}", last_train->value("loss", 0.0)));
    row("final throughput", fmt::format("{:.1f} samples/s", last_train->value("samples_per_s", 0.0)));
    if (auto m = num(*last_train, "peak_rss_mb")) row("peak host RSS", fmt::format("{:.0f} MB", *m));
    if (auto m = num(*last_train, "cuda_peak_allocated_mb")) row("peak CUDA allocated", fmt::format("{:.0f} MB", *m));
    if (auto m = num(*last_train, "mfu")) row("MFU", fmt::format("{:.1f} %", *m * 100));
  }
  if (last_eval) {
    row("final val loss", fmt::format("{:.4f}", last_eval->value("loss", 0.0)));
    if (auto a = num(*last_eval, "accuracy")) row("final val accuracy", fmt::format("{:.2f} %", *a * 100));
    if (auto a = num(*last_eval, "top5")) row("final val top-5", fmt::format("{:.2f} %", *a * 100));
    if (auto b = num(*last_eval, "bpb")) row("final val bits per byte", fmt::format("{:.4f}", *b));
    if (auto p = num(*last_eval, "ppl")) row("final val perplexity", fmt::format("{:.3f}", *p));
  }

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>trainer report: " << escape(run_name)
    << "</title>\n<style>\n"
       "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fff}\n"
       "h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:24px 0 8px}\n"
       "table{border-collapse:collapse;font-size:14px}td{padding:3px 12px;border-bottom:1px solid #e5e5e5}\n"
       "td:first-child{color:#555}.charts{display:flex;flex-wrap:wrap;gap:12px}\n"
       "svg{border:1px solid #ddd;border-radius:4px;background:#fff}.f{fill:#fcfcfc;stroke:#bbb}\n"
       ".g{stroke:#e8e8e8}.t{font-size:14px;font-weight:600;text-anchor:middle}\n"
       ".yt{font-size:11px;text-anchor:end;fill:#555}.xt{font-size:11px;text-anchor:middle;fill:#555}\n"
       ".xl{font-size:12px;text-anchor:middle;fill:#333}.lg{font-size:12px;fill:#333}.n{text-anchor:middle;fill:#999}\n"
       "pre{background:#f6f8fa;padding:12px;border-radius:4px;font-size:12px;overflow:auto;max-height:480px}\n"
       "</style></head><body>\n";
  h << "<h1>trainer report: " << escape(run_name) << "</h1>\n<h2>Summary</h2>\n<table>\n";
  for (const auto& [k, v] : rows) h << "<tr><td>" << escape(k) << "</td><td>" << escape(v) << "</td></tr>\n";
  h << "</table>\n<h2>Curves</h2>\n<div class=\"charts\">\n";
  for (const auto& c : charts) h << c << "\n";
  h << "</div>\n<h2>Configuration</h2>\n<pre>" << escape(config_yaml.empty() ? "(config.yaml not found)" : config_yaml)
    << "</pre>\n</body></html>\n";
  return h.str();
}

int cmd_report(const std::string& run_dir, const std::string& out) {
  const fs::path dir(run_dir);
  const fs::path metrics = dir / "metrics.jsonl";
  if (!fs::is_directory(dir)) {
    std::cerr << "error: " << run_dir << ": not a run directory (no such folder)\n";
    return kExitUsage;
  }
  std::istringstream in;
  try {  // regular files only: a FIFO would block
    in.str(RegularFile::open(metrics.string()).read_all());
  } catch (const FileReadError& e) {
    std::cerr << "error: " << e.what() << " (is log.jsonl off, or has the run not started?)\n";
    return kExitUsage;
  }
  std::vector<json> recs;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      if (!j.is_object() || !j.contains("kind")) throw std::runtime_error("not a record with a \"kind\"");
      recs.push_back(std::move(j));
    } catch (const json::parse_error& e) {
      if (e.byte < line.size()) {
        std::cerr << "error: " << metrics.string() << ":" << n << ": invalid record: " << e.what() << "\n";
        return kExitFailure;
      }
      // valid up to its end: a record cut short by a run killed while writing it
      std::cerr << "warning: " << metrics.string() << ":" << n << ": skipping a record cut short (killed while "
                << "writing it?)\n";
    } catch (const std::exception& e) {
      std::cerr << "error: " << metrics.string() << ":" << n << ": invalid record: " << e.what() << "\n";
      return kExitFailure;
    }
  }
  std::string config_yaml;
  try {
    config_yaml = RegularFile::open((dir / "config.yaml").string(), 16u << 20).read_all();
  } catch (const FileReadError&) {  // the report is still useful without the config
  }
  fs::path canon = fs::weakly_canonical(dir);
  if (canon.filename().empty()) canon = canon.parent_path();  // "runs/x/" names the run "x" too
  const std::string name = canon.filename().string();
  const fs::path target = out.empty() ? dir / "report.html" : fs::path(out);
  std::ofstream o(target, std::ios::binary | std::ios::trunc);
  o << render_report(name, recs, config_yaml);
  o.close();
  if (!o) {
    std::cerr << "error: cannot write " << target.string() << "\n";
    return kExitFailure;
  }
  std::cout << "report written to " << target.string() << " (" << recs.size() << " records)\n";
  return kExitOk;
}

}  // namespace trainer::obs
