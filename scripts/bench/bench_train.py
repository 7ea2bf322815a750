#!/usr/bin/env python3
"""trainer vs PyTorch-Python eager, side by side, on the same workloads.

    python scripts/bench/bench_train.py [--trainer build/trainer] [--quick] [--python-only]
                                        [--device cpu|cuda] [--rounds 3] [--json F] [--markdown F]

Sections (--only compare,loader,memory):
- compare: each workload runs `trainer run` (synthetic data of the workload's shape, the reference's
  initial weights through model.init_from) and the eager PyTorch loop of python_ref.py ALTERNATELY,
  `--rounds` times each (the order flips every round, so that drift in machine load hits both
  sides alike), each run in its own process. A run's figure is the median samples/s of its log
  intervals after the warm-up steps; a side's figure is the median over its runs; the ratio is
  trainer / PyTorch.
- loader: configs/quickstart.yaml with its real Fashion-MNIST idx loader vs data.format synthetic
  at the same shape, alternately; ratio real / synthetic (trainer only).
- memory: peak RSS of short runs, fp32 vs bf16, without vs with activation checkpointing, for the
  trainer (peak_rss_mb of metrics.jsonl) and the reference (getrusage ru_maxrss).
- graphs (--device cuda): ResNet-18-CIFAR, bf16, batch 128: the trainer without and with
  train.cuda_graphs and the PyTorch eager loop, in turn; ratios graphs / eager and graphs / PyTorch.
With --device cuda: GPT-2 124M (bf16, block 1024) and ResNet-50 (bf16, channels_last, 224x224)
with tokens/s, images/s, MFU and peak CUDA memory (scripts/device_check.sh runs this).

Prints a Markdown report and writes it (--markdown) with the JSON of every run (--json).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import trainer_side  # noqa: E402
import workloads  # noqa: E402
from stats import median, write_reports  # noqa: E402

PEAK_BF16_TFLOPS = 989.0  # H100/H200 SXM dense bf16: the MFU denominator


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def gpu_name(python):
    code = "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return r.stdout.strip()


def run_python(python, spec, work_dir, tag):
    """One reference run in its own process; returns its result dict (or raises with its stderr)."""
    spec_path = os.path.join(work_dir, f"{tag}.spec.json")
    result_path = os.path.join(work_dir, f"{tag}.result.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    t0 = time.perf_counter()
    p = subprocess.run([python, os.path.join(HERE, "python_ref.py"), spec_path, result_path], capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"python_ref.py failed ({p.returncode}) for {tag}:\n{p.stderr.strip()[-1500:]}")
    with open(result_path) as f:
        out = json.load(f)
    out["wall_s"] = time.perf_counter() - t0
    return out


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- sections --------------------------------------------------------------------------------------

def compare(args, work, env):
    todo = (workloads.cuda_compare_workloads(args.quick, args.threads) if args.device == "cuda"
            else workloads.cpu_compare_workloads(args.quick, args.threads))
    if args.workload:
        todo = [w for w in todo if any(s in w["name"] for s in args.workload)]
    results = []
    for w in todo:
        wdir = os.path.join(work, w["name"])
        os.makedirs(wdir, exist_ok=True)
        entry = {"workload": w, "trainer": {"runs": [], "errors": []}, "python": {"runs": [], "errors": []}}
        init = None
        if not args.python_only:
            init = os.path.join(wdir, "init.safetensors")  # both sides start from the same weights
            run_python(args.python, dict(w, init_out=init, init_only=True), wdir, "init")
        for r in range(args.rounds):
            sides = ["trainer", "python"] if r % 2 == 0 else ["python", "trainer"]
            for side in sides:
                if side == "trainer" and args.python_only:
                    continue
                try:
                    if side == "trainer":
                        res = trainer_side.run_workload(args.trainer, w, os.path.join(wdir, f"trainer{r}"), init, env)
                    else:
                        res = run_python(args.python, w, wdir, f"python{r}")
                    entry[side]["runs"].append(res)
                    log(f"[bench] {w['name']} round {r + 1}/{args.rounds} {side}: "
                        f"{res['samples_per_s']:.1f} samples/s")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    entry[side]["errors"].append(str(e))
                    log(f"[bench] {w['name']} round {r + 1} {side} FAILED: {e}")
        for side in ("trainer", "python"):
            runs = entry[side]["runs"]
            if runs:
                entry[side]["samples_per_s"] = median([x["samples_per_s"] for x in runs])
                for key in ("step_ms", "data_wait_ms", "compute_ms", "optim_ms", "peak_rss_mb",
                            "cuda_peak_allocated_mb", "mfu"):
                    vals = [x[key] for x in runs if key in x]
                    if vals:
                        entry[side][key] = median(vals)
                if w["model"]["arch"] == "gpt":
                    entry[side]["tokens_per_s"] = entry[side]["samples_per_s"] * w["model"]["block_size"]
        if "samples_per_s" in entry["trainer"] and "samples_per_s" in entry["python"]:
            entry["ratio"] = entry["trainer"]["samples_per_s"] / entry["python"]["samples_per_s"]
        # round by round (both sides of a round ran back to back): drift of the machine's speed over
        # the whole benchmark moves these less than it moves the ratio of the two medians
        pairs = [t["samples_per_s"] / p["samples_per_s"]
                 for t, p in zip(entry["trainer"]["runs"], entry["python"]["runs"])]
        if pairs and len(entry["trainer"]["runs"]) == len(entry["python"]["runs"]) == args.rounds:
            entry["paired_ratios"] = pairs
            entry["paired_median"] = median(pairs)
        flops = next((x["flops_per_token"] for x in entry["python"]["runs"] if "flops_per_token" in x), None)
        if w["device"] == "cuda" and flops:
            entry["flops_per_token"] = flops
            for side in ("trainer", "python"):
                if "tokens_per_s" in entry[side]:
                    entry[side]["mfu_989"] = entry[side]["tokens_per_s"] * flops / (PEAK_BF16_TFLOPS * 1e12)
        results.append(entry)
    return results


def graphs(args, work, env):
    w = workloads.cuda_graph_workload(args.quick, args.threads)
    wdir = os.path.join(work, w["name"])
    os.makedirs(wdir, exist_ok=True)
    out = {"workload": w, **{side: {"runs": [], "errors": []} for side in ("eager", "graphs", "python")}}
    init = None
    if not args.python_only:
        init = os.path.join(wdir, "init.safetensors")
        run_python(args.python, dict(w, init_out=init, init_only=True), wdir, "init")
    sides = ["eager", "graphs", "python"]
    for r in range(args.rounds):
        for side in sides[r % 3:] + sides[:r % 3]:  # the order turns every round
            if side != "python" and args.python_only:
                continue
            try:
                if side == "python":
                    res = run_python(args.python, w, wdir, f"python{r}")
                else:
                    run_w = dict(w, cuda_graphs=side == "graphs")
                    run_dir = os.path.join(wdir, f"{side}{r}")
                    res = trainer_side.run_workload(args.trainer, run_w, run_dir, init, env)
                    with open(os.path.join(run_dir, f"{w['name']}.log")) as f:
                        text = f.read()
                    res["captured"] = "train.cuda_graphs: step" in text and "captured" in text
                    if side == "graphs" and not res["captured"]:
                        why = [x for x in text.splitlines() if "train.cuda_graphs" in x]
                        raise RuntimeError("the step was not captured: " + (why[-1] if why else "no graph line in the log"))
                out[side]["runs"].append(res)
                log(f"[bench] {w['name']} round {r + 1}/{args.rounds} {side}: {res['samples_per_s']:.1f} samples/s")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                out[side]["errors"].append(str(e))
                log(f"[bench] {w['name']} round {r + 1} {side} FAILED: {e}")
    for side in sides:
        runs = out[side]["runs"]
        if runs:
            out[side]["samples_per_s"] = median([x["samples_per_s"] for x in runs])
            for key in ("step_ms", "cuda_peak_allocated_mb"):
                vals = [x[key] for x in runs if key in x]
                if vals:
                    out[side][key] = median(vals)
    sps = {side: out[side].get("samples_per_s") for side in sides}
    for a, b in (("graphs", "eager"), ("graphs", "python"), ("eager", "python")):
        if sps[a] and sps[b]:
            out[f"{a}/{b}"] = sps[a] / sps[b]
    return out


def loader(args, work, env):
    q = workloads.quickstart_loader_runs(REPO, args.quick)
    out = {"config": os.path.relpath(q["config"], REPO), "steps": q["steps"], "warmup": q["warmup"],
           "real": {"runs": [], "errors": []}, "synthetic": {"runs": [], "errors": []}}
    ldir = os.path.join(work, "quickstart")
    os.makedirs(ldir, exist_ok=True)
    for r in range(args.rounds):
        for kind in (["real", "synthetic"] if r % 2 == 0 else ["synthetic", "real"]):
            overrides = [x for s in q[kind] for x in ("--set", s)]
            run_dir = os.path.join(ldir, "runs", f"quickstart-{kind}")
            if os.path.exists(run_dir):
                shutil.rmtree(run_dir)
            try:
                res = trainer_side.run_trainer(args.trainer, [q["config"], *overrides, "--out-dir",
                                                              os.path.join(ldir, "runs")],
                                               run_dir, q["warmup"], os.path.join(ldir, f"{kind}{r}.log"), env=env)
                out[kind]["runs"].append(res)
                log(f"[bench] quickstart round {r + 1}/{args.rounds} {kind}: {res['samples_per_s']:.1f} samples/s")
            except trainer_side.TrainerRunError as e:
                out[kind]["errors"].append(str(e))
                log(f"[bench] quickstart {kind} FAILED: {e}")
    for kind in ("real", "synthetic"):
        runs = out[kind]["runs"]
        if runs:
            out[kind]["samples_per_s"] = median([x["samples_per_s"] for x in runs])
            for key in ("step_ms", "data_wait_ms", "compute_ms", "optim_ms"):
                vals = [x[key] for x in runs if key in x]
                if vals:
                    out[kind][key] = median(vals)
    if "samples_per_s" in out["real"] and "samples_per_s" in out["synthetic"]:
        out["ratio"] = out["real"]["samples_per_s"] / out["synthetic"]["samples_per_s"]
    return out


def memory(args, work, env):
    rows = []
    for w in workloads.memory_workloads(args.quick, args.threads):
        wdir = os.path.join(work, w["name"])
        os.makedirs(wdir, exist_ok=True)
        row = {"workload": w}
        for side in ("trainer", "python"):
            if side == "trainer" and args.python_only:
                continue
            try:
                if side == "trainer":
                    res = trainer_side.run_workload(args.trainer, w, os.path.join(wdir, "trainer"), None, env)
                else:
                    res = run_python(args.python, w, wdir, "python")
                row[side] = res
                log(f"[bench] {w['name']} {side}: peak RSS {res.get('peak_rss_mb', float('nan')):.0f} MiB")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                row[side] = {"error": str(e)}
                log(f"[bench] {w['name']} {side} FAILED: {e}")
        rows.append(row)
    return rows


# --- report ----------------------------------------------------------------------------------------

def first_and_last(err):
    lines = [x.strip() for x in err.splitlines() if x.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"


def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def split_text(s):
    if "step_ms" not in s:
        return "-"
    parts = [f"{s['step_ms']:.1f}"]
    if "data_wait_ms" in s:
        parts.append(f"data {s['data_wait_ms']:.1f} / compute {s.get('compute_ms', 0):.1f} / "
                     f"optim {s.get('optim_ms', 0):.1f}")
    return " = ".join(parts) if len(parts) > 1 else parts[0]


def markdown(report):
    m = report["meta"]
    lines = [f"### bench_train.py, {m['date']}", "",
             f"- machine: {m['machine']}, {m['cores']} cores{(', GPU ' + m['gpu']) if m.get('gpu') else ''}; "
             f"torch/LibTorch {m['torch']}; {m['threads']} intra-op threads on both sides",
             f"- command: `{m['command']}`",
             f"- {m['rounds']} alternating round(s) per side; load average before/after: "
             f"{m['load_before']} / {m['load_after']}", ""]
    if report.get("compare"):
        cuda = report["meta"]["device"] == "cuda"
        head = ("| workload | batch | trainer samples/s | PyTorch samples/s | trainer / PyTorch | paired by round "
                "| trainer step ms (split) | PyTorch step ms |")
        if cuda:
            head = ("| workload | batch | trainer samples/s | PyTorch samples/s | trainer / PyTorch | tokens/s "
                    "trainer / PyTorch | MFU (989 TF/s) trainer / PyTorch | peak CUDA MiB trainer / PyTorch |")
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        for e in report["compare"]:
            w, t, p = e["workload"], e["trainer"], e["python"]
            n_t, n_p = len(t["runs"]), len(p["runs"])
            ratio = f"**{e['ratio']:.2f}**" if "ratio" in e else ("failed" if t["errors"] else "-")
            base = (f"| {w['name']} | {w['batch_size']} | {fmt(t.get('samples_per_s'), 1)} ({n_t}) | "
                    f"{fmt(p.get('samples_per_s'), 1)} ({n_p}) | {ratio} |")
            if cuda:
                mfu = " / ".join(f"{100 * s['mfu_989']:.1f} %" if "mfu_989" in s else "-" for s in (t, p))
                tok = " / ".join(fmt(s.get("tokens_per_s")) for s in (t, p))
                mem = " / ".join(fmt(s.get("cuda_peak_allocated_mb")) for s in (t, p))
                lines.append(base + f" {tok} | {mfu} | {mem} |")
            else:
                paired = "-"
                if "paired_median" in e:
                    lo, hi = min(e["paired_ratios"]), max(e["paired_ratios"])
                    paired = f"{e['paired_median']:.2f} ({lo:.2f}-{hi:.2f})"
                lines.append(base + f" {paired} | {split_text(t)} | {fmt(p.get('step_ms'), 1)} |")
        lines += ["", "(n) = runs; figures are medians; paired by round = median (range) of the rounds' "
                  "trainer / PyTorch. GPT tokens/s = samples/s x block size."
                  + (" MFU = tokens/s x (6N + 12 n_layer block n_embd) / 989e12, N = parameters without wpe."
                     if cuda else ""), ""]
        errors = [f"- {e['workload']['name']} {side}: {first_and_last(err)}" for e in report["compare"]
                  for side in ("trainer", "python") for err in e[side]["errors"]]
        if errors:
            lines += ["Failures:", *errors, ""]
    g = report.get("graphs")
    if g:
        w = g["workload"]
        lines += [f"| {w['name']} | samples/s | step ms | peak CUDA MiB | runs |", "|---|---|---|---|---|"]
        for side, label in (("eager", "trainer"), ("graphs", "trainer, train.cuda_graphs"), ("python", "PyTorch eager")):
            s = g[side]
            lines.append(f"| {label} | {fmt(s.get('samples_per_s'), 1)} | {fmt(s.get('step_ms'), 2)} | "
                         f"{fmt(s.get('cuda_peak_allocated_mb'))} | {len(s['runs'])} |")
        ratios = ", ".join(f"{k} **{g[k]:.2f}**" for k in ("graphs/eager", "graphs/python", "eager/python") if k in g)
        lines += ["", f"ratios: {ratios or '-'}", ""]
        lines += [f"- {side} FAILED: {first_and_last(err)}" for side in ("eager", "graphs", "python")
                  for err in g[side]["errors"]]
    q = report.get("loader")
    if q:
        lines += ["| quickstart (batch 128) | samples/s | step ms (split) | runs |", "|---|---|---|---|"]
        for kind in ("real", "synthetic"):
            s = q[kind]
            lines.append(f"| {kind} | {fmt(s.get('samples_per_s'), 1)} | {split_text(s)} | {len(s['runs'])} |")
        lines += ["", f"real / synthetic: **{q['ratio']:.3f}**" if "ratio" in q else "real / synthetic: -", ""]
        for kind in ("real", "synthetic"):
            for err in q[kind]["errors"]:
                lines.append(f"- {kind} FAILED: {first_and_last(err)}")
    if report.get("memory"):
        lines += ["| memory workload | trainer peak RSS MiB | PyTorch peak RSS MiB (before training) |",
                  "|---|---|---|"]
        for row in report["memory"]:
            t, p = row.get("trainer", {}), row.get("python", {})
            tv = fmt(t.get("peak_rss_mb")) if "error" not in t else "failed"
            pv = (f"{fmt(p.get('peak_rss_mb'))} ({fmt(p.get('rss_before_training_mb'))})" if "error" not in p
                  else "failed")
            lines.append(f"| {row['workload']['name']} | {tv} | {pv} |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", default=os.path.join(REPO, "build", "trainer"), help="trainer binary")
    ap.add_argument("--python", default=sys.executable, help="Python with torch for the reference side")
    ap.add_argument("--python-only", action="store_true", help="run only the PyTorch reference side")
    ap.add_argument("--quick", action="store_true", help="a short smoke version (few steps, 1 round)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--rounds", type=int, default=None, help="runs per side (default 3; --quick: 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads of both sides")
    ap.add_argument("--only", default=None,
                    help="sections: compare,loader,memory,graphs (default: cpu compare,loader,memory; cuda compare,graphs)")
    ap.add_argument("--workload", action="append", help="run only compare workloads whose name contains this")
    ap.add_argument("--work-dir", default=None, help="where configs, runs and logs go (default: a temp folder)")
    ap.add_argument("--json", default=None, help="write the full results here")
    ap.add_argument("--markdown", default=None, help="write the Markdown report here")
    a = ap.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 3)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    default_sections = "compare,graphs" if a.device == "cuda" else "compare,loader,memory"
    a.sections = (a.only or default_sections).split(",")
    unknown = set(a.sections) - {"compare", "loader", "memory", "graphs"}
    if unknown:
        ap.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}; known: compare, loader, memory, graphs")
    if "graphs" in a.sections and a.device != "cuda":
        ap.error("--only graphs: CUDA graphs need --device cuda")
    if a.python_only:
        a.sections = [s for s in a.sections if s != "loader"]  # the loader section is trainer-only
    elif not os.access(a.trainer, os.X_OK):
        ap.error(f"--trainer {a.trainer}: not an executable file (build it, or use --python-only)")
    return a


def main(argv):
    args = parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_train_")
    os.makedirs(work, exist_ok=True)
    log(f"[bench] work dir {work}")
    env = dict(os.environ)
    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    report = {"meta": {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "cores": os.cpu_count(),
        "gpu": gpu_name(args.python) if args.device == "cuda" else "", "torch": torch_version,
        "threads": args.threads, "rounds": args.rounds, "device": args.device,
        "command": " ".join(["python", os.path.relpath(__file__, REPO)] + argv),
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }}
    if "compare" in args.sections:
        report["compare"] = compare(args, work, env)
    if "graphs" in args.sections:
        report["graphs"] = graphs(args, work, env)
    if "loader" in args.sections:
        report["loader"] = loader(args, work, env)
    if "memory" in args.sections:
        report["memory"] = memory(args, work, env)
    report["meta"]["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    write_reports(markdown(report), args.markdown, report, args.json)
    failed = any(e[s]["errors"] and not e[s]["runs"] for e in report.get("compare", []) for s in ("trainer", "python"))
    g = report.get("graphs")
    failed = failed or bool(g and any(g[s]["errors"] and not g[s]["runs"] for s in ("eager", "graphs", "python")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
