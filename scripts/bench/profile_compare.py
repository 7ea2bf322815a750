#!/usr/bin/env python3
"""Side-by-side op self times of two Chrome traces of the same workload: the trainer's
(profile.steps -> <run dir>/profile/trace_rank0.json) and the PyTorch reference's (python_ref.py
with spec "profile"), both written by the PyTorch (Kineto) profiler.

    python scripts/bench/profile_compare.py TRAINER_TRACE PYTHON_TRACE [--steps N] [--top 30]

Self time = an event's duration less that of the events directly inside it on the same thread
(the trainer's ops_rank<r>.txt uses the same rule). Prints ms per step for each side and the
difference, largest differences first, so that a gap between the two sides points at its ops.
"""
import argparse
import collections
import json


def self_times(path):
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in (
        "cpu_op", "user_annotation", "python_function", "kernel", "gpu_memcpy", "cuda_runtime")]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    total, calls = collections.Counter(), collections.Counter()
    for es in by_thread.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, child time]

        def close(item):
            e, child = item
            total[e["name"]] += max(0.0, e["dur"] - child)
            calls[e["name"]] += 1

        for e in es:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                close(stack.pop())
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        while stack:
            close(stack.pop())
    return total, calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trainer_trace")
    ap.add_argument("python_trace")
    ap.add_argument("--steps", type=int, default=10, help="steps recorded in each trace")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    t, tc = self_times(a.trainer_trace)
    p, pc = self_times(a.python_trace)
    names = set(t) | set(p)
    rows = sorted(names, key=lambda n: -abs(t.get(n, 0) - p.get(n, 0)))
    us = 1000.0 * a.steps
    print(f"{'op':<60} {'trainer ms':>10} {'python ms':>10} {'diff':>8} {'calls t/p':>12}   (per step)")
    for n in rows[:a.top]:
        print(f"{n[:60]:<60} {t.get(n, 0) / us:>10.3f} {p.get(n, 0) / us:>10.3f} {(t.get(n, 0) - p.get(n, 0)) / us:>8.3f} "
              f"{tc.get(n, 0) / a.steps:>5.1f}/{pc.get(n, 0) / a.steps:<5.1f}")
    print(f"{'(all self time)':<60} {sum(t.values()) / us:>10.3f} {sum(p.values()) / us:>10.3f}")


if __name__ == "__main__":
    main()
