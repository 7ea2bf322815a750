// The main of every test program: Catch2's, plus the skip exit code (see skip.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "skip.hpp"

#ifdef TRAINER_TEST_REGISTER_MODELS
#include "models/builtin.hpp"  // config's per-family rules come from the model specs
#endif

namespace {

int g_cases_run = 0, g_cases_skipped = 0;

struct SkipCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats&) override {
    ++g_cases_run;
    if (trainer::test::current_case_skipped()) ++g_cases_skipped;
    trainer::test::current_case_skipped() = false;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipCounter)

int main(int argc, char* argv[]) {
#ifdef TRAINER_TEST_REGISTER_MODELS
  trainer::models::register_builtin_archs();  // as the trainer's main does, before any config is loaded
#endif
  const int rc = Catch::Session().run(argc, argv);
  // a failure in a case that then skipped still fails (rc != 0); listing runs no case (0 of 0)
  if (rc == 0 && g_cases_run > 0 && g_cases_skipped == g_cases_run) return trainer::test::kSkipExitCode;
  return rc;
}
