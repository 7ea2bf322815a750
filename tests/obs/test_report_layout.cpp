// The report's charts and page (issue 18, 11): legends clear of the lines, log axes labelled, one
// number format per axis, only the model family's keys, and the attempts of a resumed run.
#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <sstream>

#include "config/load.hpp"
#include "obs/report.hpp"

using nlohmann::json;
using namespace trainer::obs;

namespace {

// Every number of attribute `attr` in the elements of `svg` that match `element_re`.
std::vector<double> attr_values(const std::string& svg, const std::string& element_re, const std::string& attr) {
  std::vector<double> out;
  std::regex el(element_re);
  std::regex a(attr + "=\"([-0-9.]+)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), el); it != std::sregex_iterator(); ++it) {
    std::smatch m;
    std::string s = it->str();
    if (std::regex_search(s, m, a)) out.push_back(std::stod(m[1]));
  }
  return out;
}

// The y coordinates of every polyline point.
std::vector<double> line_ys(const std::string& svg) {
  std::vector<double> ys;
  std::regex pl("points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pl); it != std::sregex_iterator(); ++it) {
    std::istringstream pts((*it)[1].str());
    for (std::string p; pts >> p;) ys.push_back(std::stod(p.substr(p.find(',') + 1)));
  }
  return ys;
}

std::vector<std::string> tick_texts(const std::string& svg, const char* cls) {
  std::vector<std::string> out;
  std::regex t(std::string("class=\"") + cls + "\">([^<]*)<");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), t); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// "sci" for 1.5e-04, "fixed:N" for a number with N decimals.
std::string style_of(const std::string& s) {
  if (s.find('e') != std::string::npos) return "sci:" + std::to_string(s.find('e') - s.find('.'));
  auto dot = s.find('.');
  return "fixed:" + std::to_string(dot == std::string::npos ? 0 : s.size() - dot - 1);
}

}  // namespace

TEST_CASE("chart legends sit above the plot area, clear of every line", "[unit]") {
  std::vector<ReportSeries> ss;
  const char* names[] = {"total", "data", "compute", "comm", "optim", "a much longer series name", "another long one"};
  for (int k = 0; k < 7; ++k) ss.push_back(ReportSeries{names[k], "#000", {0, 5, 10}, {10.0 + k, 20.0 + k, 5.0}});
  const std::string svg = svg_line_chart("Step time", "ms", ss);
  const auto plot_top = attr_values(svg, "<rect [^>]*class=\"f\"", "y");
  REQUIRE(plot_top.size() == 1);
  const auto legend_y = attr_values(svg, "<text [^>]*class=\"lg\"", "y");
  REQUIRE(legend_y.size() == 7);
  for (double y : legend_y) CHECK(y < plot_top[0]);
  for (double y : line_ys(svg)) CHECK(y >= plot_top[0]);
  // seven names do not fit one row: the legend wraps, each entry inside the chart's width
  CHECK(*std::max_element(legend_y.begin(), legend_y.end()) > *std::min_element(legend_y.begin(), legend_y.end()));
  for (double x : attr_values(svg, "<text [^>]*class=\"lg\"", "x")) CHECK(x < 560);
}

TEST_CASE("a log-scale axis says so and labels 1-2-5 values", "[unit]") {
  const std::string svg = svg_line_chart("Gradient norm", "L2 norm", {ReportSeries{"g", "#000", {1, 2, 3}, {0.3, 3, 40}}}, true);
  CHECK(svg.find(">L2 norm (log scale)<") != std::string::npos);
  auto ticks = tick_texts(svg, "yt");
  REQUIRE(ticks.size() >= 2);
  for (const auto& t : ticks) {
    INFO(t);
    CHECK(std::regex_match(t, std::regex("[125]0*(\\.0+)?|0\\.[0-9]*[125]")));
  }
  CHECK(svg_line_chart("t", "y", {ReportSeries{"s", "#000", {0, 1}, {1, 2}}}).find("log scale") == std::string::npos);
}

TEST_CASE("the tick labels of one axis share one number format", "[unit]") {
  // a learning rate from 0 to 1.2e-3: formerly "0", "2.00e-04", ..., "0.001" on one axis
  for (const auto& ys : std::vector<std::vector<double>>{{0, 0.0012}, {3e-4, 6e-4}, {0.5, 2.5}, {0, 250000}, {-1, 1}}) {
    const std::string svg = svg_line_chart("t", "y", {ReportSeries{"s", "#000", {0, 1000}, ys}});
    auto ticks = tick_texts(svg, "yt");
    REQUIRE(ticks.size() >= 3);
    for (const auto& t : ticks) {
      INFO(ys[0] << ".." << ys[1] << ": " << t << " vs " << ticks[0]);
      CHECK(style_of(t) == style_of(ticks[0]));
    }
    // labels differ, so neighbouring ticks can be told apart
    CHECK(std::set<std::string>(ticks.begin(), ticks.end()).size() == ticks.size());
  }
  CHECK(axis_labels({0, 0.0002, 0.0004}, false) == std::vector<std::string>{"0e+00", "2e-04", "4e-04"});
  CHECK(axis_labels({0, 0.0004, 0.0008, 0.0012}, false) == std::vector<std::string>{"0.0e+00", "4.0e-04", "8.0e-04", "1.2e-03"});
  CHECK(axis_labels({0, 0.5, 1.0, 1.5}, false) == std::vector<std::string>{"0.0", "0.5", "1.0", "1.5"});
  CHECK(axis_labels({0, 200, 400}, false) == std::vector<std::string>{"0", "200", "400"});
  CHECK(axis_labels({0.5, 1, 2, 5}, true) == std::vector<std::string>{"0.5", "1.0", "2.0", "5.0"});
}

TEST_CASE("the config dump shows the model keys of the run's model family only", "[unit]") {
  trainer::config::RunConfig gpt;
  gpt.model.arch = "gpt";
  const std::string g = config_for_model_family(trainer::config::dump_yaml(gpt));
  for (const char* k : {"  n_layer: ", "  n_head: ", "  vocab_size: ", "  attention: ", "  init_from: ", "  arch: "})
    CHECK(g.find(k) != std::string::npos);
  for (const char* k : {"  depth: ", "  stem: ", "  num_classes: ", "  zero_init_residual: "}) CHECK(g.find(k) == std::string::npos);
  CHECK(g.find("optim:\n") != std::string::npos);  // other sections stay whole
  CHECK(g.find("    image_size: ") != std::string::npos);

  trainer::config::RunConfig resnet;
  const std::string r = config_for_model_family(trainer::config::dump_yaml(resnet));
  CHECK(r.find("  depth: ") != std::string::npos);
  CHECK(r.find("  n_layer: ") == std::string::npos);
  // the page uses it; a text with no model section is shown as it is
  const std::string html = render_report("x", {}, trainer::config::dump_yaml(gpt));
  CHECK(html.find("  n_layer: ") != std::string::npos);
  CHECK(html.find("  depth: ") == std::string::npos);
  CHECK(config_for_model_family("optim:\n  lr: 0.1\n") == "optim:\n  lr: 0.1\n");
}

TEST_CASE("a resumed run's page lists its attempts and marks where each resume starts", "[unit]") {
  std::vector<json> recs = {
      json{{"kind", "attempt"}, {"attempt", 1}, {"start_step", 0}, {"time_s", 0.0}, {"resumed_from", nullptr}},
      json{{"kind", "train"}, {"step", 10}, {"loss", 2.0}, {"time_s", 5.0}},
      json{{"kind", "train"}, {"step", 20}, {"loss", 1.8}, {"time_s", 10.0}},
      json{{"kind", "attempt"}, {"attempt", 2}, {"start_step", 10}, {"time_s", 5.5},
           {"resumed_from", "runs/x/checkpoints/step-10"}},
      json{{"kind", "train"}, {"step", 20}, {"loss", 1.7}, {"time_s", 11.0}},
      json{{"kind", "train"}, {"step", 30}, {"loss", 1.5}, {"time_s", 16.0}},
      json{{"kind", "summary"}, {"steps", 30}, {"attempts", 2}, {"wall_s", 17.26}, {"stop_reason", "max_steps"}}};
  const std::string html = render_report("x", recs, "");
  CHECK(html.find("<h2>Attempts</h2>") != std::string::npos);
  CHECK(html.find("<tr><td>1</td><td>0</td><td>10</td><td>0.0 s</td><td>fresh start</td></tr>") != std::string::npos);
  CHECK(html.find("<tr><td>2</td><td>10</td><td>30</td><td>5.5 s</td><td>runs/x/checkpoints/step-10</td></tr>") !=
        std::string::npos);
  CHECK(html.find("<td>attempts</td><td>2</td>") != std::string::npos);
  CHECK(html.find("<td>wall time</td><td>17.3 s over 2 attempts</td>") != std::string::npos);
  CHECK(html.find("<title>resumed at step 10</title>") != std::string::npos);
  // steps logged again after the resume start a new line instead of a stroke back to step 10
  const auto loss_chart = html.substr(html.find(">Loss<"));
  CHECK(std::regex_search(loss_chart.substr(0, loss_chart.find("</svg>")),
                          std::regex("<polyline[^>]*>[\\s\\S]*<polyline")));

  // without attempt records (older runs): no table, no markers; odd fields do not break the page
  CHECK(render_report("x", {recs[1], recs[2]}, "").find("Attempts") == std::string::npos);
  const std::string odd = render_report("x", {json{{"kind", "attempt"}, {"attempt", "one"}, {"resumed_from", 7}}}, "");
  CHECK(odd.find("<tr><td>?</td><td>?</td><td>? (last record)</td><td>?</td><td>7</td></tr>") != std::string::npos);
}
