"""Pipeline parallel's tied embeddings, end to end: a pp 2 run of the tiny GPT (dropout 0.1) for 20
steps says its first and last stage's copies of wte are bit for bit equal, and `trainer export` of its
checkpoint (parts) writes one file that loads with load_state_dict(strict=True) into the
nanoGPT-style reference (tests/reference/nanogpt_ref.py) and scores, on a fixed batch, what the
export of one process trained in the pipeline's micro-batches scores (loss within 1e-4 relative, the
same next-token accuracy). Exit 77 (skipped) when a prerequisite is missing.
"""
import json
import os
import subprocess
import sys

SKIP = 77

# test_export_full's tiny GPT (tests/dist/train_runs.hpp's) with dropout 0.1, 20 steps of 8 samples
from test_export_full import TINY_GPT as _BASE  # noqa: E402 (this folder is the script's path)

TINY_GPT = (_BASE.replace("  dropout: 0.0\n", "  dropout: 0.1\n")
            .replace("  max_steps: 5\n", "  max_steps: 20\n  global_batch_size: 8\n"))
assert "dropout: 0.1" in TINY_GPT and "max_steps: 20" in TINY_GPT

# one process in micro-batches of 2 (accumulation 4) draws the pipeline's dropout masks: pp 2 cuts each
# batch of 8 into 4 microbatches of 2 (models/unit_rng.hpp)
LAYOUTS = {"one": ["run", "{cfg}", "--set", "train.batch_size=2"],
           "pp2": ["launch", "-n", "2", "--", "run", "{cfg}", "--set", "dist.pipeline_parallel=2",
                   "--set", "dist.pipeline.microbatches=4"]}


def main():
    try:
        import torch
        import torch.nn.functional as F
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

    work = os.path.join(tmp, f"py_export_pp.{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(TINY_GPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torch.manual_seed(0)
    idx = torch.randint(0, 32, (16, 17))
    x, y = idx[:, :-1], idx[:, 1:]
    scores = {}
    for name, args in LAYOUTS.items():
        out = os.path.join(work, name)
        run = subprocess.run([bin_path] + [a.format(cfg=cfg) for a in args] + ["--out-dir", out], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print(run.stdout[-3000:])
            print(f"FAILED: the {name} run exited {run.returncode}")
            return 1
        if name == "pp2" and "the tied copies on the first and last stage are bit for bit equal" not in run.stdout:
            print(run.stdout[-3000:])
            print("FAILED: the pp 2 run did not find its tied copies equal after 20 steps")
            return 1
        path = os.path.join(work, f"{name}.safetensors")
        subprocess.run([bin_path, "export", os.path.join(out, "tiny", "checkpoints"), "--out", path], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        with safe_open(path, "pt") as f:
            mc = json.loads(f.metadata()["model_config"])
        model = GPT(GPTConfig(**{k: mc[k] for k in GPTConfig.__dataclass_fields__.keys()}))
        state = load_file(path)
        model.load_state_dict(state, strict=True)  # raises on any missing / unexpected / mis-shaped name
        model.eval()
        with torch.no_grad():
            logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item()
        acc = (logits.argmax(-1) == y).float().mean().item()
        scores[name] = (loss, acc)
        print(f"{name}: {len(state)} tensors loaded strictly; loss {loss:.6f}, next-token accuracy {acc:.4f}")
    (l1, a1), (l2, a2) = scores["one"], scores["pp2"]
    if abs(l1 - l2) > 1e-4 * l1 or a1 != a2:
        print("FAILED: the pp 2 export does not score as the one-process export")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
