#!/usr/bin/env python3
"""The input pipeline alone, side by side: `trainer bench-data` against torchvision's DataLoader
(ImageFolder, PIL, RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize; validation
Resize(256) + CenterCrop(224)) on a generated ImageNet-like folder (500x375 JPEGs, quality 90,
textured), batch 64, 1 and 2 workers, alternating the two sides, medians of --repeats rounds.

Usage: python scripts/bench/bench_input.py [--trainer build/trainer] [--work DIR] [--images 1024]
           [--batches 6] [--repeats 3] [--workers 1,2] [--out FILE.md] [--dali-python PY] [--jitter]
           [--hue H]
With --dali-python (a python whose venv has the nvidia-dali wheel, e.g. nvidia-dali-cuda120 from PyPI),
DALI's CPU pipeline of the same work is a third column. --jitter adds ColorJitter(0.4, 0.4, 0.4) to
training on both sides (brightness, contrast, saturation: the shipped ResNet-50 ImageNet config's);
--hue H adds ColorJitter's hue shift in [-H, H] on both sides (with or without --jitter).
Prints a Markdown table (samples/s, per worker, trainer / torchvision) with the CPU named. Run it
alone: two benchmarks at once measure nothing."""
import argparse
import os
import platform
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import median  # noqa: E402


def cpu_name():
    model, flags, family, number = "unknown CPU", "", "", ""
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and model == "unknown CPU":
                model = value
            elif key == "cpu family" and not family:
                family = value
            elif key == "model" and not number:
                number = value
            elif key == "flags" and not flags:
                flags = line
    except OSError:
        pass
    if family:
        model += " (family %s model %s)" % (family, number)
    bf16 = [f for f in ("amx_bf16", "avx512_bf16") if f in flags.split()]
    return "%s, %d cores%s" % (model, os.cpu_count() or 0, ", " + "/".join(bf16) if bf16 else ", no native bf16")


def _make_image(args):
    """One 500x375 quality-90 JPEG with texture (noise, gradients and shapes: a flat image would decode
    unrealistically fast), from its own seed: the same file whichever process draws it."""
    import numpy as np
    from PIL import Image, ImageDraw
    path, seed, i = args
    rng = np.random.default_rng([seed, i])
    yy, xx = np.mgrid[0:375, 0:500]
    base = np.stack([(xx * rng.uniform(0.2, 0.6) + yy * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
                     for _ in range(3)], axis=-1)
    noise = rng.normal(0, 28, size=(375, 500, 3))
    img = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = rng.integers(0, 450), rng.integers(0, 330)
        draw.ellipse([x0, y0, x0 + rng.integers(10, 120), y0 + rng.integers(10, 120)],
                     fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    img.save(path, quality=90)


def make_folder(root, images, seed=0, jobs=1):
    """root/train/c<i % 4>/<i>.jpg for i < images (kept between runs: a marker names the count), drawn
    by `jobs` processes."""
    done = os.path.join(root, ".done-v2-%d" % images)
    if os.path.exists(done):
        return
    work = []
    for i in range(images):
        d = os.path.join(root, "train", "c%d" % (i % 4))
        os.makedirs(d, exist_ok=True)
        work.append((os.path.join(d, "%04d.jpg" % i), seed, i))
    if jobs > 1:
        import multiprocessing
        with multiprocessing.Pool(jobs) as pool:
            pool.map(_make_image, work, chunksize=16)
    else:
        for w in work:
            _make_image(w)
    open(done, "w").close()


CONFIG = """run: {{name: bench_input, out_dir: runs, seed: 0}}
model: {{arch: resnet, depth: 18, num_classes: 4}}
data:
  format: image_folder
  path: {train}
  val_path: {train}   # the same images: the validation pipeline runs one pass, warm-up batches included
  image_size: 224
  val_resize: 256     # validation: Resize(256) + CenterCrop(224), as torchvision's side does
  augment: {{random_resized_crop: true, hflip: true{jitter}}}
  normalize: {{mode: mean_std, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}
train: {{batch_size: 64, epochs: 1, threads: 1, precision: fp32}}
"""


def trainer_rate(trainer, cfg, workers, batches, val):
    cmd = [trainer, "bench-data", cfg, "--workers", str(workers), "--batches", str(batches)] + (["--val"] if val else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("trainer bench-data failed:\n" + out.stdout + out.stderr)
    for line in out.stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+(.*)", line)
        if m and int(m.group(1)) == workers:
            return float(m.group(2)), m.group(4).strip()
    raise SystemExit("no rate in trainer bench-data's output:\n" + out.stdout)


def torchvision_rate(root, workers, batches, val, jitter, hue):
    """Runs in a child process so that each measurement starts fresh (workers forked anew)."""
    code = r"""
import sys, time, torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T
root, workers, batches, val, jitter, hue = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1",
                                            sys.argv[5] == "1", float(sys.argv[6]))
cj = 0.4 if jitter else 0.0
torch.set_num_threads(1)
norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
tf = (T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm]) if val else
      T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + ([T.ColorJitter(cj, cj, cj, hue)] if jitter or hue else [])
                + [T.ToTensor(), norm]))
ds = datasets.ImageFolder(root + "/train", transform=tf)
ds = torch.utils.data.Subset(ds, list(range(len(ds))) * 100)  # epochs back to back, as the trainer's loader runs them
dl = DataLoader(ds, batch_size=64, shuffle=not val, num_workers=workers, drop_last=True,
                prefetch_factor=2 if workers else None, persistent_workers=False)
it = iter(dl)
for _ in range(2 * workers + 1):   # the workers started and their first batches drained
    next(it)
t0 = time.perf_counter()
n = 0
for _ in range(batches):
    n += next(it)[0].shape[0]
print(n / (time.perf_counter() - t0))
"""
    out = subprocess.run([sys.executable, "-c", code, root, str(workers), str(batches), "1" if val else "0",
                          "1" if jitter else "0", str(hue)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("torchvision side failed:\n" + out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def dali_rate(python, root, workers, batches, val):
    """NVIDIA DALI's CPU pipeline (device_id None: no GPU) of the same work, in its own interpreter
    (`--dali-python`: a venv with the nvidia-dali wheel; it is not a dependency of this project)."""
    code = r"""
import sys, time
from nvidia.dali import pipeline_def, fn, types
root, workers, batches, val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
mean, std = [0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255]

@pipeline_def(batch_size=64, num_threads=max(1, workers), device_id=None, prefetch_queue_depth=2)
def pipe():
    jpegs, labels = fn.readers.file(file_root=root + "/train", random_shuffle=not val, name="files")
    if val:
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=256, antialias=True)
        out = fn.crop_mirror_normalize(images, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW",
                                       mean=mean, std=std)
    else:
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=(224, 224), antialias=True)
        out = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std,
                                       mirror=fn.random.coin_flip())
    return out, labels

p = pipe()
p.build()
for _ in range(2 * max(1, workers) + 1):
    p.run()
t0 = time.perf_counter()
for _ in range(batches):
    p.run()
print(64 * batches / (time.perf_counter() - t0))
"""
    out = subprocess.run([python, "-c", code, root, str(workers), str(batches), "1" if val else "0"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("DALI side failed:\n" + out.stderr[-3000:])
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", default="build/trainer")
    ap.add_argument("--work", default="/tmp/bench_input")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--out", default="")
    ap.add_argument("--dali-python", default="", help="a python with nvidia-dali installed: adds DALI's CPU pipeline")
    ap.add_argument("--jitter", action="store_true",
                    help="training adds ColorJitter(0.4, 0.4, 0.4) (the shipped ImageNet config's augmentation) on both sides")
    ap.add_argument("--hue", type=float, default=0.0,
                    help="training adds ColorJitter's hue shift, uniform in [-H, H] (0 < H <= 0.5), on both sides")
    a = ap.parse_args()
    if not 0 <= a.hue <= 0.5:
        raise SystemExit("--hue: give 0 to 0.5 (a fraction of the hue circle)")
    if (a.jitter or a.hue) and a.dali_python:
        raise SystemExit("--jitter: DALI's pipeline here has no colour jitter; leave out --dali-python")
    make_folder(a.work, a.images, jobs=os.cpu_count() or 1)
    # bench-data's warm-up drains the loader's in-flight bound: data.prefetch (4) + workers, and one
    if a.images < 64 * (a.batches + 4 + max(int(w) for w in a.workers.split(",")) + 1):
        raise SystemExit("--images: the validation pass needs (batches + warm-up) x 64 images")
    cfg = os.path.join(a.work, "bench_input.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(train=os.path.join(a.work, "train"),
                              jitter=(", brightness: 0.4, contrast: 0.4, saturation: 0.4" if a.jitter else "") +
                              (", hue: %g" % a.hue if a.hue else "")))
    workers = [int(w) for w in a.workers.split(",")]
    rows = []
    for val in (False, True):
        nb = a.batches
        for w in workers:
            ours, theirs, dali, split = [], [], [], ""
            for _ in range(a.repeats):  # alternating: a slow moment of the host hits every side
                r, split = trainer_rate(a.trainer, cfg, w, nb, val)
                ours.append(r)
                theirs.append(torchvision_rate(a.work, w, nb, val, a.jitter, a.hue))
                if a.dali_python:
                    dali.append(dali_rate(a.dali_python, a.work, w, nb, val))
            rows.append((val, w, median(ours), median(theirs), median(dali) if dali else None, split, nb))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["Input pipeline, trainer bench-data vs torchvision DataLoader (%s; %s; %d JPEGs 500x375 q90, batch 64, "
             "medians of %d alternating rounds)" % (when, cpu_name(), a.images, a.repeats), "",
             "| pipeline | workers | batches | trainer samples/s | torchvision samples/s | trainer / torchvision | "
             "DALI CPU samples/s | trainer / DALI | trainer's time split |", "|---|---|---|---|---|---|---|---|---|"]
    for val, w, ours, theirs, dali, split, nb in rows:
        d = ("%.1f | %.2f" % (dali, ours / dali)) if dali else "- | -"
        lines.append("| %s | %d | %d | %.1f | %.1f | %.2f | %s | %s |" % ("validation (resize 256, centre crop 224)" if val
                     else "training (RandomResizedCrop 224, flip%s)" % ((", ColorJitter 0.4" if a.jitter else "") + (", hue %g" % a.hue if a.hue else "")), w, nb, ours, theirs, ours / theirs, d, split))
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
