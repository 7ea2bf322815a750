#include "engine/commands/sweep_results.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

namespace trainer::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<double> number(const json& r, const char* key) {
  if (!r.contains(key) || !r.at(key).is_number()) return std::nullopt;
  return r.at(key).get<double>();
}

std::string text(const json& r, const char* key) {  // "" when absent or not text
  return r.contains(key) && r.at(key).is_string() ? r.at(key).get<std::string>() : "";
}

}  // namespace

PointRecords read_point_records(const fs::path& run_dir) {
  PointRecords p;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object() || !r.contains("kind") || !r.at("kind").is_string()) continue;
    p.started = true;
    const std::string kind = r.at("kind").get<std::string>();
    if (kind == "attempt") {
      // a resume after a summary (a longer run): not finished until its own; an attempt that starts
      // where the summary ended found nothing to train (written by builds before 2026-12-06)
      const auto start = number(r, "start_step");
      if (!(p.finished && p.steps && start && *start >= static_cast<double>(*p.steps))) p.finished = false;
    } else if (kind == "train") {
      if (auto s = number(r, "step")) p.steps = static_cast<int64_t>(*s);
      p.train_loss = number(r, "loss");
    } else if (kind == "eval") {
      p.val_loss = number(r, "loss");
      p.val_accuracy = number(r, "accuracy");
      p.val_bpb = number(r, "bpb");
    } else if (kind == "summary") {
      p.finished = true;
      if (auto s = number(r, "steps")) p.steps = static_cast<int64_t>(*s);
      p.best_metric = text(r, "best_metric");
      p.best_value = number(r, "best_value");
      p.wall_s = number(r, "wall_s");
    }
  }
  return p;
}

json rows_json(const std::vector<SweepRow>& rows) {
  json out = json::array();
  for (const auto& r : rows) {
    json values = json::object();
    for (const auto& [k, v] : r.values) values[k] = v;
    json j = {{"name", r.name}, {"values", values}, {"status", r.status}, {"finished", r.records.finished}};
    const auto& p = r.records;
    if (p.steps) j["steps"] = *p.steps;
    if (p.train_loss) j["train_loss"] = *p.train_loss;
    if (p.val_loss) j["val_loss"] = *p.val_loss;
    if (p.val_accuracy) j["val_accuracy"] = *p.val_accuracy;
    if (p.val_bpb) j["val_bpb"] = *p.val_bpb;
    if (p.best_value) {
      j["best_metric"] = p.best_metric;
      j["best_value"] = *p.best_value;
    }
    if (p.wall_s) j["wall_s"] = *p.wall_s;
    out.push_back(std::move(j));
  }
  return out;
}

std::string rows_table(const std::vector<SweepRow>& rows) {
  struct Column {
    std::string title;
    bool numeric;
    std::function<std::string(const SweepRow&)> cell;
  };
  // a diverged point's 1e30 in {:.4f} is a 35-digit cell: past a million, 4 significant digits
  auto opt = [](const std::optional<double>& v, const char* f) {
    if (!v) return std::string();
    return std::abs(*v) >= 1e6 ? fmt::format("{:.4g}", *v) : fmt::format(fmt::runtime(f), *v);
  };
  std::vector<Column> cols;
  cols.push_back({"point", false, [](const SweepRow& r) { return r.name; }});
  cols.push_back({"status", false, [](const SweepRow& r) { return r.status; }});
  cols.push_back({"steps", true, [](const SweepRow& r) {
                    return r.records.steps ? std::to_string(*r.records.steps) : std::string();
                  }});
  cols.push_back({"train loss", true, [&](const SweepRow& r) { return opt(r.records.train_loss, "{:.4f}"); }});
  cols.push_back({"val loss", true, [&](const SweepRow& r) { return opt(r.records.val_loss, "{:.4f}"); }});
  cols.push_back({"val acc %", true, [&](const SweepRow& r) {
                    return opt(r.records.val_accuracy ? std::optional<double>(*r.records.val_accuracy * 100)
                                                      : std::nullopt,
                               "{:.2f}");
                  }});
  cols.push_back({"val bpb", true, [&](const SweepRow& r) { return opt(r.records.val_bpb, "{:.4f}"); }});
  cols.push_back({"best", true, [&](const SweepRow& r) {
                    return r.records.best_value ? r.records.best_metric + " " + opt(r.records.best_value, "{:.4f}")
                                                : std::string();
                  }});
  // the summary's wall_s: training time of every attempt, start-up excluded (a point's "done in" line
  // counts its process: two unlabelled times disagreed, found from outside)
  cols.push_back({"train s", true, [&](const SweepRow& r) { return opt(r.records.wall_s, "{:.1f}"); }});

  std::vector<std::vector<std::string>> cells(rows.size());
  std::vector<size_t> width;
  std::vector<const Column*> shown;
  for (const auto& c : cols) {
    std::vector<std::string> col;
    bool any = false;
    for (const auto& r : rows) {
      col.push_back(c.cell(r));
      any = any || !col.back().empty();
    }
    if (!any && c.numeric) continue;  // no point measured it (val bpb of an image model)
    size_t w = c.title.size();
    for (size_t i = 0; i < rows.size(); ++i) {
      w = std::max(w, col[i].size());
      cells[i].push_back(col[i]);
    }
    width.push_back(w);
    shown.push_back(&c);
  }
  std::string out;
  auto line = [&](const std::function<std::string(size_t)>& text) {
    std::string l;
    for (size_t c = 0; c < shown.size(); ++c) {
      const auto t = text(c);
      l += (c ? "  " : "") +
           (shown[c]->numeric ? fmt::format("{:>{}}", t, width[c]) : fmt::format("{:<{}}", t, width[c]));
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line([&](size_t c) { return shown[c]->title; });
  for (size_t i = 0; i < rows.size(); ++i) line([&](size_t c) { return cells[i][c]; });
  return out;
}

}  // namespace trainer::engine
