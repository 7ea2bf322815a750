"""`trainer export` of a dist.tensor_parallel: 2 run (2 ranks, a vocabulary of 33 padded to 34) writes
the global tensors under nanoGPT's names, padding dropped: the file loads with
load_state_dict(strict=True) into the nanoGPT-style reference (tests/reference/nanogpt_ref.py), holds
the weights a one-process run of the same config trained (to float rounding: SGD, see TINY_GPT), and gives that
module's logits. Exit 77 (skipped) when a prerequisite is missing.
"""
import json
import os
import sys

from tp_export_runs import export_single_and_tp

SKIP = 77

# tests/dist/train_runs.hpp's tiny GPT (the sharding tests' model), 5 steps
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_export_full import TINY_GPT as _FULL  # noqa: E402  (the same tiny GPT)

# SGD with momentum, not AdamW: Adam's first steps move a weight by about lr whatever its gradient's size,
# so a gradient near zero whose sign the tp run's summation order flips moves that weight by up to
# 2 lr (CI measured 1.06e-5 on one host); SGD moves it by lr x the gradient's rounding, and a weight in
# the wrong place (a layout error) still differs by its own size (~0.02), far above the bound.
TINY_GPT = _FULL.replace("vocab_size: 32", "vocab_size: 33").replace(  # odd: padded to 34 at tp 2
    "name: adamw\n  lr: 0.003", "name: sgd\n  lr: 0.1\n  momentum: 0.9")
assert "vocab_size: 33" in TINY_GPT and "name: sgd" in TINY_GPT


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

    work = os.path.join(tmp, f"py_export_tp.{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(TINY_GPT)
    exported = export_single_and_tp(bin_path, work, cfg)
    if exported is None:
        return 1

    torch.manual_seed(0)
    idx = torch.randint(0, 33, (2, 16))
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
    a, b = load_file(exported["single"]), load_file(exported["tp"])
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    diff = (logits["single"] - logits["tp"]).abs().max().item()
    print(f"tp vs single: max |weight diff| {worst:.3g}, max |logit diff| {diff:.3g}")
    if b["transformer.wte.weight"].shape[0] != 33:
        print("FAILED: the tp export kept the vocabulary padding")
        return 1
    if sorted(a) != sorted(b) or worst > 1e-5 or diff > 1e-4:
        print("FAILED: the tp run's export differs from the single run's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
