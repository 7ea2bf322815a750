// The report's charts and page (issue 18, 11): legends clear of the lines, log axes labelled, one
// number format per axis, only the model family's keys, and the attempts of a resumed run.
#include <catch2/catch.hpp>

#include <fmt/format.h>

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
  CHECK(html.find("<tr><td>1</td><td>0</td><td>10</td><td>0.0 s</td><td>fresh start</td><td>?</td></tr>") != std::string::npos);
  CHECK(html.find("<tr><td>2</td><td>10</td><td>30</td><td>5.5 s</td><td>runs/x/checkpoints/step-10</td><td>?</td></tr>") !=
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
  CHECK(odd.find("<tr><td>?</td><td>?</td><td>? (last record)</td><td>?</td><td>7</td><td>?</td></tr>") != std::string::npos);
}

TEST_CASE("a series equal to an earlier one is dashed and named as equal, not hidden under it", "[unit]") {
  const ReportSeries rss{"RSS", "#1f77b4", {1, 2, 3}, {300, 310, 320}};
  ReportSeries peak{"peak RSS", "#ff7f0e", {1, 2, 3}, {300, 310, 320}};
  const std::string svg = svg_line_chart("Host memory", "MB", {rss, peak});
  CHECK(svg.find(">peak RSS (= RSS)<") != std::string::npos);
  CHECK(svg.find(R"(stroke="#ff7f0e" stroke-width="1.8" stroke-dasharray="6 4")") != std::string::npos);
  CHECK(svg.find(R"(stroke="#1f77b4" stroke-width="1.8"/>)") != std::string::npos);  // the first stays solid
  peak.y[2] = 330;
  CHECK(svg_line_chart("Host memory", "MB", {rss, peak}).find("(= RSS)") == std::string::npos);
}

TEST_CASE("the step axis has whole-number ticks, also for a single evaluation", "[unit]") {
  const std::string one = svg_line_chart("Validation accuracy", "fraction", {ReportSeries{"top-1", "#000", {1500}, {0.9}}});
  CHECK(one.find(R"(class="xt">1500<)") != std::string::npos);
  CHECK(one.find(R"(class="xt">1499<)") != std::string::npos);
  CHECK(one.find("1499.5") == std::string::npos);
  CHECK(one.find(">1500.0<") == std::string::npos);
  const std::string two = svg_line_chart("Loss", "nats", {ReportSeries{"train", "#000", {1, 2}, {2.0, 1.0}}});
  CHECK(two.find(R"(class="xt">1.5<)") == std::string::npos);
  CHECK(two.find(R"(class="xt">2<)") != std::string::npos);
}

TEST_CASE("world size changes are listed and marked: in-process regroups and resumes on other ranks", "[unit]") {
  std::vector<json> recs = {
      json{{"kind", "attempt"}, {"attempt", 1}, {"start_step", 0}, {"time_s", 0.0}, {"resumed_from", nullptr},
           {"world_size", 3}},
      json{{"kind", "train"}, {"step", 10}, {"loss", 2.0}, {"world_size", 3}},
      json{{"kind", "world"}, {"step", 12}, {"world_size", 2}, {"previous_world_size", 3},
           {"reason", "lost member(s) 2"}},
      json{{"kind", "world"}, {"step", 12}, {"world_size", 2}, {"previous_world_size", 3},
           {"reason", "lost member(s) 2"}},  // written again by a rank that took over writing
      json{{"kind", "train"}, {"step", 20}, {"loss", 1.8}, {"world_size", 2}},
      json{{"kind", "attempt"}, {"attempt", 2}, {"start_step", 20}, {"time_s", 9.0},
           {"resumed_from", "runs/x/checkpoints/step-20"}, {"world_size", 3}},
      json{{"kind", "train"}, {"step", 30}, {"loss", 1.5}, {"world_size", 3}}};
  const std::string html = render_report("x", recs, "");
  CHECK(html.find("<h2>World size changes</h2>") != std::string::npos);
  CHECK(html.find("<tr><td>12</td><td>3 -&gt; 2</td><td>lost member(s) 2</td></tr>") != std::string::npos);
  CHECK(html.find("<tr><td>20</td><td>2 -&gt; 3</td><td>resumed (attempt 2)</td></tr>") != std::string::npos);
  size_t rows = 0;
  for (size_t p = html.find("3 -&gt; 2</td>"); p != std::string::npos; p = html.find("3 -&gt; 2</td>", p + 1)) ++rows;
  CHECK(rows == 1);  // the repeated record is one change
  CHECK(html.find("<title>world size 3 -&gt; 2 after step 12: lost member(s) 2</title>") != std::string::npos);
  // attempt 1 began at 3 ranks and ended at 2: the resume at 3 is a change
  CHECK(html.find("<title>resumed at step 20 on 3 ranks (was 2)</title>") != std::string::npos);
  CHECK(html.find("<td>runs/x/checkpoints/step-20</td><td>3</td>") != std::string::npos);
  // resumed on the 2 ranks the last records ran at: no change there
  recs[5]["world_size"] = 2;
  const std::string same = render_report("x", recs, "");
  CHECK(same.find("<title>resumed at step 20</title>") != std::string::npos);
  CHECK(same.find("resumed (attempt 2)") == std::string::npos);
}

TEST_CASE("several runs share the axes: a line per run, their final figures, the config keys that differ", "[unit]") {
  auto run = [](const std::string& name, double lr, double loss) {
    RunRecords r;
    r.name = name;
    r.dir = "runs/s/" + name;
    r.records = {json{{"kind", "train"}, {"step", 10}, {"loss", loss + 1}, {"lr", lr}},
                 json{{"kind", "train"}, {"step", 20}, {"loss", loss}, {"lr", lr}, {"samples_per_s", 100.0}},
                 json{{"kind", "eval"}, {"step", 20}, {"loss", loss + 0.1}, {"accuracy", 0.5 + lr}},
                 json{{"kind", "summary"}, {"steps", 20}, {"wall_s", 3.25}, {"best_metric", "accuracy"},
                      {"best_value", 0.5 + lr}}};
    r.config_yaml = "run:\n  name: " + name + "\n  seed: 1\noptim:\n  name: sgd\n  lr: " + fmt::format("{}", lr) +
                    "\n  betas:\n    - 0.9\n    - 0.99\n";
    return r;
  };
  const std::string html = render_comparison({run("lr=0.1", 0.1, 1.25), run("lr=0.2", 0.2, 0.75)});
  CHECK(html.find("<h1>trainer report: 2 runs</h1>") != std::string::npos);
  CHECK(html.find("lr=0.1</td><td>finished</td><td>20</td><td>1.2500</td><td>1.3500</td><td>60.00</td><td></td>"
                  "<td>accuracy 0.6000</td><td>3.2</td><td>100.0</td><td>runs/s/lr=0.1</td>") != std::string::npos);
  CHECK(html.find("<tr><th>run</th><th>optim.lr</th></tr>") != std::string::npos);  // only lr differs
  CHECK(html.find("<tr><td>lr=0.2</td><td>0.2</td></tr>") != std::string::npos);
  const auto loss = html.substr(html.find(">Training loss<"));
  const auto chart = loss.substr(0, loss.find("</svg>"));
  CHECK(chart.find(">lr=0.1<") != std::string::npos);
  CHECK(chart.find(">lr=0.2<") != std::string::npos);
  CHECK(chart.find(R"(stroke="#1f77b4")") != std::string::npos);
  CHECK(chart.find(R"(stroke="#ff7f0e")") != std::string::npos);
  CHECK(html.find(">Validation bits per byte<") == std::string::npos);
}
