// Sampler and DataLoader: coverage and disjointness over ranks, world-size changes, exact replay
// after restore(), independence from the number of workers, error propagation, clean shutdown.
#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <dirent.h>

#include <chrono>
#include <thread>
#include <condition_variable>
#include <mutex>
#include <set>
#include <tuple>

#include "data/loader.hpp"
#include "fixtures.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::data;

namespace {

// Sample i is the token vector {i}; fill() throws at `bad_index`.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t bad_index = -1) : n_(n), bad_(bad_index) {}
  int64_t size() const override { return n_; }
  SampleKind kind() const override { return SampleKind::Tokens; }
  std::vector<int64_t> sample_shape() const override { return {1}; }
  int64_t num_classes() const override { return n_; }
  std::string describe() const override { return "index dataset"; }
  torch::ScalarType raw_dtype() const override { return torch::kInt64; }
  std::vector<int64_t> target_shape() const override { return {}; }
  bool fill(int64_t index, int64_t, bool, void* input, int64_t* target) const override {
    if (index == bad_) throw DataError("fake.bin: broken sample " + std::to_string(index));
    *static_cast<int64_t*>(input) = index;
    *target = index;
    return true;
  }
  torch::Tensor finish(const torch::Tensor& raw, bool) const override { return raw; }

 private:
  int64_t n_, bad_;
};

std::vector<int64_t> ids(const Batch& b) {
  auto t = b.target.contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

LoaderOptions opts(int64_t batch, int64_t rank, int64_t world, bool train, int64_t workers = 2) {
  LoaderOptions o;
  o.batch_size = batch;
  o.rank = rank;
  o.world_size = world;
  o.train = train;
  o.workers = workers;
  o.seed = 11;
  return o;
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("sampler: training ranks are disjoint, equal-length and cover the epoch minus the ragged tail", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(103);
  for (int64_t world = 1; world <= 4; ++world) {
    std::vector<std::unique_ptr<DataLoader>> loaders;
    for (int64_t r = 0; r < world; ++r) loaders.push_back(std::make_unique<DataLoader>(ds, opts(5, r, world, true)));
    const int64_t per_rank = loaders[0]->batches_per_epoch();
    CHECK(per_rank == 103 / (5 * world));
    std::set<int64_t> seen;
    std::vector<int64_t> global_order;
    for (int64_t k = 0; k < per_rank; ++k)
      for (auto& l : loaders) {
        auto b = l->next();
        REQUIRE(b);
        CHECK(b->epoch == 0);
        CHECK(b->target.size(0) == 5);
        for (auto i : ids(*b)) {
          CHECK(seen.insert(i).second);  // disjoint
          global_order.push_back(i);
        }
      }
    CHECK(static_cast<int64_t>(seen.size()) == per_rank * 5 * world);
    // the concatenated rank slices are the epoch's permutation: independent of the world size
    auto perm = epoch_permutation(103, 11, 0);
    CHECK(global_order == std::vector<int64_t>(perm.begin(), perm.begin() + global_order.size()));
    CHECK(loaders[0]->next()->epoch == 1);  // the tail is dropped, the next epoch begins
  }
}

TEST_CASE("sampler: an epoch is whole optimizer steps, so every layout of one global batch sees the same samples",
          "[unit]") {
  // global batch 12 of 40 samples (an epoch: 3 steps, 4 samples dropped) as batch x accumulation x
  // ranks: 12 x 1 x 1, 3 x 4 x 1, 3 x 2 x 2, 2 x 3 x 2, 1 x 4 x 3, 3 x 1 x 4; accumulation never
  // reaches into the next epoch (before, 3 x 4 x 1 ran 13 batches of 3 an epoch: a step of
  // epoch 0's tail and epoch 1's start that the 4-rank layout never took)
  auto ds = std::make_shared<IndexDataset>(40);
  std::vector<std::vector<int64_t>> orders;
  for (const auto& [batch, accum, world] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {12, 1, 1}, {3, 4, 1}, {3, 2, 2}, {2, 3, 2}, {1, 4, 3}, {3, 1, 4}}) {
    INFO(batch << " x " << accum << " accumulation x " << world << " ranks");
    std::vector<std::unique_ptr<DataLoader>> loaders;
    for (int64_t r = 0; r < world; ++r) {
      auto o = opts(batch, r, world, true, /*workers=*/0);
      o.accumulation = accum;
      loaders.push_back(std::make_unique<DataLoader>(ds, o));
    }
    CHECK(loaders[0]->batches_per_epoch() == 3 * accum);  // 3 steps of `accum` batches
    std::vector<int64_t> order;  // the samples of each step in global order, over 3 epochs
    for (int64_t step = 0; step < 9; ++step)
      for (int64_t a = 0; a < accum; ++a)
        for (auto& l : loaders) {
          auto b = l->next();
          REQUIRE(b);
          CHECK(b->epoch == step / 3);
          for (auto i : ids(*b)) order.push_back(i);
        }
    orders.push_back(order);
  }
  std::vector<int64_t> want;
  for (int64_t e = 0; e < 3; ++e) {
    const auto perm = epoch_permutation(40, 11, e);
    want.insert(want.end(), perm.begin(), perm.begin() + 36);
  }
  for (const auto& o : orders) CHECK(o == want);
  // fewer samples than one global batch with accumulation: refused, naming it
  auto o = opts(4, 0, 2, true);
  o.accumulation = 6;
  CHECK_THROWS_WITH(DataLoader(ds, o),
                    "index dataset: 40 samples, fewer than one global batch of 4 x 6 accumulation x 2 rank(s)");
}

TEST_CASE("sampler: evaluation visits every sample exactly once over 1-4 ranks", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(23);
  for (int64_t world = 1; world <= 4; ++world) {
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      DataLoader l(ds, opts(4, r, world, false));
      int64_t batches = 0;
      while (auto b = l.next()) {
        ++batches;
        for (auto i : ids(*b)) seen.insert(i);
      }
      CHECK(batches == l.batches_per_epoch());
      CHECK(!l.next());
    }
    CHECK(seen.size() == 23);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 23);
  }
}

TEST_CASE("loader: a resume on another world size continues the same global order", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(200);
  std::vector<int64_t> order;
  LoaderState state;
  {
    DataLoader r0(ds, opts(4, 0, 2, true)), r1(ds, opts(4, 1, 2, true));
    for (int k = 0; k < 5; ++k)
      for (auto* l : {&r0, &r1})
        for (auto i : ids(*l->next())) order.push_back(i);
    state = r0.state();
    CHECK(state == r1.state());
    CHECK(state.samples_consumed == 40);
  }
  std::vector<std::unique_ptr<DataLoader>> three;
  for (int r = 0; r < 3; ++r) {
    three.push_back(std::make_unique<DataLoader>(ds, opts(4, r, 3, true)));
    three.back()->restore(state);
  }
  for (int k = 0; k < 4; ++k)
    for (auto& l : three)
      for (auto i : ids(*l->next())) order.push_back(i);
  auto perm = epoch_permutation(200, 11, 0);
  CHECK(order == std::vector<int64_t>(perm.begin(), perm.begin() + 88));
}

TEST_CASE("loader: restore() replays exactly the batches that followed, across epochs", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(50);
  DataLoader a(ds, opts(8, 0, 1, true, 3));
  std::vector<std::vector<int64_t>> first;
  std::vector<LoaderState> states;
  for (int k = 0; k < 20; ++k) {  // 6 batches per epoch: crosses three epoch boundaries
    first.push_back(ids(*a.next()));
    states.push_back(a.state());
  }
  for (int at : {0, 5, 6, 13}) {
    DataLoader b(ds, opts(8, 0, 1, true, 2));
    b.restore(states[at]);
    for (int k = at + 1; k < 20; ++k) CHECK(ids(*b.next()) == first[k]);
  }
  a.restore(states[2]);  // restoring the same loader mid-stream
  CHECK(ids(*a.next()) == first[3]);
}

TEST_CASE("loader: augmented image batches are the same with 0, 1 or 4 workers and with 1 or 2 ranks", "[unit]") {
  config::DataConfig d;
  d.format = config::DataFormat::Synthetic;
  d.synthetic.num_samples = 96;
  d.synthetic.image_size = 12;
  d.augment.crop_padding = 2;
  d.augment.hflip = true;
  d.augment.rotation_degrees = 10;
  config::ModelConfig m;
  m.in_channels = 3;
  m.num_classes = 5;
  auto ds = create_datasets(d, m, 5).train;
  auto run = [&](int64_t workers, int64_t batch, int64_t rank, int64_t world) {
    DataLoader l(ds, opts(batch, rank, world, true, workers));
    std::vector<torch::Tensor> xs;
    for (int k = 0; k < 7; ++k) xs.push_back(l.next()->input);  // 7 batches cross into epoch 1
    return xs;
  };
  auto one = run(1, 16, 0, 1), four = run(4, 16, 0, 1), inline_ = run(0, 16, 0, 1);
  for (int k = 0; k < 7; ++k) {
    CHECK(torch::equal(one[k], four[k]));
    CHECK(torch::equal(one[k], inline_[k]));
  }
  auto r0 = run(2, 8, 0, 2), r1 = run(3, 8, 1, 2);
  for (int k = 0; k < 7; ++k) CHECK(torch::equal(torch::cat({r0[k], r1[k]}), one[k]));
  // augmentation did change the images: epoch 0 and epoch 1 views of a sample differ
  CHECK(!torch::equal(ds->get(3, 0, true).input, ds->get(3, 1, true).input));
  CHECK(torch::equal(ds->get(3, 0, false).input, ds->get(3, 1, false).input));
}

TEST_CASE("loader: RandomResizedCrop and colour jitter batches are the same with 0 or 3 workers and 1 or 2 ranks",
          "[unit]") {
  config::DataConfig d;
  d.format = config::DataFormat::Synthetic;
  d.synthetic.num_samples = 64;
  d.synthetic.image_size = 16;
  d.augment.random_resized_crop = true;
  d.augment.hflip = true;
  d.augment.brightness = d.augment.contrast = d.augment.saturation = 0.4;
  d.augment.hue = 0.1;
  config::ModelConfig m;
  m.in_channels = 3;
  m.num_classes = 5;
  auto ds = create_datasets(d, m, 5).train;
  auto run = [&](int64_t workers, int64_t batch, int64_t rank, int64_t world) {
    DataLoader l(ds, opts(batch, rank, world, true, workers));
    std::vector<torch::Tensor> xs;
    for (int k = 0; k < 5; ++k) xs.push_back(l.next()->input);  // into epoch 1
    return xs;
  };
  auto inline_ = run(0, 16, 0, 1), three = run(3, 16, 0, 1);
  auto r0 = run(2, 8, 0, 2), r1 = run(1, 8, 1, 2);
  for (int k = 0; k < 5; ++k) {
    CHECK(torch::equal(inline_[k], three[k]));
    CHECK(torch::equal(torch::cat({r0[k], r1[k]}), inline_[k]));
  }
  // each epoch draws new crops and colours; evaluation samples are untouched
  CHECK(!torch::equal(ds->get(3, 0, true).input, ds->get(3, 1, true).input));
  CHECK(!torch::equal(ds->get(3, 0, true).input, ds->get(3, 0, false).input));
  CHECK(torch::equal(ds->get(3, 0, false).input, ds->get(3, 1, false).input));
}

TEST_CASE("loader: a worker's error reaches next() in order, naming the file and sample", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(64, 37);
  for (int64_t workers : {0, 1, 4}) {
    DataLoader l(ds, opts(4, 0, 1, false, workers));
    int64_t delivered = 0;
    try {
      while (l.next()) ++delivered;
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK(std::string(e.what()) == "fake.bin: broken sample 37");
    }
    CHECK(delivered == 9);  // batches 0..8 hold samples 0..35; batch 9 holds 37
    CHECK_THROWS_AS(l.next(), DataError);  // stays failed
  }
}

TEST_CASE("loader: destruction mid-stream and after errors joins every worker", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(1000, 500);
  const int before = thread_count();
  for (int round = 0; round < 20; ++round) {
    DataLoader l(ds, opts(4, 0, 1, round % 2 == 0, 4));
    CHECK(l.live_workers() == 4);
    l.next();  // the prefetch buffer is full and workers wait: the destructor must wake them
  }
  {
    DataLoader failing(ds, opts(100, 0, 1, false, 3));
    CHECK_THROWS_AS([&] { while (failing.next()) {} }(), DataError);
  }
  CHECK(thread_count() == before);
}

namespace {

// fill() blocks until the gate opens (or 60 s pass: a failing test, not a hang), counting the fills
// started and finished: a batch of one sample is one fill, so these count batches in progress.
class GatedDataset : public IndexDataset {
 public:
  using IndexDataset::IndexDataset;
  bool fill(int64_t index, int64_t epoch, bool train, void* input, int64_t* target) const override {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return open; });
    lock.unlock();
    IndexDataset::fill(index, epoch, train, input, target);
    lock.lock();
    ++finished;
    cv.notify_all();
    return true;
  }
  template <class Pred>
  bool wait_until(Pred pred) const {  // a condition, not a time: 60 s is only the failure's bound
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return pred(); });
  }
  int started_now() const {
    std::lock_guard<std::mutex> lock(mu);
    return started;
  }
  void release() const {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  mutable int started = 0, finished = 0;
  mutable bool open = false;
};

}  // namespace

TEST_CASE("loader: every worker builds a batch at once, and workers + prefetch batches are the most in flight",
          "[unit]") {
  for (const auto& [workers, prefetch] : {std::pair<int64_t, int64_t>{6, 1}, {3, 4}}) {
    auto ds = std::make_shared<GatedDataset>(1000);
    auto o = opts(1, 0, 1, true, workers);
    o.prefetch = prefetch;
    DataLoader l(ds, o);
    REQUIRE(l.in_flight_limit() == workers + prefetch);
    // all the workers in a fill together: none waits for the step while the gate is shut
    CHECK(ds->wait_until([&] { return ds->started == workers; }));
    CHECK(l.ready_batches() == 0);  // bench-data's count of batches built before its clock started
    ds->release();
    // then the finished batches fill the buffer, and no worker starts another
    CHECK(ds->wait_until([&] { return ds->finished == workers + prefetch; }));
    CHECK(ds->started_now() == workers + prefetch);
    // a fill finishes before its batch is collated and queued: polled, 60 s only the failure's bound
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (l.ready_batches() < workers + prefetch && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    CHECK(l.ready_batches() == workers + prefetch);
    // each delivery frees one place
    REQUIRE(l.next());
    CHECK(ds->wait_until([&] { return ds->finished == workers + prefetch + 1; }));
    CHECK(ds->started_now() == workers + prefetch + 1);
  }
}

TEST_CASE("loader: evaluation batches, the short last batch, and limit_samples", "[unit]") {
  auto ds = std::make_shared<IndexDataset>(10);
  DataLoader l(ds, opts(4, 0, 1, false, 1));
  CHECK(l.batches_per_epoch() == 3);
  CHECK(ids(*l.next()) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(ids(*l.next()) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(ids(*l.next()) == std::vector<int64_t>{8, 9});
  CHECK(!l.next());
  CHECK(l.state().samples_consumed == 10);
  CHECK_THROWS_WITH(DataLoader(ds, opts(6, 0, 2, true)),
                    "index dataset: 10 samples, fewer than one global batch of 6 x 1 accumulation x 2 rank(s)");

  config::DataConfig d;
  d.format = config::DataFormat::Synthetic;
  d.synthetic.num_samples = 100;
  d.limit_samples = 30;
  config::ModelConfig m;
  m.arch = "gpt";
  m.block_size = 4;
  CHECK(create_datasets(d, m, 0).train->size() == 30);
}

TEST_CASE("on a GPU, the loader's threads copy batches to the device, the same batches as on the host", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  auto ds = std::make_shared<IndexDataset>(200);
  for (int64_t workers : {0, 3}) {
    INFO(workers << " workers");
    auto host_opts = opts(16, 0, 1, true, workers);
    auto device_opts = host_opts;
    device_opts.pin_memory = true;
    device_opts.device_index = 0;
    DataLoader host(ds, host_opts), device(ds, device_opts);
    for (int k = 0; k < 30; ++k) {  // crosses epochs; later copies overlap the use of earlier batches
      auto h = host.next(), d = device.next();
      REQUIRE(d->input.is_cuda());
      REQUIRE(d->target.is_cuda());
      CHECK_FALSE(d->copied);  // next() made this thread's stream wait for the copy
      CHECK(torch::equal(d->input.cpu(), h->input));
      CHECK(torch::equal(d->target.cpu(), h->target));
    }
    CHECK(device.state() == host.state());
  }
}
