#include <catch2/catch.hpp>

#include <ATen/autocast_mode.h>

#include "engine/optim/precision.hpp"

using namespace trainer::engine;

TEST_CASE("bf16 autocast on CPU runs matmuls in bf16 inside the scope only", "[unit]") {
  auto a = torch::randn({4, 4});
  {
    AutocastScope scope(Precision::Bf16, torch::kCPU);
    CHECK(torch::mm(a, a).dtype() == torch::kBFloat16);
    {
      AutocastScope inner(Precision::Fp32, torch::kCPU);  // fp32 scope is a no-op, autocast stays on
      CHECK(torch::mm(a, a).dtype() == torch::kBFloat16);
    }
    CHECK(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
  }
  CHECK_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
  CHECK(torch::mm(a, a).dtype() == torch::kFloat32);
}

TEST_CASE("precision names parse, fp16 on CPU is refused with the reason", "[unit]") {
  CHECK(parse_precision("bf16") == Precision::Bf16);
  CHECK(precision_name(Precision::Fp16) == "fp16");
  REQUIRE_THROWS_WITH(parse_precision("fp8"), "unknown precision 'fp8'; known: fp32, bf16, fp16, auto");
  REQUIRE_THROWS_WITH(check_precision_supported(Precision::Fp16, torch::kCPU),
                      "precision fp16 needs a CUDA device (dynamic loss scaling on GPU); on cpu use bf16 or fp32");
  CHECK_NOTHROW(check_precision_supported(Precision::Bf16, torch::kCPU));
}
