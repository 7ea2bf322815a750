#!/usr/bin/env python3
"""Tensor parallel side by side on this machine (issue 24): a GPT of ~43 M parameters (6 layers, width
768) on one global batch of synthetic tokens, at 2 and 4 ranks (`trainer launch`), in the layouts
dp 2, tp 2, tp 2 + sequence parallel (2 ranks) and dp 4, dp 2 x tp 2, dp 2 x tp 2 with
dist.sharding full (4 ranks), all with the same global batch; beside them PyTorch's own tensor
parallel (tp_worker.py: parallelize_module with Colwise / Rowwise / SequenceParallel over a
DeviceMesh, Gloo, CPU; FSDP2 on the dp dimension for the sharded 2-D case) under torchrun on the same
initial weights and tokens. Losses are compared step by step (the issue's tolerance: 1e-6 relative
for 10 AdamW steps with grad_clip), throughput as a ratio.

A second, activation-heavy model (4 layers, width 512, 128 tokens a sequence) measures what sequence
parallel saves at tp 2: for the trainer the growth of rank 0's peak RSS from a batch of 4 to a batch
of 32 sequences (the activations; the weights and optimizer state do not grow), for PyTorch the
bytes its forward saves for backward (saved_tensors_hooks) and the same RSS growth.

    scripts/bench/bench_tp.py [--trainer build/trainer] [--steps 10] [--only throughput|activations]

Prints Markdown tables (docs/PERFORMANCE.md, "Tensor parallel") and writes the raw figures to
<work>/tp.json."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_side import read_train_records, summarise_records, to_yaml  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIG = {"arch": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 6, "n_head": 12, "n_embd": 768,
       "dropout": 0.0, "bias": True}
# attention's S x S scores are not cut by sequence parallel (they live in the head-parallel region):
# a short sequence against the width keeps them from hiding what it saves (Megatron's 5as/h term)
ACT = {"arch": "gpt", "vocab_size": 256, "block_size": 128, "n_layer": 4, "n_head": 8, "n_embd": 512,
       "dropout": 0.0, "bias": True}
# (name, world, tp, sequence parallel, dist.sharding) for the trainer; PyTorch runs the tp > 1 ones
LAYOUTS = [("dp2", 2, 1, False, "none"), ("tp2", 2, 2, False, "none"), ("tp2+sp", 2, 2, True, "none"),
           ("dp4", 4, 1, False, "none"), ("dp2xtp2", 4, 2, False, "none"), ("dp2xtp2+full", 4, 2, False, "full")]
VENV = os.environ.get("TRAINER_VENV", os.path.expanduser("~/.cache/trainer/venv-torch-2.11.0"))


def shared_inputs(work, model, global_batch, tag):
    """The nanoGPT reference's initial weights (seed 1) as safetensors and a token file of exactly one
    global batch of windows, so that every step of every layout trains on all of them (the loss and
    the averaged gradient are means over all, whatever order each side deals them to the ranks in)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
    from nanogpt_ref import GPT, GPTConfig
    from ref_models import state_for_trainer
    init = os.path.join(work, f"init-{tag}.safetensors")
    if not os.path.exists(init):
        torch.manual_seed(1)
        m = GPT(GPTConfig(**{k: v for k, v in model.items() if k != "arch"}))
        save_file(state_for_trainer(m), init)
    tokens = os.path.join(work, f"tokens-{tag}-b{global_batch}.bin")
    rng = np.random.default_rng(global_batch)
    rng.integers(0, model["vocab_size"], global_batch * model["block_size"] + 1, dtype=np.uint16).tofile(tokens)
    return init, tokens


def trainer_config(out_dir, model, steps, batch, init, tokens, tp, sp, sharding):
    return {
        "run": {"name": "tp", "out_dir": out_dir, "seed": 1},
        "model": dict(model, init={"from": init}),
        "data": {"format": "tokens", "path": tokens, "val_path": tokens, "workers": 1},
        "train": {"batch_size": batch, "max_steps": steps, "precision": "fp32", "device": "cpu", "threads": 1,
                  "log_every": 1, "eval_every": 0, "eval_steps": 1, "grad_clip": 1.0},
        "optim": {"name": "adamw", "lr": 3e-4, "weight_decay": 0.0},
        "schedule": {"name": "constant"},
        "dist": {"tensor_parallel": tp, "sequence_parallel": sp, "sharding": sharding},
        "checkpoint": {"every_steps": 0, "keep_last": 1},
        "log": {"progress": "off", "tensorboard": False},
    }


def run_trainer(a, name, world, tp, sp, sharding, model, global_batch, tag, steps):
    init, tokens = shared_inputs(a.work, model, global_batch, tag)
    root = os.path.join(a.work, f"trainer-{tag}-{name}-b{global_batch}")
    shutil.rmtree(root, ignore_errors=True)  # an earlier run's records must not count
    os.makedirs(root)
    cfg = os.path.join(root, "tp.yaml")
    dp = world // tp
    with open(cfg, "w") as f:
        f.write(to_yaml(trainer_config(os.path.join(root, "runs"), model, steps, global_batch // dp, init, tokens,
                                       tp, sp, sharding)) + "\n")
    log = os.path.join(root, "log.txt")
    t0 = time.perf_counter()
    with open(log, "w") as out:
        p = subprocess.run([a.trainer, "launch", "-n", str(world), "--", "run", cfg, "--force", "--resume", "never"],
                           stdout=out, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}, see {log}"}
    recs = read_train_records(os.path.join(root, "runs", "tp", "metrics.jsonl"))
    s = summarise_records(recs, a.warmup)
    s["wall_s"] = time.perf_counter() - t0
    s["losses"] = [r["loss"] for r in recs]
    s["tp_comm_ms"] = max((r.get("tp_comm_ms", 0.0) for r in recs[a.warmup:]), default=0.0)
    return s


def run_pytorch(a, name, world, tp, sp, fsdp, model, global_batch, tag, steps):
    init, tokens = shared_inputs(a.work, model, global_batch, tag)
    out = os.path.join(a.work, f"pytorch-{tag}-{name}-b{global_batch}.json")
    cmd = [os.path.join(VENV, "bin", "torchrun"), "--nproc_per_node", str(world), "--master_addr", "127.0.0.1",
           "--master_port", str(29600 + world), os.path.join(os.path.dirname(os.path.abspath(__file__)), "tp_worker.py"),
           "--steps", str(steps), "--batch", str(global_batch // (world // tp)), "--tp", str(tp),
           "--warmup", str(a.warmup), "--out", out, "--model", json.dumps(model), "--init", init, "--tokens", tokens]
    cmd += ["--sequence-parallel"] if sp else []
    cmd += ["--fsdp"] if fsdp else []
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(out + ".log", "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        errors = [l for l in p.stdout.splitlines() if "Error" in l or "error:" in l]
        return {"error": (errors[-1] if errors else f"exit {p.returncode}") + f" (see {out}.log)"}
    with open(out) as f:
        return json.load(f)


def rel_diff(xs, ys):
    return max(abs(x - y) / abs(y) for x, y in zip(xs, ys))


def throughput(a, results):
    print("| ranks | layout | trainer samples/s | vs dp | rank 0 peak RSS MiB | tp_comm_ms | PyTorch samples/s "
          "| trainer / PyTorch | losses vs PyTorch | losses vs dp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, world, tp, sp, sharding in LAYOUTS:
        t = results[f"trainer/{name}"] = run_trainer(a, name, world, tp, sp, sharding, BIG, a.global_batch, "big",
                                                     a.steps)
        py = {}
        if tp > 1:
            py = results[f"pytorch/{name}"] = run_pytorch(a, name, world, tp, sp, sharding == "full", BIG,
                                                          a.global_batch, "big", a.steps)
        print(f"{name}: trainer {t}\n  pytorch {py}", file=sys.stderr, flush=True)
        base = results.get(f"trainer/dp{world}", {})
        if "error" in t:
            print(f"| {world} | {name} | did not run: {t['error']} | | | | | | | |")
            continue
        vs_dp = f"{t['samples_per_s'] / base['samples_per_s']:.2f}" if "samples_per_s" in base else "-"
        dl = f"{rel_diff(t['losses'], base['losses']):.1e}" if "losses" in base and base is not t else "-"
        if "losses" in py:
            ratio, pl = f"{t['samples_per_s'] / py['samples_per_s']:.2f}", f"{rel_diff(t['losses'], py['losses']):.1e}"
            ps = f"{py['samples_per_s']:.2f}"
        else:
            ratio = pl = ps = py.get("error", "-")
        print(f"| {world} | {name} | {t['samples_per_s']:.2f} | {vs_dp} | {t['peak_rss_mb']:.0f} | "
              f"{t['tp_comm_ms']:.0f} | {ps} | {ratio} | {pl} | {dl} |", flush=True)


def activations(a, results):
    """Sequence parallel's saving at tp 2 on the activation-heavy model (5 steps: memory, not speed)."""
    rows = []
    for sp in (False, True):
        name = "tp2+sp" if sp else "tp2"
        r = {}
        for b in (4, 32):  # global batch 4 and 32 at tp 2 (dp 1): the growth is 28 sequences' activations
            r[f"trainer{b}"] = run_trainer(a, name, 2, 2, sp, "none", ACT, b, "act", 5)
            r[f"pytorch{b}"] = run_pytorch(a, name, 2, 2, sp, False, ACT, b, "act", 5)
        results[f"activations/{name}"] = r
        print(f"activations {name}: {r}", file=sys.stderr, flush=True)
        rows.append((name, r))
    print("\n| layout | trainer RSS growth 4 -> 32 sequences MiB | vs tp2 | PyTorch RSS growth MiB | vs tp2 "
          "| PyTorch saved activations MiB (32) | vs tp2 |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, r in rows:
        try:
            g_t = r["trainer32"]["peak_rss_mb"] - r["trainer4"]["peak_rss_mb"]
            g_p = r["pytorch32"]["peak_rss_mb"] - r["pytorch4"]["peak_rss_mb"]
            s_p = r["pytorch32"]["saved_activation_bytes"] / 2**20
        except KeyError:
            print(f"| {name} | did not run: {r} | | | | | |")
            continue
        base = base or (g_t, g_p, s_p)
        print(f"| {name} | {g_t:.0f} | {g_t / base[0]:.2f} | {g_p:.0f} | {g_p / base[1]:.2f} | {s_p:.0f} | "
              f"{s_p / base[2]:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default=os.path.join(REPO, "build", "trainer"))
    ap.add_argument("--work", default="/tmp/trainer-bench-tp")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--only", choices=["throughput", "activations"])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = {}
    if a.only != "activations":
        throughput(a, results)
    if a.only != "throughput":
        activations(a, results)
    with open(os.path.join(a.work, "tp.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
