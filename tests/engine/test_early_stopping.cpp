#include <catch2/catch.hpp>

#include "engine/eval/early_stopping.hpp"

using trainer::config::EarlyStoppingConfig;
using trainer::engine::EarlyStopping;

TEST_CASE("early stopping on loss stops after `patience` evaluations without a min_delta improvement", "[unit]") {
  EarlyStoppingConfig c;
  c.metric = "loss";
  c.patience = 2;
  c.min_delta = 0.05;
  EarlyStopping es(c, "loss");
  CHECK_FALSE(es.maximize());
  CHECK_FALSE(es.update(1.00, 100));
  CHECK_FALSE(es.update(0.90, 200));  // improves by 0.10
  CHECK_FALSE(es.update(0.87, 300));  // only 0.03 better: does not count
  CHECK(es.best() == Approx(0.90));
  CHECK(es.best_step() == 200);
  CHECK(es.update(0.88, 400));        // second evaluation without improvement: stop
  CHECK(es.evals_without_improvement() == 2);
}

TEST_CASE("early stopping mode auto maximises accuracy and an improvement resets the count", "[unit]") {
  EarlyStoppingConfig c;
  c.metric = "accuracy";
  c.patience = 2;
  EarlyStopping es(c, "loss");
  CHECK(es.maximize());
  CHECK_FALSE(es.update(0.80, 1));
  CHECK_FALSE(es.update(0.79, 2));
  CHECK_FALSE(es.update(0.85, 3));  // new best resets the count
  CHECK(es.evals_without_improvement() == 0);
  CHECK_FALSE(es.update(0.85, 4));  // equal is not better
  CHECK(es.update(0.84, 5));
  CHECK(es.best() == Approx(0.85));
  CHECK(es.best_step() == 3);
}

TEST_CASE("without a metric the tracker records the best of the fallback metric and never stops", "[unit]") {
  EarlyStoppingConfig c;
  c.patience = 1;
  EarlyStopping es(c, "bpb");
  CHECK_FALSE(es.stopping_enabled());
  CHECK(es.metric() == "bpb");
  CHECK_FALSE(es.update(2.0, 10));
  CHECK_FALSE(es.update(3.0, 20));
  CHECK_FALSE(es.update(4.0, 30));
  CHECK(es.best() == Approx(2.0));
  CHECK(es.best_step() == 10);
}

TEST_CASE("explicit mode overrides auto", "[unit]") {
  EarlyStoppingConfig c;
  c.metric = "accuracy";
  c.mode = config::StopMode::Min;
  EarlyStopping es(c, "loss");
  CHECK_FALSE(es.maximize());
}
