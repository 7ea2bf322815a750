"""One rank of PyTorch's own pipeline parallel (torch.distributed.pipelining: a PipelineStage per stage
and ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B or ScheduleInterleavedZeroBubble, Gloo on
CPU, run under torchrun) training the nanoGPT reference (tests/reference/nanogpt_ref.py) on the
tokens bench_pp.py wrote: bench_pp.py's reference for `dist.pipeline_parallel`.

The model is cut into the trainer's units (0 the embeddings wte + wpe, 1..n_layer the blocks,
n_layer + 1 the head ln_f + lm_head) and the units into contiguous stages by --stages ("0-4,5-9",
bench_pp.py passes the split `trainer check` prints for the same config, so both sides pipeline the
same stages). Stage s lives on rank s % P (with v stages a rank under the interleaved schedule:
Megatron's and PyTorch's looped placement), built by hand as a PipelineStage over a module of its
units (no tracing: the reference's forward is a plain chain).

GPT's tied wte / lm_head: the first stage (rank 0) holds the embedding's copy, the last stage (rank
P - 1) the head's, both the same initial tensor. After each step's backward the two gradients are
summed (all_reduce over a group of those two ranks), which is the tied parameter's gradient, so both
copies take the same clipped AdamW update and stay equal (checked at the end, bit for bit): what the
trainer does. The gradient norm for clipping is over the whole model: each rank's squared norm of
the parameters it trains (the tied weight counted once, on the first stage's rank), summed over the
ranks by an all_reduce, then every gradient scaled by min(1, clip / (norm + 1e-6)) as torch's
clip_grad_norm_ does. AdamW lr 3e-4, weight decay 0, fp32.

The schedule's loss is cross entropy (mean) a microbatch, with scale_grads (the gradients divided by
M): the M equal microbatches' mean, the whole batch's loss. The step's loss is the mean of the last
stage's M losses, broadcast to rank 0, which writes the losses, the median step time (after
--warmup steps), samples/s and its peak RSS to --out and prints them as one JSON line."""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
from nanogpt_ref import GPT, GPTConfig  # noqa: E402

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")


class StageModule(nn.Module):
    """Units first..last (inclusive) of the reference GPT. The embedding and the head get their own
    copies of the tied weight (the caller keeps the two in step)."""

    def __init__(self, gpt, first, last):
        super().__init__()
        n_layer = len(gpt.transformer.h)
        self.first, self.last, self.n_layer = first, last, n_layer
        tied = gpt.lm_head.weight.detach()
        if first == 0:
            self.wte = nn.Embedding.from_pretrained(tied.clone(), freeze=False)
            self.wpe = gpt.transformer.wpe
        lo, hi = max(first, 1) - 1, min(last, n_layer)  # the blocks' indices [lo, hi)
        self.blocks = nn.ModuleList([gpt.transformer.h[i] for i in range(lo, hi)])
        if last == n_layer + 1:
            self.ln_f = gpt.transformer.ln_f
            self.lm_head = nn.Linear(tied.shape[1], tied.shape[0], bias=False)
            with torch.no_grad():
                self.lm_head.weight.copy_(tied)

    def forward(self, x):
        if self.first == 0:  # x: (B, T) token ids
            pos = torch.arange(x.shape[1], dtype=torch.long, device=x.device)
            x = self.wte(x) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        if self.last == self.n_layer + 1:
            x = self.lm_head(self.ln_f(x))  # (B, T, V)
        return x


def parse_stages(text, n_units):
    ranges = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        ranges.append((int(a), int(b or a)))
    flat = [u for a, b in ranges for u in range(a, b + 1)]
    if flat != list(range(n_units)):
        raise SystemExit(f"--stages {text!r}: the stages must cover units 0..{n_units - 1} in order, each once")
    return ranges


def balanced_stages(n_layer, n_stages):
    """A fallback split when --stages is not given: the blocks as even as they go, the embeddings with
    the first stage's blocks and the head with the last's (units 0 and n_layer + 1)."""
    n_units = n_layer + 2
    if n_stages > n_units:
        raise SystemExit(f"{n_stages} stages for {n_units} units")
    bounds = [round(i * n_units / n_stages) for i in range(n_stages + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(n_stages)]


def time_p2p_waits():
    """Seconds this rank spends in the schedules' waits on their point-to-point work (every schedule
    waits through schedules._wait_batch_p2p, a module global looked up at each call): [total], which
    the caller resets each step. The sends are in it too (Gloo's complete at once, or are batched with
    a receive): it is the time the rank's stages stood still for a neighbour, as pp_wait_ms."""
    from torch.distributed.pipelining import schedules
    inner, total = schedules._wait_batch_p2p, [0.0]

    def timed(work):
        t = time.perf_counter()
        try:
            return inner(work)
        finally:
            total[0] += time.perf_counter() - t

    schedules._wait_batch_p2p = timed
    return total


def make_schedule(kind, stages, m, loss_fn):
    from torch.distributed.pipelining import (Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                              ScheduleInterleavedZeroBubble)
    if kind == "gpipe":
        return ScheduleGPipe(stages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=True)
    if kind == "1f1b":
        return Schedule1F1B(stages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=True)
    if kind == "interleaved_1f1b":
        return ScheduleInterleaved1F1B(stages, n_microbatches=m, loss_fn=loss_fn, scale_grads=True)
    # ZB1P, the interleaved zero bubble schedule; with one stage a rank it is ZB-H1 (the trainer's)
    return ScheduleInterleavedZeroBubble(stages, n_microbatches=m, loss_fn=loss_fn, scale_grads=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, required=True, help="sequences a step (the whole batch: dp 1)")
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--schedule", choices=SCHEDULES, required=True)
    ap.add_argument("--virtual-stages", type=int, default=1, help="stages a rank (interleaved_1f1b)")
    ap.add_argument("--stages", help="unit ranges of the stages in order, e.g. 0-4,5-9 (default: an even split)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", required=True, help="initial weights (safetensors, the trainer's names)")
    ap.add_argument("--tokens", required=True, help="uint16 tokens: exactly --batch windows")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    a = ap.parse_args()
    m = json.loads(a.model)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from torch.distributed.pipelining import PipelineStage
    world, rank = dist.get_world_size(), dist.get_rank()
    P, v = world, a.virtual_stages
    if P < 2:
        raise SystemExit("pp_worker.py runs a pipeline of at least 2 ranks")
    if v > 1 and a.schedule != "interleaved_1f1b":
        raise SystemExit("--virtual-stages > 1 is for interleaved_1f1b")
    if a.batch % a.microbatches:
        raise SystemExit(f"{a.microbatches} microbatches do not divide a batch of {a.batch}")
    n_stages = P * v
    n_layer = m["n_layer"]
    ranges = parse_stages(a.stages, n_layer + 2) if a.stages else balanced_stages(n_layer, n_stages)
    if len(ranges) != n_stages:
        raise SystemExit(f"{len(ranges)} stages given for {P} ranks x {v} virtual stages")

    gpt = GPT(GPTConfig(vocab_size=m["vocab_size"], block_size=m["block_size"], n_layer=n_layer,
                        n_head=m["n_head"], n_embd=m["n_embd"], dropout=0.0, bias=m["bias"]))
    from safetensors.torch import load_file
    gpt.load_state_dict(load_file(a.init), strict=True)
    mine = [s for s in range(n_stages) if s % P == rank]  # rank r: stages r, r + P, ... (looped placement)
    modules = {s: StageModule(gpt, *ranges[s]) for s in mine}
    del gpt  # the other stages' weights go: a rank holds its own stages only
    dev = torch.device("cpu")
    stages = [PipelineStage(modules[s], s, n_stages, dev) for s in mine]

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))

    schedule = make_schedule(a.schedule, stages, a.microbatches, loss_fn)
    waited = time_p2p_waits()
    first, last = 0 in modules, (n_stages - 1) in modules
    # the tied weight's two copies: the first stage's (rank 0) and the last stage's (rank P - 1)
    tied_group = dist.new_group([0, (n_stages - 1) % P])
    tied = modules[0].wte.weight if first else (modules[n_stages - 1].lm_head.weight if last else None)
    params = [p for s in mine for p in modules[s].parameters()]
    counted = [p for p in params if not (last and p is modules[n_stages - 1].lm_head.weight)]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)

    import numpy as np
    T, B = m["block_size"], a.batch
    tokens = torch.from_numpy(np.fromfile(a.tokens, dtype=np.uint16).astype(np.int64))
    windows = torch.stack([tokens[i * T:i * T + T + 1] for i in range(B)])
    x, y = windows[:, :T].contiguous(), windows[:, 1:].contiguous()

    times, losses, norms = [], [], []
    waits = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        waited[0] = 0.0
        mb_losses = []
        if first and last:
            schedule.step(x, target=y, losses=mb_losses)
        elif first:
            schedule.step(x)
        elif last:
            schedule.step(target=y, losses=mb_losses)
        else:
            schedule.step()
        if tied is not None:
            dist.all_reduce(tied.grad, group=tied_group)  # SUM: the tied parameter's gradient
        sq = torch.zeros((), dtype=torch.float64)
        for p in counted:
            if p.grad is not None:
                sq += p.grad.double().pow(2).sum()
        dist.all_reduce(sq)
        norm = sq.sqrt().float()
        if a.grad_clip > 0:
            torch._foreach_mul_([p.grad for p in params if p.grad is not None],
                                (a.grad_clip / (norm + 1e-6)).clamp_max(1.0))
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = torch.stack([l.detach() for l in mb_losses]).mean() if last else torch.zeros(())
        dist.broadcast(loss, src=(n_stages - 1) % P)
        losses.append(loss.item())
        norms.append(norm.item())
        times.append(time.perf_counter() - t0)
        waits.append(waited[0])

    # the tied copies must have stayed equal (the same gradient, the same AdamW update)
    same = torch.zeros(())
    if tied is not None:
        other = tied.detach().clone()
        dist.broadcast(other, src=0, group=tied_group)
        same = (other != tied.detach()).any().float()
    dist.all_reduce(same)
    steady = sorted(times[a.warmup:] or times[-1:])
    med = steady[len(steady) // 2]
    steady_waits = sorted(waits[a.warmup:] or waits[-1:])
    if rank == 0:
        out = {"samples_per_s": B / med, "step_ms": med * 1e3,
               "pp_wait_ms": steady_waits[len(steady_waits) // 2] * 1e3, "peak_rss_mb": resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 1024.0, "losses": losses, "grad_norms": norms,
               "schedule": type(schedule).__name__, "stages": [list(r) for r in ranges],
               "tied_copies_equal": same.item() == 0}
        with open(a.out, "w") as f:
            json.dump(out, f)
        print(json.dumps(out), flush=True)
    dist.barrier()
    # no destroy_process_group / interpreter teardown: Gloo's threads at exit have aborted a
    # finished run ("terminate called without an active exception") after the figures were written
    os._exit(0)


if __name__ == "__main__":
    main()
