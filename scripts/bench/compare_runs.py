#!/usr/bin/env python3
"""Two runs of the same config side by side (scripts/device_check.sh's sharding and tensor-parallel
steps): each run's train records from <root>/<name>/<run>/metrics.jsonl, a summary line per run
(steps, first and last loss, tokens/s, the record keys asked for), and the largest relative loss
difference. Exit 0 when both ran `--steps` steps, the difference is within `--tol`, and no record
of the second run carries a `--absent` key; else 1.

    compare_runs.py ROOT BASE OTHER --run gpt2_full --steps 20 --tol 1e-2 [--show KEY ...] [--absent KEY]"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--run", required=True, help="run.name: the folder under each run's out-dir")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--show", nargs="*", default=[], help="record keys printed from each run's last record")
    ap.add_argument("--absent", help="a key no record of OTHER may carry")
    ap.add_argument("--label", default="", help="what is compared, for the verdict line")
    a = ap.parse_args()
    recs = {}
    for name in (a.base, a.other):
        path = os.path.join(a.root, name, a.run, "metrics.jsonl")
        if not os.path.exists(path):
            sys.exit(f"{name}: no metrics ({path})")
        recs[name] = [r for r in map(json.loads, open(path)) if r.get("kind") == "train"]
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(recs[a.base], recs[a.other]))
    for name, rs in recs.items():
        last = rs[-1]
        extra = ", ".join(f"{k} {last.get(k, 'absent')}" for k in a.show)
        print(f"{name}: {len(rs)} steps, loss {rs[0]['loss']:.4f} -> {last['loss']:.4f}, "
              f"{last.get('tokens_per_s', 0):.0f} tok/s" + (f", {extra}" if extra else ""))
    absent_ok = a.absent is None or all(a.absent not in r for r in recs[a.other])
    print(f"{a.label or a.other + ' vs ' + a.base}: max relative loss difference {worst:.3g} (tolerance {a.tol:g})"
          + (f"; no {a.absent} in {a.other}'s records: {absent_ok}" if a.absent else ""))
    ok = len(recs[a.base]) == len(recs[a.other]) == a.steps and worst <= a.tol and absent_ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
