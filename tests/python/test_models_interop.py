"""Safetensors written by the C++ models load with strict=True into the matching PyTorch modules
(torchvision's resnet18 and VisionTransformer, the nanoGPT-style reference, ref_models.ConvNet) and give
the same logits.
For ViT also: the C++ vit_b_16 has torchvision's vit_b_16 names and shapes, and the C++ initialisation
draws what torchvision's does for the same seed; so does the ConvNet against ref_models.ConvNet.

The files come from the Catch2 test "interop export: ..." in tests/models (run here first). Exit 77 (skip)
when torchvision or safetensors is missing.
"""
import os
import subprocess
import sys

try:
    import torch
    import torch.nn as nn
    import torchvision
    from safetensors.torch import load_file
except ImportError as e:  # pragma: no cover
    print(f"skipping: {e}")
    sys.exit(77)

SRC = os.environ.get("TRAINER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
from nanogpt_ref import GPT, GPTConfig  # noqa: E402
from ref_models import ConvNet  # noqa: E402  (the quickstart's model, as its Python reference builds it)


def cifar_resnet(n, num_classes):
    """He et al.'s CIFAR ResNet (6n+2) from torchvision BasicBlocks, under torchvision-style names."""
    from torchvision.models.resnet import BasicBlock

    class CifarResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            inp = 16
            for s in range(3):
                planes, blocks = 16 << s, []
                for b in range(n):
                    stride = 2 if (b == 0 and s > 0) else 1
                    ds = None
                    if stride != 1 or inp != planes:
                        ds = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
                    blocks.append(BasicBlock(inp, planes, stride, ds))
                    inp = planes
                setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
            self.fc = nn.Linear(64, num_classes)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return CifarResNet()


def check(name, module, folder):
    state = load_file(os.path.join(folder, name + ".safetensors"))
    module.load_state_dict(state, strict=True)  # raises on any missing / unexpected / mis-shaped name
    io = load_file(os.path.join(folder, name + "_io.safetensors"))
    module.eval()
    with torch.no_grad():
        logits = module(io["input"])
    diff = (logits - io["logits"]).abs().max().item()
    print(f"{name}: {len(state)} tensors loaded strictly, max |logits diff| {diff:.3g}")
    assert diff <= 1e-5, f"{name}: logits differ by {diff}"


def tv_vit(in_channels=3, **kw):
    """torchvision's VisionTransformer; for in_channels != 3 with a conv_proj of that input width."""
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(**kw)
    if in_channels != 3:
        p = kw["patch_size"]
        model.conv_proj = nn.Conv2d(in_channels, kw["hidden_dim"], kernel_size=p, stride=p)
    return model


def check_init(name, folder, seed, build):
    """The C++ model built after manual_seed(seed) against build() after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    ref = build().state_dict()
    got = load_file(os.path.join(folder, name + "_init.safetensors"))
    assert sorted(got) == sorted(ref), (sorted(set(got) ^ set(ref)))
    worst = max((got[k] - ref[k]).abs().max().item() for k in ref)
    print(f"{name} init (seed {seed}): {len(ref)} tensors, max |C++ - PyTorch| {worst:.3g}")
    assert worst == 0.0, f"{name}: the initialisation differs from PyTorch's by {worst}"


def check_whitening(folder):
    """model.whiten: the trainer's Jacobi filters against LAPACK's from the same images; the init's draws."""
    got = load_file(os.path.join(folder, "convnet_whiten_init.safetensors"))
    images = load_file(os.path.join(folder, "convnet_whiten_images.safetensors"))["images"]
    ref = ConvNet(0.5, in_channels=3, num_classes=10, whiten=2)
    ref.init_whitening(images)
    want = ref.whiten
    assert got["whiten"].shape == want.shape == (24, 3, 2, 2), (got["whiten"].shape, want.shape)
    rel = ((got["whiten"] - want).abs().max() / want.abs().max()).item()
    print(f"convnet whitening filters: max |C++ - LAPACK| / max |filter| {rel:.3g}")
    assert rel <= 1e-5, f"whitening filters differ by {rel} (relative)"
    torch.manual_seed(123)
    drawn = ConvNet(0.5, in_channels=3, num_classes=10, whiten=2).state_dict()
    assert sorted(got) == sorted(drawn), sorted(set(got) ^ set(drawn))
    worst = max((got[k] - drawn[k]).abs().max().item() for k in drawn if k != "whiten")
    assert worst == 0.0, f"convnet whiten: the initialisation differs from PyTorch's by {worst}"


def check_vit_b_16_layout(folder):
    with torch.device("meta"):  # shapes only: no 330 MB of weights
        ref = torchvision.models.vit_b_16().state_dict()
    got = {}
    with open(os.path.join(folder, "vit_b_16_layout.txt")) as f:
        for line in f:
            n, shape = line.split()
            got[n] = tuple(int(d) for d in shape.split(","))
    want = {n: tuple(t.shape) for n, t in ref.items()}
    assert got == want, f"vit_b_16 layouts differ: {sorted(set(got.items()) ^ set(want.items()))[:8]}"
    print(f"vit_b_16: {len(got)} tensors, names and shapes equal to torchvision's")


def main():
    bin_dir = os.path.dirname(os.environ["TRAINER_BIN"])
    test_models = os.path.join(bin_dir, "tests", "test_models")
    if not os.path.exists(test_models):
        print(f"{test_models} is not built")
        return 1
    tmp = os.environ.get("TRAINER_TEST_TMP", os.path.join(bin_dir, "test-tmp"))
    tmp = os.path.join(tmp, f"py_models_interop.{os.getpid()}")
    subprocess.run([test_models, "interop export: resnet18 and gpt safetensors with reference logits"], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "TRAINER_SCRATCH_DIR": tmp})
    folder = os.path.join(tmp, "models_interop")
    torch.set_num_threads(1)
    check("resnet18", torchvision.models.resnet18(num_classes=10), folder)
    check("resnet20_cifar", cifar_resnet(3, 10), folder)
    check("convnet", ConvNet(1.0, in_channels=1, num_classes=10), folder)
    check_init("convnet", folder, 123, lambda: ConvNet(1.0, in_channels=1, num_classes=10))
    check_whitening(folder)
    check("convnet_whiten", ConvNet(0.5, in_channels=3, num_classes=10, whiten=2), folder)
    check("gpt", GPT(GPTConfig()), folder)
    check("gpt_nobias", GPT(GPTConfig(bias=False)), folder)

    subprocess.run([test_models, "interop export: vit safetensors with reference logits*"], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "TRAINER_SCRATCH_DIR": tmp})
    folder = os.path.join(tmp, "models_interop_vit")
    tiny = dict(image_size=16, patch_size=4, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10)
    grey = {**tiny, "image_size": 28, "patch_size": 7}
    check("vit_rgb", tv_vit(**tiny), folder)
    check("vit_grey", tv_vit(in_channels=1, **grey), folder)
    from torchvision.models.vision_transformer import VisionTransformer
    check_init("vit_rgb", folder, 123, lambda: VisionTransformer(**tiny))
    check_vit_b_16_layout(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
