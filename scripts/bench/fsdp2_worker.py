"""One rank of PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard, Gloo on CPU) training the
nanoGPT reference (tests/reference/nanogpt_ref.py) on random tokens: bench_sharding.py's reference.
Each block is its own shard unit, then the whole model, as FSDP2's examples do. Rank 0 writes the
steady throughput (samples/s over all ranks) and its peak RSS to --out."""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
from nanogpt_ref import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", required=True, help="initial weights (safetensors, the trainer's names)")
    ap.add_argument("--tokens", required=True, help="uint16 tokens: exactly batch x world windows")
    a = ap.parse_args()
    m = json.loads(a.model)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=m["vocab_size"], block_size=m["block_size"], n_layer=m["n_layer"],
                          n_head=m["n_head"], n_embd=m["n_embd"], dropout=0.0, bias=m["bias"]))
    from safetensors.torch import load_file
    model.load_state_dict(load_file(a.init), strict=True)
    import numpy as np
    T, B, r = m["block_size"], a.batch, dist.get_rank()
    tokens = torch.from_numpy(np.fromfile(a.tokens, dtype=np.uint16).astype(np.int64))
    windows = torch.stack([tokens[i * T:i * T + T + 1] for i in range(B * dist.get_world_size())])
    x, y = windows[r * B:(r + 1) * B, :T], windows[r * B:(r + 1) * B, 1:]  # this rank's share, every step
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    times, losses = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        logits = model(x)
        logits = logits[0] if isinstance(logits, tuple) else logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the ranks' mean, as the trainer logs it
        losses.append(mean.item() / dist.get_world_size())
        times.append(time.perf_counter() - t0)
    steady = sorted(times[a.warmup:])
    med = steady[len(steady) // 2]
    if dist.get_rank() == 0:
        with open(a.out, "w") as f:
            json.dump({"samples_per_s": a.batch * dist.get_world_size() / med,
                       "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                       "losses": losses}, f)
    dist.barrier()
    # no destroy_process_group / interpreter teardown: Gloo's threads at exit have aborted a
    # finished run ("terminate called without an active exception") after the figures were written
    os._exit(0)


if __name__ == "__main__":
    main()
