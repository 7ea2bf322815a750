// models/convnet.cpp: the quickstart's airbench-style ConvNet. Its logits against PyTorch (ref_models.ConvNet,
// loaded from the C++ export, and the init drawn for the same seed): tests/python/test_models_interop.py.
#include <catch2/catch.hpp>

#include "io/safetensors.hpp"
#include "model_test_util.hpp"
#include "models/convnet.hpp"
#include "models/whitening.hpp"
#include "test_util.hpp"

using namespace trainer;

TEST_CASE("convnet gives (B, num_classes) logits from any image of 8x8 and up, and its names and shapes", "[unit]") {
  auto model = test::make_model(test::convnet_cfg());
  for (int64_t side : {8, 28, 33}) {
    INFO(side);
    CHECK(model->forward(torch::randn({3, 1, side, side})).sizes() == std::vector<int64_t>{3, 10});
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : io::named_state(*model)) shapes[name] = t.sizes().vec();
  CHECK(shapes.size() == 2 + 3 * 12 + 1);  // stem weight + bias; per block 2 convs + 2 BNs of 5 (4 tensors + the count); head
  CHECK(shapes["stem.weight"] == std::vector<int64_t>{24, 1, 3, 3});
  CHECK(shapes["stem.bias"] == std::vector<int64_t>{24});
  CHECK(shapes["blocks.0.conv1.weight"] == std::vector<int64_t>{32, 24, 3, 3});
  CHECK(shapes["blocks.1.bn1.running_var"] == std::vector<int64_t>{64});
  CHECK(shapes["blocks.2.conv2.weight"] == std::vector<int64_t>{128, 128, 3, 3});
  CHECK(shapes["head.weight"] == std::vector<int64_t>{10, 128});
  CHECK(shapes.count("head.bias") == 0);
  CHECK(models::convnet_widths(2.0) == std::vector<int64_t>{48, 64, 128, 256});
  CHECK(models::convnet_widths(0.01) == std::vector<int64_t>{1, 1, 1, 1});
}

TEST_CASE("convnet rejects wrong input shapes with clear messages", "[unit]") {
  auto model = test::make_model(test::convnet_cfg());
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 3, 28, 28})), "convnet expects images (B, 1, H, W), got [2, 3, 28, 28]");
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 1, 7, 28})),
                    "convnet needs images of at least 8x8 pixels (three 2x2 max-pools), got [2, 1, 7, 28]");
}

TEST_CASE("convnet model.whiten: a frozen whitening stem from the data, block 1 reads its 2 C k^2 channels", "[unit]") {
  auto cfg = test::convnet_cfg(1.0, 3);
  cfg.whiten = 2;
  auto model = test::make_model(cfg, 9);
  CHECK(model->data_init_samples() == 5000);
  CHECK(test::make_model(test::convnet_cfg())->data_init_samples() == 0);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : io::named_state(*model)) shapes[name] = t.sizes().vec();
  CHECK(shapes["whiten"] == std::vector<int64_t>{24, 3, 2, 2});
  CHECK(shapes.count("stem.weight") == 0);
  CHECK(shapes["blocks.0.conv1.weight"] == std::vector<int64_t>{32, 24, 3, 3});
  CHECK(model->named_buffers().contains("whiten"));  // not a parameter: no optimizer state, no gradient
  CHECK_FALSE(model->named_parameters().contains("whiten"));
  const auto images = torch::randn({20, 3, 10, 10});
  model->init_from_data(images);
  CHECK(torch::equal(model->named_buffers()["whiten"], models::whitening_weight(images, 2)));
  // the unpadded 2x2 conv takes a pixel: 9x9 is the least; a 2x2 stem's forward is the whitening conv's
  CHECK(model->forward(torch::randn({2, 3, 9, 9})).sizes() == std::vector<int64_t>{2, 10});
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 3, 8, 9})),
                    "convnet needs images of at least 9x9 pixels (three 2x2 max-pools, the unpadded whitening conv), got [2, 3, 8, 9]");
  // FLOPs: the whitening conv's forward only (24 filters of 12 at 27x27), block 1 from 24 channels at 27x27
  auto grey = test::convnet_cfg();
  grey.whiten = 2;
  const double macs = 729.0 * 8 * 4 / 3.0 + 729.0 * 9 * 8 * 32 + 169.0 * 9 * 32 * 32 + 169.0 * 9 * 32 * 64 +
                      36.0 * 9 * 64 * 64 + 36.0 * 9 * 64 * 128 + 9.0 * 9 * 128 * 128 + 128.0 * 10;
  CHECK(test::make_model(grey)->train_flops_per_sample({1, 28, 28}) == Approx(3.0 * 2.0 * macs));
}

TEST_CASE("convnet FLOPs per sample: the convolutions and the head counted by hand", "[unit]") {
  auto model = test::make_model(test::convnet_cfg());
  // multiply-adds at 28x28: stem 28*28*9*1*24; block 1 conv1 at 28x28 (24->32), conv2 at 14x14 (32->32);
  // block 2 at 14 then 7 (32->64, 64->64); block 3 at 7 then 3 (64->128, 128->128); head 128*10
  const double macs = 784.0 * 9 * 24 + 784.0 * 9 * 24 * 32 + 196.0 * 9 * 32 * 32 + 196.0 * 9 * 32 * 64 +
                      49.0 * 9 * 64 * 64 + 49.0 * 9 * 64 * 128 + 9.0 * 9 * 128 * 128 + 128.0 * 10;
  CHECK(model->train_flops_per_sample({1, 28, 28}) == Approx(3.0 * 2.0 * macs));
}

TEST_CASE("convnet channels_last and activation checkpointing give the plain model's outputs and gradients", "[unit]") {
  auto cfg = test::convnet_cfg(0.5, 3);
  auto plain = test::make_model(cfg, 7);
  auto cl_cfg = cfg;
  cl_cfg.channels_last = true;
  auto ac_cfg = cfg;
  ac_cfg.activation_checkpointing = true;
  auto cl = test::make_model(cl_cfg, 7), ac = test::make_model(ac_cfg, 7);
  CHECK(cl->named_parameters()["blocks.0.conv1.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
  const auto x = torch::randn({4, 3, 16, 16});
  const auto target = torch::tensor({0, 1, 2, 3});
  for (auto& m : {plain, cl, ac}) torch::nn::functional::cross_entropy(m->forward(x), target).backward();
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) { return test::max_abs_diff(a, b) / b.abs().max().item<double>(); };
  auto pp = plain->named_parameters(), pc = cl->named_parameters(), pa = ac->named_parameters();
  for (const auto& p : pp) {
    INFO(p.key());
    CHECK(torch::equal(p.value().grad(), pa[p.key()].grad()));  // the recompute runs the same kernels
    CHECK(rel(pc[p.key()].grad(), p.value().grad()) < 1e-4);    // other kernels: equal up to rounding
  }
  auto bp = plain->named_buffers(), ba = ac->named_buffers();
  for (const auto& b : bp) {
    INFO(b.key());
    CHECK(torch::equal(b.value(), ba[b.key()]));  // BatchNorm statistics updated once, not twice
  }
  CHECK(ba["blocks.2.bn2.num_batches_tracked"].item<int64_t>() == 1);
}

TEST_CASE("convnet init is PyTorch's default and a function of the torch seed", "[unit]") {
  auto a = test::make_model(test::convnet_cfg(), 11), b = test::make_model(test::convnet_cfg(), 11);
  auto c = test::make_model(test::convnet_cfg(), 12);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  CHECK(torch::equal(pa["blocks.1.conv2.weight"], pb["blocks.1.conv2.weight"]));
  CHECK_FALSE(torch::equal(pa["blocks.1.conv2.weight"], pc["blocks.1.conv2.weight"]));
  // kaiming_uniform(a = sqrt(5)): bound 1 / sqrt(fan_in); BN as the identity
  const double bound = 1.0 / std::sqrt(64.0 * 9);
  CHECK(pa["blocks.1.conv2.weight"].abs().max().item<double>() <= bound);
  CHECK(pa["blocks.1.conv2.weight"].abs().max().item<double>() > 0.9 * bound);
  CHECK(torch::equal(pa["blocks.0.bn1.weight"], torch::ones({32})));
  CHECK(torch::equal(pa["blocks.0.bn1.bias"], torch::zeros({32})));
}
