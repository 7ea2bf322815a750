"""`trainer export` -> PyTorch: the exported file loads with load_state_dict(strict=True) into torchvision's
resnet18, into torchvision's VisionTransformer built from the file's model_config (a 1-channel conv_proj
swapped in, as torchvision hard-wires 3 channels) and into the nanoGPT-style reference
(tests/reference/nanogpt_ref.py), and gives the logits the C++ model gave on the same input.

The fixture (checkpoints, exports, inputs, C++ logits) is written by the test_ckpt case
"export interop fixture: ..."; this script runs it first. Exit 77 (skipped) when a prerequisite is missing.
"""
import json
import os
import subprocess
import sys

SKIP = 77


def main():
    try:
        import torch
        import torchvision
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    bin_path = os.environ.get("TRAINER_BIN", "")
    tmp = os.environ.get("TRAINER_TEST_TMP", "")
    src = os.environ.get("TRAINER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    test_ckpt = os.path.join(os.path.dirname(bin_path), "tests", "test_ckpt")
    if not bin_path or not tmp or not os.path.exists(test_ckpt):
        print(f"skipped: TRAINER_BIN / TRAINER_TEST_TMP not set or {test_ckpt} not built")
        return SKIP
    sys.path.insert(0, os.path.join(src, "tests", "reference"))
    try:
        from nanogpt_ref import GPT, GPTConfig
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP

    tmp = os.path.join(tmp, f"py_export_interop.{os.getpid()}")
    subprocess.run([test_ckpt, "export interop fixture: resnet18 + gpt + vit exports with reference logits"],
                   check=True, env=dict(os.environ, OMP_NUM_THREADS="1", TRAINER_SCRATCH_DIR=tmp))
    fixture = os.path.join(tmp, "ckpt_export_interop")
    torch.set_num_threads(1)

    def build(meta):
        cfg = json.loads(meta["model_config"])
        if meta["arch"] == "resnet":
            assert cfg["depth"] == 18 and cfg["stem"] == "imagenet", cfg
            return torchvision.models.resnet18(num_classes=cfg["num_classes"])
        if meta["arch"] == "vit":
            from torchvision.models.vision_transformer import VisionTransformer

            keys = ("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim", "dropout",
                    "attention_dropout", "num_classes")
            vit = VisionTransformer(**{k: cfg[k] for k in keys})
            if cfg["in_channels"] != 3:
                p = cfg["patch_size"]
                vit.conv_proj = torch.nn.Conv2d(cfg["in_channels"], cfg["hidden_dim"], kernel_size=p, stride=p)
            return vit
        fields = GPTConfig.__dataclass_fields__.keys()
        return GPT(GPTConfig(**{k: cfg[k] for k in fields}))

    failures = 0
    for arch in ("resnet18", "gpt", "vit"):
        io = load_file(os.path.join(fixture, f"{arch}_io.safetensors"))
        for dtype in ("fp32", "bf16"):
            path = os.path.join(fixture, f"{arch}_{dtype}.safetensors")
            with safe_open(path, "pt") as f:
                meta = f.metadata()
            model = build(meta)
            state = load_file(path)
            want = torch.float32 if dtype == "fp32" else torch.bfloat16
            assert all(t.dtype in (want, torch.int64) for t in state.values()), {k: t.dtype for k, t in state.items()}
            model.load_state_dict(state, strict=True)  # raises on any missing / unexpected / mis-shaped name
            model.eval()
            with torch.no_grad():
                logits = model(io["input"])
            expected = io[f"logits_{dtype}"]
            diff = (logits - expected).abs().max().item()
            scale = expected.abs().max().item()
            ok = logits.shape == expected.shape and diff <= 1e-5 * max(1.0, scale)
            print(f"{arch} {dtype}: logits {tuple(logits.shape)}, max |diff| {diff:.3g} (scale {scale:.3g}) "
                  f"{'ok' if ok else 'MISMATCH'}")
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
