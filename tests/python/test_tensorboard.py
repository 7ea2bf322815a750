"""TensorBoard event files written by `trainer run` (log.tensorboard: true), read back with the
tensorboard package's EventAccumulator: the tags and values must equal metrics.jsonl's records.
Exit 77 (skipped) when tensorboard is not installed."""
import json
import os
import shutil
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed: skipped")
    sys.exit(77)

import numpy as np

TRAINER = os.environ["TRAINER_BIN"]
TMP = os.path.join(os.environ.get("TRAINER_TEST_TMP", "/tmp"), "py_tensorboard")

CONFIG = """run: {name: tb, seed: 0}
model: {arch: gpt, vocab_size: 32, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16}
data: {format: synthetic, workers: 1, bytes_per_token: 1.5, synthetic: {num_samples: 128, val_samples: 16}}
train: {batch_size: 8, max_steps: 6, log_every: 2, eval_every: 3, device: cpu, threads: 1}
optim: {name: adamw, lr: 0.01}
log: {progress: off, tensorboard: true}
"""


def main():
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    cfg = os.path.join(TMP, "tb.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    out = subprocess.run([TRAINER, "run", cfg, "--out-dir", os.path.join(TMP, "runs")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    run = os.path.join(TMP, "runs", "tb")
    records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]

    tb_dir = os.path.join(run, "tb")
    files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1, files
    acc = EventAccumulator(tb_dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for t in ["train/loss", "train/lr", "train/grad_norm", "perf/samples_per_s", "perf/tokens_per_s",
              "perf/step_ms", "eval/loss", "eval/bpb", "eval/ppl", "memory/rss_mb"]:
        assert t in tags, (t, sorted(tags))
    assert "eval/accuracy" not in tags  # a language model reports no accuracy

    def check(tag, kind, key):
        want = [(r["step"], r[key]) for r in records if r["kind"] == kind]
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want], (tag, got, want)
        # simple_value is a float32
        np.testing.assert_allclose([v for _, v in got], [np.float32(v) for _, v in want], rtol=1e-6)

    check("train/loss", "train", "loss")
    check("train/lr", "train", "lr")
    check("perf/tokens_per_s", "train", "tokens_per_s")
    check("eval/loss", "eval", "loss")
    check("eval/bpb", "eval", "bpb")
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == [2, 4, 6], steps
    assert [e.step for e in acc.Scalars("eval/loss")] == [3, 6]
    print("ok: %d scalar tags, steps %s" % (len(tags), steps))


if __name__ == "__main__":
    main()
