"""Small statistics shared by the benchmark scripts (no torch import: the harness stays light)."""


def median(values):
    v = sorted(values)
    if not v:
        raise ValueError("median of no values")
    k = len(v)
    return v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])


def steady(intervals, warmup):
    """The log intervals that start after the first `warmup` steps. An interval is a dict with `step`
    (steps done at its end) and `steps` (steps it covers); if none qualifies, the last one (a run too
    short for its warm-up still gives a figure, flagged by the caller through the interval count)."""
    kept = [iv for iv in intervals if iv["step"] - iv["steps"] >= warmup]
    return kept or intervals[-1:]


def write_reports(text, markdown_path=None, data=None, json_path=None):
    """Prints a benchmark's Markdown report and writes it (and its data as JSON) where asked."""
    import json
    print(text)
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(text + "\n")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1, default=str)
