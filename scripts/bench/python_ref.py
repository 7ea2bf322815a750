"""The PyTorch-Python eager reference of one benchmark workload: the training loop a user would write.

Run as its own process by bench_train.py (so its peak RSS is its own):
    python python_ref.py SPEC.json RESULT.json
SPEC is a workload (see workloads.py). The loop keeps the data in memory (random tensors of the
workload's shape), draws shuffled batches, runs forward, loss, backward, optimizer step and
zero_grad, and reads the loss to the host every `log_every` steps, as the trainer does. Throughput is
measured as the trainer measures it: samples over wall time per interval of `log_every` steps; the
intervals that end within the first `warmup` steps are dropped.
"""
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_models import build_model, gpt_flops_per_token, state_for_trainer  # noqa: E402
from stats import median, steady  # noqa: E402


def make_optimizer(model, o):
    """Two groups as the trainer's build_optimizer: weights of 2+ dims decay; biases, norms and
    embeddings do not (optim.decay_norm_and_bias false)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    params = {id(p): p for p in model.parameters()}.values()  # a tied weight once
    decay = [p for p in params if p.dim() >= 2 and id(p) not in embeddings]
    no_decay = [p for p in params if not (p.dim() >= 2 and id(p) not in embeddings)]
    groups = [{"params": decay, "weight_decay": o.get("weight_decay", 0.0)}, {"params": no_decay, "weight_decay": 0.0}]
    if o["name"] == "sgd":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.9), nesterov=o.get("nesterov", False))
    if o["name"] == "adamw":
        return torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8))
    raise ValueError(f"unknown optimizer {o['name']!r}")


def make_data(spec, device, gen):
    """The whole dataset as tensors on the device: (N, C, H, W) float + (N) labels, or (N, T) tokens."""
    n = spec["num_samples"]
    m = spec["model"]
    if m["arch"] == "gpt":
        v, t = m["vocab_size"], m["block_size"]
        x = torch.randint(0, v, (n, t), generator=gen)  # (N, T)
        y = torch.randint(0, v, (n, t), generator=gen)  # (N, T)
    else:
        c, side = m["in_channels"], spec["image_size"]
        x = torch.randn(n, c, side, side, generator=gen)  # (N, C, H, W)
        y = torch.randint(0, m["num_classes"], (n,), generator=gen)  # (N)
    return x.to(device), y.to(device)


def run(spec):
    device = torch.device(spec["device"])
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    m = spec["model"]
    model = build_model(m)
    if spec.get("init_out"):  # the trainer starts from exactly these weights (model.init_from)
        from safetensors.torch import save_file

        save_file(state_for_trainer(model), spec["init_out"])
        if spec.get("init_only"):
            return {"init_out": spec["init_out"]}
    model.to(device)
    channels_last = m["arch"] == "resnet" and m.get("channels_last", False)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = make_optimizer(model, spec["optim"])
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    x_all, y_all = make_data(spec, device, gen)
    n, batch = x_all.shape[0], spec["batch_size"]
    autocast = spec["precision"] == "bf16"

    steps, log_every, warmup = spec["steps"], spec["log_every"], spec["warmup"]
    perm, pos = torch.randperm(n, generator=gen).to(device), 0
    intervals = []  # (steps, seconds) per log interval
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t_last, last_step = time.perf_counter(), 0
    prof = None  # spec["profile"] = {"start_step", "steps", "out"}: the trainer's profile.* window, same op tracer
    p_cfg = spec.get("profile")
    for step in range(1, steps + 1):
        if p_cfg and step == p_cfg["start_step"] + 1:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        if pos + batch > n:  # new epoch: reshuffle, drop the ragged tail (the trainer's sampler does too)
            perm, pos = torch.randperm(n, generator=gen).to(device), 0
        idx = perm[pos:pos + batch]
        pos += batch
        x, y = x_all[idx], y_all[idx]  # (B, ...) gathered from memory
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if prof is not None and step == p_cfg["start_step"] + p_cfg["steps"]:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(p_cfg["out"])
            prof = None
        if step % log_every == 0 or step == steps:
            loss_value = loss.item()  # the host waits here, as on the trainer's log steps
            now = time.perf_counter()
            intervals.append({"step": step, "steps": step - last_step, "seconds": now - t_last, "loss": loss_value})
            t_last, last_step = now, step

    kept = steady(intervals, warmup)
    out = {
        "samples_per_s": median([iv["steps"] * batch / iv["seconds"] for iv in kept]),
        "step_ms": median([1000.0 * iv["seconds"] / iv["steps"] for iv in kept]),
        "intervals": len(kept),
        "final_loss": intervals[-1]["loss"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,  # Linux: KiB
        "rss_before_training_mb": rss_start,
        "num_parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if m["arch"] == "gpt":
        out["tokens_per_s"] = out["samples_per_s"] * m["block_size"]
        out["flops_per_token"] = gpt_flops_per_token(model, m["n_layer"], m["block_size"], m["n_embd"])
    if device.type == "cuda":
        out["cuda_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def main(argv):
    if len(argv) != 3:
        print("usage: python_ref.py SPEC.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        spec = json.load(f)
    result = run(spec)
    with open(argv[2], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
