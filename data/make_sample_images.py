"""Make the sample JPEGs notebook 02 reads: photo-like, about 800x533, fixed seed.

    python data/make_sample_images.py          # writes data/images/sample_0.jpg ... sample_3.jpg

Each image mixes a smooth colour gradient, low-frequency "cloudy" noise, sharp-edged
shapes and fine grain, so JPEG decoding costs about what a real photo costs (a flat
colour would decode unrealistically fast). No download: the same bytes every time.
"""
from __future__ import annotations


from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

WIDTH, HEIGHT = 800, 533
COUNT = 4
SEED = 2024
QUALITY = 85
OUT_DIR = Path(__file__).resolve().parent / "images"


def smooth_noise(rng: np.random.Generator, h: int, w: int, cell: int) -> np.ndarray:
    """Value noise: a coarse random grid upsampled bilinearly (values 0..1)."""
    gh, gw = h // cell + 2, w // cell + 2
    grid = rng.random((gh, gw)).astype(np.float32)
    img = Image.fromarray((grid * 255).astype(np.uint8)).resize((w, h), Image.BILINEAR)
    return np.asarray(img, dtype=np.float32) / 255.0


def make_image(rng: np.random.Generator) -> Image.Image:
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = rng.random(3) * 0.6 + 0.2
    tilt = rng.random(3) * 0.5
    grad = base[None, None, :] + tilt[None, None, :] * (yy / HEIGHT)[..., None] - 0.2 * (xx / WIDTH)[..., None]
    clouds = sum(smooth_noise(rng, HEIGHT, WIDTH, c) * wgt for c, wgt in ((160, 0.5), (40, 0.3), (10, 0.2)))
    rgb = grad * 0.6 + clouds[..., None] * rng.random(3)[None, None, :] * 0.6
    img = Image.fromarray((np.clip(rgb, 0, 1) * 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(14):  # shapes give hard edges (high-frequency DCT content)
        x0, y0 = int(rng.integers(0, WIDTH - 60)), int(rng.integers(0, HEIGHT - 60))
        x1, y1 = x0 + int(rng.integers(30, 260)), y0 + int(rng.integers(30, 200))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(2, 9)))
    img = img.filter(ImageFilter.GaussianBlur(0.8))
    grain = rng.normal(0, 6, (HEIGHT, WIDTH, 3))  # sensor-like grain
    arr = np.clip(np.asarray(img, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB")


def image_paths(out_dir: Path = OUT_DIR, count: int = COUNT) -> list[Path]:
    return [out_dir / f"sample_{i}.jpg" for i in range(count)]


def main(out_dir: Path = OUT_DIR, count: int = COUNT) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    paths = image_paths(out_dir, count)
    for p in paths:
        make_image(rng).save(p, "JPEG", quality=QUALITY)
    return paths


if __name__ == "__main__":
    written = main()
    total = sum(p.stat().st_size for p in written)
    for p in written:
        print(f"{p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p}: {p.stat().st_size / 1024:.0f} KiB")
    print(f"{len(written)} images, {total / 1024:.0f} KiB in all")

