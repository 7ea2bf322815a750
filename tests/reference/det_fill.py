"""Deterministic weights from a tensor's name, computed with exact integer arithmetic so that the
C++ tests (tests/models/golden_util.hpp, det_fill) produce bit-identical values without any file.

Used for ResNet-18, whose 11.7M weights (45 MB) are too big to commit as a golden file, and for the
small ViT golden test, where it gives every tensor (zero-initialised ones included) a distinct value.
"""
import math

import torch


def name_seed(name: str) -> int:
    return sum((k + 1) * ord(c) for k, c in enumerate(name)) % 1000003


def det_uniform(name: str, numel: int) -> torch.Tensor:
    """numel float64 values in [0, 1): an integer hash of (name, index)."""
    i = torch.arange(numel, dtype=torch.int64)
    h = (i * 2654435761 + name_seed(name) * 97 + 12345) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 73244475) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    return h.to(torch.float64) / 4294967296.0


def det_resnet_tensor(name: str, shape) -> torch.Tensor:
    """The value of one ResNet state_dict entry: kaiming-sized convs, near-identity BatchNorm."""
    numel = math.prod(shape)
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    u = det_uniform(name, numel)
    if len(shape) == 4:  # conv: uniform with the He-normal standard deviation
        fan_in = shape[1] * shape[2] * shape[3]
        half = math.sqrt(3.0) * math.sqrt(2.0 / fan_in)
        center = 0.0
    elif name == "fc.weight":
        half, center = 1.0 / math.sqrt(shape[1]), 0.0
    elif name.endswith("running_var"):
        half, center = 0.5, 1.0
    elif name.endswith(".weight"):  # BatchNorm scale
        half, center = 0.1, 1.0
    else:  # BatchNorm shift, running_mean, fc.bias
        half, center = 0.1, 0.0
    return (center + half * (2.0 * u - 1.0)).to(torch.float32).reshape(shape)


def det_vit_tensor(name: str, shape) -> torch.Tensor:
    """The value of one VisionTransformer state_dict entry: fan-in-sized matrices and convs, 0.1-sized
    class token, position embedding and biases, near-one LayerNorm scales (the only 1-d weights)."""
    numel = math.prod(shape)
    u = det_uniform(name, numel)
    center = 0.0
    if len(shape) == 3:  # class_token (1, 1, D), encoder.pos_embedding (1, S, D)
        half = 0.1
    elif len(shape) >= 2:  # conv_proj (D, C, p, p), in_proj_weight, out_proj, mlp, head
        half = math.sqrt(3.0 / math.prod(shape[1:]))
    elif name.endswith(".weight"):  # LayerNorm scale
        half, center = 0.1, 1.0
    else:  # biases, LayerNorm shift
        half = 0.1
    return (center + half * (2.0 * u - 1.0)).to(torch.float32).reshape(shape)
