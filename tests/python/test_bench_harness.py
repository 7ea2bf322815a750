"""scripts/bench/bench_train.py and its parts: the statistics, reading metrics.jsonl, the configs it
writes for the trainer (accepted by `trainer check`), the PyTorch reference models (same parameter
names and counts as the trainer's, the MFU FLOPs formula) and one tiny reference run.
Exit 77 (skipped) without torch or safetensors."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import safetensors  # noqa: F401  (the harness writes the shared initial weights with it)
except ImportError as e:
    print(f"skipping: {e}")
    sys.exit(77)

SRC = os.environ.get("TRAINER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
import bench_train  # noqa: E402
import python_ref  # noqa: E402
import ref_models  # noqa: E402
import trainer_side  # noqa: E402
import workloads  # noqa: E402
from stats import median, steady  # noqa: E402

TMP = os.path.join(os.environ.get("TRAINER_TEST_TMP", tempfile.gettempdir()), "py_bench_harness")
TRAINER = os.environ.get("TRAINER_BIN", "")


def expect_raises(exc, fn, contains):
    try:
        fn()
    except exc as e:
        assert contains in str(e), f"{contains!r} not in {str(e)!r}"
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def test_stats():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    expect_raises(ValueError, lambda: median([]), "no values")
    ivs = [{"step": 2, "steps": 2}, {"step": 4, "steps": 2}, {"step": 6, "steps": 2}]
    assert steady(ivs, 2) == ivs[1:]  # the interval 0..2 holds warm-up steps
    assert steady(ivs, 3) == ivs[2:]  # 2..4 starts inside the warm-up
    assert steady(ivs, 10) == ivs[2:]  # too short a run: the last interval


def test_metrics_reading():
    path = os.path.join(TMP, "metrics.jsonl")
    recs = [
        {"kind": "train", "step": 5, "samples_per_s": 10.0, "step_ms": 100.0, "peak_rss_mb": 300.0},
        {"kind": "eval", "step": 5, "loss": 1.0},
        {"kind": "train", "step": 10, "samples_per_s": 30.0, "step_ms": 40.0, "data_wait_ms": 1.0, "peak_rss_mb": 320.0},
        {"kind": "train", "step": 15, "samples_per_s": 20.0, "step_ms": 60.0, "data_wait_ms": 3.0, "peak_rss_mb": 330.0},
        {"kind": "train", "step": 20, "samples_per_s": 25.0, "step_ms": 50.0, "data_wait_ms": 2.0, "peak_rss_mb": 310.0},
        {"kind": "summary", "steps": 20},
    ]
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(r) for r in recs) + "\n")
    got = trainer_side.summarise_records(trainer_side.read_train_records(path), warmup=5)
    assert got["samples_per_s"] == 25.0, got  # median of 30, 20, 25: the warm-up record (10) is dropped
    assert got["step_ms"] == 50.0 and got["data_wait_ms"] == 2.0, got
    assert got["peak_rss_mb"] == 330.0, got  # the run's high-water mark, warm-up included
    assert got["intervals"] == 3, got

    expect_raises(trainer_side.TrainerRunError, lambda: trainer_side.read_train_records(path + ".none"),
                  "metrics.jsonl.none: no metrics file")
    with open(path, "a") as f:
        f.write('{"kind": "train", "step": 2\n')
    expect_raises(trainer_side.TrainerRunError, lambda: trainer_side.read_train_records(path), "metrics.jsonl:7: not JSON")
    with open(path, "w") as f:
        f.write('{"kind": "train", "step": 2}\n')
    expect_raises(trainer_side.TrainerRunError, lambda: trainer_side.read_train_records(path),
                  "metrics.jsonl:1: train record without 'samples_per_s'")


def test_yaml_writer():
    text = trainer_side.to_yaml({"a": {"b": 1, "c": [0.9, 0.95], "d": True, "e": "x y"}, "f": 2.0})
    assert text == 'a:\n  b: 1\n  c: [0.9, 0.95]\n  d: true\n  e: "x y"\nf: 2.0', text


def test_configs_accepted_by_trainer():
    """Every config the harness writes validates and builds (`trainer check`, synthetic data opened)."""
    if not (TRAINER and os.access(TRAINER, os.X_OK)):
        print("  (no TRAINER_BIN: trainer check skipped)")
        return
    todo = workloads.cpu_compare_workloads(False, 1) + workloads.memory_workloads(False, 1)
    # the GPU workloads, checked with train.device cpu (this machine may have no GPU; the rest is the same)
    todo += [dict(w, device="cpu") for w in workloads.cuda_compare_workloads(False, 1)]
    todo.append(dict(workloads.cuda_graph_workload(False, 1), device="cpu", cuda_graphs=True))
    for w in todo:
        cfg = os.path.join(TMP, w["name"] + ".yaml")
        with open(cfg, "w") as f:
            f.write(trainer_side.to_yaml(trainer_side.trainer_config(w, os.path.join(TMP, "runs"))) + "\n")
        # a limit on a command that must end by itself; TRAINER_TEST_TIMEOUT_SCALE as in tests/test_util.hpp
        limit = 300 * float(os.environ.get("TRAINER_TEST_TIMEOUT_SCALE", "1"))
        p = subprocess.run([TRAINER, "check", cfg], capture_output=True, text=True, timeout=limit)
        assert p.returncode == 0, f"{w['name']}: trainer check failed:\n{p.stdout}\n{p.stderr}"


def test_reference_models_match_trainer_layout():
    # names as torchvision's CIFAR-style ResNet: conv1/bn1, layerN.k.{conv,bn}{1,2}, downsample.{0,1}, fc
    m = ref_models.CifarResNet(8, 2.0, 1, 10)
    names = [n for n, _ in m.named_parameters()]
    assert names[:3] == ["conv1.weight", "bn1.weight", "bn1.bias"], names[:3]
    assert "layer2.0.downsample.0.weight" in names and "layer1.0.downsample.0.weight" not in names
    assert names[-2:] == ["fc.weight", "fc.bias"]
    # the trainer logs "model resnet: 308074 parameters" for depth 8, width 2, 1 channel, 10 classes
    assert sum(p.numel() for p in m.parameters()) == 308074
    # ResNet-18-CIFAR (the graphs workload): torchvision's resnet18 with a 3x3/1 stem and no max-pool;
    # the trainer logs "model resnet: 11173962 parameters" for it
    r18 = ref_models.build_model(dict(workloads.RESNET18_CIFAR))
    assert tuple(r18.conv1.weight.shape) == (64, 3, 3, 3) and isinstance(r18.maxpool, torch.nn.Identity)
    assert sum(p.numel() for p in r18.parameters()) == 11173962
    # GPT: a tied weight is written under both owners' names, each its own storage (safetensors refuses shared)
    g = ref_models.build_model(dict(workloads.GPT_MINI))
    state = ref_models.state_for_trainer(g)
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    assert state["lm_head.weight"].data_ptr() != state["transformer.wte.weight"].data_ptr()


def test_gpt_flops_formula():
    cfg = dict(workloads.GPT2_124M)
    g = ref_models.build_model(cfg)
    V, C, L, T = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["block_size"]
    # no biases: per block c_attn 3C^2 + c_proj C^2 + mlp 8C^2, two LayerNorm weights; ln_f; tied wte (wpe left out)
    n = V * C + L * (12 * C * C + 2 * C) + C
    assert n == 123_587_328, n  # nanoGPT prints "number of parameters: 123.59M" for this model
    assert ref_models.gpt_flops_per_token(g, L, T, C) == 6 * n + 12 * L * T * C


def test_reference_run_and_checkpointing():
    """A tiny reference run gives a throughput and RSS; checkpointing recomputes, it does not change the loss."""
    model = {"arch": "gpt", "vocab_size": 32, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16, "bias": True}
    base = {"name": "tiny", "model": model, "optim": dict(workloads.ADAMW), "batch_size": 4, "precision": "fp32",
            "steps": 4, "warmup": 2, "log_every": 2, "threads": 1, "device": "cpu", "seed": 0, "num_samples": 32,
            "image_size": 0, "data_workers": 1}
    plain = python_ref.run(base)
    ac = python_ref.run(dict(base, model=dict(model, activation_checkpointing=True)))
    assert plain["samples_per_s"] > 0 and plain["intervals"] == 1, plain
    assert plain["peak_rss_mb"] >= plain["rss_before_training_mb"] > 0, plain
    assert plain["tokens_per_s"] == plain["samples_per_s"] * 8
    assert abs(plain["final_loss"] - ac["final_loss"]) < 1e-5, (plain["final_loss"], ac["final_loss"])
    img = {"arch": "resnet", "depth": 8, "width": 0.5, "in_channels": 1, "num_classes": 4, "channels_last": True}
    r1 = python_ref.run(dict(base, model=img, image_size=8, optim=dict(workloads.SGD)))
    r2 = python_ref.run(dict(base, model=dict(img, activation_checkpointing=True), image_size=8, optim=dict(workloads.SGD)))
    assert abs(r1["final_loss"] - r2["final_loss"]) < 1e-5, (r1["final_loss"], r2["final_loss"])


def test_report_and_arguments():
    w = workloads.cpu_compare_workloads(True, 2)[0]
    report = {"meta": {"date": "d", "machine": "m", "cores": 2, "torch": "t", "threads": 2, "rounds": 1,
                       "device": "cpu", "command": "c", "load_before": "1", "load_after": "2"},
              "compare": [{"workload": w, "ratio": 1.25, "paired_ratios": [1.2, 1.3, 1.25], "paired_median": 1.25,
                           "trainer": {"runs": [{}], "errors": [], "samples_per_s": 125.0, "step_ms": 10.0,
                                       "data_wait_ms": 1.0, "compute_ms": 8.0, "optim_ms": 1.0},
                           "python": {"runs": [{}], "errors": ["boom\nmore"], "samples_per_s": 100.0, "step_ms": 12.5}}]}
    text = bench_train.markdown(report)
    assert (f"| {w['name']} | 128 | 125.0 (1) | 100.0 (1) | **1.25** | 1.25 (1.20-1.30) | "
            "10.0 = data 1.0 / compute 8.0 / optim 1.0 | 12.5 |") in text, text
    assert f"- {w['name']} python: boom more" in text, text
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            bench_train.parse_args(["--trainer", "/nonexistent/trainer"])
    except SystemExit as e:
        assert e.code == 2
        assert "--trainer /nonexistent/trainer: not an executable file" in err.getvalue(), err.getvalue()
    else:
        raise AssertionError("a missing trainer binary must be refused")
    a = bench_train.parse_args(["--python-only", "--quick"])
    assert a.rounds == 1 and a.sections == ["compare", "memory"], (a.rounds, a.sections)
    a = bench_train.parse_args(["--python-only", "--device", "cuda"])
    assert a.sections == ["compare", "graphs"], a.sections
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            bench_train.parse_args(["--python-only", "--only", "graphs"])
    except SystemExit as e:
        assert e.code == 2 and "--only graphs: CUDA graphs need --device cuda" in err.getvalue(), err.getvalue()
    else:
        raise AssertionError("the graphs section without --device cuda must be refused")
    g = workloads.cuda_graph_workload(False, 16)
    graphs = {"workload": g, "graphs/eager": 1.4, "graphs/python": 1.5, "eager/python": 1.07,
              "eager": {"runs": [{}], "errors": [], "samples_per_s": 10000.0, "step_ms": 12.8},
              "graphs": {"runs": [{}], "errors": [], "samples_per_s": 14000.0, "step_ms": 9.14},
              "python": {"runs": [], "errors": ["no GPU"]}}
    text = bench_train.markdown(dict(report, compare=[], graphs=graphs))
    assert "| trainer, train.cuda_graphs | 14,000.0 | 9.14 | - | 1 |" in text, text
    assert "ratios: graphs/eager **1.40**, graphs/python **1.50**, eager/python **1.07**" in text, text
    assert "- python FAILED: no GPU" in text, text


def main():
    os.makedirs(TMP, exist_ok=True)
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        t()
        print(f"ok: {t.__name__}")
    print(f"{len(tests)} passed, 0 failed")


if __name__ == "__main__":
    main()
