"""The benchmark workloads, as plain dicts that both sides read: the trainer's config is written
from them (trainer_side.py) and the Python reference builds the same thing from them (python_ref.py).

A workload: name, model (the trainer's model.* keys), image_size (images), num_samples held in
memory, batch_size, precision, optim (the trainer's optim.* keys), steps, warmup (steps not
measured), log_every (steps per measured interval), threads, device, seed, data_workers (the
trainer's loader threads).
"""
import copy
import os

# He et al.'s CIFAR layout on Fashion-MNIST-shaped images (1x28x28, 10 classes), the quickstart's model family until 2026-12-05
RESNET_FMNIST = {
    "arch": "resnet", "depth": 8, "width": 2.0, "in_channels": 1, "num_classes": 10, "channels_last": True,
}
# GPT-mini: 4 layers, 128 wide, 4 heads, block 128, byte vocabulary
GPT_MINI = {
    "arch": "gpt", "vocab_size": 256, "block_size": 128, "n_layer": 4, "n_head": 4, "n_embd": 128, "bias": True,
}
# GPT-2 124M (nanoGPT's shapes, configs/gpt2_124m.yaml) and torchvision's ResNet-50, for one GPU
GPT2_124M = {
    "arch": "gpt", "vocab_size": 50304, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768, "bias": False,
}
RESNET50 = {"arch": "resnet", "depth": 50, "in_channels": 3, "num_classes": 1000, "channels_last": True}
# ResNet-18 with the CIFAR stem (3x3/1 conv, no max-pool) on 32x32x3, 10 classes: the usual "ResNet-18 on CIFAR"
RESNET18_CIFAR = {"arch": "resnet", "depth": 18, "stem": "cifar", "in_channels": 3, "num_classes": 10,
                  "channels_last": True}

SGD = {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5.0e-4}
ADAMW = {"name": "adamw", "lr": 6.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1}


def _workload(name, model, optim, batch, precision, steps, warmup, log_every, threads, device, **extra):
    w = {
        "name": name, "model": copy.deepcopy(model), "optim": copy.deepcopy(optim), "batch_size": batch,
        "precision": precision, "steps": steps, "warmup": warmup, "log_every": log_every, "threads": threads,
        "device": device, "seed": 0, "num_samples": 1024, "image_size": 28, "data_workers": 1,
    }
    w.update(extra)
    return w


def cpu_compare_workloads(quick, threads):
    """(a) ResNet CIFAR layout (depth 8, width 2: the quickstart's model until 2026-12-05) on 28x28x1, fp32 channels_last,
    batch 128; (b) GPT-mini fp32 and bf16, batch 32. Sized for a 2-core machine: about a second per
    step when idle, so that one run takes well under a minute."""
    steps, warmup, log_every = (6, 2, 2) if quick else (30, 6, 6)
    return [
        _workload("resnet8-w2-fmnist-fp32", dict(RESNET_FMNIST, depth=8), SGD, 128, "fp32", steps, warmup, log_every,
                  threads, "cpu"),
        _workload("gpt-mini-fp32", GPT_MINI, ADAMW, 32, "fp32", steps, warmup, log_every, threads, "cpu"),
        _workload("gpt-mini-bf16", GPT_MINI, ADAMW, 32, "bf16", steps, warmup, log_every, threads, "cpu"),
    ]


def cuda_compare_workloads(quick, threads):
    """GPT-2 124M bf16 block 1024 and ResNet-50 bf16 channels_last 224x224 (synthetic), on one GPU."""
    s = (lambda full, short: short if quick else full)
    return [
        _workload("gpt2-124m-bf16", GPT2_124M, ADAMW, 16, "bf16", s(60, 12), s(20, 4), s(10, 4), threads, "cuda",
                  num_samples=2048, data_workers=4),
        _workload("resnet50-bf16-224", RESNET50, dict(SGD, lr=0.1, nesterov=False, weight_decay=1e-4), 256, "bf16",
                  s(50, 12), s(20, 4), s(10, 4), threads, "cuda", image_size=224, num_samples=4096, data_workers=12),
    ]


def cuda_graph_workload(quick, threads):
    """train.cuda_graphs: ResNet-18-CIFAR, bf16 channels_last, batch 128, 32x32 synthetic, on one GPU."""
    s = (lambda full, short: short if quick else full)
    return _workload("resnet18-cifar-bf16-b128", RESNET18_CIFAR, dict(SGD, lr=0.1), 128, "bf16", s(120, 30), s(40, 10),
                     s(20, 10), threads, "cuda", image_size=32, num_samples=8192, data_workers=6)


def memory_workloads(quick, threads):
    """Peak host memory: fp32 vs bf16, without vs with activation checkpointing. Twice the batch of
    the throughput runs, so that activations (what checkpointing saves) stand out above the fixed
    cost of the process and the weights; the peak is reached in the first steps (optimizer state
    is allocated by the first step), so a few steps suffice."""
    steps = 2 if quick else 3
    out = []
    for tag, base, optim, batch in (("gpt-mini", GPT_MINI, ADAMW, 64),
                                    ("resnet8-w2", dict(RESNET_FMNIST, depth=8), SGD, 256)):
        for precision in ("fp32", "bf16"):
            for ac in (False, True):
                model = dict(base, activation_checkpointing=ac)
                name = f"mem-{tag}-b{batch}-{precision}{'-ac' if ac else ''}"
                out.append(_workload(name, model, optim, batch, precision, steps, 1, 1, threads, "cpu",
                                     num_samples=2 * batch))
    return out


def quickstart_loader_runs(repo, quick):
    """(c) configs/quickstart.yaml with its real idx loader, and the same run on synthetic data of the
    same shape (1x28x28, 60000 samples): --set overrides for each, and the steps measured."""
    steps, log_every = (8, 2) if quick else (30, 6)
    common = [f"train.max_steps={steps}", "train.epochs=0", "schedule.warmup_steps=0", f"train.log_every={log_every}", "train.eval_steps=1",
              "checkpoint.every_steps=0", "log.progress=off", "log.tensorboard=false"]
    synthetic = ["data.format=synthetic", "data.synthetic.image_size=28", "data.synthetic.num_samples=60000",
                 "data.synthetic.val_samples=128"]
    config = os.path.join(repo, "configs", "quickstart.yaml")
    return {"config": config, "steps": steps, "warmup": log_every, "batch_size": 128,
            "real": common + ["run.name=quickstart-real"],
            "synthetic": common + synthetic + ["run.name=quickstart-synthetic"]}
