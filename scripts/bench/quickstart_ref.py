#!/usr/bin/env python3
"""The quickstart's recipe as a PyTorch-Python user would write it, for time to accuracy beside
`trainer run configs/quickstart.yaml` (docs/PERFORMANCE.md, "Time to accuracy"):
Fashion-MNIST from Debian's package, normalised by the training split's mean and std, random
horizontal flips, the airbench-style ConvNet of ref_models.py (widths 24-32-64-128, channels-last),
cross-entropy with label smoothing 0.1, Nesterov SGD (lr 0.3, momentum 0.9, weight decay 5e-4 on
weights of 2+ dims only), 300 warm-up steps then a linear decay to 0, batch 128, 4 epochs,
bf16 autocast where the CPU has native bf16 (as the trainer's precision auto chose), one evaluation
of the 10,000 test images at the end.

configs/fmnist_best.yaml's recipe is the same with `--best`: the ConvNet 1.5 times as wide (36-48-96-192), 20 epochs, random shifts of
up to 2 pixels (zero padding of the raw image, as the trainer pads before it normalises), and flip
test-time augmentation (the mean of an image's logits and its mirror's) reported beside the plain
figure. (The trainer's config also evaluates an EMA of the weights; this reference does not.)

Usage: python scripts/bench/quickstart_ref.py [--seed 0] [--epochs 4] [--precision auto|bf16|fp32]
                                              [--best] [--arch convnet|resnet] [--depth 8] [--width 1]
                                              [--crop-padding 0] [--tta] [--label-smoothing 0.1] [--alt-flip]
Prints the test accuracy, the training seconds and the wall seconds, with the CPU."""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_models import build_model  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def shifted(xb, padding, value):
    """Each image moved by its own random (dy, dx) in [-padding, padding], the border filled with `value`."""
    n, c, h, w = xb.shape
    padded = F.pad(xb, (padding, padding, padding, padding), value=value)
    oy = torch.randint(0, 2 * padding + 1, (n,))
    ox = torch.randint(0, 2 * padding + 1, (n,))
    out = torch.empty_like(xb)
    for dy in range(2 * padding + 1):
        for dx in range(2 * padding + 1):
            sel = ((oy == dy) & (ox == dx)).nonzero().flatten()
            if sel.numel():
                out[sel] = padded[sel, :, dy:dy + h, dx:dx + w]
    return out


def native_bf16():
    flags = open("/proc/cpuinfo").read()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=float, default=None, help="4 (--best: 20)")
    ap.add_argument("--arch", default="convnet", choices=["convnet", "resnet"])
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--depth", type=int, default=8, help="resnet only (width 2)")
    ap.add_argument("--width", type=float, default=1.0, help="convnet only: the widths 24-32-64-128 times this")
    ap.add_argument("--crop-padding", type=int, default=0, help="random shifts of up to this many pixels")
    ap.add_argument("--tta", action="store_true", help="also score each test image with its mirror")
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--alt-flip", action="store_true",
                    help="alternating flips (data.augment.hflip_alternate): a coin per image in the first epoch, "
                         "then the opposite of the epoch before")
    ap.add_argument("--best", action="store_true",
                    help="configs/fmnist_best.yaml: convnet width 1.5, 20 epochs, padding 2, alternating flips, "
                         "lookahead 5, tta")
    ap.add_argument("--whiten", type=int, default=0, help="model.whiten: a frozen k x k whitening first layer")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--lookahead", type=int, default=None,
                    help="airbench's lookahead every K steps, as train.ema.lookahead (the weights and BN statistics "
                         "pulled to their running average with decay 0.95^K (step/total)^3, then replaced by it; the "
                         "model ends on the average); 0 = off (--best: 5)")
    a = ap.parse_args()
    if a.best:
        a.arch, a.width, a.crop_padding, a.tta, a.alt_flip = "convnet", 1.5, 2, True, True
        a.epochs = a.epochs or 20.0
        a.lookahead = 5 if a.lookahead is None else a.lookahead
    a.lookahead = a.lookahead or 0
    a.epochs = a.epochs or 4.0
    t_start = time.perf_counter()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    bf16 = a.precision == "bf16" or (a.precision == "auto" and native_bf16())
    x_train = torch.from_numpy(idx("train-images-idx3-ubyte.gz").copy()).float().div_(255).unsqueeze(1)
    y_train = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    x_test = torch.from_numpy(idx("t10k-images-idx3-ubyte.gz").copy()).float().div_(255).unsqueeze(1)
    y_test = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = x_train.mean().item(), x_train.std().item()
    x_train = (x_train - mean) / std
    x_test = (x_test - mean) / std

    pad_value = (0.0 - mean) / std  # a black pixel, normalised
    if a.arch == "convnet":
        model = build_model({"arch": "convnet", "width": a.width, "in_channels": 1, "num_classes": 10, "whiten": a.whiten})
        if a.whiten:
            model.init_whitening(x_train[:5000])
    else:
        model = build_model({"arch": "resnet", "depth": a.depth, "width": 2.0, "in_channels": 1, "num_classes": 10})
    model = model.to(memory_format=torch.channels_last)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=a.lr, momentum=0.9, nesterov=True)
    batch = a.batch_size
    per_epoch = x_train.shape[0] // batch  # drop_last, as the trainer's sampler
    total = int(round(a.epochs * per_epoch))
    warmup = 300

    def lr_at(step):  # 1-based step
        if step <= warmup:
            return a.lr * step / warmup
        return a.lr * max(0.0, (total - step) / max(1, total - warmup))

    # --lookahead: the running average of every float tensor of the state (parameters and BN statistics)
    slow = [t.detach().clone() for t in model.state_dict().values() if t.is_floating_point()] if a.lookahead else None

    def lookahead(decay):
        with torch.no_grad():
            for avg, cur in zip(slow, (t for t in model.state_dict().values() if t.is_floating_point())):
                avg.lerp_(cur, 1 - decay)
                cur.copy_(avg)

    t_train = time.perf_counter()
    step = 0
    model.train()
    # --alt-flip: each image's first-epoch flip (drawn only then, so other runs keep their draws)
    coins = torch.rand(x_train.shape[0]) < 0.5 if a.alt_flip else None
    epoch = -1
    while step < total:
        epoch += 1
        perm = torch.randperm(x_train.shape[0])
        for b in range(per_epoch):
            if step >= total:
                break
            idx_b = perm[b * batch:(b + 1) * batch]
            xb = x_train[idx_b]
            flip = (coins[idx_b] ^ (epoch % 2 == 1)) if a.alt_flip else torch.rand(batch) < 0.5
            xb[flip] = xb[flip].flip(3)
            if a.crop_padding:
                xb = shifted(xb, a.crop_padding, pad_value)
            xb = xb.contiguous(memory_format=torch.channels_last)
            step += 1
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(xb), y_train[idx_b], label_smoothing=a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if a.lookahead and step % a.lookahead == 0:
                lookahead(0.95 ** a.lookahead * (step / total) ** 3)
            if step % 500 == 0:
                print(f"step {step}/{total} loss {loss.item():.4f} ({time.perf_counter() - t_train:.0f} s)", flush=True)
    if a.lookahead:
        lookahead(1.0)  # the model ends on the average
    train_s = time.perf_counter() - t_train
    model.eval()
    correct = correct_tta = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for b in range(0, x_test.shape[0], 500):
            xb = x_test[b:b + 500].contiguous(memory_format=torch.channels_last)
            logits = model(xb).float()
            correct += (logits.argmax(1) == y_test[b:b + 500]).sum().item()
            if a.tta:
                mirrored = model(xb.flip(3).contiguous(memory_format=torch.channels_last)).float()
                correct_tta += (((logits + mirrored) / 2).argmax(1) == y_test[b:b + 500]).sum().item()
    acc = correct / x_test.shape[0]
    tta = f" (flip TTA {100 * correct_tta / x_test.shape[0]:.2f} %)" if a.tta else ""
    print(f"seed {a.seed}: {a.arch}{f' width {a.width:g}' if a.arch == 'convnet' else f' depth {a.depth}'}, test accuracy {100 * acc:.2f} %{tta}, training {train_s:.1f} s, wall "
          f"{time.perf_counter() - t_start:.1f} s, {total} steps, {'bf16' if bf16 else 'fp32'}, "
          f"batch {batch}, lr {a.lr:g}{f', whiten {a.whiten}' if a.whiten else ''}"
          f"{f', lookahead {a.lookahead}' if a.lookahead else ''}, {a.threads} threads, torch {torch.__version__}")


if __name__ == "__main__":
    main()
