#include "models/resnet.hpp"

#include <cmath>
#include <stdexcept>

#include "models/checkpoint.hpp"

namespace trainer::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

double conv_flops(const nn::Conv2d& c, int64_t& h, int64_t& w) {
  const auto& o = c->options;
  const int64_t k = o.kernel_size()->at(0), s = o.stride()->at(0);
  const int64_t p = std::get<torch::ExpandingArray<2>>(o.padding())->at(0);
  h = (h + 2 * p - k) / s + 1;
  w = (w + 2 * p - k) / s + 1;
  return 2.0 * static_cast<double>(o.in_channels() * o.out_channels() * k * k * h * w);
}

// 1x1 conv + BN on the shortcut where the shape changes (torchvision's `downsample`).
nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out));
}

// out += identity, then ReLU, both in place when the dtypes allow (they do in fp32 and under autocast,
// where both branches end in the same dtype): no new tensors for the two memory-bound ops of every
// block. Autograd allows it: BatchNorm's backward reads its input, not its output, and add's backward
// reads neither.
torch::Tensor add_relu_(torch::Tensor out, const torch::Tensor& identity) {
  if (out.scalar_type() != identity.scalar_type()) return torch::relu(out + identity);
  out.add_(identity);
  return out.relu_();
}

class BasicBlock : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv(in, planes, 3, stride))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv(planes, planes, 3, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
    if (stride != 1 || in != planes) downsample_ = register_module("downsample", make_downsample(in, planes, stride));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto out = bn1_(conv1_(x)).relu_();  // (B, planes, H/s, W/s)
    out = bn2_(conv2_(out));
    return add_relu_(out, downsample_ ? downsample_->forward(x) : x);
  }
  double forward_flops(int64_t& h, int64_t& w) const override {
    int64_t h0 = h, w0 = w;
    double f = conv_flops(conv1_, h, w) + conv_flops(conv2_, h, w);
    if (downsample_) f += conv_flops(downsample_->ptr<nn::Conv2dImpl>(0), h0, w0);
    return f;
  }
  void zero_init_last_bn() override { torch::nn::init::zeros_(bn2_->weight); }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Sequential downsample_{nullptr};
};

class Bottleneck : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv(in, planes, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv(planes, planes, 3, stride))),  // the stride sits on the 3x3
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3_(register_module("conv3", conv(planes, planes * kExpansion, 1, 1))),
        bn3_(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))) {
    if (stride != 1 || in != planes * kExpansion)
      downsample_ = register_module("downsample", make_downsample(in, planes * kExpansion, stride));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto out = bn1_(conv1_(x)).relu_();  // (B, planes, H, W)
    out = bn2_(conv2_(out)).relu_();     // (B, planes, H/s, W/s)
    out = bn3_(conv3_(out));                  // (B, 4 planes, H/s, W/s)
    return add_relu_(out, downsample_ ? downsample_->forward(x) : x);
  }
  double forward_flops(int64_t& h, int64_t& w) const override {
    int64_t h0 = h, w0 = w;
    double f = conv_flops(conv1_, h, w) + conv_flops(conv2_, h, w) + conv_flops(conv3_, h, w);
    if (downsample_) f += conv_flops(downsample_->ptr<nn::Conv2dImpl>(0), h0, w0);
    return f;
  }
  void zero_init_last_bn() override { torch::nn::init::zeros_(bn3_->weight); }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv3_;
  nn::BatchNorm2d bn3_;
  nn::Sequential downsample_{nullptr};
};

struct Layout {
  bool bottleneck = false;
  std::vector<int64_t> blocks;  // per stage
  int64_t base_channels = 64;   // stage i has base * 2^i planes
  bool torchvision = true;
};

// "" for a ResNet depth, else why not (the one text of this rule: config load and the constructor)
std::string depth_problem(int64_t depth) {
  if (depth == 18 || depth == 34 || depth == 50 || depth == 101 || depth == 152 || (depth >= 8 && (depth - 2) % 6 == 0))
    return "";
  return std::to_string(depth) +
         " is not a ResNet depth: use 18, 34, 50, 101, 152 (torchvision) or 6n+2 such as 20, 32, 44, 56, 110 (CIFAR)";
}

Layout layout_for(int64_t depth) {
  if (auto why = depth_problem(depth); !why.empty()) throw std::invalid_argument("model.depth " + why);
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}, 64, true};
    case 34: return {false, {3, 4, 6, 3}, 64, true};
    case 50: return {true, {3, 4, 6, 3}, 64, true};
    case 101: return {true, {3, 4, 23, 3}, 64, true};
    case 152: return {true, {3, 8, 36, 3}, 64, true};
    default: break;
  }
  const int64_t n = (depth - 2) / 6;  // 6n+2 (depth_problem said so)
  return {false, {n, n, n}, 16, false};
}

std::string shape_text(const torch::Tensor& x) {
  std::string s = "[";
  for (int64_t i = 0; i < x.dim(); ++i) s += (i ? ", " : "") + std::to_string(x.size(i));
  return s + "]";
}

}  // namespace

ResNet::ResNet(const config::ModelConfig& cfg) : cfg_(cfg) {
  if (cfg.stem != "imagenet" && cfg.stem != "cifar")
    throw std::invalid_argument("model.stem '" + cfg.stem + "' is unknown; known: cifar, imagenet");
  if (cfg.in_channels < 1 || cfg.num_classes < 1 || !(cfg.width > 0))
    throw std::invalid_argument("resnet needs in_channels >= 1, num_classes >= 1 and width > 0");
  const Layout layout = layout_for(cfg.depth);
  // The CIFAR layout always has its own 3x3 stride-1 stem; `stem` chooses for the torchvision layout.
  imagenet_stem_ = layout.torchvision && cfg.stem == "imagenet";
  const int64_t base = std::max<int64_t>(1, std::llround(static_cast<double>(layout.base_channels) * cfg.width));

  conv1_ = register_module("conv1", imagenet_stem_ ? nn::Conv2d(nn::Conv2dOptions(cfg.in_channels, base, 7)
                                                                    .stride(2).padding(3).bias(false))
                                                   : conv(cfg.in_channels, base, 3, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(base));
  int64_t in = base;
  const int64_t expansion = layout.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  for (size_t s = 0; s < layout.blocks.size(); ++s) {
    const int64_t planes = base << s;
    nn::ModuleList stage;
    std::vector<std::shared_ptr<ResidualBlock>> typed;
    for (int64_t b = 0; b < layout.blocks[s]; ++b) {
      const int64_t stride = (b == 0 && s > 0) ? 2 : 1;
      std::shared_ptr<ResidualBlock> block;
      if (layout.bottleneck)
        block = std::make_shared<Bottleneck>(in, planes, stride);
      else
        block = std::make_shared<BasicBlock>(in, planes, stride);
      stage->push_back(block);
      typed.push_back(block);
      in = planes * expansion;
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
    blocks_.push_back(std::move(typed));
  }
  fc_ = register_module("fc", nn::Linear(in, cfg.num_classes));  // keeps Linear's default init, as torchvision

  // torchvision's init: He-normal (fan_out) convolutions, BatchNorm as the identity.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  if (cfg.zero_init_residual)
    for (auto& stage : blocks_)
      for (auto& b : stage) b->zero_init_last_bn();
  if (cfg.channels_last) to_channels_last();
}

void ResNet::to_channels_last() { models::to_channels_last(*this); }

torch::Tensor ResNet::run_stage(size_t i, torch::Tensor x) {
  for (auto& b : blocks_[i]) x = b->forward(x);
  return x;
}

torch::Tensor ResNet::forward(const torch::Tensor& input) {
  if (input.dim() != 4 || input.size(1) != cfg_.in_channels)
    throw std::invalid_argument("resnet expects images (B, " + std::to_string(cfg_.in_channels) + ", H, W), got " +
                                shape_text(input));
  torch::Tensor x = input;
  if (cfg_.channels_last) {
    // weights may have been replaced since construction (loading, broadcast): keep them channels-last too
    if (!has_channels_last_strides(conv1_->weight)) to_channels_last();
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  }
  enter_unit(0);  // units(): 0 the stem, 1.. the stages, then the head
  x = bn1_(conv1_(x)).relu_();  // (B, base, H/2, W/2) imagenet stem; (B, base, H, W) cifar stem
  x = leave_unit(0, x);
  if (imagenet_stem_) x = torch::max_pool2d(x, 3, 2, 1);  // (B, base, H/4, W/4)
  for (size_t i = 0; i < stages_.size(); ++i) {
    enter_unit(i + 1);
    if (cfg_.activation_checkpointing)
      x = checkpoint(*stages_[i], [this, i](const torch::Tensor& t) { return run_stage(i, t); }, x);
    else
      x = run_stage(i, x);
    x = leave_unit(i + 1, x);
  }
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // (B, C)
  enter_unit(stages_.size() + 1);
  return leave_unit(stages_.size() + 1, fc_(x));  // (B, num_classes)
}

double ResNet::train_flops_per_sample(const std::vector<int64_t>& shape) const {
  if (shape.size() != 3) throw std::invalid_argument("resnet FLOPs need a (C, H, W) sample shape");
  int64_t h = shape[1], w = shape[2];
  double f = conv_flops(conv1_, h, w);
  if (imagenet_stem_) h = (h + 2 - 3) / 2 + 1, w = (w + 2 - 3) / 2 + 1;  // max-pool 3x3/2, padding 1
  for (const auto& stage : blocks_)
    for (const auto& b : stage) f += b->forward_flops(h, w);
  f += 2.0 * static_cast<double>(fc_->options.in_features() * fc_->options.out_features());
  return 3.0 * f;  // backward costs about twice the forward
}

std::vector<ModelUnit> ResNet::units() const {
  // the stem and the head are units of their own; each stage is one checkpointed block
  std::vector<ModelUnit> u{{"stem", {"conv1.", "bn1."}, false}};
  for (size_t i = 0; i < stages_.size(); ++i) {
    const std::string name = "layer" + std::to_string(i + 1);
    u.push_back({name, {name + "."}, true});
  }
  u.push_back({"head", {"fc."}, false});
  return u;
}

ModelSpec resnet_spec() {
  ModelSpec s;
  s.rules.name = "resnet";
  s.rules.input = config::ArchInput::Image;
  s.rules.fixed_image_size = false;  // adaptive average pooling: any image size
  s.rules.keys = {"model.depth",  "model.stem",  "model.in_channels",       "model.num_classes",
                  "model.width",  "model.zero_init_residual", "model.channels_last"};
  s.rules.eval_metrics = {"accuracy", "top5", "loss"};
  s.rules.check = [](const config::RunConfig& c, const config::ErrFn& err) {
    if (auto why = depth_problem(c.model.depth); !why.empty()) err("model.depth", why);
    if (c.dist.tensor_parallel > 1) err("dist.tensor_parallel", "ResNet has no tensor-parallel layers: use dist.sharding: full to cut memory instead");
  };
  s.build = [](const config::ModelConfig& c, const BuildContext&) -> ModelPtr { return std::make_shared<ResNet>(c); };
  s.layout = "torchvision ResNet (torchvision.models.resnet*)";
  return s;
}

}  // namespace trainer::models
