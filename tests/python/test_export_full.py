"""`trainer export` of a dist.sharding: full run (ZeRO-3, 3 ranks: uneven shards) writes one whole
safetensors file that loads with load_state_dict(strict=True) into the nanoGPT-style reference
(tests/reference/nanogpt_ref.py), holds the weights a dist.sharding: none run of the same config
trained (to float rounding), and gives that module's logits. Exit 77 (skipped) when a prerequisite
is missing.
"""
import json
import os
import subprocess
import sys

SKIP = 77

# tests/dist/train_runs.hpp's tiny GPT (the sharding tests' model), 5 steps
TINY_GPT = """run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: gpt
  vocab_size: 32
  block_size: 16
  n_layer: 2
  n_head: 2
  n_embd: 32
  dropout: 0.0
  bias: true
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 1024
    val_samples: 32
train:
  batch_size: 8
  max_steps: 5
  device: cpu
  precision: fp32  # both runs alike: auto times bf16 and fp32, and a busy host can flip it
  threads: 1
  log_every: 1
optim:
  name: adamw
  lr: 0.003
  weight_decay: 0.0
dist:
  timeout_s: 60
log:
  progress: "off"
"""


def main():
    try:
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    bin_path = os.environ.get("TRAINER_BIN", "")
    tmp = os.environ.get("TRAINER_TEST_TMP", "")
    src = os.environ.get("TRAINER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    if not bin_path or not tmp:
        print("skipped: TRAINER_BIN / TRAINER_TEST_TMP not set")
        return SKIP
    sys.path.insert(0, os.path.join(src, "tests", "reference"))
    from nanogpt_ref import GPT, GPTConfig

    work = os.path.join(tmp, f"py_export_full.{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(TINY_GPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    exported = {}
    for mode in ("none", "full"):
        out = os.path.join(work, mode)
        run = subprocess.run([bin_path, "launch", "-n", "3", "--", "run", cfg, "--set", f"dist.sharding={mode}",
                              "--out-dir", out], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print(run.stdout[-3000:])
            print(f"FAILED: the {mode} run exited {run.returncode}")
            return 1
        if mode == "full" and "ZeRO-3" not in run.stdout:
            print(run.stdout[-3000:])
            print("FAILED: the full run did not say it ran ZeRO-3")
            return 1
        path = os.path.join(work, f"{mode}.safetensors")
        subprocess.run([bin_path, "export", os.path.join(out, "tiny", "checkpoints"), "--out", path], env=env,
                       check=True)
        exported[mode] = path

    torch.manual_seed(0)
    idx = torch.randint(0, 32, (2, 16))
    logits = {}
    for mode, path in exported.items():
        with safe_open(path, "pt") as f:
            meta = f.metadata()
        mc = json.loads(meta["model_config"])
        model = GPT(GPTConfig(**{k: mc[k] for k in GPTConfig.__dataclass_fields__.keys()}))
        state = load_file(path)
        model.load_state_dict(state, strict=True)  # raises on any missing / unexpected / mis-shaped name
        model.eval()
        with torch.no_grad():
            logits[mode] = model(idx)
        print(f"{mode}: {len(state)} tensors loaded strictly, logits {tuple(logits[mode].shape)}")
    a, b = load_file(exported["none"]), load_file(exported["full"])
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    diff = (logits["none"] - logits["full"]).abs().max().item()
    print(f"full vs none: max |weight diff| {worst:.3g}, max |logit diff| {diff:.3g}")
    if sorted(a) != sorted(b) or worst > 1e-5 or diff > 1e-4:
        print("FAILED: the full run's export differs from the none run's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
