"""What notebook 02's DataLoader workers run (top level, for ``spawn``): dataset, transforms, collates, GPU decode and
the checks before a worker starts."""

import contextlib
import functools
import math
import os
import shutil
import traceback
from pathlib import Path

import numpy as np
import torch
from torch.profiler import record_function
from torch.utils.data import Dataset, default_collate

from ...measure.compare import equal_outputs
from ...measure.validate import validate_batch_size, validate_num_workers
from ...notebook.env import project_root

VARIANTS = (
    "baseline",
    "bool_dilation",
    "crop_first",
    "batch_collate",
    "uint8_device",
    "gpu_decode",
)
REGENERATE = "python data/make_sample_images.py"
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
YUV = torch.tensor(
    [[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]]
)
YUV_OFFSET = torch.tensor([0.0, 128.0, 128.0])


class ImageLoadError(RuntimeError):
    """An image that is missing or cannot be decoded (the message says which and what to do)."""


def sample_paths(data_dir: Path | str | None = None) -> list[Path]:
    """The sample JPEGs, or a clear error saying how to make them."""
    paths = sorted((d := Path(data_dir or project_root() / "data" / "images")).glob("*.jpg"))
    if not paths:
        raise FileNotFoundError(
            f"no sample images in {d}; run `{REGENERATE}` from the project folder to make them."
        )
    return paths


def load_image(path: Path | str):
    """Open and decode one image as RGB PIL, with a clear message when it is missing or corrupt."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.exists():
        raise ImageLoadError(
            f"image {p} does not exist; `{REGENERATE}` regenerates the sample images."
        )
    try:
        with Image.open(p) as im:
            return im.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageLoadError(
            f"image {p} could not be decoded ({type(exc).__name__}: {exc}); it is corrupt or "
            f"not an image. `{REGENERATE}` regenerates the sample images."
        ) from None


class ImageDataset(Dataset):
    """``length`` samples cycling over ``paths``, random labels (``bytes``: raw; ``die_at``: a worker exits)."""

    def __init__(self, paths, length, transform=None, seed=0, bytes=False, die_at=None):
        if not paths or length < 1:
            raise ValueError(f"a dataset needs image paths and a length >= 1 (got {length})")
        self.paths, self.length, self.transform = paths, length, transform
        self.bytes, self.die_at, self.loaded = bytes, die_at, 0
        self.labels = torch.randint(0, 10, (length,), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int):
        self.loaded += 1
        if self.die_at is not None and self.loaded > self.die_at:
            if torch.utils.data.get_worker_info() is None:
                raise RuntimeError(
                    "die_at only kills DataLoader worker processes; here num_workers=0"
                )
            os._exit(3)  # a crash (segfault, OOM kill) of this worker process
        path = Path(self.paths[idx % len(self.paths)])
        if self.bytes:
            # gpu_decode: the file's bytes (a torch-owned tensor travels through shared memory)
            with record_function("read_bytes"):
                data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).clone()
            return (data, *self.transform(None)), self.labels[idx]
        with record_function("load_image"):
            img = load_image(path)
        return (self.transform(img) if self.transform else img), self.labels[idx]


class Compose:
    """``torchvision.transforms.Compose`` that wraps each transform in ``record_function(its class name)``."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            with record_function(type(t).__name__):
                x = t(x)
        return x


def dilate_convolve(mask: np.ndarray) -> np.ndarray:
    """4-neighbour dilation the article's way: a 2-D convolution with a cross kernel (scipy)."""
    from scipy.signal import convolve2d

    return convolve2d(mask.astype(np.uint8), CROSS, mode="same") > 0


def dilate_shift(mask: np.ndarray) -> np.ndarray:
    """The same dilation with boolean shifts of a zero-padded mask: an OR of 5 views, no arithmetic."""
    p = np.pad(mask.astype(bool), 1)
    return p[1:-1, 1:-1] | p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]


DILATIONS = {"convolve2d": dilate_convolve, "bool_shift": dilate_shift}


class RandomMask:
    """Zero a random set of pixels (Bernoulli(ratio), torch's draw: seeded per worker), dilated with a cross."""

    def __init__(self, ratio: float = 0.25, dilation: str = "convolve2d"):
        if not 0.0 <= ratio <= 1.0 or dilation not in DILATIONS:
            raise ValueError(f"mask ratio must be in [0, 1] and dilation one of {list(DILATIONS)}")
        self.ratio, self.dilation = ratio, dilation

    def make_mask(self, h: int, w: int) -> np.ndarray:
        return DILATIONS[self.dilation]((torch.rand(h, w) < self.ratio).numpy())

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return img.masked_fill(torch.from_numpy(self.make_mask(img.shape[-2], img.shape[-1])), 0)


@functools.cache
def yuv_constants(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(YUV, YUV_OFFSET)`` on a tensor's device, copied once (a copy per batch: two blocking copies on a GPU)."""
    return YUV.to(device), YUV_OFFSET.to(device)


class ConvertColor:
    """RGB -> YUV (BT.601, full range) of one image (C, H, W) or a batch (B, C, H, W), on any device; float32 out."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        (m, off), x = yuv_constants(img.device), img.float()
        return (m @ x.reshape(*x.shape[:-2], -1)).reshape(x.shape) + off[:, None, None]


class Scale:
    """Divide by 255."""

    def __call__(self, img):
        return img / 255.0


class CropParams:
    """``gpu_decode``'s transform: the crop's offsets and the dilated mask, drawn in the worker (no pixels yet)."""

    def __init__(self, size: int, image_hw: tuple[int, int], ratio: float = 0.25):
        self.size, self.image_hw, self.mask = size, image_hw, RandomMask(ratio, "bool_shift")

    def __call__(self, _):
        h, w = self.image_hw
        top = int(torch.randint(0, h - self.size + 1, ()))
        left = int(torch.randint(0, w - self.size + 1, ()))
        mask = self.mask.make_mask(self.size, self.size)
        return torch.tensor([top, left]), torch.from_numpy(mask)


def collate_batch_transforms(batch):
    """``batch_collate``: stack the uint8 crops, then ConvertColor + Scale once for the whole batch."""
    with record_function("collate"):
        x, y = default_collate(batch)
    with record_function("ConvertColor(batch)"):
        x = ConvertColor()(x)
    with record_function("Scale(batch)"):
        return Scale()(x), y


def collate_bytes(batch):
    """``gpu_decode``: ``((JPEG byte tensors, crop offsets, masks), labels)``."""
    with record_function("collate"):
        datas, offsets, masks = zip(*(b[0] for b in batch))
        return (list(datas), torch.stack(offsets), torch.stack(masks)), default_collate(
            [b[1] for b in batch]
        )


def decode_on_device(x, device) -> torch.Tensor:
    """``gpu_decode``'s ``(bytes, offsets, masks)`` decoded on ``device`` (nvJPEG), cropped and masked: uint8."""
    from torchvision.io import ImageReadMode, decode_jpeg

    datas, offsets, masks = x
    if torch.device(device).type == "cuda":
        # nvJPEG writes on a private stream that does not wait for this one (pytorch/vision#9606, seen on H100s)
        torch.cuda.current_stream(device).synchronize()
    # grey JPEGs as 3 channels, like PIL's
    imgs = decode_jpeg(datas, device=device, mode=ImageReadMode.RGB)
    s = masks.shape[-1]
    x = torch.stack([im[:, t : t + s, l : l + s] for im, (t, l) in zip(imgs, offsets.tolist())])
    return x.masked_fill(masks.to(device, non_blocking=True)[:, None], 0)


# -- before a worker starts ------------------------------------------------------------------------
class SharedMemoryTooSmall(RuntimeError):
    """/dev/shm cannot hold the batches the workers keep in flight (they would die with a bus error)."""


class DecodeMismatch(RuntimeError):
    """The GPU's JPEG decode differs from the CPU's by more than the tolerance."""


def shm_needed_mb(
    num_workers, batch_size, crop, *, prefetch_factor=None, bytes_per_value=4, pinned=True
) -> float:
    """MiB of /dev/shm the batches in flight take (workers x prefetch, two more when not pinned)."""
    if num_workers <= 0:
        return 0.0
    batches = num_workers * (prefetch_factor or 2) + (0 if pinned else 2)
    return batches * batch_size * 3 * crop * crop * bytes_per_value / 2**20


def check_shm(need_mb: float, free_mb: float | None = None, path: str = "/dev/shm") -> float | None:
    """``SharedMemoryTooSmall`` saying what to do when ``need_mb`` does not fit; else the free MiB (or None)."""
    with contextlib.suppress(OSError):
        free_mb = shutil.disk_usage(path).free / 2**20 if free_mb is None else free_mb
    if free_mb is not None and need_mb > free_mb:
        raise SharedMemoryTooSmall(
            f"{path} has {free_mb:.0f} MiB free but the workers' batches in flight need about {need_mb:.0f} MiB; "
            f"workers would die with a bus error. Give the container more (docker run "
            f"--shm-size={max(1, math.ceil(need_mb * 1.25 / 1024))}g, Kubernetes: an emptyDir with medium Memory on "
            f"{path}) or lower num_workers, prefetch_factor or batch size."
        )
    return free_mb


def check_settings(
    variant,
    num_workers,
    batch_size,
    *,
    crop,
    device,
    cores=None,
    prefetch_factor=None,
    pinned=False,
) -> None:
    """Refuse bad settings with a one-line ``ValueError`` before any worker starts, and too little /dev/shm."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown pipeline variant {variant!r}; one of {', '.join(VARIANTS)}")
    validate_num_workers(num_workers, cores)
    validate_batch_size(batch_size, maximum=1 << 16)
    if variant == "gpu_decode" and torch.device(device).type != "cuda":
        raise ValueError("gpu_decode needs nvJPEG on a CUDA device; this run is on the CPU")
    per_value = 1 if variant in ("uint8_device", "gpu_decode") else 4
    kw = dict(prefetch_factor=prefetch_factor, pinned=pinned, bytes_per_value=per_value)
    check_shm(shm_needed_mb(num_workers, batch_size, crop, **kw))


@contextlib.contextmanager
def worker_errors():
    """A worker's error as one readable line, raised without the iterator's frames (workers stop at once)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised, readable
        traceback.clear_frames(exc.__traceback__)
        text = str(exc)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if text.startswith("Caught "):
            exc = RuntimeError(f"{lines[0].rstrip('.')}: {lines[-1].strip()}")
        elif "exited unexpectedly" in text:
            exc = RuntimeError(f"a DataLoader worker died ({lines[0]}); the run stopped cleanly")
        raise exc.with_traceback(None) from None


def check_decode(paths, device, decode=None, mean_tol=3.0, p99_tol=24.0) -> dict[str, float]:
    """``decode(JPEG bytes, device)`` (nvJPEG on a GPU) against PIL's decode: ``DecodeMismatch`` beyond tolerance."""
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms.functional import pil_to_tensor

    decode = decode or (lambda datas, dev: decode_jpeg(datas, device=dev, mode=ImageReadMode.RGB))
    outs = decode([read_file(str(p)) for p in paths], device)
    c = equal_outputs(
        {str(p): pil_to_tensor(load_image(p)) for p in paths},
        {str(p): o for p, o in zip(paths, outs)},
    )
    why = c["why"]
    if not why:
        why = (
            f"mean |diff| {c['mean_abs_diff']:.2f}, 99th percentile {c['p99_abs_diff']:.0f} levels"
        )
    if c["why"] or c["mean_abs_diff"] > mean_tol or c["p99_abs_diff"] > p99_tol:
        raise DecodeMismatch(
            f"the GPU decode differs from the CPU decode ({why}); not timing a pipeline that "
            "gives different pixels"
        )
    return {"mean_abs": c["mean_abs_diff"], "p99_abs": c["p99_abs_diff"]}
