// The HTML report: self-contained, one chart per available metric, a summary table, clear errors.
#include <catch2/catch.hpp>

#include "obs/report.hpp"
#include "test_util.hpp"

using nlohmann::json;
using namespace trainer::obs;

namespace {

std::vector<json> sample_records() {
  return {json{{"kind", "train"}, {"step", 10}, {"loss", 2.0}, {"lr", 0.1}, {"grad_norm", 1.5}, {"samples_per_s", 100.0},
               {"step_ms", 10.0}, {"data_wait_ms", 1.0}, {"compute_ms", 8.0}, {"optim_ms", 1.0}, {"rss_mb", 300.0},
               {"peak_rss_mb", 310.0}, {"samples", 640}, {"time_s", 1.0}},
          json{{"kind", "train"}, {"step", 20}, {"loss", 1.0}, {"lr", 0.05}, {"grad_norm", 1.0}, {"samples_per_s", 120.0},
               {"step_ms", 9.0}, {"data_wait_ms", 1.0}, {"compute_ms", 7.0}, {"optim_ms", 1.0}, {"rss_mb", 305.0},
               {"peak_rss_mb", 315.0}, {"samples", 1280}, {"time_s", 2.0}},
          json{{"kind", "eval"}, {"step", 20}, {"loss", 1.2}, {"accuracy", 0.875}, {"top5", 0.99}, {"count", 100}},
          json{{"kind", "summary"}, {"steps", 20}, {"epochs", 1.5}, {"samples", 1280}, {"wall_s", 2.5},
               {"stop_reason", "max_steps"}, {"best_metric", "accuracy"}, {"best_value", 0.875}, {"best_step", 20},
               {"num_parameters", 1234}, {"world_size", 1}, {"device", "cpu"}, {"precision", "fp32"}}};
}

}  // namespace

TEST_CASE("the report is one self-contained page with the run's charts and summary", "[unit]") {
  std::string html = render_report("demo<1>", sample_records(), "optim:\n  lr: 0.1\n");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("demo&lt;1&gt;") != std::string::npos);  // escaped
  for (const char* t : {">Loss<", ">Validation accuracy<", ">Learning rate<", ">Throughput<", ">Host memory<",
                        ">Step time<"})
    CHECK(html.find(t) != std::string::npos);
  CHECK(html.find(">Validation bits per byte<") == std::string::npos);  // no bpb in these records
  CHECK(html.find(">CUDA memory<") == std::string::npos);
  for (const char* external : {"<script", "<link", " src=", " href=", "@import"}) CHECK(html.find(external) == std::string::npos);
  CHECK(html.find("<td>samples seen</td><td>1280</td>") != std::string::npos);
  CHECK(html.find("<td>best accuracy</td><td>0.8750 at step 20</td>") != std::string::npos);
  CHECK(html.find("<td>final val accuracy</td><td>87.50 %</td>") != std::string::npos);
  CHECK(html.find("<td>wall time</td><td>2.5 s</td>") != std::string::npos);
  CHECK(html.find("lr: 0.1") != std::string::npos);
}

TEST_CASE("a chart places points inside its plot area, first and last at the edges", "[unit]") {
  std::string svg = svg_line_chart("t", "y", {ReportSeries{"s", "#000", {0, 10}, {0, 1}}});
  // x from 0 to 10 spans the plot: left edge at 72 px, right edge at 560 - 16 = 544 px
  CHECK(svg.find("points=\"72.0,") != std::string::npos);
  CHECK(svg.find(" 544.0,") != std::string::npos);
  CHECK(svg_line_chart("t", "y", {}).find("no data") != std::string::npos);
}

TEST_CASE("report errors name the run directory or the bad line", "[unit]") {
  auto dir = trainer::test::scratch_dir("report_errors");
  CHECK(cmd_report((dir / "nope").string(), "") == 2);
  CHECK(cmd_report(dir.string(), "") == 2);  // no metrics.jsonl
  // a line that is no record is skipped with a warning (the run reads past it too); one with nothing
  // valid in the file is an error
  trainer::test::write_file(dir / "metrics.jsonl", "{\"kind\":\"train\",\"step\":1}\n{broken\n");
  CHECK(cmd_report(dir.string(), "") == 0);
  trainer::test::write_file(dir / "metrics.jsonl", "{broken\n");
  CHECK(cmd_report(dir.string(), "") == 1);
  trainer::test::write_file(dir / "metrics.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\n");
  CHECK(cmd_report(dir.string(), (dir / "r.html").string()) == 0);
  // a line torn by kill -9 (then ended by the resumed run) is skipped, not fatal
  trainer::test::write_file(dir / "metrics.jsonl",
                            "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\n{\"kind\":\"train\",\"st\n"
                            "{\"kind\":\"train\",\"step\":2,\"loss\":1.5}\n");
  CHECK(cmd_report(dir.string(), (dir / "r.html").string()) == 0);
  CHECK(trainer::test::read_file(dir / "r.html").find("no summary record") != std::string::npos);
}

TEST_CASE("report: a record's field of another type is no crash, a kind that is not text an invalid record",
          "[unit]") {
  auto dir = trainer::test::scratch_dir("report_field_types");
  // a string loss, nulls, a string step count: the page is made with what can be read (it aborted)
  trainer::test::write_file(dir / "metrics.jsonl",
                            "{\"kind\":\"train\",\"step\":1,\"loss\":\"x\",\"samples_per_s\":\"fast\"}\n"
                            "{\"kind\":\"train\",\"step\":2,\"loss\":null}\n"
                            "{\"kind\":\"eval\",\"step\":2,\"loss\":\"y\"}\n"
                            "{\"kind\":\"summary\",\"steps\":\"x\",\"stop_reason\":7,\"world_size\":\"two\"}\n");
  CHECK(cmd_report(dir.string(), (dir / "r.html").string()) == 0);
  CHECK(trainer::test::read_file(dir / "r.html").find("finished (?)") != std::string::npos);
  CHECK(cmd_report(std::vector<std::string>{dir.string(), dir.string()}, (dir / "c.html").string()) == 0);  // the comparison page too
  trainer::test::write_file(dir / "metrics.jsonl", "{\"kind\":1,\"step\":1}\n");
  CHECK(cmd_report(dir.string(), (dir / "r.html").string()) == 1);
  // the output may not be the records it reads
  trainer::test::write_file(dir / "metrics.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\n");
  CHECK(cmd_report(dir.string(), (dir / "metrics.jsonl").string()) == 2);
  CHECK(trainer::test::read_file(dir / "metrics.jsonl") == "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\n");
}
