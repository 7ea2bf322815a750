// The report's SVG line chart: axes whose tick labels share one number format, a legend above the
// plot (never over the lines), log axes that say so, a marker where each resumed attempt starts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "obs/report.hpp"

namespace trainer::obs {
namespace {

constexpr double kW = 560, kH = 300;                     // chart size in px
constexpr double kLeft = 72, kRight = 16, kBottom = 40;  // plot margins; the top one holds the legend
constexpr double kTitleH = 28, kLegendRowH = 16;


// About `n` round tick values covering [lo, hi] (1, 2, 5 x 10^k steps), steps of at least `min_step`
// (1 on the step axis: a run of two steps has no step 1.5).
std::vector<double> linear_ticks(double lo, double hi, int n, double min_step = 0) {
  if (!(hi > lo)) return {lo};
  const double raw = std::max((hi - lo) / n, min_step);
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

// Ticks of a log axis given in log10 units [lo, hi]: 1-2-5 values inside when they are few enough,
// else the decades (every second or third one over a wide range). Returned as log10 values.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const int d0 = static_cast<int>(std::floor(lo)), d1 = static_cast<int>(std::ceil(hi));
  for (int d = d0; d <= d1; ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = std::log10(m) + d;
      if (v >= lo - 1e-9 && v <= hi + 1e-9) t.push_back(v);
    }
  if (t.size() <= 7 && t.size() >= 2) return t;
  t.clear();
  const int every = std::max(1, (d1 - d0 + 5) / 6);
  for (int d = d0; d <= d1; ++d)
    if (d >= lo - 1e-9 && d <= hi + 1e-9 && d % every == 0) t.push_back(d);
  if (t.empty()) t.push_back((lo + hi) / 2);  // a range inside one decade with no 1-2-5 value
  return t;
}

}  // namespace

std::vector<std::string> axis_labels(const std::vector<double>& ticks, bool log_axis) {
  double largest = 0, smallest = std::numeric_limits<double>::infinity(), step = 0;
  for (size_t i = 0; i < ticks.size(); ++i) {
    const double a = std::abs(ticks[i]);
    largest = std::max(largest, a);
    if (a > 0) smallest = std::min(smallest, a);
    if (i > 0) step = step == 0 ? std::abs(ticks[i] - ticks[i - 1]) : std::min(step, std::abs(ticks[i] - ticks[i - 1]));
  }
  if (!std::isfinite(smallest)) smallest = 1;
  if (step == 0) step = largest > 0 ? largest : 1;
  // Linear ticks are multiples of a 1-2-5 step, log ticks 1-2-5 x 10^k: `unit` is the smallest
  // difference a label must show, and every label of the axis gets the same format for it.
  const double unit = log_axis ? smallest : step;
  const auto exponent = [](double v) { return static_cast<int>(std::floor(std::log10(v) + 1e-9)); };
  std::vector<std::string> out;
  if (largest >= 1e5 || smallest < 1e-3) {
    const int mantissa = std::clamp(log_axis ? 0 : exponent(largest) - exponent(unit), 0, 6);
    for (double t : ticks) out.push_back(fmt::format("{:.{}e}", t, mantissa));
  } else {
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(unit) - 1e-9)), 0, 6);
    for (double t : ticks) out.push_back(fmt::format("{:.{}f}", t, decimals));
  }
  return out;
}

namespace {

struct LegendEntry {
  const ReportSeries* s;
  double x, row;
};

// The legend: rows above the plot, wrapped at the chart's width.
std::vector<LegendEntry> layout_legend(const std::vector<ReportSeries>& series) {
  std::vector<LegendEntry> legend;
  double lx = kLeft, row = 0;
  for (const auto& s : series) {
    if (s.x.empty()) continue;
    const double w = 22 + 7.0 * static_cast<double>(s.name.size());
    if (lx + w > kW - kRight && lx > kLeft) lx = kLeft, ++row;
    legend.push_back({&s, lx, row});
    lx += w;
  }
  return legend;
}

// Data ranges and their mapping to pixels; y in log10 units on a log axis.
struct Plot {
  double x0, x1, y0, y1, top, pw, ph;
  bool log_y;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * pw; }
  double py(double y) const { return top + (1 - (y - y0) / (y1 - y0)) * ph; }
  double py_value(double v) const { return py(log_y ? std::log10(v) : v); }
  bool shown(double v) const { return !log_y || v > 0; }
};

void draw_axes(std::ostringstream& o, const Plot& p, const std::string& y_label, const std::vector<ChartMarker>& markers) {
  o << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" class="f"/>)", kLeft, p.top, p.pw, p.ph);
  const auto yt = p.log_y ? log_ticks(p.y0, p.y1) : linear_ticks(p.y0, p.y1, 5);
  std::vector<double> y_values;
  for (double t : yt) y_values.push_back(p.log_y ? std::pow(10.0, t) : t);
  const auto y_text = axis_labels(y_values, p.log_y);
  for (size_t i = 0; i < yt.size(); ++i) {
    o << fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="g"/>)", kLeft, kLeft + p.pw,
                     p.py(yt[i]), p.py(yt[i]));
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="yt">{}</text>)", kLeft - 4, p.py(yt[i]) + 4, y_text[i]);
  }
  const auto xt = linear_ticks(p.x0, p.x1, 6, /*min_step=*/1);
  const auto x_text = axis_labels(xt, false);
  for (size_t i = 0; i < xt.size(); ++i) {
    o << fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="g"/>)", p.px(xt[i]), p.px(xt[i]),
                     p.top, p.top + p.ph);
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="xt">{}</text>)", p.px(xt[i]), p.top + p.ph + 14, x_text[i]);
  }
  for (const auto& m : markers)
    if (m.x >= p.x0 && m.x <= p.x1)
      o << fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="m"><title>{}</title></line>)",
                       p.px(m.x), p.px(m.x), p.top, p.top + p.ph, html_escape(m.title));
  o << fmt::format(R"(<text x="{}" y="{}" class="xl">step</text>)", kLeft + p.pw / 2, kH - 6);
  o << fmt::format(R"svg(<text transform="translate(14 {}) rotate(-90)" class="xl">{}</text>)svg", p.top + p.ph / 2,
                   html_escape(p.log_y ? y_label + " (log scale)" : y_label));
}

void draw_series(std::ostringstream& o, const Plot& p, const ReportSeries& s) {
  // a resumed run logs some steps again: a new line starts where the steps stop increasing
  std::vector<std::string> runs(1);
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!p.shown(s.y[i])) continue;
    if (i > 0 && s.x[i] <= s.x[i - 1] && !runs.back().empty()) runs.emplace_back();
    runs.back() += fmt::format("{:.1f},{:.1f} ", p.px(s.x[i]), p.py_value(s.y[i]));
  }
  for (const auto& pts : runs)
    if (!pts.empty())
      o << fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.8"{}/>)", pts, s.color,
                       s.dashed ? R"( stroke-dasharray="6 4")" : "");
  if (s.x.size() <= 40)  // few points (evaluations): mark each one
    for (size_t i = 0; i < s.x.size(); ++i)
      if (p.shown(s.y[i]))
        o << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"><title>step {}: {:.6g}</title></circle>)",
                         p.px(s.x[i]), p.py_value(s.y[i]), s.color, s.x[i], s.y[i]);
}

}  // namespace

std::string html_escape(const std::string& s) {
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

std::string svg_line_chart(const std::string& title, const std::string& y_label, const std::vector<ReportSeries>& in,
                           bool log_y, const std::vector<ChartMarker>& markers) {
  // a series drawn exactly over an earlier one would vanish under it: dashed, and named as equal
  std::vector<ReportSeries> series = in;
  for (size_t i = 0; i < series.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (!series[i].x.empty() && series[i].x == series[j].x && series[i].y == series[j].y) {
        series[i].dashed = true;
        series[i].name += " (= " + in[j].name + ")";
        break;
      }
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (log_y && s.y[i] <= 0) continue;
      double y = log_y ? std::log10(s.y[i]) : s.y[i];
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  const auto legend = layout_legend(series);
  const double top = kTitleH + kLegendRowH * (legend.empty() ? 0 : legend.back().row + 1) + 6;

  std::ostringstream o;
  o << fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", kW,
                   kH, kW, kH);
  o << fmt::format(R"(<text x="{}" y="20" class="t">{}</text>)", kW / 2, html_escape(title));
  if (!std::isfinite(x0)) {
    o << fmt::format(R"(<text x="{}" y="{}" class="n">no data</text></svg>)", kW / 2, kH / 2);
    return o.str();
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = log_y ? 0.05 : std::max(std::abs(y0) * 0.05, 1e-9);
    y0 -= pad, y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
    if (!log_y && y0 < 0 && y0 + pad >= 0) y0 = 0;  // non-negative data keeps a non-negative axis
  }
  const Plot plot{x0, x1, y0, y1, top, kW - kLeft - kRight, kH - top - kBottom, log_y};
  draw_axes(o, plot, y_label, markers);
  for (const auto& s : series)
    if (!s.x.empty()) draw_series(o, plot, s);
  for (const auto& e : legend) {
    const double y = kTitleH + kLegendRowH * e.row;
    if (e.s->dashed)
      o << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="4" height="3" fill="{}"/><rect x="{:.1f}" y="{:.1f}" )"
                       R"(width="4" height="3" fill="{}"/>)", e.x, y + 4, e.s->color, e.x + 6, y + 4, e.s->color);
    else
      o << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="10" height="3" fill="{}"/>)", e.x, y + 4, e.s->color);
    o << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="lg">{}</text>)", e.x + 14, y + 9, html_escape(e.s->name));
  }
  o << "</svg>";
  return o.str();
}

}  // namespace trainer::obs
