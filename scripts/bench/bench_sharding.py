#!/usr/bin/env python3
"""dist.sharding side by side on this machine: a GPT of ~57 M parameters (8 layers, width 768) on
synthetic tokens, at 2 and 4 ranks (`trainer launch`), in every implemented mode; throughput
relative to `none` and rank 0's peak RSS, plus PyTorch's FSDP2 (`fully_shard`, Gloo, CPU) on the
same model (tests/reference/nanogpt_ref.py) under torchrun where it runs.

    scripts/bench/bench_sharding.py [--trainer build/trainer] [--steps 8] [--worlds 2,4] [--no-fsdp2]

Prints a Markdown table (docs/PERFORMANCE.md, "Sharded data parallel") and writes the raw figures
to <work>/sharding.json. Targets: optimizer >= 0.95 of none, peak RSS of `gradients` below `none`'s,
`full` (ZeRO-3) holding about 1/N of the parameters, gradients and optimizer state outside a gathered
unit (the parameter column; its all-gathers per unit cost throughput, which the table shows)."""
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
MODEL = {"arch": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 8, "n_head": 12, "n_embd": 768,
         "dropout": 0.0, "bias": True}
MODES = ["none", "optimizer", "gradients", "full"]


def shared_inputs(work, world, batch):
    """What the trainer and FSDP2 both start from, so that their losses can be compared: the nanoGPT
    reference's initial weights (seed 1) as safetensors, and a token file of exactly one global batch
    of windows (batch x world), so that every step trains on all of them, whatever order each side's
    sampler deals them to the ranks in (the loss and the averaged gradient are means over all)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
    from nanogpt_ref import GPT, GPTConfig
    from ref_models import state_for_trainer
    init = os.path.join(work, "init.safetensors")
    if not os.path.exists(init):
        torch.manual_seed(1)
        model = GPT(GPTConfig(vocab_size=MODEL["vocab_size"], block_size=MODEL["block_size"], n_layer=MODEL["n_layer"],
                              n_head=MODEL["n_head"], n_embd=MODEL["n_embd"], dropout=0.0, bias=MODEL["bias"]))
        save_file(state_for_trainer(model), init)
    tokens = os.path.join(work, f"tokens-w{world}.bin")
    rng = np.random.default_rng(world)
    rng.integers(0, MODEL["vocab_size"], batch * world * MODEL["block_size"] + 1, dtype=np.uint16).tofile(tokens)
    return init, tokens


def config(out_dir, steps, batch, init, tokens):
    return {
        "run": {"name": "shard", "out_dir": out_dir, "seed": 1},
        "model": dict(MODEL, init={"from": init}),
        "data": {"format": "tokens", "path": tokens, "val_path": tokens, "workers": 1},
        "train": {"batch_size": batch, "max_steps": steps, "precision": "fp32", "device": "cpu", "threads": 1,
                  "log_every": 1, "eval_every": 0, "eval_steps": 1},
        # no weight decay: torch's AdamW would decay every parameter, the trainer's not biases and norms
        "optim": {"name": "adamw", "lr": 3e-4, "weight_decay": 0.0},
        "schedule": {"name": "constant"},
        "checkpoint": {"every_steps": 0, "keep_last": 1},
        "log": {"progress": "off", "tensorboard": False},
    }


def run_trainer(trainer, world, mode, work, steps, batch, warmup):
    init, tokens = shared_inputs(work, world, batch)
    run_root = os.path.join(work, f"w{world}-{mode}")
    shutil.rmtree(run_root, ignore_errors=True)  # an earlier run's records must not count
    os.makedirs(run_root)
    cfg = os.path.join(run_root, "shard.yaml")
    with open(cfg, "w") as f:
        f.write(to_yaml(config(os.path.join(run_root, "runs"), steps, batch, init, tokens)) + "\n")
    log = os.path.join(run_root, "log.txt")
    t0 = time.perf_counter()
    with open(log, "w") as out:
        # the final checkpoint is written too: keep it out of the throughput (records only)
        p = subprocess.run([trainer, "launch", "-n", str(world), "--", "run", cfg, "--force", "--resume", "never",
                            "--set", f"dist.sharding={mode}"], stdout=out, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise RuntimeError(f"{mode} at {world} ranks exited with {p.returncode}: see {log}")
    recs = read_train_records(os.path.join(run_root, "runs", "shard", "metrics.jsonl"))
    s = summarise_records(recs, warmup)
    last = recs[-1]
    for k in ("param_bytes", "grad_bytes", "optim_state_bytes"):
        s[k] = last.get(k)
    s["wall_s"] = time.perf_counter() - t0
    s["losses"] = [r["loss"] for r in recs]
    return s


def run_fsdp2(world, work, steps, batch, warmup):
    init, tokens = shared_inputs(work, world, batch)
    venv = os.environ.get("TRAINER_VENV", os.path.expanduser("~/.cache/trainer/venv-torch-2.11.0"))
    out = os.path.join(work, f"fsdp2-w{world}.json")
    cmd = [os.path.join(venv, "bin", "torchrun"), "--nproc_per_node", str(world), "--master_addr", "127.0.0.1",
           "--master_port", str(29500 + world), os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "fsdp2_worker.py"),
           "--steps", str(steps), "--batch", str(batch), "--warmup", str(warmup), "--out", out,
           "--model", json.dumps(MODEL), "--init", init, "--tokens", tokens]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    with open(os.path.join(work, f"fsdp2-w{world}.log"), "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        errors = [l for l in p.stdout.splitlines() if "Error" in l or "error:" in l]
        return {"error": (errors[-1] if errors else f"exit {p.returncode}") + f" (see {work}/fsdp2-w{world}.log)"}
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default=os.path.join(REPO, "build", "trainer"))
    ap.add_argument("--work", default="/tmp/trainer-bench-sharding")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--no-fsdp2", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = {}
    for world in [int(w) for w in a.worlds.split(",")]:
        for mode in a.modes.split(","):
            results[f"{world}/{mode}"] = run_trainer(a.trainer, world, mode, a.work, a.steps, a.batch, a.warmup)
            print(f"{world} ranks, {mode}: {results[f'{world}/{mode}']}", file=sys.stderr, flush=True)
        if not a.no_fsdp2:
            results[f"{world}/fsdp2"] = run_fsdp2(world, a.work, a.steps, a.batch, a.warmup)
            print(f"{world} ranks, fsdp2: {results[f'{world}/fsdp2']}", file=sys.stderr, flush=True)
    for world in [int(w) for w in a.worlds.split(",")]:
        f, n = results.get(f"{world}/fsdp2", {}), results[f"{world}/none"]
        if "losses" in f:
            worst = max(abs(x - y) / abs(y) for x, y in zip(f["losses"], n["losses"]))
            f["loss_rel_diff"] = worst
            print(f"{world} ranks: FSDP2's losses against the trainer's none over {len(f['losses'])} steps: largest "
                  f"relative difference {worst:.2e}", file=sys.stderr, flush=True)
    with open(os.path.join(a.work, "sharding.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("| ranks | mode | samples/s | vs none | rank 0 peak RSS MiB | vs none | parameters MiB | optimizer state MiB "
          "| gradients MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        world, mode = key.split("/")
        base = results[f"{world}/none"]
        if "error" in r:
            print(f"| {world} | {mode} | did not run: {r['error']} | | | | | | |")
            continue
        mib = lambda v: f"{v / 2**20:.0f}" if v is not None else "-"
        print(f"| {world} | {mode} | {r['samples_per_s']:.2f} | {r['samples_per_s'] / base['samples_per_s']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / base['peak_rss_mb']:.2f} | "
              f"{mib(r.get('param_bytes'))} | {mib(r.get('optim_state_bytes'))} | {mib(r.get('grad_bytes'))} |")


if __name__ == "__main__":
    main()
