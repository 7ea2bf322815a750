"""The weight-file corpus of issue 29: hostile torch.save and safetensors files, each beside its valid
twin, for tests/cli/test_weight_corpus.cpp. Usage: make_weight_corpus.py OUT_DIR

Every file holds `transformer.wte.weight` (64 x 16) and `transformer.wpe.weight` (8 x 16), the
embeddings of the tests' tiny GPT (vocab 64, block 8, n_embd 16), so `trainer check` with
model.init.strict: false loads exactly those two. Mutations are made at the level of the pickle
opcodes (data.pkl) or of the safetensors header, never by re-saving through another tool.
OUT_DIR/manifest.json records, for every file, whether torch.load(weights_only=True,
map_location="cpu") / safetensors.torch.load_file refuse it, and for each file PyTorch loads, the
tensors it loads as OUT_DIR/<name>.expected.safetensors (complex tensors as their real view) so the
C++ side can compare bitwise. Small: every file is under 100 KB except the deep-nesting one (200 KB).
"""
import io
import json
import os
import struct
import sys
import zipfile

import torch
from safetensors.torch import load_file, save_file

WTE, WPE = "transformer.wte.weight", "transformer.wpe.weight"


def base_state(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return {WTE: torch.randn(64, 16, generator=g).to(dtype), WPE: torch.randn(8, 16, generator=g).to(dtype)}


def saved(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def zip_records(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def rezip(records, rename=None, edit=None):
    """The archive again (stored, as torch.save writes it) with record names renamed and data.pkl edited."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            if edit and name.endswith("/data.pkl"):
                data = edit(data)
            z.writestr(rename(name) if rename else name, data)
    return out.getvalue()


def pickle_edit(data, old, new, count=1):
    assert data.count(old) >= count, (old, data)
    return data.replace(old, new, count)


def st_header(tensors):
    """A safetensors file from (name, dtype, shape, bytes) without the library: header control."""
    header, body, off = {}, b"", 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        body += raw
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + body


def main(out):
    os.makedirs(out, exist_ok=True)
    files = {}
    good = saved(base_state())
    recs = zip_records(good)
    p2 = lambda edit: rezip(recs, edit=edit)

    # --- torch.save: the valid files --------------------------------------------------------------------
    files["pt_valid.pt"] = good
    files["pt_layout_named.pt"] = rezip(recs, rename=lambda n: "weights/" + n.split("/", 1)[1])  # the older folder name
    files["pt_protocol4.pt"] = saved(base_state(), pickle_protocol=4)
    files["pt_fp16.pt"] = saved(base_state(torch.float16))
    files["pt_bf16.pt"] = saved(base_state(torch.bfloat16))
    files["pt_fp64.pt"] = saved(base_state(torch.float64))
    t = base_state()
    files["pt_transposed.pt"] = saved({WTE: t[WTE].t().contiguous().t(), WPE: t[WPE]})  # strides (1, 64)
    big = torch.randn(200, 16, generator=torch.Generator().manual_seed(1))
    files["pt_view_of_larger.pt"] = saved({WTE: big[10:74], WPE: big[100:108]})  # one storage, offsets
    files["pt_cuda7_location.pt"] = p2(lambda d: pickle_edit(d, b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:7"))
    g = torch.Generator().manual_seed(2)
    files["pt_all_dtypes.pt"] = saved({
        "f32": torch.randn(3, 4, generator=g), "f64": torch.randn(5, generator=g).double(),
        "f16": torch.randn(2, 3, generator=g).half(), "bf16": torch.randn(2, 3, generator=g).bfloat16(),
        "i64": torch.arange(-3, 3), "i32": torch.arange(6, dtype=torch.int32), "i16": torch.arange(4, dtype=torch.int16),
        "i8": torch.arange(-2, 2, dtype=torch.int8), "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]), "c64": torch.randn(3, generator=g, dtype=torch.complex64),
        "c128": torch.randn(2, generator=g, dtype=torch.complex128), "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3), "nan": torch.tensor([float("nan"), float("inf"), -0.0])})
    files["pt_optimizer_state.pt"] = saved({WTE: t[WTE], WPE: t[WPE], "step": torch.tensor(7.0),
                                            "exp_avg": torch.zeros(64, 16), "exp_avg_sq": torch.ones(64, 16)})

    # --- torch.save: what is refused -----------------------------------------------------------------
    files["pt_complex.pt"] = saved({WTE: torch.complex(t[WTE], t[WTE]), WPE: t[WPE]})
    files["pt_bool.pt"] = saved({WTE: t[WTE] > 0, WPE: t[WPE]})
    files["pt_int.pt"] = saved({WTE: (t[WTE] * 10).long(), WPE: t[WPE]})
    files["pt_bool_storage_lie.pt"] = p2(lambda d: pickle_edit(d, b"FloatStorage", b"BoolStorage"))
    files["pt_half_storage_lie.pt"] = p2(lambda d: pickle_edit(d, b"FloatStorage", b"HalfStorage"))
    files["pt_stride0.pt"] = saved({WTE: t[WTE][0].expand(64, 16), WPE: t[WPE]})
    files["pt_overlap.pt"] = saved({WTE: torch.randn(100).as_strided((64, 16), (1, 1)), WPE: t[WPE]})
    # the first tensor's storage offset (BININT1 0 after BINPERSID) made 2^31 - 1
    files["pt_offset_range.pt"] = p2(lambda d: pickle_edit(d, b"QK\x00K@", b"QJ\xff\xff\xff\x7fK@"))
    files["pt_location_bad.pt"] = p2(lambda d: pickle_edit(d, b"X\x03\x00\x00\x00cpu", b"X\x03\x00\x00\x00c:u"))
    files["pt_proto255.pt"] = p2(lambda d: b"\x80\xff" + d[2:])
    files["pt_no_proto.pt"] = p2(lambda d: d[2:])
    p4 = zip_records(files["pt_protocol4.pt"])
    files["pt_frame_huge.pt"] = rezip(p4, edit=lambda d: d[:2] + b"\x95" + struct.pack("<Q", 1 << 62) + d[11:])
    n = 100000
    files["pt_deep_lists.pt"] = rezip(recs, edit=lambda d: b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    files["pt_short_record.pt"] = rezip([(k, v[:-4] if k.endswith("/data/0") else v) for k, v in recs])

    # --- safetensors ---------------------------------------------------------------------------------
    s = base_state()
    raw = lambda x: x.contiguous().view(torch.uint8).numpy().tobytes()
    ent = [(WTE, "F32", [64, 16], raw(s[WTE])), (WPE, "F32", [8, 16], raw(s[WPE]))]
    files["st_valid.safetensors"] = st_header(ent)
    buf = st_header(ent)
    files["st_trailing.safetensors"] = buf + b"\x00" * 16
    gap = st_header(ent)  # a gap of 16 bytes between the two tensors
    hdr = {WTE: {"dtype": "F32", "shape": [64, 16], "data_offsets": [0, 4096]},
           WPE: {"dtype": "F32", "shape": [8, 16], "data_offsets": [4112, 4624]}}
    text = json.dumps(hdr).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    files["st_gap.safetensors"] = struct.pack("<Q", len(text)) + text + ent[0][3] + b"\x00" * 16 + ent[1][3]
    spaces = 99_000_000
    files["st_spaces_header.safetensors"] = struct.pack("<Q", spaces) + b" " * spaces
    files["st_fp16.safetensors"] = st_header([(WTE, "F16", [64, 16], raw(s[WTE].half())), (WPE, "BF16", [8, 16], raw(s[WPE].bfloat16()))])
    files["st_bool.safetensors"] = st_header([(WTE, "BOOL", [64, 16], raw(s[WTE] > 0)), ent[1]])
    files["st_header_not_object_start.safetensors"] = st_header(ent).replace(b"{", b" ", 1)

    manifest = {}
    for name, data in files.items():
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(data)
        entry = {}
        try:
            if name.endswith(".safetensors"):
                loaded = load_file(path)
            else:
                loaded = torch.load(path, weights_only=True, map_location="cpu")
            entry["pytorch_loads"] = True
            if isinstance(loaded, dict) and all(isinstance(v, torch.Tensor) for v in loaded.values()):
                exp = {k: (torch.view_as_real(v) if v.is_complex() else v).contiguous() for k, v in loaded.items()}
                save_file(exp, path + ".expected.safetensors")
        except Exception as e:  # what PyTorch says, for the record
            entry["pytorch_loads"] = False
            entry["pytorch_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        manifest[name] = entry
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main(sys.argv[1]))
