"""The kinds of image file an ImageNet-style folder holds, written with PIL, each beside the pixels
PIL decodes from it (what torchvision's ImageFolder trains on: Image.open(f).convert("RGB"), and
.convert("L") for one channel). tests/data/test_image_kinds.cpp decodes each file with the trainer
and compares. Usage: make_image_kinds.py OUT_DIR. Writes OUT_DIR/manifest.json:
{name: {"file", "height", "width", "rgb", "l"}} where rgb / l are raw HWC bytes files.
"""
import io
import json
import os
import struct
import sys

import numpy as np
from PIL import Image, PngImagePlugin


def photo(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([128 + 70 * np.sin(0.05 * x + 0.9 * k) * np.cos(0.031 * y - 0.4 * k) for k in range(4)], -1)
    a += ((x // 37 + y // 23) % 2 * 50 - 25)[..., None] + rng.integers(-12, 13, (h, w, 4))
    return np.clip(a, 0, 255).astype(np.uint8)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    px = photo(181, 243, 1)  # odd sizes: partial MCUs at the right and bottom edges
    rgb = Image.fromarray(px[..., :3])
    files = {}

    def save(name, im, **kw):
        path = os.path.join(out, name)
        im.save(path, **kw)
        files[name] = path

    save("rgb_420.jpg", rgb, quality=90)
    save("rgb_422.jpg", rgb, quality=90, subsampling=1)
    save("rgb_444.jpg", rgb, quality=90, subsampling=0)
    save("progressive.jpg", rgb, quality=90, progressive=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate to view; PIL's open (and ImageFolder) does not apply it
    save("exif_rotated.jpg", rgb, quality=90, exif=exif.tobytes())
    save("cmyk.jpg", Image.fromarray(px, "CMYK"), quality=90)  # Adobe's inverted CMYK, as Photoshop writes
    save("cmyk_progressive.jpg", Image.fromarray(px, "CMYK"), quality=90, progressive=True)
    save("grey.jpg", rgb.convert("L"), quality=90)
    save("tiny.jpg", rgb.resize((9, 7)), quality=90)
    save("rgb.png", rgb)
    rgba = Image.fromarray(px, "RGBA")  # alpha from the 4th channel: every level, 0 included
    save("rgba.png", rgba)
    save("grey_alpha.png", rgba.convert("LA"))
    save("palette.png", rgb.convert("P"))
    pal_t = rgb.convert("P")
    pal_t.info["transparency"] = 3
    save("palette_transparent.png", pal_t, transparency=3)
    save("grey.png", rgb.convert("L"))
    save("bilevel.png", rgb.convert("1"))
    # saturated colours at q75: decoded RGB clips, so PIL's luma of it is not the JPEG's own Y plane
    sat = np.random.default_rng(5).integers(0, 2, (181, 243, 3)).astype(np.uint8) * 255
    save("saturated_q75.jpg", Image.fromarray(sat), quality=75)
    # a gAMA chunk (gamma 1.0): PIL keeps it in info and leaves the pixels as stored
    gamma = PngImagePlugin.PngInfo()
    gamma.add(b"gAMA", struct.pack(">I", 100000))
    save("gamma_1.png", rgb, pnginfo=gamma)
    save("grey_gamma_1.png", rgb.convert("L"), pnginfo=gamma)
    manifest = {}
    for name, path in files.items():
        im = Image.open(path)
        entry = {"file": path, "height": im.height, "width": im.width, "mode": im.mode}
        for mode, key in (("RGB", "rgb"), ("L", "l")):
            raw = path + "." + key
            np.asarray(im.convert(mode)).tofile(raw)
            entry[key] = raw
        manifest[name] = entry
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
