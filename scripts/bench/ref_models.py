"""PyTorch-Python definitions of the models `trainer` builds, for the side-by-side benchmark.

Same layouts, parameter names and initialisation rules as models/resnet.cpp and models/gpt.cpp:
- ResNet, He et al.'s CIFAR layout (depth 6n+2): 3x3/1 conv1 -> bn1 -> relu -> layer1..3 of n
  BasicBlocks with 16/32/64 x width planes (1x1 conv + BN `downsample` where the shape changes) ->
  global average pool -> fc; torchvision's init (He-normal fan_out convs, BN as the identity).
- ResNet-50: torchvision's own (the trainer copies its layout and names).
- ConvNet: models/convnet.cpp's airbench-style net (the quickstart's), same names and init draws.
- GPT: the nanoGPT-style module in tests/reference/nanogpt_ref.py, which the model tests check
  models/gpt.cpp against.
Both take `activation_checkpointing`: recompute per ResNet stage or per GPT block in backward, as
the trainer's model.activation_checkpointing does.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "tests", "reference"))
from nanogpt_ref import GPT, GPTConfig  # noqa: E402  (the reference the model tests use)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual; the stride sits on the first conv (torchvision's names)."""

    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))  # (B, planes, H/s, W/s)
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class CifarResNet(nn.Module):
    def __init__(self, depth=20, width=1.0, in_channels=3, num_classes=10, activation_checkpointing=False):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 (8, 14, 20, ...), got {depth}")
        n = (depth - 2) // 6
        base = max(1, round(16 * width))
        self.activation_checkpointing = activation_checkpointing
        self.conv1 = nn.Conv2d(in_channels, base, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        inp = base
        for s in range(3):
            planes = base << s
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(inp, planes, 2 if (b == 0 and s > 0) else 1))
                inp = planes
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(inp, num_classes)  # keeps Linear's default init, as torchvision
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))  # (B, base, H, W)
        for stage in (self.layer1, self.layer2, self.layer3):
            x = checkpoint(stage, x, use_reentrant=False) if self.activation_checkpointing else stage(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))  # (B, num_classes)


def whitening_weight(images, k, eps=5e-4):
    """models/whitening.cpp through LAPACK: the +- eigenvectors of the uncentred covariance of the k x k
    patches of `images` (N, C, H, W), each over sqrt(eigenvalue + eps), largest eigenvalue first, each
    signed so that its largest component is positive. All patch positions (the trainer samples a grid
    beyond 4 million patches)."""
    c = images.shape[1]
    patches = images.double().unfold(2, k, 1).unfold(3, k, 1)  # (N, C, H', W', k, k)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * k * k)  # rows in (C, k, k) order
    cov = patches.T @ patches / patches.shape[0]
    values, vectors = torch.linalg.eigh(cov)  # ascending, vectors in columns
    values, vectors = values.flip(0), vectors.flip(1).T
    big = vectors.abs().argmax(1)
    vectors = vectors * torch.sign(vectors[torch.arange(len(big)), big]).unsqueeze(1)
    w = (vectors / torch.sqrt(values.clamp_min(0) + eps).unsqueeze(1)).float().reshape(c * k * k, c, k, k)
    return torch.cat([w, -w])


class ConvNet(nn.Module):
    """models/convnet.cpp: an airbench-style net. A 3x3 stem conv (with bias) and GELU, then three blocks
    of conv -> 2x2 max-pool -> BN -> GELU -> conv -> BN -> GELU, a global max-pool and a bias-free head.
    Widths 24-32-64-128 times `width`; PyTorch's default init, built in the trainer's order (the same
    draws for the same seed). whiten=k: the stem is model.whiten's frozen k x k whitening conv (no draws)."""

    def __init__(self, width=1.0, in_channels=3, num_classes=10, activation_checkpointing=False, whiten=0):
        super().__init__()
        w = [max(1, round(b * width)) for b in (24, 32, 64, 128)]
        self.activation_checkpointing = activation_checkpointing
        self.whiten_k = whiten
        if whiten:  # model.whiten: frozen filters, set by init_whitening (or loaded)
            d = in_channels * whiten * whiten
            self.register_buffer("whiten", torch.zeros(2 * d, in_channels, whiten, whiten))
            w[0] = 2 * d
        else:
            self.stem = nn.Conv2d(in_channels, w[0], 3, 1, 1, bias=True)
        self.blocks = nn.ModuleList()
        for i in range(3):
            block = nn.Module()
            block.conv1 = nn.Conv2d(w[i], w[i + 1], 3, 1, 1, bias=False)
            block.bn1 = nn.BatchNorm2d(w[i + 1])
            block.conv2 = nn.Conv2d(w[i + 1], w[i + 1], 3, 1, 1, bias=False)
            block.bn2 = nn.BatchNorm2d(w[i + 1])
            self.blocks.append(block)
        self.head = nn.Linear(w[3], num_classes, bias=False)

    @staticmethod
    def _block(b, x):
        x = F.gelu(b.bn1(F.max_pool2d(b.conv1(x), 2)))  # (B, C', H/2, W/2)
        return F.gelu(b.bn2(b.conv2(x)))

    def init_whitening(self, images):
        self.whiten.copy_(whitening_weight(images, self.whiten_k))

    def forward(self, x):
        x = F.gelu(F.conv2d(x, self.whiten) if self.whiten_k else self.stem(x))  # (B, w0, H, W); whiten: H - k + 1
        for b in self.blocks:
            x = checkpoint(self._block, b, x, use_reentrant=False) if self.activation_checkpointing else self._block(b, x)
        return self.head(torch.amax(x, dim=(2, 3)))  # (B, num_classes)


class CheckpointedGPT(GPT):
    """nanoGPT reference with optional per-block activation checkpointing."""

    def __init__(self, cfg, activation_checkpointing=False):
        super().__init__(cfg)
        self.activation_checkpointing = activation_checkpointing

    def forward(self, idx):
        if not self.activation_checkpointing:
            return super().forward(idx)
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        for block in self.transformer.h:
            x = checkpoint(block, x, use_reentrant=False)
        return self.lm_head(self.transformer.ln_f(x))  # (B, T, V)


def build_model(model_cfg):
    """model_cfg: the trainer's model.* keys (arch, depth, width, ... or n_layer, n_embd, ...)."""
    ac = bool(model_cfg.get("activation_checkpointing", False))
    if model_cfg["arch"] == "resnet":
        depth = int(model_cfg["depth"])
        if depth in (18, 50):
            import torchvision  # the trainer's depth-18/50 layout is torchvision's, names included

            if ac:
                raise ValueError("activation checkpointing is not wired into the torchvision ResNet references")
            model = getattr(torchvision.models, f"resnet{depth}")(num_classes=int(model_cfg["num_classes"]))
            if int(model_cfg.get("in_channels", 3)) != 3:
                raise ValueError("the torchvision ResNet references take 3 input channels")
            if model_cfg.get("stem", "imagenet") == "cifar":  # 3x3/1 conv, no max-pool (the trainer's model.stem: cifar)
                model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
                model.maxpool = torch.nn.Identity()
            return model
        return CifarResNet(depth, float(model_cfg.get("width", 1.0)), int(model_cfg["in_channels"]),
                           int(model_cfg["num_classes"]), ac)
    if model_cfg["arch"] == "convnet":
        return ConvNet(float(model_cfg.get("width", 1.0)), int(model_cfg.get("in_channels", 3)),
                       int(model_cfg["num_classes"]), ac, int(model_cfg.get("whiten", 0)))
    if model_cfg["arch"] == "gpt":
        cfg = GPTConfig(vocab_size=int(model_cfg["vocab_size"]), block_size=int(model_cfg["block_size"]),
                        n_layer=int(model_cfg["n_layer"]), n_head=int(model_cfg["n_head"]),
                        n_embd=int(model_cfg["n_embd"]), dropout=0.0, bias=bool(model_cfg.get("bias", True)))
        return CheckpointedGPT(cfg, ac)
    raise ValueError(f"unknown arch {model_cfg['arch']!r}; known: convnet, gpt, resnet")


def gpt_flops_per_token(model, n_layer, block, n_embd):
    """6N + 12 * n_layer * block * n_embd, N = unique parameters without the position embedding
    (as models/gpt.cpp's train_flops_per_sample)."""
    n = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    n -= model.transformer.wpe.weight.numel()
    return 6.0 * n + 12.0 * n_layer * block * n_embd


def state_for_trainer(model):
    """Parameters and buffers under their names, each its own contiguous CPU tensor (a tied weight is
    written under both owners' names, as the trainer's named_state lists it)."""
    out = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers()):
        out[name] = t.detach().to("cpu").contiguous().clone()
    return out
