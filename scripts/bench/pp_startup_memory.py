#!/usr/bin/env python3
"""Host memory of a pipeline rank: the largest rank's peak RSS over a short run at pp P, beside the
whole model's fp32 bytes, on the CPU.

A pipeline rank that built the whole model before releasing its other stages' weights would hold the
whole model at start-up; one that draws the other units and drops them (models/partial_build.hpp)
holds its stages plus one unit. The run trains one step of SGD with everything but ln_f frozen
(train.freeze), so the step holds no gradients or optimizer state and the start-up is the peak: the
peak RSS shows which of the two start-ups happened.

    python3 scripts/bench/pp_startup_memory.py [--trainer build/trainer] [--layers 24] [--embd 1024]
                                               [--pp 4]

Prints one line per run: the layout, rank 0's peak RSS at its first step (peak_rss_mb of the train
record: start-up and the step), the largest peak RSS of its processes over the whole run, the final
checkpoint's write included (ru_maxrss of the launcher's waited-for descendants), and the whole
model's parameters in fp32.
"""
import json
import argparse
import os
import resource
import subprocess
import sys
import tempfile

CONFIG = """run: {{name: mem, seed: 1}}
model: {{arch: gpt, vocab_size: 50304, block_size: 64, n_layer: {layers}, n_head: 16, n_embd: {embd}, dropout: 0.0}}
data: {{format: synthetic, workers: 1, synthetic: {{num_samples: 64, val_samples: 8}}}}
train: {{batch_size: 4, max_steps: 1, device: cpu, threads: 1, precision: fp32, log_every: 1, eval_every: 0}}
optim: {{name: sgd, lr: 0.01, momentum: 0.0, weight_decay: 0.0}}
checkpoint: {{every_steps: 0}}
log: {{progress: "off"}}
"""


def peak_rss_mb(cmd, log):
    """The largest ru_maxrss (MiB) among the waited-for descendants of `cmd`, run in a fresh child."""
    probe = ("import resource, subprocess, sys; "
             "r = subprocess.run(sys.argv[1:], stdout=open(%r, 'w'), stderr=subprocess.STDOUT); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)" % log)
    out = subprocess.run([sys.executable, "-c", probe] + cmd, capture_output=True, text=True, check=True)
    rc, kib = out.stdout.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; log: {log}")
    return int(kib) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "trainer"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--embd", type=int, default=1024)
    ap.add_argument("--pp", type=int, default=4)
    args = ap.parse_args()
    params = 50304 * args.embd + 64 * args.embd + args.layers * (12 * args.embd ** 2 + 13 * args.embd) + 2 * args.embd
    whole_mb = params * 4 / 2 ** 20
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "mem.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(layers=args.layers, embd=args.embd))
        for p in (1, args.pp):
            run = ["run", cfg, "--out-dir", os.path.join(tmp, f"pp{p}"), "--set", r"train.freeze=[h\., wte, wpe]"]
            cmd = [args.trainer] + (run if p == 1 else ["launch", "-n", str(p), "--"] + run +
                                    ["--set", f"dist.pipeline_parallel={p}"])
            mb = peak_rss_mb(cmd, os.path.join(tmp, f"pp{p}.log"))
            with open(os.path.join(tmp, f"pp{p}", "mem", "metrics.jsonl")) as f:
                first = next(r for r in map(json.loads, f) if r.get("kind") == "train")
            print(f"pp {p}: rank 0's peak RSS at step 1 {first['peak_rss_mb']:.0f} MiB, the largest process's "
                  f"over the run {mb:.0f} MiB; the whole model {whole_mb:.0f} MiB in fp32 "
                  f"({params / 1e6:.0f} M parameters)", flush=True)


if __name__ == "__main__":
    main()
