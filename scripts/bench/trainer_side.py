"""The trainer's side of a benchmark: write the workload's config, run `trainer run`, and read its
throughput and memory from <run dir>/metrics.jsonl (the contract of docs/METRICS.md: train records
with step, samples_per_s, step_ms, data_wait_ms, compute_ms, optim_ms, peak_rss_mb, ...)."""
import json
import os
import shutil
import subprocess
import time

from stats import median, steady


class TrainerRunError(RuntimeError):
    pass


def _yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid YAML double-quoted scalar


def to_yaml(tree, indent=0):
    """Nested dicts of scalars and lists as block YAML (the few shapes a config needs)."""
    lines = []
    for k, v in tree.items():
        if isinstance(v, dict):
            lines.append(" " * indent + f"{k}:")
            lines.append(to_yaml(v, indent + 2))
        else:
            lines.append(" " * indent + f"{k}: {_yaml_scalar(v)}")
    return "\n".join(lines)


def trainer_config(w, out_dir, init_from=None):
    """The RunConfig tree that runs workload `w` on synthetic data of the same shape as the reference's."""
    model = dict(w["model"])
    if model["arch"] == "resnet":
        model.setdefault("stem", "cifar" if model["depth"] not in (18, 34, 50, 101, 152) else "imagenet")
    if init_from:
        model["init_from"] = init_from
    data = {"format": "synthetic", "workers": w["data_workers"],
            "synthetic": {"num_samples": w["num_samples"], "val_samples": w["batch_size"]}}
    if model["arch"] == "resnet":
        data["synthetic"]["image_size"] = w["image_size"]
        # fixed statistics (about those of the synthetic pixels, on the 0-1 scale): no startup pass
        # over the training split to compute them, and inputs of unit scale like the reference's
        c = model["in_channels"]
        data["normalize"] = {"mode": "mean_std", "mean": [0.29] * c, "std": [0.16] * c}
    return {
        "run": {"name": w["name"], "out_dir": out_dir, "seed": w["seed"]},
        "model": model,
        "data": data,
        "train": {"batch_size": w["batch_size"], "max_steps": w["steps"], "precision": w["precision"],
                  "device": w["device"], "threads": w["threads"], "log_every": w["log_every"], "eval_every": 0,
                  "eval_steps": 1, "cuda_graphs": bool(w.get("cuda_graphs", False))},
        "optim": dict(w["optim"]),
        "schedule": {"name": "constant"},
        "checkpoint": {"every_steps": 0, "keep_last": 1},
        "log": {"progress": "off", "tensorboard": False},
    }


def read_train_records(metrics_path):
    """The train records of a metrics.jsonl, in order; a clear error if the file is missing or bad."""
    if not os.path.exists(metrics_path):
        raise TrainerRunError(f"{metrics_path}: no metrics file (did the run start training?)")
    records = []
    with open(metrics_path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise TrainerRunError(f"{metrics_path}:{n}: not JSON ({e})") from None
            if r.get("kind") == "train":
                for key in ("step", "samples_per_s"):
                    if key not in r:
                        raise TrainerRunError(f"{metrics_path}:{n}: train record without '{key}'")
                records.append(r)
    if not records:
        raise TrainerRunError(f"{metrics_path}: no train records")
    return records


def summarise_records(records, warmup):
    """Median throughput and timing split over the records after the warm-up, peak memory of the run."""
    intervals, prev = [], 0
    for r in records:
        intervals.append(dict(r, steps=r["step"] - prev))
        prev = r["step"]
    kept = steady(intervals, warmup)
    out = {"samples_per_s": median([r["samples_per_s"] for r in kept]), "intervals": len(kept),
           "final_loss": records[-1].get("loss")}
    for key in ("tokens_per_s", "step_ms", "data_wait_ms", "compute_ms", "optim_ms", "comm_ms", "mfu"):
        values = [r[key] for r in kept if key in r]
        if values:
            out[key] = median(values)
    for key in ("peak_rss_mb", "cuda_peak_allocated_mb", "cuda_reserved_mb"):
        values = [r[key] for r in records if key in r]  # high-water marks: the largest is the run's peak
        if values:
            out[key] = max(values)
    return out


def run_trainer(trainer, args, run_dir, warmup, log_path, timeout_s=900, env=None):
    """Runs `trainer run ARGS...`; returns the summary of <run_dir>/metrics.jsonl and the wall time."""
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            p = subprocess.run([trainer, "run", *args], stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                               env=env)
        except subprocess.TimeoutExpired:
            raise TrainerRunError(f"trainer ran past {timeout_s} s (log: {log_path})") from None
        except OSError as e:
            raise TrainerRunError(f"cannot start {trainer}: {e}") from None
    if p.returncode != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-6:]).strip()
        raise TrainerRunError(f"trainer exited with {p.returncode} (log: {log_path}):\n{tail}")
    out = summarise_records(read_train_records(os.path.join(run_dir, "metrics.jsonl")), warmup)
    out["wall_s"] = time.perf_counter() - t0
    return out


def run_workload(trainer, w, work_dir, init_from=None, env=None):
    """Writes the workload's config into work_dir and runs it; the run directory is fresh each time."""
    os.makedirs(work_dir, exist_ok=True)
    runs = os.path.join(work_dir, "runs")
    cfg_path = os.path.join(work_dir, f"{w['name']}.yaml")
    with open(cfg_path, "w") as f:
        f.write(f"# bench_train.py workload {w['name']}\n" + to_yaml(trainer_config(w, runs, init_from)) + "\n")
    run_dir = os.path.join(runs, w["name"])
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    return run_trainer(trainer, [cfg_path], run_dir, w["warmup"], os.path.join(work_dir, f"{w['name']}.log"), env=env)
