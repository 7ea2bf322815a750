#!/usr/bin/env python3
"""Feeding a GPU from JPEGs: ResNet-50 (bf16, channels_last, batch 256, SGD) trained on an ImageNet-like
JPEG folder (bench_input.py's: 500x375, quality 90, textured), its input pipeline RandomResizedCrop(224)
+ flip + normalisation, with W loader workers, side by side in one run:
  - the trainer: data.format image_folder, data.workers W (uint8 batches cross to the GPU and are
    normalised there), its train records' images/s and data wait;
  - PyTorch eager: torchvision's ImageFolder + DataLoader(num_workers=W, pin_memory=True), the batch
    copied non_blocking, the same model, autocast and optimizer;
  - the trainer on synthetic batches of the same shape: what the GPU does when the loader costs nothing.
Then `trainer bench-data CONFIG --run <the trainer's run>` says how many workers keep that step fed.

Usage: python scripts/bench/bench_feed.py --trainer build/trainer [--workers 8,16] [--steps 40]
           [--warmup 10] [--images 4096] [--work DIR] [--device cuda] [--depth 50] [--batch 256]
           [--markdown FILE] [--json FILE]
(--device cpu --depth 18 --batch 16 --steps 6 --warmup 2 runs the same harness on a CPU: a check of
the script, not a figure.) Run it alone: two benchmarks at once measure nothing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_input import cpu_name, make_folder  # noqa: E402
from stats import write_reports  # noqa: E402
from trainer_side import TrainerRunError, run_trainer, to_yaml  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLASSES = 4  # the folder's (the trainer refuses a head wider than the data's classes); the head is a trifle of the step


def trainer_tree(a, workers, synthetic, out_dir):
    if synthetic:
        data = {"format": "synthetic", "workers": workers,
                "synthetic": {"num_samples": a.images, "val_samples": a.batch, "image_size": 224},
                "normalize": {"mode": "mean_std", "mean": MEAN, "std": STD}}
    else:
        data = {"format": "image_folder", "path": os.path.join(a.work, "train"), "val_path": os.path.join(a.work, "train"),
                "image_size": 224, "workers": workers, "prefetch": 4,
                "augment": {"random_resized_crop": True, "hflip": True},
                "normalize": {"mode": "mean_std", "mean": MEAN, "std": STD}}
    return {
        "run": {"name": "feed", "out_dir": out_dir, "seed": 0},
        "model": {"arch": "resnet", "depth": a.depth, "stem": "imagenet", "in_channels": 3, "num_classes": CLASSES,
                  "channels_last": True},
        "data": data,
        "train": {"batch_size": a.batch, "max_steps": a.steps, "precision": a.precision, "device": a.device,
                  "log_every": a.log_every, "eval_every": 0, "eval_steps": 1},
        "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": False, "weight_decay": 1e-4},
        "schedule": {"name": "constant"},
        "checkpoint": {"every_steps": 0, "keep_last": 1},
        "log": {"progress": "off", "tensorboard": False},
    }


def trainer_side(a, workers, synthetic):
    tag = "synthetic" if synthetic else "jpeg-w%d" % workers
    d = os.path.join(a.work, "runs-" + tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = os.path.join(d, "feed.yaml")
    with open(cfg, "w") as f:
        f.write(to_yaml(trainer_tree(a, workers, synthetic, os.path.join(d, "runs"))) + "\n")
    out = run_trainer(a.trainer, [cfg], os.path.join(d, "runs", "feed"), a.warmup, os.path.join(d, "trainer.log"),
                      timeout_s=a.timeout)
    out["config"], out["run_dir"] = cfg, os.path.join(d, "runs", "feed")
    return out


TORCH_SIDE = r"""
import json, sys, time, torch, torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T
root, workers, batch, steps, warmup, device, depth, precision = sys.argv[1:9]
workers, batch, steps, warmup, depth = int(workers), int(batch), int(steps), int(warmup), int(depth)
torch.manual_seed(0)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(root + "/train", transform=tf)
ds = torch.utils.data.Subset(ds, list(range(len(ds))) * 100)   # epochs back to back
dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True, pin_memory=device == "cuda",
                prefetch_factor=4 if workers else None, persistent_workers=workers > 0)
model = getattr(torchvision.models, "resnet%d" % depth)(num_classes=4).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
dtype = torch.bfloat16 if precision == "bf16" else None
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
it = iter(dl)
waits, t0 = 0.0, None
for step in range(steps):
    if step == warmup:
        sync(); t0 = time.perf_counter(); waits = 0.0
    w0 = time.perf_counter()
    x, y = next(it)
    waits += time.perf_counter() - w0
    x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    y = y.to(device, non_blocking=True)
    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
sync()
dt = time.perf_counter() - t0
n = steps - warmup
print(json.dumps({"samples_per_s": n * batch / dt, "step_ms": 1000 * dt / n, "data_wait_ms": 1000 * waits / n}))
"""


def torch_side(a, workers):
    args = [a.python, "-c", TORCH_SIDE, a.work, str(workers), str(a.batch), str(a.steps), str(a.warmup), a.device,
            str(a.depth), a.precision]
    p = subprocess.run(args, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        raise SystemExit("PyTorch side (%d workers) failed:\n%s" % (workers, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def workers_needed(a, cfg, run_dir, workers):
    """`trainer bench-data --run`: its verdict lines (how many workers keep the run's step fed)."""
    p = subprocess.run([a.trainer, "bench-data", cfg, "--workers", str(workers), "--batches", str(a.bench_batches),
                        "--run", run_dir], capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        raise SystemExit("trainer bench-data --run failed:\n" + p.stdout + p.stderr)
    return p.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", default="build/trainer")
    ap.add_argument("--python", default=sys.executable, help="Python with torch + torchvision (the reference side)")
    ap.add_argument("--work", default="/tmp/bench_feed")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--workers", default="8,16")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--bench-batches", type=int, default=40, help="bench-data's timed batches")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if (a.steps - a.warmup) % a.log_every or a.warmup % a.log_every:
        raise SystemExit("--steps and --warmup must be multiples of --log-every")
    t = time.perf_counter()
    make_folder(a.work, a.images, jobs=os.cpu_count() or 1)
    print("folder: %d JPEGs in %.1f s" % (a.images, time.perf_counter() - t), flush=True)
    results = {"cpu": cpu_name(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": []}
    try:
        ceiling = trainer_side(a, max(int(w) for w in a.workers.split(",")), synthetic=True)
    except TrainerRunError as e:
        raise SystemExit(str(e))
    results["synthetic"] = ceiling
    print("trainer, synthetic batches: %.1f img/s" % ceiling["samples_per_s"], flush=True)
    verdict = ""
    for w in (int(x) for x in a.workers.split(",")):
        try:
            ours = trainer_side(a, w, synthetic=False)
        except TrainerRunError as e:
            raise SystemExit(str(e))
        theirs = torch_side(a, w)
        print("workers %d: trainer %.1f img/s (wait %.2f ms), PyTorch %.1f img/s (wait %.2f ms)" % (
            w, ours["samples_per_s"], ours.get("data_wait_ms", float("nan")), theirs["samples_per_s"],
            theirs["data_wait_ms"]), flush=True)
        results["rows"].append({"workers": w, "trainer": ours, "pytorch": theirs})
        verdict = workers_needed(a, ours["config"], ours["run_dir"], w)
    results["bench_data_run"] = verdict
    lines = ["ResNet-%d %s, batch %d, fed from %d JPEGs (500x375 q90; RandomResizedCrop 224 + flip + normalise), "
             "%s, %s; steps %d-%d of %d measured" % (a.depth, a.precision, a.batch, a.images, a.device, results["cpu"],
                                                    a.warmup + 1, a.steps, a.steps), "",
             "| loader workers | trainer img/s | trainer data wait ms/step | PyTorch (torchvision DataLoader) img/s | "
             "PyTorch data wait ms/step | trainer / PyTorch | trainer / its synthetic-data rate |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        o, p = r["trainer"], r["pytorch"]
        lines.append("| %d | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f |" % (
            r["workers"], o["samples_per_s"], o.get("data_wait_ms", float("nan")), p["samples_per_s"],
            p["data_wait_ms"], o["samples_per_s"] / p["samples_per_s"], o["samples_per_s"] / ceiling["samples_per_s"]))
    lines += ["", "trainer on synthetic batches (no decode): %.1f img/s, step %.1f ms" % (
        ceiling["samples_per_s"], ceiling.get("step_ms", float("nan"))), "", "trainer bench-data --run (last row's run):",
        "", "```", verdict, "```"]
    write_reports("\n".join(lines), a.markdown, results, a.json)


if __name__ == "__main__":
    main()
