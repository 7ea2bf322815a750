"""TensorBoard event files written by `trainer run` (log.tensorboard: true), read back with the
tensorboard package's EventAccumulator: the tags and values must equal metrics.jsonl's records.
Exit 77 (skipped) when tensorboard is not installed."""
import json
import os
import shutil
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed: skipped")
    sys.exit(77)

import numpy as np

TRAINER = os.environ["TRAINER_BIN"]
TMP = os.path.join(os.environ.get("TRAINER_TEST_TMP", "/tmp"), "py_tensorboard")

CONFIG = """run: {name: tb, seed: 0}
model: {arch: gpt, vocab_size: 32, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16}
data: {format: synthetic, workers: 1, bytes_per_token: 1.5, synthetic: {num_samples: 128, val_samples: 16}}
train: {batch_size: 8, max_steps: 6, log_every: 2, eval_every: 3, device: cpu, threads: 1}
optim: {name: adamw, lr: 0.01}
log: {progress: off, tensorboard: true}
"""


def main():
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    cfg = os.path.join(TMP, "tb.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    out = subprocess.run([TRAINER, "run", cfg, "--out-dir", os.path.join(TMP, "runs")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    run = os.path.join(TMP, "runs", "tb")
    records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]

    tb_dir = os.path.join(run, "tb")
    files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1, files
    acc = EventAccumulator(tb_dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for t in ["train/loss", "train/lr", "train/grad_norm", "perf/samples_per_s", "perf/tokens_per_s",
              "perf/step_ms", "eval/loss", "eval/bpb", "eval/ppl", "memory/rss_mb"]:
        assert t in tags, (t, sorted(tags))
    assert "eval/accuracy" not in tags  # a language model reports no accuracy

    def check(tag, kind, key):
        want = [(r["step"], r[key]) for r in records if r["kind"] == kind]
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want], (tag, got, want)
        # simple_value is a float32
        np.testing.assert_allclose([v for _, v in got], [np.float32(v) for _, v in want], rtol=1e-6)

    check("train/loss", "train", "loss")
    check("train/lr", "train", "lr")
    check("perf/tokens_per_s", "train", "tokens_per_s")
    check("eval/loss", "eval", "loss")
    check("eval/bpb", "eval", "bpb")
    # the hparams dashboard's summaries, parsed by tensorboard's own hparams plugin code
    from tensorboard.plugins.hparams import metadata as hp
    from tensorboard.plugins.hparams import api_pb2
    content = acc.PluginTagToContent(hp.PLUGIN_NAME)
    assert set(content) == {hp.EXPERIMENT_TAG, hp.SESSION_START_INFO_TAG, hp.SESSION_END_INFO_TAG}, sorted(content)
    exp = hp.parse_experiment_plugin_data(content[hp.EXPERIMENT_TAG])
    start = hp.parse_session_start_info_plugin_data(content[hp.SESSION_START_INFO_TAG])
    end = hp.parse_session_end_info_plugin_data(content[hp.SESSION_END_INFO_TAG])
    values = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    assert values["optim.lr"] == 0.01 and values["optim.name"] == "adamw", values
    assert values["model.arch"] == "gpt" and values["model.n_embd"] == 16 and values["train.batch_size"] == 8, values
    assert values["data.bytes_per_token"] == 1.5 and values["run.seed"] == 0, values
    assert "run.name" not in values and "train.max_steps" not in values  # not a training choice
    assert "model.depth" not in values  # a ResNet key
    infos = {i.name: i.type for i in exp.hparam_infos}
    assert set(infos) == set(values), (sorted(infos), sorted(values))
    assert infos["optim.lr"] == api_pb2.DATA_TYPE_FLOAT64 and infos["optim.name"] == api_pb2.DATA_TYPE_STRING
    assert [m.name.tag for m in exp.metric_infos] == ["eval/loss", "eval/bpb", "train/loss"]
    assert end.status == api_pb2.STATUS_SUCCESS
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == [2, 4, 6], steps
    assert [e.step for e in acc.Scalars("eval/loss")] == [3, 6]
    print("ok: %d scalar tags, steps %s" % (len(tags), steps))


if __name__ == "__main__":
    main()
