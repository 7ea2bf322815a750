"""Writes the golden files the C++ model tests compare against (tests/models/test_golden.cpp).

Run with the project's Python environment (see README.md):
    ~/.cache/trainer/venv-torch-2.11.0/bin/python tests/reference/make_golden.py
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import torchvision
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from det_fill import det_resnet_tensor, det_uniform, det_vit_tensor  # noqa: E402
from nanogpt_ref import GPT, GPTConfig  # noqa: E402

OUT = os.path.join(HERE, "golden")

# Gradients of a few ResNet-18 tensors from every part of the network (all of them would be 45 MB).
RESNET_GRADS = ["conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.1.weight",
                "layer4.0.downsample.1.bias", "layer4.1.bn2.weight", "fc.weight", "fc.bias"]
RESNET_STATS = ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked", "layer4.1.bn2.running_var"]


def meta(**kw):
    return {"torch": torch.__version__, "torchvision": torchvision.__version__, **{k: json.dumps(v) for k, v in kw.items()}}


def resnet18_golden():
    model = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            t.copy_(det_resnet_tensor(name, list(t.shape)))
    x = (2.0 * det_uniform("input", 4 * 3 * 32 * 32) - 1.0).to(torch.float32).reshape(4, 3, 32, 32)
    target = torch.tensor([1, 3, 5, 7])
    model.train()
    logits = model(x)  # batch statistics; running stats move once
    loss = F.cross_entropy(logits, target)
    loss.backward()
    params = dict(model.named_parameters())
    state = model.state_dict()
    out = {"input": x, "target": target, "logits_train": logits.detach(), "loss": loss.detach().reshape(1)}
    for n in RESNET_GRADS:
        out["grad." + n] = params[n].grad
    for n in RESNET_STATS:
        out["after." + n] = state[n].clone()
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(x)
    save_file(out, os.path.join(OUT, "resnet18_golden.safetensors"),
              meta(arch="resnet", depth=18, num_classes=10, weights="tests/reference/det_fill.py"))
    print(f"resnet18: loss {loss.item():.6f}, |logits_train| max {logits.abs().max():.3f}, "
          f"|logits_eval| max {out['logits_eval'].abs().max():.3f}")


def gpt_golden():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0, bias=True)
    torch.manual_seed(0)
    model = GPT(cfg)
    # the state_dict holds the tied tensor twice; save_file wants distinct storage for each name
    save_file({k: v.clone() for k, v in model.state_dict().items()},
              os.path.join(OUT, "gpt_weights.safetensors"), meta(**cfg.__dict__))
    idx = torch.randint(0, cfg.vocab_size, (2, 12))  # T = 12 < block_size: shorter sequences work
    target = torch.randint(0, cfg.vocab_size, (2, 12))
    logits = model(idx)
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), target.reshape(-1))
    loss.backward()
    out = {"input": idx, "target": target, "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for n, p in model.named_parameters():  # named_parameters() lists the tied weight once, as wte
        out["grad." + n] = p.grad
    save_file(out, os.path.join(OUT, "gpt_golden.safetensors"), meta(**cfg.__dict__))
    print(f"gpt: loss {loss.item():.6f}, {sum(p.numel() for p in model.parameters())} parameters")


# The small ViT of tests/models/test_golden.cpp (test::tiny_vit_cfg), as torchvision's VisionTransformer.
VIT = dict(image_size=16, patch_size=4, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10)


def vit_golden():
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(**VIT)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            t.copy_(det_vit_tensor(name, list(t.shape)))
    x = (2.0 * det_uniform("input", 4 * 3 * 16 * 16) - 1.0).to(torch.float32).reshape(4, 3, 16, 16)
    target = torch.tensor([0, 2, 4, 9])
    model.train()  # dropout 0: the train-mode path of nn.MultiheadAttention
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out = {"input": x, "target": target, "logits_train": logits.detach(), "loss": loss.detach().reshape(1)}
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad
    model.eval()  # nn.MultiheadAttention's inference fast path
    with torch.no_grad():
        out["logits_eval"] = model(x)
    save_file(out, os.path.join(OUT, "vit_golden.safetensors"), meta(arch="vit", **VIT, weights="tests/reference/det_fill.py"))
    print(f"vit: loss {loss.item():.6f}, {len(list(model.parameters()))} parameter tensors")


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    resnet18_golden()
    gpt_golden()
    vit_golden()
    for f in sorted(os.listdir(OUT)):
        print(f"{f}: {os.path.getsize(os.path.join(OUT, f))} bytes")
