"""Golden losses: the first 50 steps of the two shipped configs, bit for bit.

tests/reference/golden_losses*.json hold every train record's loss (and the final evaluation's)
of configs/quickstart.yaml and configs/gpt_char.yaml run deterministically on CPU for 50 steps,
as the JSON number text metrics.jsonl wrote. This test runs the same commands with the current
binary and requires each loss to be the same double, naming the first step that differs.
It is what shows that a refactoring of the engine kept the arithmetic unchanged.

    python tests/python/test_golden_losses.py           # check (ctest python.test_golden_losses)
    python tests/python/test_golden_losses.py --write   # regenerate: see tests/reference/README.md

bf16 and fp32 CPU kernels (oneDNN, MKL) pick their code by instruction set, so the losses are only
comparable on a CPU with the same math features as the one that wrote the file. Each golden file
(tests/reference/golden_losses*.json) names the CPU it was made on; the test takes the one that
matches this CPU, and on a CPU none matches it is skipped (exit 77) and says why. Missing data
(setup.sh not run) also skips. `--write` rewrites this CPU's file, or starts one for a new CPU
(golden_losses_<hash of the CPU signature>.json): make it with a binary known to be right (the
commit before the change to be checked), then check the change against it.
"""
# Two 50-step trainings: 12 s wall (22 s CPU) in bf16 on the 2-core machine with AMX when it is quiet,
# up to 8 min while three other builds share it; not labelled slow. A CPU without native bf16 runs
# them in fp32 (see PRECISION below).
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys

ROOT = os.environ.get("TRAINER_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
TRAINER = os.environ.get("TRAINER_BIN") or os.path.join(ROOT, "build", "trainer")
TMP = os.path.join(os.environ.get("TRAINER_TEST_TMP", "/tmp"), "py_golden_losses")
REFERENCE = os.path.join(ROOT, "tests", "reference")

# Deterministic and quick: deterministic algorithms, CPU, a fixed thread count (reduction splits
# follow it), one record per step, no progress bar, one evaluation (at the end) of 4 batches. The
# data workers stay as the configs have them: the loader's order and augmentation draws depend on
# (seed, sample position) only, never on which worker thread built the batch. The configs' warm-ups
# (300 and 100 steps) are longer than 50 steps, which loading would clip to the run: 20 steps of warm-up,
# then the configs' own decay (linear, cosine) over the remaining 30 steps, so both phases are covered.
# The configs' train.precision is auto, which is fp32 in a deterministic run, so the runs name their
# precision: bf16 (the configs' precision when the first golden file was made) where the CPU computes
# it natively, fp32 where it would be emulated: an AVX2-only AMD EPYC took 878 s for the two bf16 runs
# (2026-12-02), most of a CI budget, to check the same engine code the fp32 runs check. The precision
# is part of the overrides each golden file records, so a file and a CPU of the other kind never meet.
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")
COMMON = ["run.deterministic=true", "train.device=cpu", "train.threads=2", "train.max_steps=50",
          "schedule.warmup_steps=20", "train.log_every=1", "train.eval_every=0", "train.eval_steps=4",
          "log.progress=off"]
RUNS = {
    # the recipe the golden files were made with, pinned: the quickstart's crop, label smoothing and lr
    # changed since (2026-12-04), and its model (the ConvNet since 2026-12-05: the run "convnet" below);
    # the ResNet, data and step are what this checks
    "quickstart": {"config": "configs/quickstart.yaml",
                   "extra": ["model.arch=resnet", "model.depth=8", "model.width=2.0", "train.epochs=0",
                             "data.augment.crop_padding=2", "train.label_smoothing=0", "optim.lr=0.2"],
                   "needs": "/usr/share/datasets/fashion-mnist"},
    # the quickstart as shipped (models/convnet.cpp)
    "convnet": {"config": "configs/quickstart.yaml", "extra": ["run.name=convnet", "train.epochs=0"],
                "needs": "/usr/share/datasets/fashion-mnist"},
    "gpt_char": {"config": "configs/gpt_char.yaml", "extra": [],
                 "needs": "data/generated/fortunes.txt"},
}
# the CPU features that choose the math kernels' code paths
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16")


def cpu_signature():
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {"model": model, "flags": [fl for fl in CPU_FLAGS if fl in flags]}


def golden_files():
    return sorted(os.path.join(REFERENCE, f) for f in os.listdir(REFERENCE)
                  if f.startswith("golden_losses") and f.endswith(".json"))


def golden_for(signature):
    """The golden file made on a CPU with this signature, or None."""
    for path in golden_files():
        with open(path) as f:
            if json.load(f)["cpu"] == signature:
                return path
    return None


def precision():
    """bf16 where this CPU computes it natively, fp32 where it would be emulated."""
    return "bf16" if any(f in cpu_signature()["flags"] for f in NATIVE_BF16) else "fp32"


def overrides(name):
    return RUNS[name]["extra"] + ["train.precision=" + precision()] + COMMON


def command(name, out_dir):
    args = [TRAINER, "run", RUNS[name]["config"]]
    for o in overrides(name):
        args += ["--set", o]
    return args + ["--out-dir", out_dir]


def run(name):
    """The train and eval losses of one run, as {"train": [[step, text]...], "eval": [...]}."""
    out_dir = os.path.join(TMP, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    proc = subprocess.run(command(name, out_dir), cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="2"))
    if proc.returncode != 0:
        raise AssertionError(f"{name}: trainer exited {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    run_dir = os.path.join(out_dir, name)  # each run's run.name is its key in RUNS
    losses = {"train": [], "eval": []}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            # parse_float=str keeps each number exactly as written (shortest round-trip text)
            rec = json.loads(line, parse_float=str, parse_int=str)
            if rec.get("kind") in losses:
                losses[rec["kind"]].append([int(rec["step"]), rec["loss"]])
    return losses


def bits(text):
    return struct.pack("<d", float(text))


def ulps(a, b):
    ia, ib = (struct.unpack("<q", bits(x))[0] for x in (a, b))
    ia, ib = (i if i >= 0 else -(1 << 63) - i for i in (ia, ib))  # monotonic over the sign
    return abs(ia - ib)


def compare(name, kind, want, got):
    """The mismatches of one record kind: the first differing step in full, then how many more."""
    errors = []
    if [s for s, _ in want] != [s for s, _ in got]:
        errors.append(f"{name} {kind}: logged steps {[s for s, _ in got]}, golden {[s for s, _ in want]}")
    differ = [(step, w, g) for (step, w), (gstep, g) in zip(want, got) if step == gstep and bits(w) != bits(g)]
    if differ:
        step, w, g = differ[0]
        diff = float(g) - float(w) if math.isfinite(float(g)) else float("nan")
        later = f"; {len(differ) - 1} later step(s) differ too" if len(differ) > 1 else ""
        errors.append(f"{name} {kind}: first difference at step {step}: loss {g}, golden {w} "
                      f"(diff {diff:.3g}, {ulps(w, g)} ulp){later}")
    return errors


def write():
    golden = {
        "about": "first 50 steps of the shipped configs, deterministic on CPU; see tests/reference/README.md",
        "cpu": cpu_signature(),
        "common_overrides": COMMON,
        "runs": {},
    }
    for name in RUNS:
        cmd = " ".join(shlex.quote(a) for a in command(name, "<tmp>"))
        golden["runs"][name] = {"config": RUNS[name]["config"], "overrides": overrides(name),
                                "command": cmd.replace(shlex.quote(TRAINER), "build/trainer", 1),
                                "losses": run(name)}
        print(f"{name}: {len(golden['runs'][name]['losses']['train'])} train losses")
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    golden["made_at_commit"] = head.stdout.strip() or "unknown"
    sig = golden["cpu"]
    path = golden_for(sig) or os.path.join(REFERENCE, "golden_losses_" + hashlib.sha256(
        json.dumps(sig, sort_keys=True).encode()).hexdigest()[:8] + ".json")
    with open(path, "w") as f:
        f.write(dump(golden))
    print(f"wrote {path}")


def dump(golden):
    """The golden file as JSON with one [step, "loss"] pair a line, so that diffs show steps."""
    text = json.dumps({k: v for k, v in golden.items() if k != "runs"}, indent=1)[:-2]
    runs = []
    for name, spec in golden["runs"].items():
        fields = [f'   {json.dumps(k)}: {json.dumps(v)}' for k, v in spec.items() if k != "losses"]
        kinds = [f'    {json.dumps(kind)}: [\n' + ",\n".join(f"     {json.dumps(p)}" for p in pairs) + "\n    ]"
                 for kind, pairs in spec["losses"].items()]
        fields.append('   "losses": {\n' + ",\n".join(kinds) + "\n   }")
        runs.append(f'  {json.dumps(name)}: {{\n' + ",\n".join(fields) + "\n  }")
    return text + ',\n "runs": {\n' + ",\n".join(runs) + "\n }\n}\n"


def check():
    here = cpu_signature()
    path = golden_for(here)
    if path is None:
        made_on = []
        for p in golden_files():
            with open(p) as f:
                made_on.append(json.load(f)["cpu"])
        print(f"skipped: the golden losses come from {made_on}, this CPU is {here}")
        return 77
    with open(path) as f:
        golden = json.load(f)  # the losses are JSON strings: their text is kept as written
    for name, spec in RUNS.items():
        if not os.path.exists(os.path.join(ROOT, spec["needs"])):
            print(f"skipped: {spec['needs']} is missing (scripts/setup.sh prepares it)")
            return 77
    errors = []
    unchecked = []
    for name in RUNS:
        if name not in golden["runs"]:
            # a change of the arithmetic on purpose drops a run from the files of the CPUs it could not
            # be remade on; `--write` on such a CPU adds it back (tests/reference/README.md)
            unchecked.append(name)
            print(f"{name}: not checked: {os.path.relpath(path, ROOT)} holds no losses of it "
                  f"({golden.get('dropped', {}).get(name, 'dropped')}); --write on this CPU adds them")
            continue
        want = golden["runs"][name]
        if want["overrides"] != overrides(name):
            errors.append(f"{name}: the golden file was made with {want['overrides']}, "
                          f"this test runs {overrides(name)}: regenerate it")
            continue
        if len(want["losses"]["train"]) != 50:
            errors.append(f"{name}: the golden file holds {len(want['losses']['train'])} train losses, want 50")
        got = run(name)
        for kind in ("train", "eval"):
            errors += compare(name, kind, want["losses"][kind], got[kind])
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} difference(s) from {path}")
        return 1
    checked = [n for n in RUNS if n not in unchecked]
    if not checked:
        print("skipped: no run of this test has golden losses for this CPU")
        return 77
    print(f"ok: every loss of {', '.join(checked)} equals {os.path.relpath(path, ROOT)} bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(write() if sys.argv[1:] == ["--write"] else check())
