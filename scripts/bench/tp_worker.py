"""One rank of PyTorch's own tensor parallel (torch.distributed.tensor.parallel.parallelize_module over
a DeviceMesh, Gloo on CPU) training the nanoGPT reference (tests/reference/nanogpt_ref.py) on the
tokens bench_tp.py wrote: bench_tp.py's reference for `dist.tensor_parallel`.

The plan is Megatron's, as torchtitan writes it: q, k and v column-parallel (the reference's fused
c_attn is cut into three Linears first, so that a rank's columns are whole heads, which is what the
trainer's qkv_column_parallel does), the attention's c_proj row-parallel, the MLP's c_fc column- and
c_proj row-parallel. wte / lm_head (tied) and the LayerNorms stay replicated: the trainer shards the
vocabulary, which at 256 tokens is 0.3 % of the model. --sequence-parallel adds SequenceParallel on
the LayerNorms, the blocks' input cut along the sequence and row-parallel outputs reduce-scattered
(torchtitan's plan). With dp > 1 the gradients are averaged over the mesh's dp dimension (SUM, then
divided: Gloo's AVG is not trusted, pytorch#162338), or with --fsdp the model is sharded over dp by
FSDP2 (fully_shard on the dp sub-mesh, after TP: PyTorch's 2-D recipe).

Rank 0 writes the steady throughput (samples/s over all ranks), its peak RSS, the losses and the
bytes the forward saves for backward (saved_tensors_hooks, one count per storage) to --out."""
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


class SplitAttention(nn.Module):
    """nanoGPT's attention with c_attn cut into q, k, v (the same arithmetic); the heads per rank come
    from the local width, so it runs unchanged whole or column-parallel."""

    def __init__(self, attn, head_size):
        super().__init__()
        C = attn.c_proj.weight.shape[0]
        w, b = attn.c_attn.weight.detach(), attn.c_attn.bias
        self.q, self.k, self.v = (nn.Linear(C, C, bias=b is not None) for _ in range(3))
        with torch.no_grad():
            for i, lin in enumerate((self.q, self.k, self.v)):
                lin.weight.copy_(w[i * C:(i + 1) * C])
                if b is not None:
                    lin.bias.copy_(b.detach()[i * C:(i + 1) * C])
        self.c_proj, self.hs = attn.c_proj, head_size

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (lin(x).view(B, T, -1, self.hs).transpose(1, 2) for lin in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, local heads, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


def tp_plan(n_layer, sequence_parallel):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    out = Shard(1) if sequence_parallel else Replicate()
    plan = {}
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        for name in ("attn.q", "attn.k", "attn.v", "mlp.c_fc"):
            plan[p + name] = ColwiseParallel()
        plan[p + "attn.c_proj"] = RowwiseParallel(output_layouts=out)
        plan[p + "mlp.c_proj"] = RowwiseParallel(output_layouts=out)
        if sequence_parallel:
            plan[p + "ln_1"] = SequenceParallel()
            plan[p + "ln_2"] = SequenceParallel()
            for name in ("attn", "mlp"):  # gather the sequence before the column-parallel layers
                plan[p + name] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    if sequence_parallel:
        # the (replicated) embeddings' output cut along the sequence; its backward gathers the gradient
        plan["transformer.h.0"] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                                     use_local_output=True)
        plan["transformer.ln_f"] = SequenceParallel()
        plan["lm_head"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                             use_local_output=True)
    return plan


class SavedBytes:
    """Bytes of the distinct storages autograd saves during a forward (the activations held for backward)."""

    def __init__(self):
        self.seen, self.bytes = set(), 0

    def pack(self, t):
        local = t._local_tensor if hasattr(t, "_local_tensor") else t
        s = local.untyped_storage()
        if s.data_ptr() not in self.seen:
            self.seen.add(s.data_ptr())
            self.bytes += s.nbytes()
        return t


def clip_grad_norm(params, max_norm):
    """The global L2 norm over the mesh, each element counted once, and the gradients scaled by
    min(1, max_norm / (norm + 1e-6)) in fp32 as torch's clip_grad_norm_ and the trainer's
    mesh_clip_grad_norm do (not at max_norm 0). A DTensor gradient's local squares are summed over
    every dimension of its own mesh that it is not replicated on; a plain gradient (the same on every
    rank) is taken as it is (torch's clip_grad_norm_ cannot mix DTensor and plain parameters).
    Under SequenceParallel the LayerNorms' gradients come out of backward Partial(sum), each rank's
    sequence chunk's share: they are summed into Replicate first (AdamW's DTensor ops would sum them
    anyway): the squares of the shares do not add up to the square of their sum.

    A placement indexes the DTensor's own device_mesh, not the run's (dp, tp) mesh: under
    parallelize_module that is the 1-D tp sub-mesh, so placement 0 is tp, and under FSDP2 the dp
    sub-mesh or the 2-D (dp, tp) one. Reading it against the run's mesh summed a tp-sharded gradient
    over dp instead of tp: at tp 2 the norm saw each rank's half of the cut weights only (0.73 of the
    true norm on bench_tp.py's model), and bench_tp.py's PyTorch rows drifted from one process's (and
    the trainer's) by 5.5e-3 from the third loss on (Adam's second update is the first to feel the
    clipping's scale); scripts/bench/tp_gap_check.py measures it.
    FSDP2 cuts a tp-sharded weight's dim 0 over dp with _StridedShard, which is no Shard (nor
    is_shard()): so every placement that is not Replicate counts as a cut here."""
    from torch.distributed.tensor import Replicate
    sums, grads = {}, []
    for p in params:
        if p.grad is None:
            continue
        key = None
        if hasattr(p.grad, "_local_tensor"):
            if any(pl.is_partial() for pl in p.grad.placements):  # SequenceParallel's norms: sum them now
                p.grad = p.grad.redistribute(p.grad.device_mesh,
                                             [Replicate() if pl.is_partial() else pl for pl in p.grad.placements])
            dims = tuple(i for i, pl in enumerate(p.grad.placements) if not isinstance(pl, Replicate))
            key = (p.grad.device_mesh, dims) if dims else None
        g = p.grad._local_tensor if hasattr(p.grad, "_local_tensor") else p.grad
        sums[key] = sums.get(key, 0.0) + g.double().pow(2).sum()  # same order on every rank: same collectives
        grads.append(g)
    total = torch.zeros((), dtype=torch.float64)
    for key, sq in sums.items():
        sq = torch.as_tensor(sq, dtype=torch.float64).clone()
        if key is not None:
            mesh, dims = key
            for i in dims:  # the sum over a product of mesh dimensions, one dimension at a time
                dist.all_reduce(sq, group=mesh.get_group(i))
        total += sq
    norm = total.sqrt().float()
    if max_norm > 0 and grads:  # train.grad_clip 0 is off: the norm is still reported
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp_max(1.0))
    return norm.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, required=True, help="sequences per data-parallel rank")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--sequence-parallel", action="store_true")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 over the dp dimension")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", required=True, help="initial weights (safetensors, the trainer's names)")
    ap.add_argument("--tokens", required=True, help="uint16 tokens: exactly batch x dp windows")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    a = ap.parse_args()
    m = json.loads(a.model)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    world, rank = dist.get_world_size(), dist.get_rank()
    dp = world // a.tp
    mesh = init_device_mesh("cpu", (dp, a.tp), mesh_dim_names=("dp", "tp"))

    model = GPT(GPTConfig(vocab_size=m["vocab_size"], block_size=m["block_size"], n_layer=m["n_layer"],
                          n_head=m["n_head"], n_embd=m["n_embd"], dropout=0.0, bias=m["bias"]))
    from safetensors.torch import load_file
    model.load_state_dict(load_file(a.init), strict=True)
    for block in model.transformer.h:
        block.attn = SplitAttention(block.attn, m["n_embd"] // m["n_head"])
    if a.tp > 1:
        parallelize_module(model, mesh["tp"], tp_plan(m["n_layer"], a.sequence_parallel))
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])

    import numpy as np
    T, B = m["block_size"], a.batch
    d = mesh["dp"].get_local_rank()
    tokens = torch.from_numpy(np.fromfile(a.tokens, dtype=np.uint16).astype(np.int64))
    windows = torch.stack([tokens[i * T:i * T + T + 1] for i in range(B * dp)])
    x, y = windows[d * B:(d + 1) * B, :T], windows[d * B:(d + 1) * B, 1:]  # this dp rank's share, every step
    # no weight decay: torch's AdamW would decay every parameter, the trainer's not biases and norms
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    dp_group = mesh["dp"].get_group() if dp > 1 and not a.fsdp else None
    times, losses, norms, saved = [], [], [], 0
    for step in range(a.steps):
        t0 = time.perf_counter()
        counter = SavedBytes()
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
            logits = model(x)
        saved = max(saved, counter.bytes)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        if dp_group is not None:
            for p in model.parameters():
                g = p.grad._local_tensor if hasattr(p.grad, "_local_tensor") else p.grad
                dist.all_reduce(g, group=dp_group)
                g.div_(dp)
        norms.append(clip_grad_norm(model.parameters(), a.grad_clip))
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # every rank's loss: the tp ranks of one dp rank hold the same one
        losses.append(mean.item() / world)
        times.append(time.perf_counter() - t0)
    steady = sorted(times[a.warmup:])
    med = steady[len(steady) // 2]
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"samples_per_s": a.batch * dp / med, "peak_rss_mb": resource.getrusage(
                resource.RUSAGE_SELF).ru_maxrss / 1024.0, "losses": losses, "grad_norms": norms,
                       "saved_activation_bytes": saved}, f)
    dist.barrier()
    # no destroy_process_group / interpreter teardown: Gloo's threads at exit have aborted a
    # finished run ("terminate called without an active exception") after the figures were written
    os._exit(0)


if __name__ == "__main__":
    main()
