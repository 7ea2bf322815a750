"""tests/reference/golden/recipes_ref.safetensors (the PyTorch / torchvision references of label
smoothing, soft-target cross-entropy, resized_crop and the ColorJitter adjustments that the C++
tests read) still holds what the installed torch and torchvision compute: every tensor is recomputed
by tests/reference/make_recipes_ref.py and must be equal (float tensors to 1e-6 relative, the uint8
images exactly). Exit 77 (skip) when torchvision or safetensors is missing.
"""
import os
import sys

try:
    import torch
    import torchvision  # noqa: F401
    from safetensors.torch import load_file
except ImportError as e:  # pragma: no cover
    print(f"skipping: {e}")
    sys.exit(77)

SRC = os.environ.get("TRAINER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import make_recipes_ref  # noqa: E402


def main():
    committed = load_file(os.path.join(SRC, "tests", "reference", "golden", "recipes_ref.safetensors"))
    fresh = make_recipes_ref.build()
    bad = []
    if set(committed) != set(fresh):
        bad.append(f"names differ: only committed {sorted(set(committed) - set(fresh))}, "
                   f"only recomputed {sorted(set(fresh) - set(committed))}")
    for name in sorted(set(committed) & set(fresh)):
        a, b = committed[name], fresh[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            bad.append(f"{name}: {a.dtype} {tuple(a.shape)} committed, {b.dtype} {tuple(b.shape)} now")
        elif a.is_floating_point():
            if not torch.allclose(a.double(), b.double(), rtol=1e-6, atol=0):
                bad.append(f"{name}: max difference {(a.double() - b.double()).abs().max().item()}")
        elif not torch.equal(a, b):
            bad.append(f"{name}: {(a != b).sum().item()} elements differ")
    for line in bad:
        print(line)
    print(f"{len(committed)} reference tensors, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
