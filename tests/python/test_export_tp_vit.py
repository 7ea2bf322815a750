"""`trainer export` of a dist.tensor_parallel: 2 ViT run (2 ranks: in_proj split by head groups,
out_proj / mlp.3 by columns, mlp.0 by rows) writes the global tensors under torchvision's names: the
file loads with load_state_dict(strict=True) into torchvision's VisionTransformer, holds the weights a
one-process run of the same config trained (to float rounding: SGD with momentum, whose steps are lr x
the gradient, so rounding stays rounding; AdamW's first steps are about lr whatever the gradient, and
turned the rounding noise of in_proj_bias's key block, whose gradient is zero, into 1e-5 differences)
and gives that module's logits.
Exit 77 (skipped) when a prerequisite is missing.
"""
import json
import os
import sys

from tp_export_runs import export_single_and_tp

SKIP = 77

# tests/dist/test_tp_train.cpp's tiny ViT (4 patches + the class token, 2 heads), 5 steps
TINY_VIT = """run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: vit
  in_channels: 1
  num_classes: 4
  image_size: 8
  patch_size: 4
  num_layers: 2
  num_heads: 2
  hidden_dim: 16
  mlp_dim: 32
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 256
    val_samples: 16
    image_size: 8
train:
  batch_size: 8
  max_steps: 5
  device: cpu
  precision: fp32  # both runs alike: auto times bf16 and fp32, and a busy host can flip it
  threads: 1
  log_every: 1
optim:
  name: sgd
  lr: 0.1
  momentum: 0.9
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
        from torchvision.models.vision_transformer import VisionTransformer
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    bin_path = os.environ.get("TRAINER_BIN", "")
    tmp = os.environ.get("TRAINER_TEST_TMP", "")
    if not bin_path or not tmp:
        print("skipped: TRAINER_BIN / TRAINER_TEST_TMP not set")
        return SKIP
    work = os.path.join(tmp, f"py_export_tp_vit.{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "tiny_vit.yaml")
    with open(cfg, "w") as f:
        f.write(TINY_VIT)
    exported = export_single_and_tp(bin_path, work, cfg)
    if exported is None:
        return 1

    torch.manual_seed(0)
    images = torch.randn(3, 1, 8, 8)
    logits = {}
    for mode, path in exported.items():
        with safe_open(path, "pt") as f:
            mc = json.loads(f.metadata()["model_config"])
        keys = ("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim", "dropout",
                "attention_dropout", "num_classes")
        model = VisionTransformer(**{k: mc[k] for k in keys})
        p = mc["patch_size"]
        model.conv_proj = torch.nn.Conv2d(mc["in_channels"], mc["hidden_dim"], kernel_size=p, stride=p)
        state = load_file(path)
        model.load_state_dict(state, strict=True)  # raises on any missing / unexpected / mis-shaped name
        model.eval()
        with torch.no_grad():
            logits[mode] = model(images)
        print(f"{mode}: {len(state)} tensors loaded strictly, logits {tuple(logits[mode].shape)}")
    a, b = load_file(exported["single"]), load_file(exported["tp"])
    worst = max((a[k] - b[k]).abs().max().item() for k in a)  # every weight, in_proj_bias's key block too
    diff = (logits["single"] - logits["tp"]).abs().max().item()
    print(f"tp vs single: max |weight diff| {worst:.3g}, max |logit diff| {diff:.3g}")
    if sorted(a) != sorted(b) or worst > 1e-5 or diff > 1e-4:
        print("FAILED: the tp run's export differs from the single run's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
