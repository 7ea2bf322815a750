"""Seeds for the torch.save fuzz test (tests/io/test_hostile_pickle.cpp, also in the ASan suite):
real torch.save files, small, committed in pickle_seeds/. Regenerate:

    ~/.cache/trainer/venv-torch-2.11.0/bin/python tests/reference/make_pickle_seeds.py

gpt.pt          a tiny nanoGPT state_dict (vocab 16, block 4, 1 layer, 2 heads, n_embd 8; lm_head tied)
convbn.pt       a conv + BatchNorm state_dict (running statistics, num_batches_tracked: int64)
optimizer.pt    an AdamW optimizer's state_dict after one step (nested dicts, lists, ints, floats)
dtypes.pt       one tensor of every dtype, a 0-d one, an empty one, a transposed view and a slice
protocol4.pt    gpt.pt written with pickle_protocol=4 (FRAME, MEMOIZE, STACK_GLOBAL)
named.pt        gpt.pt in the older zip layout: records under "<file stem>/" instead of "archive/"
"""
import io
import os
import sys
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanogpt_ref import GPT, GPTConfig  # noqa: E402


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pickle_seeds")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=16, block_size=4, n_layer=1, n_head=2, n_embd=8))
    torch.save(gpt.state_dict(), os.path.join(out, "gpt.pt"))
    torch.save(gpt.state_dict(), os.path.join(out, "protocol4.pt"), pickle_protocol=4)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    net(torch.randn(2, 1, 5, 5))
    torch.save(net.state_dict(), os.path.join(out, "convbn.pt"))
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    net(torch.randn(2, 1, 5, 5)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), os.path.join(out, "optimizer.pt"))
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save({"f32": base, "f64": base.double(), "f16": base.half(), "bf16": base.bfloat16(),
                "i64": base.long(), "i32": base.int(), "i16": base.short(), "i8": base.char(), "u8": base.byte(),
                "bool": base > 5, "c64": torch.complex(base, -base), "c128": torch.complex(base, base).to(torch.complex128),
                "scalar": torch.tensor(1.5), "empty": torch.zeros(0, 2), "t": base.t(), "slice": base[1:, 1:3]},
               os.path.join(out, "dtypes.pt"))
    buf = io.BytesIO()
    torch.save(gpt.state_dict(), buf)
    with zipfile.ZipFile(buf) as z, zipfile.ZipFile(os.path.join(out, "named.pt"), "w", zipfile.ZIP_STORED) as w:
        for i in z.infolist():
            w.writestr("named/" + i.filename.split("/", 1)[1], z.read(i.filename))
    for f in sorted(os.listdir(out)):
        print(f, os.path.getsize(os.path.join(out, f)))


if __name__ == "__main__":
    main()
