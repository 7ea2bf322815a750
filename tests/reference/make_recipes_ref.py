"""PyTorch / torchvision references for the training recipes (issue 15), written to
golden/recipes_ref.safetensors and read by tests/engine/test_recipes_loss.cpp and
tests/data/test_crop_jitter.cpp. tests/python/test_recipes_ref.py recomputes every tensor with the
installed torch / torchvision and requires the committed file to hold the same values.

    ~/.cache/trainer/venv-torch-2.11.0/bin/python tests/reference/make_recipes_ref.py [OUT]
"""
import os
import sys

import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden", "recipes_ref.safetensors")


def scalar(v):
    return torch.tensor(float(v), dtype=torch.float64)


def losses(t):
    g = torch.Generator().manual_seed(15)
    # classification: (8, 10) logits, label smoothing 0.1
    logits = torch.randn(8, 10, generator=g) * 3
    target = torch.randint(0, 10, (8,), generator=g)
    t["ls.logits"], t["ls.target"] = logits, target
    t["ls.loss"] = F.cross_entropy(logits, target, label_smoothing=0.1).reshape(1)
    # the token models' (B*T, V) path: (2, 5, 7) logits, label smoothing 0.2
    tl = torch.randn(2, 5, 7, generator=g) * 2
    tt = torch.randint(0, 7, (2, 5), generator=g)
    t["tok.logits"], t["tok.target"] = tl, tt
    t["tok.loss"] = F.cross_entropy(tl.reshape(-1, 7), tt.reshape(-1), label_smoothing=0.2).reshape(1)
    # bf16 logits under CPU autocast: the loss runs in fp32 (autocast's fp32 list)
    lb = (torch.randn(8, 10, generator=g) * 3).bfloat16()
    t["bf16.logits"] = lb
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t["bf16.loss"] = F.cross_entropy(lb, target, label_smoothing=0.1).reshape(1)
    # soft targets (a mixup of lambda 0.7 with the flipped batch) and label smoothing 0.1
    lam = 0.7
    onehot = F.one_hot(target, 10).float()
    soft = onehot * lam + onehot.flip(0) * (1 - lam)
    t["soft.target"] = soft
    t["soft.loss"] = F.cross_entropy(logits, soft, label_smoothing=0.1).reshape(1)
    # timm's SoftTargetCrossEntropy of mixup_target(smoothing=0.1): the same loss another way
    off = 0.1 / 10
    y1 = torch.full((8, 10), off).scatter_(1, target.unsqueeze(1), 1 - 0.1 + off)
    timm_target = y1 * lam + y1.flip(0) * (1 - lam)
    t["soft.timm_loss"] = torch.sum(-timm_target * F.log_softmax(logits, dim=-1), dim=-1).mean().reshape(1)


def transforms(t):
    g = torch.Generator().manual_seed(16)
    rgb = torch.randint(0, 256, (3, 20, 24), dtype=torch.uint8, generator=g)
    gray = torch.randint(0, 256, (1, 20, 24), dtype=torch.uint8, generator=g)
    t["img.rgb"], t["img.gray"] = rgb, gray
    crops = [(2, 3, 12, 15, 16, 16), (0, 0, 20, 24, 8, 8), (5, 5, 6, 7, 16, 16), (1, 4, 17, 9, 10, 12)]
    for k, (top, left, h, w, oh, ow) in enumerate(crops):
        t[f"rrc{k}.box"] = torch.tensor([top, left, h, w, oh, ow], dtype=torch.int64)
        t[f"rrc{k}.rgb"] = TF.resized_crop(rgb, top, left, h, w, [oh, ow], antialias=True)
        t[f"rrc{k}.gray"] = TF.resized_crop(gray, top, left, h, w, [oh, ow], antialias=True)
    for k, f in enumerate([0.6, 1.4]):
        t[f"brightness{k}.factor"] = scalar(f)
        t[f"brightness{k}.rgb"] = TF.adjust_brightness(rgb, f)
        t[f"brightness{k}.gray"] = TF.adjust_brightness(gray, f)
    for k, f in enumerate([0.5, 1.5]):
        t[f"contrast{k}.factor"] = scalar(f)
        t[f"contrast{k}.rgb"] = TF.adjust_contrast(rgb, f)
        t[f"contrast{k}.gray"] = TF.adjust_contrast(gray, f)
    for k, f in enumerate([0.3, 1.7]):
        t[f"saturation{k}.factor"] = scalar(f)
        t[f"saturation{k}.rgb"] = TF.adjust_saturation(rgb, f)
    for k, f in enumerate([-0.3, 0.2, 0.5]):
        t[f"hue{k}.factor"] = scalar(f)
        t[f"hue{k}.rgb"] = TF.adjust_hue(rgb, f)


def build():
    torch.set_num_threads(1)
    t = {}
    losses(t)
    transforms(t)
    return {k: v.contiguous() for k, v in t.items()}


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    tensors = build()
    save_file(tensors, out, metadata={"torch": torch.__version__})
    print(f"{out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes")
    print("ls", tensors["ls.loss"].item(), "soft", tensors["soft.loss"].item(), "timm", tensors["soft.timm_loss"].item())
