// Dropout inside a tensor-parallel region (tensor_parallel/region_rng.hpp), in one process: a rank of
// a tp group of 2 is a Communicator that says so (RegionRng calls no collective). Inside a region the
// ranks draw different masks; from the same default state a rank draws the same mask again (what
// activation checkpointing's recompute and a resumed checkpoint rely on); outside, the default
// stream is the same on every rank afterwards; at T = 1, or inactive, nothing changes.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "tensor_parallel/region_rng.hpp"

using namespace trainer;
namespace tpl = trainer::tensor_parallel;

namespace region_rng {  // named: the unity build joins the tp tests

// Rank `r` of a tp group of `n`, as RegionRng sees it.
class RankOf final : public tpl::Communicator {
 public:
  RankOf(int64_t r, int64_t n) : r_(r), n_(n) {}
  int64_t rank() const override { return r_; }
  int64_t size() const override { return n_; }
  void all_reduce(torch::Tensor&, tpl::ReduceOp) override { FAIL("no collective expected"); }
  torch::Tensor all_gather(const torch::Tensor& t, int64_t) override { FAIL("no collective expected"); return t; }
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t) override { FAIL("no collective expected"); return t; }

 private:
  int64_t r_, n_;
};

struct Drawn {
  torch::Tensor mask;   // the region's dropout mask (kept elements)
  torch::Tensor after;  // the default stream's next draws after the region
};

// From the default generator seeded with `seed`: a region dropout as `comm`'s rank, then the default stream.
Drawn draw(const tpl::Communicator& comm, uint64_t seed, bool active = true) {
  torch::manual_seed(seed);
  auto x = torch::ones({4, 64}, torch::kFloat64);
  Drawn d;
  {
    tpl::RegionRng rng(torch::Device(torch::kCPU), comm, active);
    d.mask = torch::dropout(x, 0.5, /*train=*/true) != 0;
  }
  d.after = torch::rand({16}, torch::kFloat64);
  return d;
}

// The cases live in the namespace too: its names hide same-named helpers of the files a unity
// build puts in the same translation unit.


TEST_CASE("region dropout: another mask on each tp rank, the same mask again from the same state", "[unit][tp]") {
  RankOf r0(0, 2), r1(1, 2);
  auto a = draw(r0, 11), b = draw(r1, 11), a2 = draw(r0, 11);
  CHECK_FALSE(torch::equal(a.mask, b.mask));
  CHECK(torch::equal(a.mask, a2.mask));  // a recompute from the unit's saved state
  // about half kept on each: a real dropout stream, and the two ranks' masks are not complements
  for (const auto* d : {&a, &b}) {
    const double kept = d->mask.to(torch::kFloat64).mean().item<double>();
    CHECK(kept > 0.35);
    CHECK(kept < 0.65);
  }
  const double same = (a.mask == b.mask).to(torch::kFloat64).mean().item<double>();
  CHECK(same > 0.35);
  CHECK(same < 0.65);
  // outside the region every rank continues the same default stream: one draw further than before it
  CHECK(torch::equal(a.after, b.after));
  torch::manual_seed(11);
  {
    auto cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    (void)at::check_generator<at::CPUGeneratorImpl>(cpu)->random64();
  }
  CHECK(torch::equal(a.after, torch::rand({16}, torch::kFloat64)));
  CHECK_FALSE(torch::equal(draw(r0, 12).mask, a.mask));  // another default state, another region stream
  CHECK(tpl::RegionRng::region_seed(5, 0) != tpl::RegionRng::region_seed(5, 1));
}

TEST_CASE("region dropout at T = 1 or inactive is torch's dropout on the default stream", "[unit][tp]") {
  torch::manual_seed(11);
  auto x = torch::ones({4, 64}, torch::kFloat64);
  const auto plain = torch::dropout(x, 0.5, true) != 0;
  const auto plain_after = torch::rand({16}, torch::kFloat64);
  for (bool solo : {true, false}) {
    INFO((solo ? "solo()" : "inactive at T = 2"));
    RankOf r1(1, 2);
    auto d = solo ? draw(tpl::solo(), 11) : draw(r1, 11, /*active=*/false);
    CHECK(torch::equal(d.mask, plain));
    CHECK(torch::equal(d.after, plain_after));
  }
  torch::manual_seed(11);
  CHECK(torch::equal(tpl::region_dropout(x, 0.5, true, tpl::solo()) != 0, plain));
  CHECK(torch::equal(tpl::region_dropout(x, 0.5, false, RankOf(0, 2)), x));  // eval: no dropout, no draw
}

}  // namespace region_rng
