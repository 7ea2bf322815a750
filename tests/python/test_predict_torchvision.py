"""`trainer predict` on an image folder agrees with torchvision: a small ViT trained by `trainer run` on
PNG images written here, exported with `trainer export`, is loaded into torchvision's VisionTransformer
(strict); each image, read with PIL and normalised with torchvision's transforms, gets the class
`trainer predict` gave it, with the same probabilities. Exit 77 (skipped) when a prerequisite is missing.
"""
import json
import os
import random
import shutil
import subprocess
import sys

SKIP = 77
CLASSES = ["apple", "kiwi", "plum"]
MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]


def write_images(root, per_class, rng, Image):
    for c, name in enumerate(CLASSES):
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            px = bytes((120 if k % 3 == c else 0) + rng.randrange(128) for k in range(16 * 16 * 3))
            Image.frombytes("RGB", (16, 16), px).save(os.path.join(root, name, f"{i}.png"))


def main():
    try:
        import torch
        import torchvision.transforms as T
        from PIL import Image
        from safetensors import safe_open
        from safetensors.torch import load_file
        from torchvision.models.vision_transformer import VisionTransformer
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    bin_path, tmp = os.environ.get("TRAINER_BIN", ""), os.environ.get("TRAINER_TEST_TMP", "")
    if not bin_path or not os.path.exists(bin_path) or not tmp:
        print("skipped: TRAINER_BIN / TRAINER_TEST_TMP not set")
        return SKIP
    work = os.path.join(tmp, f"py_predict_torchvision.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    rng = random.Random(0)
    write_images(os.path.join(work, "train"), 24, rng, Image)
    write_images(os.path.join(work, "val"), 10, rng, Image)
    config = os.path.join(work, "exp.yaml")
    with open(config, "w") as f:
        f.write("run: {name: vit, out_dir: runs, seed: 0}\n"
                "model: {arch: vit, image_size: 16, patch_size: 4, num_layers: 1, num_heads: 2, hidden_dim: 16,"
                " mlp_dim: 32, in_channels: 3, num_classes: 3}\n"
                f"data: {{format: image_folder, path: train, val_path: val, workers: 1,"
                f" normalize: {{mode: mean_std, mean: {MEAN}, std: {STD}}}}}\n"
                "train: {batch_size: 16, max_steps: 30, log_every: 10, threads: 1, precision: fp32}\n"  # fp32 as torchvision's side (auto may time bf16 faster on a busy host)
                "optim: {name: adamw, lr: 0.003}\nlog: {progress: off}\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = lambda *args: subprocess.run([bin_path, *args], check=True, env=env, capture_output=True, text=True)
    run("run", config)
    weights = os.path.join(work, "vit.safetensors")
    run("export", os.path.join(work, "runs", "vit", "checkpoints"), "--out", weights)
    out = run("predict", config, "--checkpoint", weights, "--input", os.path.join(work, "val"), "--top-k", "3").stdout
    predictions = [json.loads(line) for line in out.splitlines()]
    assert len(predictions) == 30, out

    with safe_open(weights, "pt") as f:
        cfg = json.loads(f.metadata()["model_config"])
    keys = ("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim", "dropout",
            "attention_dropout", "num_classes")
    model = VisionTransformer(**{k: cfg[k] for k in keys})
    model.load_state_dict(load_file(weights), strict=True)
    model.eval()
    torch.set_num_threads(1)
    transform = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    failures, worst, classes_seen = 0, 0.0, set()
    for p in predictions:
        x = transform(Image.open(p["path"]).convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            probs = torch.softmax(model(x), dim=1)[0]
        top = p["top"]
        want = int(probs.argmax())
        classes_seen.add(want)
        diff = max(abs(float(probs[t["index"]]) - t["prob"]) for t in top)
        worst = max(worst, diff)
        ok = top[0]["index"] == want and top[0]["class"] == CLASSES[want] and diff < 1e-4
        if not ok:
            print(f"MISMATCH {p['path']}: trainer {top}, torchvision {probs.tolist()}")
        failures += not ok
    print(f"{len(predictions)} images: {len(predictions) - failures} agree with torchvision, "
          f"max |prob diff| {worst:.2g}, classes predicted {sorted(classes_seen)}")
    if len(classes_seen) < 2:
        print("the model predicts one class for everything: the comparison would say little")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
