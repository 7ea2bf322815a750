#include "models/convnet.hpp"

#include <cmath>
#include <stdexcept>

#include "models/checkpoint.hpp"
#include "models/whitening.hpp"

namespace trainer::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(int64_t in, int64_t out, bool bias) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(bias));
}

std::string shape_of(const torch::Tensor& x) { return c10::str(x.sizes()); }  // "[2, 1, 28, 28]"

// Three 2x2 max-pools need 8 pixels; the whitening conv has no padding and takes k - 1 more.
int64_t convnet_min_side(const config::ModelConfig& c) { return 8 + std::max<int64_t>(c.whiten - 1, 0); }

}  // namespace

std::vector<int64_t> convnet_widths(double width) {
  std::vector<int64_t> w;
  for (int64_t base : {24, 32, 64, 128}) w.push_back(std::max<int64_t>(1, std::llround(static_cast<double>(base) * width)));
  return w;
}

ConvNet::ConvNet(const config::ModelConfig& cfg) : cfg_(cfg) {
  if (cfg.in_channels < 1 || cfg.num_classes < 1 || !(cfg.width > 0))
    throw std::invalid_argument("convnet needs in_channels >= 1, num_classes >= 1 and width > 0");
  const auto w = convnet_widths(cfg.width);
  // Modules are built in PyTorch's order (stem, blocks, head) with its default init: the same draws
  // as ref_models.ConvNet after the same torch.manual_seed.
  const int64_t k = cfg.whiten;
  if (k > 0)  // filled by init_from_data at a fresh start (or from a checkpoint); no draws
    whiten_ = register_buffer("whiten", torch::zeros({stem_channels(), cfg.in_channels, k, k}));
  else
    stem_ = register_module("stem", conv3x3(cfg.in_channels, w[0], /*bias=*/true));
  blocks_ = register_module("blocks", nn::ModuleList());
  for (int64_t b = 0; b < kBlocks; ++b) {
    auto block = std::make_shared<nn::Module>();
    const int64_t in = b == 0 ? stem_channels() : w[b];
    conv1_.push_back(block->register_module("conv1", conv3x3(in, w[b + 1], false)));
    bn1_.push_back(block->register_module("bn1", nn::BatchNorm2d(w[b + 1])));
    conv2_.push_back(block->register_module("conv2", conv3x3(w[b + 1], w[b + 1], false)));
    bn2_.push_back(block->register_module("bn2", nn::BatchNorm2d(w[b + 1])));
    blocks_->push_back(block);
  }
  // No bias: the global max-pool feeds it features of any offset, and airbench found none needed.
  head_ = register_module("head", nn::Linear(nn::LinearOptions(w[kBlocks], cfg.num_classes).bias(false)));
  if (cfg.channels_last) models::to_channels_last(*this);
}

torch::Tensor ConvNet::run_block(size_t i, const torch::Tensor& x) {
  // the pool comes before BN and GELU: they then run on a quarter of the pixels
  auto y = torch::max_pool2d(conv1_[i](x), 2);  // (B, C', H/2, W/2)
  y = torch::gelu(bn1_[i](y));
  return torch::gelu(bn2_[i](conv2_[i](y)));  // (B, C', H/2, W/2)
}

torch::Tensor ConvNet::forward(const torch::Tensor& input) {
  if (input.dim() != 4 || input.size(1) != cfg_.in_channels)
    throw std::invalid_argument("convnet expects images (B, " + std::to_string(cfg_.in_channels) + ", H, W), got " +
                                shape_of(input));
  const int64_t least = convnet_min_side(cfg_);
  if (input.size(2) < least || input.size(3) < least)
    throw std::invalid_argument("convnet needs images of at least " + std::to_string(least) + "x" + std::to_string(least) +
                                " pixels (three 2x2 max-pools" + (cfg_.whiten > 0 ? ", the unpadded whitening conv" : "") +
                                "), got " + shape_of(input));
  torch::Tensor x = input;
  if (cfg_.channels_last) {
    // weights may have been replaced since construction (loading, broadcast): keep them channels-last too
    if (!has_channels_last_strides(stem_ ? stem_->weight : whiten_)) models::to_channels_last(*this);
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  }
  enter_unit(0);  // units(): 0 the stem, 1..3 the blocks, 4 the head
  if (stem_)
    x = leave_unit(0, torch::gelu(stem_(x)));  // (B, w0, H, W)
  else  // frozen: no gradient reaches the input of block 1's first conv, nor is one computed for it
    x = leave_unit(0, torch::gelu(torch::conv2d(x, whiten_)));  // (B, 2 C k^2, H - k + 1, W - k + 1)
  for (size_t i = 0; i < static_cast<size_t>(kBlocks); ++i) {
    enter_unit(i + 1);
    if (cfg_.activation_checkpointing)
      x = checkpoint(*blocks_[i], [this, i](const torch::Tensor& t) { return run_block(i, t); }, x);
    else
      x = run_block(i, x);
    x = leave_unit(i + 1, x);
  }
  x = torch::amax(x, {2, 3});  // (B, C): global max-pool
  enter_unit(kBlocks + 1);
  return leave_unit(kBlocks + 1, head_(x));  // (B, num_classes)
}

double ConvNet::train_flops_per_sample(const std::vector<int64_t>& shape) const {
  if (shape.size() != 3) throw std::invalid_argument("convnet FLOPs need a (C, H, W) sample shape");
  const auto w = convnet_widths(cfg_.width);
  double h = static_cast<double>(shape[1]), wd = static_cast<double>(shape[2]);
  double f = 0;
  if (cfg_.whiten > 0) {
    const double k = static_cast<double>(cfg_.whiten);
    h -= k - 1, wd -= k - 1;
    // frozen, no gradient: forward only, a third of the 3x below
    f += 2.0 * static_cast<double>(stem_channels() * cfg_.in_channels) * k * k * h * wd / 3.0;
  } else {
    f += 2.0 * 9 * static_cast<double>(cfg_.in_channels * w[0]) * h * wd;  // stem
  }
  for (int64_t b = 0; b < kBlocks; ++b) {
    f += 2.0 * 9 * static_cast<double>((b == 0 ? stem_channels() : w[b]) * w[b + 1]) * h * wd;  // conv1 at the block's input size
    h = std::floor(h / 2), wd = std::floor(wd / 2);
    f += 2.0 * 9 * static_cast<double>(w[b + 1] * w[b + 1]) * h * wd;  // conv2 after the pool
  }
  f += 2.0 * static_cast<double>(w[kBlocks] * cfg_.num_classes);
  return 3.0 * f;  // backward costs about twice the forward
}

std::vector<ModelUnit> ConvNet::units() const {
  std::vector<ModelUnit> u{{"stem", {cfg_.whiten > 0 ? "whiten" : "stem."}, false}};
  for (int64_t b = 0; b < kBlocks; ++b)
    u.push_back({"block" + std::to_string(b + 1), {"blocks." + std::to_string(b) + "."}, true});
  u.push_back({"head", {"head."}, false});
  return u;
}

int64_t ConvNet::stem_channels() const {
  return cfg_.whiten > 0 ? 2 * cfg_.in_channels * cfg_.whiten * cfg_.whiten : convnet_widths(cfg_.width)[0];
}

int64_t ConvNet::data_init_samples() const { return cfg_.whiten > 0 ? kWhitenImages : 0; }

void ConvNet::init_from_data(const torch::Tensor& images) {
  if (cfg_.whiten <= 0) return;
  torch::NoGradGuard no_grad;
  whiten_.copy_(whitening_weight(images, cfg_.whiten));  // copy_ keeps the buffer's (channels-last) strides
}

ModelSpec convnet_spec() {
  ModelSpec s;
  s.rules.name = "convnet";
  s.rules.input = config::ArchInput::Image;
  s.rules.fixed_image_size = false;  // global max-pool: any image of at least 8x8
  s.rules.min_image_side = convnet_min_side;
  s.rules.keys = {"model.in_channels", "model.num_classes", "model.width", "model.whiten", "model.channels_last"};
  s.rules.eval_metrics = {"accuracy", "top5", "loss"};
  s.rules.check = [](const config::RunConfig& c, const config::ErrFn& err) {
    if (c.dist.tensor_parallel > 1) err("dist.tensor_parallel", "convnet has no tensor-parallel layers: use dist.sharding: full to cut memory instead");
  };
  s.build = [](const config::ModelConfig& c, const BuildContext&) -> ModelPtr { return std::make_shared<ConvNet>(c); };
  s.layout = "trainer ConvNet (scripts/bench/ref_models.py ConvNet)";
  return s;
}

}  // namespace trainer::models
