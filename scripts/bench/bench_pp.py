#!/usr/bin/env python3
"""Pipeline parallel side by side on this machine (issue 25): a GPT of ~6.4 M parameters (8 layers,
width 256, 64 tokens a sequence, vocabulary 256) on one global batch of synthetic tokens, trained by
the trainer at pp 2 (world 2) and pp 4 (world 4) with the schedules gpipe, 1f1b, interleaved_1f1b
(dist.pipeline.virtual_stages 2) and zero_bubble, at 4 and 8 microbatches a batch, beside data
parallel at the same world and global batch (dist.pipeline_parallel 1) and one process (the loss
reference); and PyTorch's own pipeline parallel (pp_worker.py: torch.distributed.pipelining's
PipelineStage with ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
Gloo, CPU, under torchrun) on the same initial weights, tokens and stages (`trainer check` prints the
trainer's split of the units; the PyTorch side is given the same). All fp32, AdamW lr 3e-4, no weight
decay, grad_clip 1.0.

(a) Losses: the largest relative difference of a step's loss from the trainer's one-process run;
throughput as ratios (trainer / PyTorch at the same pipeline, pp / dp at the same world); rank 0's
peak RSS (the trainer's records' peak_rss_mb; PyTorch's ru_maxrss). (b) The bubble: the trainer's
records carry pp_wait_ms (rank 0's stage waiting for its neighbours) and pp_bubble (that over the step
time); beside them the schedule's textbook bubble, (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(vM+P-1)
interleaved, (P-1)/(3M+P-1) for ZB-H1 at F = I = W (a third of 1F1B's), the bubble `trainer check`
computes for its own lists at unit costs (F 1, B 2, over all ranks), and PyTorch's rank 0 time in
its p2p waits over its step time, and the trainer's pp_act_peak_mb (the most rank 0's microbatches held
at once).

    scripts/bench/bench_pp.py [--trainer build/trainer] [--steps 10] [--quick] [--only pp2,dp]

--quick: a tiny model (6 layers, width 64, a global batch of 8) for 3 steps at 4 microbatches,
PyTorch at pp 2 only: a smoke test of both sides (about 2 minutes on 2 cores, most of it
PyTorch's start-up under torchrun), not a measurement.
--only: comma-separated substrings of the row names (1proc, dp2, dp4, pp2-1f1b-m4, ...); the
one-process reference and the dp rows of the pipelines' worlds run whenever a pipeline row does.

Prints Markdown tables and writes the raw figures to <work>/pp.json."""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import median  # noqa: E402
from trainer_side import TrainerRunError, read_train_records, summarise_records, to_yaml  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VENV = os.environ.get("TRAINER_VENV", os.path.expanduser("~/.cache/trainer/venv-torch-2.11.0"))
MODEL = {"arch": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 8, "n_head": 4, "n_embd": 256,
         "dropout": 0.0, "bias": True}
QUICK_MODEL = {"arch": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 6, "n_head": 2, "n_embd": 64,
               "dropout": 0.0, "bias": True}
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")
VIRTUAL = {"interleaved_1f1b": 2}  # dist.pipeline.virtual_stages of a schedule (1 for the others)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def shared_inputs(work, model, global_batch):
    """The nanoGPT reference's initial weights (seed 1) as safetensors, under the trainer's names, and
    a token file of exactly one global batch of windows: every step of every layout trains on all of
    them, so the loss and the averaged gradient are the same means whatever order each side deals
    the windows to its microbatches and ranks in."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
    from nanogpt_ref import GPT, GPTConfig
    from ref_models import state_for_trainer
    tag = "L{n_layer}-C{n_embd}-H{n_head}-T{block_size}-V{vocab_size}".format(**model)
    init = os.path.join(work, f"init-{tag}.safetensors")
    if not os.path.exists(init):
        torch.manual_seed(1)
        m = GPT(GPTConfig(**{k: v for k, v in model.items() if k != "arch"}))
        save_file(state_for_trainer(m), init)
    tokens = os.path.join(work, f"tokens-{tag}-b{global_batch}.bin")
    rng = np.random.default_rng(global_batch)
    rng.integers(0, model["vocab_size"], global_batch * model["block_size"] + 1, dtype=np.uint16).tofile(tokens)
    return init, tokens


def trainer_config(out_dir, model, steps, batch, init, tokens, pp=None):
    """pp: None (no pipeline: one process or data parallel) or (P, M, schedule, v)."""
    cfg = {
        "run": {"name": "pp", "out_dir": out_dir, "seed": 1},
        "model": dict(model, init={"from": init}),
        "data": {"format": "tokens", "path": tokens, "val_path": tokens, "workers": 1},
        "train": {"batch_size": batch, "max_steps": steps, "precision": "fp32", "device": "cpu", "threads": 1,
                  "log_every": 1, "eval_every": 0, "eval_steps": 1, "grad_clip": 1.0},
        "optim": {"name": "adamw", "lr": 3e-4, "weight_decay": 0.0},
        "schedule": {"name": "constant"},
        "checkpoint": {"every_steps": 0, "keep_last": 1},
        "log": {"progress": "off", "tensorboard": False},
    }
    if pp is not None:
        P, M, schedule, v = pp
        pipe = {"microbatches": M, "schedule": schedule, "stages": "auto"}
        if v > 1:
            pipe["virtual_stages"] = v
        cfg["dist"] = {"pipeline_parallel": P, "pipeline": pipe}
    return cfg


def tail(path, n=4):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])


def trainer_plan(a, cfg):
    """`trainer check CONFIG --no-data`: the stages (unit ranges, in stage order) and the bubble of the
    schedule at unit costs, as the trainer prints them."""
    p = subprocess.run([a.trainer, "check", cfg, "--no-data"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    stages, bubble = {}, None
    for line in p.stdout.splitlines():
        mt = re.match(r"\s*stage (\d+) on pp rank \d+: units (\d+)(?:-(\d+))?", line)
        if mt:
            stages[int(mt.group(1))] = (int(mt.group(2)), int(mt.group(3) or mt.group(2)))
        mt = re.search(r"bubble ([\d.]+) % of rank-time", line)
        if mt:
            bubble = float(mt.group(1)) / 100.0
    out = {"check_exit": p.returncode, "stages": [stages[s] for s in sorted(stages)], "unit_bubble": bubble}
    if p.returncode != 0 or not stages:
        out["check_output"] = p.stdout[-2000:]
    return out


def run_trainer(a, name, world, model, global_batch, pp=None):
    init, tokens = shared_inputs(a.work, model, global_batch)
    root = os.path.join(a.work, f"trainer-{name}")
    shutil.rmtree(root, ignore_errors=True)  # an earlier run's records must not count
    os.makedirs(root)
    cfg = os.path.join(root, "pp.yaml")
    P = pp[0] if pp else 1
    dp = world // P
    with open(cfg, "w") as f:
        f.write(f"# bench_pp.py {name}\n" + to_yaml(trainer_config(os.path.join(root, "runs"), model, a.steps,
                                                                   global_batch // dp, init, tokens, pp)) + "\n")
    out = {"world": world, "config": cfg}
    if pp is not None:
        out.update(trainer_plan(a, cfg))
    args = ["run", cfg, "--force", "--resume", "never"]
    cmd = [a.trainer] + (args if world == 1 else ["launch", "-n", str(world), "--"] + args)
    out["command"] = " ".join(cmd)
    log = os.path.join(root, "log.txt")
    t0 = time.perf_counter()
    with open(log, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=a.timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        except OSError as e:
            rc = f"not started ({e})"
    out["wall_s"] = time.perf_counter() - t0
    if rc != 0:
        # the records may all be there (a crash at exit): the figures are kept, the row says it failed
        out["exit"] = rc
        out["error"] = f"exit {rc}: {tail(log)} (log {log}; command: {out['command']})"
    try:
        recs = read_train_records(os.path.join(root, "runs", "pp", "metrics.jsonl"))
    except TrainerRunError as e:
        out["error"] = out.get("error") or str(e)
        out["no_records"] = True
        return out
    if len(recs) < a.steps:
        out["error"] = (out.get("error", "") + f"; only {len(recs)} of {a.steps} train records").lstrip("; ")
    out.update(summarise_records(recs, a.warmup))
    out["losses"] = [r["loss"] for r in recs]
    out["grad_norms"] = [r.get("grad_norm") for r in recs]
    kept = [r for r in recs if r["step"] > a.warmup] or recs[-1:]
    for key in ("pp_wait_ms", "pp_bubble"):
        values = [r[key] for r in kept if key in r]
        if values:
            out[key] = median(values)
    if "pp_act_peak_mb" in recs[-1]:  # a high-water mark: the last record's is the run's
        out["pp_act_peak_mb"] = recs[-1]["pp_act_peak_mb"]
    return out


def run_pytorch(a, name, P, M, schedule, v, stages, model, global_batch):
    init, tokens = shared_inputs(a.work, model, global_batch)
    out = os.path.join(a.work, f"pytorch-{name}.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [os.path.join(VENV, "bin", "torchrun"), "--nproc_per_node", str(P), "--master_addr", "127.0.0.1",
           "--master_port", str(29700 + P), os.path.join(os.path.dirname(os.path.abspath(__file__)), "pp_worker.py"),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch", str(global_batch), "--microbatches",
           str(M), "--schedule", schedule, "--virtual-stages", str(v), "--out", out, "--model", json.dumps(model),
           "--init", init, "--tokens", tokens]
    if stages:
        cmd += ["--stages", ",".join(f"{lo}-{hi}" for lo, hi in stages)]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=a.timeout,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        text, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    with open(out + ".log", "w") as f:
        f.write(text)
    if rc != 0 or not os.path.exists(out):
        errors = [l for l in text.splitlines() if "Error" in l or "error:" in l]
        return {"error": (errors[-1].strip() if errors else f"exit {rc}") + f" (see {out}.log)"}
    with open(out) as f:
        return json.load(f)


def rel_diff(xs, ys):
    if not xs or len(xs) != len(ys):
        return None
    return max(abs(x - y) / abs(y) for x, y in zip(xs, ys))


def theory_bubble(schedule, P, M, v):
    if schedule == "interleaved_1f1b":
        return (P - 1) / (v * M + P - 1)
    if schedule == "zero_bubble":
        return (P - 1) / (3 * M + P - 1)  # ZB-H1 at F = I = W: (P-1) idle units against 3M of work
    return (P - 1) / (M + P - 1)


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default=os.path.join(REPO, "build", "trainer"))
    ap.add_argument("--work", default="/tmp/trainer-bench-pp")
    ap.add_argument("--steps", type=int, help="steps a run (default 10, --quick 3)")
    ap.add_argument("--warmup", type=int, help="steps left out of the timing (default 3, --quick 1)")
    ap.add_argument("--global-batch", type=int, help="sequences a step (default 16, --quick 8)")
    ap.add_argument("--microbatches", default=None, help="comma-separated M values (default 4,8; --quick 4)")
    ap.add_argument("--quick", action="store_true", help="a tiny smoke configuration (1-2 minutes)")
    ap.add_argument("--only", help="comma-separated substrings of the row names to run")
    ap.add_argument("--no-pytorch", action="store_true", help="the trainer's rows only")
    ap.add_argument("--timeout", type=int, help="seconds a run (default 900, --quick 180)")
    a = ap.parse_args()
    a.trainer = os.path.abspath(a.trainer)
    if not os.access(a.trainer, os.X_OK):
        raise SystemExit(f"{a.trainer}: no trainer binary there (build it, or pass --trainer)")
    model = QUICK_MODEL if a.quick else MODEL
    a.steps = a.steps or (3 if a.quick else 10)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 3)
    a.timeout = a.timeout or (180 if a.quick else 900)
    gb = a.global_batch or (8 if a.quick else 16)
    Ms = [int(x) for x in (a.microbatches or ("4" if a.quick else "4,8")).split(",")]
    torch_worlds = (2,) if a.quick else (2, 4)
    os.makedirs(a.work, exist_ok=True)
    only = [s for s in (a.only or "").split(",") if s]

    def wanted(name):
        return not only or any(s in name for s in only)

    rows = []  # (name, P, schedule, M, v)
    for P in (2, 4):
        for schedule in SCHEDULES:
            for M in Ms:
                name = f"pp{P}-{schedule}-m{M}"
                if wanted(name):
                    rows.append((name, P, schedule, M, VIRTUAL.get(schedule, 1)))
    worlds = sorted({P for _, P, _, _, _ in rows} | {w for w in (2, 4) if wanted(f"dp{w}")})
    for M in Ms:
        if gb % M or any(gb % w for w in worlds):
            raise SystemExit(f"global batch {gb}: the microbatches {Ms} and the worlds {worlds} must divide it")

    import torch
    n_params = 12 * model["n_layer"] * model["n_embd"] ** 2 + (model["vocab_size"] + model["block_size"]) * model["n_embd"]
    print(f"# Pipeline parallel: trainer vs torch.distributed.pipelining\n\nCPU: {cpu_model()} "
          f"({os.cpu_count()} logical CPUs); torch {torch.__version__}; trainer {a.trainer}\n\n"
          f"GPT: {model['n_layer']} layers, width {model['n_embd']}, {model['n_head']} heads, block {model['block_size']}, "
          f"vocab {model['vocab_size']} (~{n_params / 1e6:.1f} M parameters); global batch {gb}; {a.steps} steps, "
          f"the first {a.warmup} left out of the timing; fp32, AdamW 3e-4, grad_clip 1.0, 1 thread a rank\n",
          flush=True)
    meta = {"cpu": cpu_model(), "cpus": os.cpu_count(), "torch": torch.__version__, "trainer": a.trainer,
            "model": model, "global_batch": gb, "steps": a.steps, "warmup": a.warmup, "microbatches": Ms,
            "quick": a.quick}
    results = {"meta": meta, "runs": {}}
    R = results["runs"]

    def save():
        with open(os.path.join(a.work, "pp.json"), "w") as f:
            json.dump(results, f, indent=1)

    def log(name, r):
        brief = {k: v for k, v in r.items() if k not in ("losses", "grad_norms", "check_output")}
        print(f"{name}: {brief}", file=sys.stderr, flush=True)

    R["trainer/1proc"] = run_trainer(a, "1proc", 1, model, gb)
    log("trainer/1proc", R["trainer/1proc"])
    for w in worlds:
        R[f"trainer/dp{w}"] = run_trainer(a, f"dp{w}", w, model, gb)
        log(f"trainer/dp{w}", R[f"trainer/dp{w}"])
        save()
    for name, P, schedule, M, v in rows:
        t = R[f"trainer/{name}"] = run_trainer(a, name, P, model, gb, (P, M, schedule, v))
        log(f"trainer/{name}", t)
        if not a.no_pytorch and P in torch_worlds:
            py = R[f"pytorch/{name}"] = run_pytorch(a, name, P, M, schedule, v, t.get("stages"), model, gb)
            log(f"pytorch/{name}", py)
        save()

    ref = R["trainer/1proc"].get("losses")
    notes = []

    def note(text):
        notes.append(text)
        return f"[{len(notes)}]"

    print("## (a) Losses, throughput, memory\n")
    print("| world | layout | schedule | M | v | trainer samples/s | pp / dp | trainer losses vs 1 process "
          "| trainer rank 0 peak RSS MiB | PyTorch samples/s | trainer / PyTorch | PyTorch losses vs 1 process "
          "| PyTorch rank 0 peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def trainer_cells(t, base):
        if t.get("no_records"):
            return [f"did not run {note(t['error'])}", "-", "-", "-"]
        mark = f" {note(t['error'])}" if "error" in t else ""
        vs_dp = (f"{t['samples_per_s'] / base['samples_per_s']:.2f}" if base and "samples_per_s" in base
                 and base is not t else "-")
        return [f"{t['samples_per_s']:.2f}{mark}", vs_dp, fmt(rel_diff(t["losses"], ref) if ref else None, ".1e"),
                fmt(t.get("peak_rss_mb"), ".0f")]

    one = R["trainer/1proc"]
    print("| " + " | ".join(["1", "one process", "-", "-", "-"] + trainer_cells(one, None) + ["-"] * 4) + " |")
    for w in worlds:
        base = R[f"trainer/dp{w}"]
        print("| " + " | ".join([str(w), f"dp {w}", "-", "-", "-"] + trainer_cells(base, None) + ["-"] * 4) + " |")
        for name, P, schedule, M, v in rows:
            if P != w:
                continue
            t, py = R[f"trainer/{name}"], R.get(f"pytorch/{name}")
            cells = [str(w), f"pp {P}", schedule, str(M), str(v)] + trainer_cells(t, base)
            if py is None:
                cells += ["not run"] + ["-"] * 3
            elif "error" in py:
                cells += [f"failed {note(py['error'])}"] + ["-"] * 3
            else:
                ratio = (f"{t['samples_per_s'] / py['samples_per_s']:.2f}" if "samples_per_s" in t else "-")
                cells += [f"{py['samples_per_s']:.2f}", ratio, fmt(rel_diff(py["losses"], ref) if ref else None, ".1e"),
                          f"{py['peak_rss_mb']:.0f}"]
            print("| " + " | ".join(cells) + " |")

    print("\n## (b) The bubble: measured (rank 0's stage) against the schedule's\n")
    print("| P | schedule | M | v | stages (units) | trainer step ms | pp_wait_ms | pp_bubble | textbook bubble "
          "| trainer check's bubble at unit costs | trainer rank 0 activation peak MiB | PyTorch step ms "
          "| PyTorch rank 0 p2p wait ms | PyTorch wait / step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, P, schedule, M, v in rows:
        t, py = R[f"trainer/{name}"], R.get(f"pytorch/{name}") or {}
        stages = " ".join(f"{lo}-{hi}" for lo, hi in t.get("stages", [])) or "-"
        pw = py.get("pp_wait_ms")
        print(f"| {P} | {schedule} | {M} | {v} | {stages} | {fmt(t.get('step_ms'), '.1f')} | "
              f"{fmt(t.get('pp_wait_ms'), '.2f')} | {fmt(t.get('pp_bubble'), '.3f')} | "
              f"{theory_bubble(schedule, P, M, v):.3f} | {fmt(t.get('unit_bubble'), '.3f')} | "
              f"{fmt(t.get('pp_act_peak_mb'), '.2f')} | "
              f"{fmt(py.get('step_ms'), '.1f')} | {fmt(pw, '.2f')} | "
              f"{fmt(pw / py['step_ms'] if pw is not None and py.get('step_ms') else None, '.3f')} |")
    print("\nTextbook bubble: (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(vM+P-1) interleaved, (P-1)/(3M+P-1) for "
          "zero bubble (ZB-H1 with F = I = W). The trainer's pp_bubble is pp_wait_ms / step_ms of rank 0's stage "
          "(the first), medians over the steps after the warm-up; PyTorch's is rank 0's time in the schedule's "
          "p2p waits (sends and receives) over its step. The activation peak is the records' pp_act_peak_mb: the most "
          "rank 0's microbatches held at once (sampled between the schedule's actions; GPipe's grows with M, 1F1B's "
          "stops at P microbatches).")
    if notes:
        print("\nNotes:\n")
        for i, text in enumerate(notes, 1):
            print(f"{i}. {text}")
    save()
    print(f"\nraw figures: {os.path.join(a.work, 'pp.json')}")


if __name__ == "__main__":
    main()
