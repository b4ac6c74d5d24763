"""The data-input pipeline of ``02_data_pipeline``: dataset, transforms, collates, toy CNN, timed runs.

Everything a DataLoader worker needs lives here, at module top level, so that it pickles
(workers started with ``spawn`` re-import it). The pipeline variants, fastest last:

- ``baseline``       open + decode (PIL), PILToTensor, RandomCrop, RandomMask (dilation by
                     ``scipy.signal.convolve2d``), ConvertColor (RGB->YUV), Scale (/255)
- ``bool_dilation``  the same, with the dilation done by boolean shifts of a padded mask
- ``crop_first``     RandomCrop on the PIL image before PILToTensor (4x fewer pixels converted)
- ``batch_collate``  ConvertColor + Scale once per batch inside the collate function
- ``uint8_device``   the workers ship uint8 (4x fewer bytes); colour + scale run on the device
- ``gpu_decode``     (CUDA only) workers read the JPEG bytes; ``torchvision.io.decode_jpeg``
                     decodes the batch on the GPU (checked against the CPU decode first), then crop,
                     mask, colour and scale there

Every row is timed by one loop (``timed_loop``), the ceiling included, and compared by its mean step
(``summarize``, ``speedup``): with N workers batches arrive in waves and the median hides the stall.
On a CPU the model's step is a ``StandIn`` for the accelerator (a fixed time, no CPU). The sweep's
expectation is ``predicted_samples_per_s``; ``run_interleaved`` measures variants in rotating rounds.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset, default_collate

from . import timing, training, widgets

VARIANTS = ("baseline", "bool_dilation", "crop_first", "batch_collate", "uint8_device", "gpu_decode")
CPU_VARIANTS = VARIANTS[:-1]
REGENERATE = "python data/make_sample_images.py"
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "images"
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])

# RGB -> YUV (BT.601, full range), as in the source article: yuv = M @ rgb + offset
YUV_MATRIX = torch.tensor([[0.299, 0.587, 0.114],
                           [-0.168736, -0.331264, 0.5],
                           [0.5, -0.418688, -0.081312]])
YUV_OFFSET = torch.tensor([0.0, 128.0, 128.0])


class ImageLoadError(RuntimeError):
    """An image that is missing or cannot be decoded (the message says which and what to do)."""


# -- data ------------------------------------------------------------------------------------------
def sample_paths(data_dir: Path | str = DATA_DIR) -> list[Path]:
    """The sample JPEGs, or a clear error saying how to make them."""
    d = Path(data_dir)
    paths = sorted(d.glob("*.jpg"))
    if not paths:
        raise FileNotFoundError(f"no sample images in {d}; run `{REGENERATE}` from the project folder to make them.")
    return paths


def load_image(path: Path | str):
    """Open and decode one image as RGB PIL, with a clear message when it is missing or corrupt."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.exists():
        raise ImageLoadError(f"image {p} does not exist; `{REGENERATE}` regenerates the sample images.")
    try:
        with Image.open(p) as im:
            return im.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageLoadError(f"image {p} could not be decoded ({type(exc).__name__}: {exc}); it is corrupt or "
                             f"not an image. `{REGENERATE}` regenerates the sample images.") from None


class ImageDataset(Dataset):
    """``length`` samples cycling over ``paths`` (the article: 10,000 paths to one JPEG), random labels.

    ``mode="pil"`` returns ``transform(decoded PIL image)``; ``mode="bytes"`` returns the
    file's bytes as a uint8 tensor (for decoding on the GPU) plus ``transform`` applied to nothing
    (it receives the path). ``die_at=n`` makes a *worker* process exit when it loads its n-th
    sample (counted per worker, so it happens whatever the shuffle order; for the "worker that
    dies" demonstration; in the main process it raises instead).
    """

    def __init__(self, paths: Sequence[Path | str], length: int, transform: Callable | None = None,
                 num_classes: int = 10, seed: int = 0, mode: str = "pil", die_at: int | None = None):
        if not paths:
            raise ValueError("the dataset needs at least one image path")
        if length < 1:
            raise ValueError(f"dataset length must be at least 1 (got {length})")
        self.paths = [str(p) for p in paths]
        self.length = int(length)
        self.transform = transform
        self.mode = mode
        self.die_at = die_at
        self._loaded = 0
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_classes, (self.length,), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int):
        self._loaded += 1
        if self.die_at is not None and self._loaded > self.die_at:
            if torch.utils.data.get_worker_info() is not None:
                os._exit(3)  # simulate a crash (segfault, OOM kill) of this worker process
            raise RuntimeError("die_at only kills DataLoader worker processes; here num_workers=0")
        path = self.paths[idx % len(self.paths)]
        if self.mode == "bytes":
            with record_function("read_bytes"):
                if not os.path.exists(path):
                    raise ImageLoadError(f"image {path} does not exist; `{REGENERATE}` regenerates it.")
                # a plain torch-owned uint8 tensor: it moves to the main process through shared memory
                # (torchvision.io.read_file's tensor cannot: "Bad file descriptor" in the worker's queue)
                data = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8).clone()
            return (data, self.transform(None) if self.transform else None), self.labels[idx]
        with record_function("load_image"):
            img = load_image(path)
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[idx]


# -- transforms ------------------------------------------------------------------------------------
class Compose:
    """``torchvision.transforms.Compose`` that wraps each transform in ``record_function(its class name)``."""

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            with record_function(type(t).__name__):
                x = t(x)
        return x


def dilate_convolve(mask: np.ndarray) -> np.ndarray:
    """4-neighbour dilation the article's way: a 2-D convolution with a cross kernel (scipy)."""
    from scipy.signal import convolve2d

    return convolve2d(mask.astype(np.uint8), CROSS, mode="same").astype(bool)


def dilate_shift(mask: np.ndarray) -> np.ndarray:
    """The same dilation with boolean shifts of a zero-padded mask: an OR of 5 views, no arithmetic."""
    p = np.pad(mask.astype(bool), 1)
    return p[1:-1, 1:-1] | p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]


DILATIONS = {"convolve2d": dilate_convolve, "bool_shift": dilate_shift}


class RandomMask:
    """Zero a random, dilated set of pixels: mask ~ Bernoulli(ratio), dilated with a 4-neighbour cross."""

    def __init__(self, ratio: float = 0.25, dilation: str = "convolve2d"):
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"mask ratio must be in [0, 1] (got {ratio})")
        if dilation not in DILATIONS:
            raise ValueError(f"unknown dilation {dilation!r}; use one of {', '.join(DILATIONS)}")
        self.ratio, self.dilation = ratio, dilation

    def make_mask(self, h: int, w: int) -> np.ndarray:
        # torch's generator is seeded per DataLoader worker (numpy's global one is not)
        mask = (torch.rand(h, w) < self.ratio).numpy()
        return DILATIONS[self.dilation](mask)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        mask = torch.from_numpy(self.make_mask(img.shape[-2], img.shape[-1]))
        return img.masked_fill(mask, 0)


_YUV_CACHE: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def yuv_constants(device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(YUV_MATRIX, YUV_OFFSET)`` on ``device``, copied there once and then cached.

    Copying them on every call would be two blocking host-to-device copies per batch on a GPU
    (pageable memory: the host waits for each), hidden inside the device-side variants.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev not in _YUV_CACHE:
        _YUV_CACHE[dev] = (YUV_MATRIX.to(dev), YUV_OFFSET.to(dev))
    return _YUV_CACHE[dev]


class ConvertColor:
    """RGB -> YUV: a 3x3 matrix on the channel axis plus the offset (0, 128, 128); float32 out.

    Works on one image (C, H, W) or a batch (B, C, H, W) on any device.
    """

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        m, off = yuv_constants(img.device)
        x = img.float()
        # (3, 3) @ (..., 3, H*W): a plain matmul (einsum lowers to a bmm that is slow for tiny CPU inputs)
        return (m @ x.reshape(*x.shape[:-2], -1)).reshape(x.shape) + off[:, None, None]


class Scale:
    """Divide by 255."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return img / 255.0


class PILRandomCrop:
    """RandomCrop on a PIL image (so only the crop is converted to a tensor); errors like torchvision's."""

    def __init__(self, size: int):
        from torchvision.transforms import RandomCrop

        self.crop = RandomCrop(size)

    def __call__(self, img):
        return self.crop(img)


class CropParams:
    """For ``gpu_decode``: draw the crop offsets and the dilated mask in the worker (no pixels yet)."""

    def __init__(self, size: int, image_hw: tuple[int, int], ratio: float = 0.25):
        self.size, self.image_hw, self.mask = size, image_hw, RandomMask(ratio, "bool_shift")

    def __call__(self, _):
        h, w = self.image_hw
        top = int(torch.randint(0, h - self.size + 1, ()))
        left = int(torch.randint(0, w - self.size + 1, ()))
        return torch.tensor([top, left]), torch.from_numpy(self.mask.make_mask(self.size, self.size))


def build_transform(variant: str, crop: int, ratio: float = 0.25, image_hw: tuple[int, int] = (533, 800)):
    """The per-sample transform of each variant (see the module docstring)."""
    from torchvision.transforms import PILToTensor, RandomCrop

    if variant not in VARIANTS:
        raise ValueError(f"unknown pipeline variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if variant == "baseline":
        return Compose([PILToTensor(), RandomCrop(crop), RandomMask(ratio, "convolve2d"), ConvertColor(), Scale()])
    if variant == "bool_dilation":
        return Compose([PILToTensor(), RandomCrop(crop), RandomMask(ratio, "bool_shift"), ConvertColor(), Scale()])
    if variant == "crop_first":
        return Compose([PILRandomCrop(crop), PILToTensor(), RandomMask(ratio, "bool_shift"), ConvertColor(), Scale()])
    if variant in ("batch_collate", "uint8_device"):
        return Compose([PILRandomCrop(crop), PILToTensor(), RandomMask(ratio, "bool_shift")])
    return CropParams(crop, image_hw, ratio)  # gpu_decode


# -- collates --------------------------------------------------------------------------------------
def collate(batch):
    """``default_collate`` inside ``record_function("collate")``."""
    with record_function("collate"):
        return default_collate(batch)


def collate_batch_transforms(batch):
    """Stack uint8 images, then ConvertColor + Scale once for the whole batch."""
    with record_function("collate"):
        x, y = default_collate(batch)
    with record_function("ConvertColor(batch)"):
        x = ConvertColor()(x)
    with record_function("Scale(batch)"):
        x = Scale()(x)
    return x, y


def collate_bytes(batch):
    """For ``gpu_decode``: a list of JPEG byte tensors, crop offsets, masks and labels."""
    with record_function("collate"):
        datas = [b[0][0] for b in batch]
        offsets = torch.stack([b[0][1][0] for b in batch])
        masks = torch.stack([b[0][1][1] for b in batch])
        labels = default_collate([b[1] for b in batch])
    return datas, offsets, masks, labels


def collate_for(variant: str) -> Callable:
    return {"batch_collate": collate_batch_transforms, "gpu_decode": collate_bytes}.get(variant, collate)


# -- on the device ---------------------------------------------------------------------------------
def to_device(batch, variant: str, device, crop: int | None = None):
    """Move a collated batch to ``device`` (non-blocking) and finish the variant's work there.

    Returns ``(x float32 (B, 3, H, W), y)``.
    """
    non_blocking = torch.device(device).type == "cuda"
    with record_function("to_device"):
        if variant == "gpu_decode":
            from torchvision.io import ImageReadMode, decode_jpeg

            datas, offsets, masks, y = batch
            if torch.device(device).type == "cuda":
                # torchvision's CUDA decoder writes on a private stream that does not wait for this one: memory freed
                # here while queued kernels still read it could be overwritten (pytorch/vision#9606, seen on H100s).
                # Our loops synchronise every step, so this wait costs nothing there; it keeps any other caller safe.
                torch.cuda.current_stream(device).synchronize()
            imgs = decode_jpeg(datas, device=device, mode=ImageReadMode.RGB)   # as PIL's convert("RGB"): grey -> 3 channels
            x = torch.stack([im[:, t:t + crop, l:l + crop] for im, (t, l) in zip(imgs, offsets.tolist())])
            x = x.masked_fill(masks.to(device, non_blocking=non_blocking)[:, None], 0)
            x = Scale()(ConvertColor()(x))
            return x, y.to(device, non_blocking=non_blocking)
        x, y = batch
        x = x.to(device, non_blocking=non_blocking)
        y = y.to(device, non_blocking=non_blocking)
        if variant == "uint8_device":
            x = Scale()(ConvertColor()(x))
        return x, y


# -- model and step --------------------------------------------------------------------------------
def toy_cnn(image_size: int = 256, num_classes: int = 10) -> nn.Module:
    """The article's toy CNN: conv 3->30, log2(size) x (conv 30->30 'same', ReLU, max-pool 2), conv 30->10, flatten."""
    if image_size < 2 or image_size & (image_size - 1):
        raise ValueError(f"image_size must be a power of two so the pooling ends at 1x1 (got {image_size})")
    layers: list[nn.Module] = [nn.Conv2d(3, 30, 3, padding="same")]
    for _ in range(int(math.log2(image_size))):
        layers += [nn.Conv2d(30, 30, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2)]
    layers += [nn.Conv2d(30, num_classes, 3, padding="same"), nn.Flatten()]
    return nn.Sequential(*layers)


def make_trainer(image_size: int, device, seed: int = 0):
    """A fresh toy CNN + SGD(lr 0.001, momentum 0.9); returns ``train(x, y) -> loss`` with labelled phases."""
    torch.manual_seed(seed)
    model = toy_cnn(image_size).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    return training.labelled_step(model, opt, nn.CrossEntropyLoss())


class StandIn:
    """A stand-in for the accelerator on a CPU: a "device step" that takes ``step_ms`` and uses no CPU.

    It sleeps (``time.sleep`` releases the GIL), so DataLoader workers compete with each other for
    the cores, not with the model, as they do beside a GPU. Its numbers are *not* GPU numbers: they
    show the dynamics of an input-bound loop (the sawtooth, the worker sweep, fixes that raise
    throughput) with a device whose step time is fixed and stated.
    """

    def __init__(self, step_ms: float):
        if not isinstance(step_ms, (int, float)) or isinstance(step_ms, bool) or not step_ms > 0:
            raise ValueError(f"the stand-in step time must be a positive number of ms (got {step_ms!r})")
        self.step_ms = float(step_ms)

    def __call__(self, x, y):
        with record_function("stand_in_step"):
            time.sleep(self.step_ms / 1000.0)
        return None

    def __repr__(self) -> str:
        return f"StandIn({self.step_ms:g} ms)"


def stand_in_step_ms(batch_ms: float, num_workers: int, ratio: float = 0.5) -> float:
    """The stand-in's step time: ``ratio`` x the time the baseline's ``num_workers`` workers take per batch
    (``batch_ms``, one process's time per batch, divided by the workers; 0 workers: ``batch_ms``).

    So the baseline with those workers takes about ``1 / ratio`` x the stand-in step (input-bound) on any
    core count: ``ratio x batch_ms`` alone would make 4 workers on an 8-core laptop twice as fast as the device.
    """
    if not batch_ms > 0 or not 0 < ratio <= 1:
        raise ValueError(f"need batch_ms > 0 and 0 < ratio <= 1 (got {batch_ms!r}, {ratio!r})")
    return ratio * batch_ms / max(int(num_workers), 1)


def make_step(crop: int, device, seed: int = 0, stand_in_ms: float | None = None) -> Callable:
    """The training step of a run: the toy CNN (``make_trainer``), or a ``StandIn`` when ``stand_in_ms`` is set."""
    return StandIn(stand_in_ms) if stand_in_ms is not None else make_trainer(crop, device, seed)


# -- statistics: the comparison sees the stall -----------------------------------------------------
COMPARE = "step_ms_mean"   # what variants are compared by (samples/s is batch / this)


def summarize(times_ms: Sequence[float], batch_size: int, warm_ms: Sequence[float] = ()) -> dict[str, Any]:
    """Metrics of the timed steps: mean (the comparison), median and quartiles (extra columns).

    With N workers batches arrive in waves (a long step, then N-1 short ones): the median is a short
    step and hides the stall; the mean, and ``samples_per_s`` over the whole timed window, do not.
    """
    if not times_ms:
        raise ValueError("no timed steps to summarise")
    times = [float(t) for t in times_ms]
    st = timing.StepTimes(times_ms=times, first_ms=float(warm_ms[0]) if len(warm_ms) else None)
    m = st.metrics()
    mean = sum(times) / len(times)
    m["step_ms_mean"] = round(mean, 3)
    m["step_ms_max"] = round(max(times), 3)
    m["samples_per_s"] = round(batch_size * len(times) / (sum(times) / 1000.0), 2)
    m["warmup_ms"] = [round(t, 2) for t in warm_ms]
    m["times_ms"] = [round(t, 3) for t in times]
    return m


def comparison_ms(metrics: Mapping[str, Any]) -> float:
    """The step time variants are compared by (``COMPARE``: the mean)."""
    return float(metrics[COMPARE])


def speedup(base: Mapping[str, Any], new: Mapping[str, Any]) -> float:
    """How many times faster ``new`` is than ``base`` (ratio of ``comparison_ms``; > 1 = faster)."""
    return comparison_ms(base) / comparison_ms(new)


def cycle_steps(num_workers: int, cycles: int, at_least: int = 1) -> int:
    """Steps covering at least ``cycles`` full worker cycles (one cycle = ``num_workers`` batches, one
    per worker), at least ``at_least``, rounded up to whole cycles."""
    n = max(int(num_workers), 1)
    k = max(int(cycles) * n, int(at_least), 1)
    return -(-k // n) * n


def predicted_samples_per_s(num_workers: int, batch_ms: float, step_ms: float, batch_size: int) -> float:
    """Throughput the per-batch pipeline cost predicts: ``batch × min(N ÷ T_batch, 1 ÷ T_step)``.

    With 0 workers the main process prepares each batch and then steps: ``batch ÷ (T_batch + T_step)``.
    (Assumes the workers have a core each; past the core count they share them.)
    """
    if batch_ms <= 0 or step_ms <= 0:
        raise ValueError("batch_ms and step_ms must be positive")
    if num_workers == 0:
        return batch_size * 1000.0 / (batch_ms + step_ms)
    return batch_size * 1000.0 * min(num_workers / batch_ms, 1.0 / step_ms)


def bound_ms(variant: str, ceiling_ms: float, decode_bound_ms: float) -> float:
    """The fastest step a variant can reach: the ceiling, and for a pipeline whose workers decode the JPEGs on the
    CPU, also the decode bound (``max`` of the two). ``gpu_decode`` decodes on the GPU: the CPU decode bound says
    nothing about it (a step below it is no sign of being near its own bound), so its bound is the ceiling."""
    if ceiling_ms <= 0 or decode_bound_ms <= 0:
        raise ValueError("ceiling_ms and decode_bound_ms must be positive")
    return ceiling_ms if variant == "gpu_decode" else max(ceiling_ms, decode_bound_ms)


# -- validation ------------------------------------------------------------------------------------
def check_config(variant: str, num_workers: Any, batch_size: Any, device=None, max_workers: int | None = None):
    """Refuse bad settings with a clear message (ValueError) before any process starts."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown pipeline variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    widgets.validate_num_workers(num_workers, max_workers)  # InvalidValue is a ValueError
    widgets.validate_batch_size(batch_size, maximum=1 << 16)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if variant == "gpu_decode" and dev.type != "cuda":
        raise ValueError("gpu_decode decodes JPEGs with nvJPEG on a CUDA device; this run is on the CPU")


def _clean_worker_error(exc: BaseException) -> BaseException:
    """A worker's exception arrives as 'Caught X in DataLoader worker process N. Original Traceback...':
    keep the worker number and the original last line."""
    text = str(exc)
    if text.startswith("Caught "):
        first = text.splitlines()[0]
        last = [ln for ln in text.splitlines() if ln.strip()][-1]
        return RuntimeError(f"{first.rstrip('.')}: {last.strip()}")
    if "exited unexpectedly" in text:
        return RuntimeError(f"a DataLoader worker died ({text.splitlines()[0]}); the run was stopped cleanly")
    return exc


# -- shared memory and decode checks ---------------------------------------------------------------
SHM_PATH = "/dev/shm"


class SharedMemoryTooSmall(RuntimeError):
    """/dev/shm cannot hold the batches the workers keep in flight (they would die with a bus error)."""


class DecodeMismatch(RuntimeError):
    """The GPU's JPEG decode differs from the CPU's by more than the tolerance."""


def shm_needed_mb(num_workers: int, batch_size: int, crop: int, *, prefetch_factor: int | None = None,
                  bytes_per_value: int = 4, pinned: bool = True) -> float:
    """MiB of shared memory the batches in flight take: workers × prefetch × batch × 3 × crop² × bytes.

    With ``pinned=False`` two more batches: the DataLoader asks for a new batch as soon as it hands one over, so
    the batch the loop holds (and, while ``next()`` waits, the previous one) stays in shared memory beside the
    workers' ``workers × prefetch``. (Pinned, the pin-memory thread copies each batch out and frees it.)
    """
    if num_workers <= 0:
        return 0.0
    pf = 2 if prefetch_factor is None else prefetch_factor
    batches = num_workers * pf + (0 if pinned else 2)
    return batches * batch_size * 3 * crop * crop * bytes_per_value / 2**20


def _shm_bytes(variant: str) -> int:
    """Bytes per value of the batches a variant's workers ship (uint8 or float32)."""
    return 1 if variant in ("uint8_device", "gpu_decode") else 4


def shm_free_mb(path: str = SHM_PATH) -> float | None:
    """Free space of ``path`` in MiB (None where it does not exist, e.g. not Linux)."""
    import shutil

    try:
        return shutil.disk_usage(path).free / 2**20
    except OSError:
        return None


def shm_advice(need_mb: float) -> str:
    """A ``--shm-size`` that holds ``need_mb`` with a quarter to spare (whole GiB, at least 1g)."""
    return f"{max(1, math.ceil(need_mb * 1.25 / 1024))}g"


def check_shm(need_mb: float, free_mb: float | None = None, path: str = SHM_PATH) -> str:
    """Raise ``SharedMemoryTooSmall`` with what to do when ``need_mb`` does not fit; else a one-line report."""
    free = shm_free_mb(path) if free_mb is None else free_mb
    if free is None:
        return f"{path} not found: worker batches go through the system's default shared memory"
    if need_mb > free:
        raise SharedMemoryTooSmall(
            f"{path} has {free:.0f} MiB free but the workers' batches in flight need about {need_mb:.0f} MiB; "
            f"workers would die with a bus error. Give the container more (docker run --shm-size={shm_advice(need_mb)}, "
            f"Kubernetes: an emptyDir with medium Memory on {path}) or lower num_workers, prefetch_factor or batch size.")
    return f"{path}: {free:.0f} MiB free, batches in flight need about {need_mb:.0f} MiB: enough"


def compare_decodes(ref: torch.Tensor, other: torch.Tensor, *, mean_tol: float = 3.0, p99_tol: float = 24.0,
                    what: str = "image") -> dict[str, float]:
    """Compare two uint8 decodes of one JPEG (JPEG decoders may differ by a few levels: IDCT, chroma upsampling).

    Raises ``DecodeMismatch`` when the shapes differ, the mean absolute difference exceeds ``mean_tol``
    or its 99th percentile exceeds ``p99_tol`` levels. Returns ``{"mean_abs", "p99_abs", "max_abs"}``.
    """
    ref, other = ref.detach().cpu(), other.detach().cpu()
    if ref.shape != other.shape:
        raise DecodeMismatch(f"{what}: GPU decode gave shape {tuple(other.shape)}, the CPU decode {tuple(ref.shape)}")
    d = (ref.to(torch.int16) - other.to(torch.int16)).abs().float().flatten()
    k = max(1, int(0.99 * d.numel()))
    out = {"mean_abs": float(d.mean()), "p99_abs": float(d.kthvalue(k).values), "max_abs": float(d.max())}
    if out["mean_abs"] > mean_tol or out["p99_abs"] > p99_tol:
        raise DecodeMismatch(f"{what}: GPU decode differs from the CPU decode (mean |diff| {out['mean_abs']:.2f}, "
                             f"99th percentile {out['p99_abs']:.0f} levels; tolerance {mean_tol:g} / {p99_tol:g}); "
                             "not timing a pipeline that gives different pixels")
    return out


def check_decode(paths: Sequence[Path | str], device, decode: Callable | None = None, **tol) -> dict[str, float]:
    """Decode each JPEG with ``decode(list of byte tensors, device)`` (default: ``torchvision.io.decode_jpeg``
    on ``device``, nvJPEG on a GPU) and compare with the CPU decode the other variants use (PIL).
    Raises ``DecodeMismatch`` (clear message) on a mismatch; returns the worst differences."""
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms.functional import pil_to_tensor

    if decode is None:
        decode = lambda datas, dev: decode_jpeg(datas, device=dev, mode=ImageReadMode.RGB)  # noqa: E731
    paths = list(paths)
    outs = decode([read_file(str(p)) for p in paths], device)
    worst = {"mean_abs": 0.0, "p99_abs": 0.0, "max_abs": 0.0}
    for p, out in zip(paths, outs):
        r = compare_decodes(pil_to_tensor(load_image(p)), out, what=Path(p).name, **tol)
        worst = {k: max(worst[k], r[k]) for k in worst}
    return worst


# -- the timed run ---------------------------------------------------------------------------------
def make_loader(variant: str, num_workers: int, batch_size: int, *, crop: int, length: int,
                paths: Sequence[Path | str] | None = None, device=None, pin_memory: bool | None = None,
                prefetch_factor: int | None = None, persistent_workers: bool = False,
                die_at: int | None = None, seed: int = 0) -> DataLoader:
    """The DataLoader of a variant (pin_memory defaults to True where the device is CUDA)."""
    paths = list(paths) if paths is not None else sample_paths()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    image_hw = (533, 800)
    if variant == "gpu_decode":
        from PIL import Image

        with Image.open(paths[0]) as im:
            image_hw = (im.height, im.width)
    ds = ImageDataset(paths, length, build_transform(variant, crop, image_hw=image_hw), seed=seed,
                      mode="bytes" if variant == "gpu_decode" else "pil", die_at=die_at)
    kw: dict[str, Any] = {}
    if num_workers > 0:
        kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            kw["prefetch_factor"] = prefetch_factor
    g = torch.Generator().manual_seed(seed)
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True,
                      collate_fn=collate_for(variant), generator=g,
                      pin_memory=(dev.type == "cuda") if pin_memory is None else pin_memory, **kw)


def _copy_overlapped(batch, variant: str, dev, crop, stream):
    """Issue ``to_device`` of ``batch`` on a side CUDA stream (returns at once: the copy runs beside compute)."""
    with torch.cuda.stream(stream):
        return to_device(batch, variant, dev, crop)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` intra-op threads (restored after); ``None`` leaves them alone.

    DataLoader workers run with one thread each; the main process defaults to one per core, and on a
    loaded machine those threads spin waiting for each other. Where the main process does the pipeline's
    work (``num_workers=0``) or stands beside a stand-in device, one thread makes its cost a worker's.
    """
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _main_threads(dev: torch.device, num_workers: int) -> int | None:
    return 1 if (num_workers == 0 or dev.type != "cuda") else None


def timed_loop(batches, step: Callable, device, *, variant: str, crop: int | None, steps: int, warmup: int,
               overlap_copy: bool = False) -> tuple[list[float], list[float], list[float], torch.Tensor]:
    """The one clock every row of notebook 02 uses (the ceiling too).

    Each step: ``next(batches)`` (the wait for data), ``to_device``, ``step(x, y)``, synchronise the
    device, read ``time.perf_counter``. A step's time runs from the end of the previous step to the end
    of this one, so it includes the wait. With ``overlap_copy`` (CUDA only) the next batch is fetched
    and copied (non-blocking, on a side stream, from pinned memory) while this step's kernels run.
    Returns ``(timed step ms, timed wait ms, warm-up step ms, last x)``.
    """
    dev = torch.device(device)
    if overlap_copy and dev.type != "cuda":
        raise ValueError("overlap_copy overlaps a host-to-device copy with device compute: it needs a CUDA device")
    times, waits, warm = [], [], []
    stream = torch.cuda.Stream(dev) if overlap_copy else None
    t_prev = time.perf_counter()
    cur = _copy_overlapped(next(batches), variant, dev, crop, stream) if overlap_copy else None
    x = None
    for i in range(warmup + steps):
        if overlap_copy:
            torch.cuda.current_stream(dev).wait_stream(stream)
            x, y = cur
            for t in (x, y):
                t.record_stream(torch.cuda.current_stream(dev))
            step(x, y)                       # queued on the default stream; the CPU goes on at once
            t0 = time.perf_counter()
            nxt = next(batches) if i + 1 < warmup + steps else None
            t_data = time.perf_counter()
            if nxt is not None:
                cur = _copy_overlapped(nxt, variant, dev, crop, stream)
            wait_ms = (t_data - t0) * 1000.0
        else:
            batch = next(batches)
            t_data = time.perf_counter()
            wait_ms = (t_data - t_prev) * 1000.0
            x, y = to_device(batch, variant, dev, crop)
            step(x, y)
        timing.synchronize(dev)
        t_end = time.perf_counter()
        if i < warmup:
            warm.append((t_end - t_prev) * 1000.0)
        else:
            times.append((t_end - t_prev) * 1000.0)
            waits.append(wait_ms)
        t_prev = t_end
    return times, waits, warm, x


def run_variant(variant: str = "baseline", num_workers: int = 0, batch_size: int = 16, steps: int = 10, *,
                warmup: int = 2, crop: int = 64, device=None, paths: Sequence[Path | str] | None = None,
                dataset_size: int | None = None, pin_memory: bool | None = None, prefetch_factor: int | None = None,
                persistent_workers: bool = False, die_at: int | None = None, seed: int = 0,
                max_workers: int | None = None, train: bool = True, stand_in_ms: float | None = None,
                overlap_copy: bool = False, check_shared_memory: bool = True) -> dict[str, Any]:
    """Train for ``warmup + steps`` steps fed by the variant's DataLoader; time each step (``timed_loop``).

    The step is the toy CNN, or with ``stand_in_ms`` a ``StandIn`` (a fixed-time device step that uses
    no CPU); ``train=False`` skips it (the pipeline alone). The first ``warmup`` steps are reported
    apart: the first holds the workers' start-up, and the first worker cycle arrives as one burst.
    Variants are compared by the mean step (``samples_per_s`` over the whole timed window); median and
    quartiles are extra columns. ``data_wait_share`` is the share of the timed window spent in
    ``next()``. Peak device memory is reset first, so it is this row's. With workers, /dev/shm is
    checked first (``check_shm``); ``gpu_decode`` is checked against the CPU decode before it is timed.
    With ``num_workers=0``, or on a CPU, the main process runs with one intra-op thread, as a worker does
    (``torch_threads``).
    Returns the metrics dict of a results row.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    check_config(variant, num_workers, batch_size, dev, max_workers)
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be at least 1 and warmup at least 0")
    paths = list(paths) if paths is not None else sample_paths()
    if num_workers > 0 and check_shared_memory:
        pinned = (dev.type == "cuda") if pin_memory is None else bool(pin_memory)
        check_shm(shm_needed_mb(num_workers, batch_size, crop, prefetch_factor=prefetch_factor,
                                bytes_per_value=_shm_bytes(variant), pinned=pinned))
    decode_check = check_decode(paths[:4], dev) if variant == "gpu_decode" else None
    needed = (warmup + steps + 1) * batch_size
    length = max(dataset_size or 0, needed)
    loader = make_loader(variant, num_workers, batch_size, crop=crop, length=length, paths=paths, device=dev,
                         pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                         persistent_workers=persistent_workers, die_at=die_at, seed=seed)
    step = make_step(crop, dev, seed, stand_in_ms) if train else (lambda x, y: None)
    timing.reset_peak_memory(dev)
    it = iter(loader)
    try:
        with torch_threads(_main_threads(dev, num_workers)):
            times, waits, warm, x = timed_loop(it, step, dev, variant=variant, crop=crop, steps=steps, warmup=warmup,
                                               overlap_copy=overlap_copy)
    except Exception as exc:  # noqa: BLE001 - re-raised with a readable message
        raise _clean_worker_error(exc) from None
    finally:
        del it
    m = summarize(times, batch_size, warm)
    m["data_wait_ms_median"] = round(float(np.median(waits)), 3)
    m["data_wait_share"] = round(sum(waits) / sum(times), 4)
    m["peak_mem_mb"] = timing.peak_memory_mb(dev)
    m["x_shape"] = list(x.shape)
    m["x_dtype"] = str(x.dtype)
    if decode_check is not None:
        m["decode_vs_cpu_mean_abs"] = round(decode_check["mean_abs"], 3)
    return m


def run_interleaved(configs: Mapping[str, Mapping[str, Any]], rounds: int, **common) -> dict[str, Any]:
    """Run each configuration (``run_variant`` keyword arguments, over ``common``) ``rounds`` times, in
    rotating order (A B C, B C A, C A B, ...), and pool each one's timed steps.

    On a shared machine the load drifts; run one after the other, a variant is judged by the load of its
    moment. Interleaved, a burst of someone else's work hits every variant alike. Returns
    ``{name: metrics}`` (``summarize`` of the pooled steps; first step and warm-up from the first round),
    or ``{name: exception}`` for a configuration that failed (it is not run again).
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    names = list(configs)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    failed: dict[str, BaseException] = {}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name in failed:
                continue
            try:
                runs[name].append(run_variant(**{**common, **configs[name]}))
            except Exception as exc:  # noqa: BLE001 - reported as this configuration's failure
                failed[name] = exc
    out: dict[str, Any] = {}
    for name in names:
        if name in failed:
            out[name] = failed[name]
            continue
        ms = runs[name]
        times = [t for m in ms for t in m["times_ms"]]
        batch = (common | dict(configs[name])).get("batch_size", 16)
        m = summarize(times, batch, ms[0]["warmup_ms"])
        m["data_wait_share"] = round(sum(x["data_wait_share"] * sum(x["times_ms"]) for x in ms) / sum(times), 4)
        mems = [x["peak_mem_mb"] for x in ms if x.get("peak_mem_mb") is not None]
        m["peak_mem_mb"] = max(mems) if mems else None
        m["rounds"] = len(ms)
        m["round_means_ms"] = [x["step_ms_mean"] for x in ms]
        for k in ("x_shape", "x_dtype", "decode_vs_cpu_mean_abs"):
            if k in ms[-1]:
                m[k] = ms[-1][k]
        out[name] = m
    return out


def ceiling(batch_size: int, crop: int, steps: int = 10, warmup: int = 2, device=None, seed: int = 0,
            stand_in_ms: float | None = None) -> dict[str, Any]:
    """The same step fed one batch already on the device, timed by the same ``timed_loop`` (same clock):
    the fastest this loop can go. Returns the metrics of a results row (``summarize``)."""
    import itertools

    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch_size, 3, crop, crop, generator=g).to(dev)
    y = torch.randint(0, 10, (batch_size,), generator=g).to(dev)
    step = make_step(crop, dev, seed, stand_in_ms)
    timing.reset_peak_memory(dev)
    with torch_threads(_main_threads(dev, 0) if stand_in_ms is not None else None):
        times, waits, warm, _ = timed_loop(itertools.repeat((x, y)), step, dev, variant="ceiling", crop=crop,
                                           steps=steps, warmup=warmup)
    m = summarize(times, batch_size, warm)
    m["peak_mem_mb"] = timing.peak_memory_mb(dev)
    return m


def first_batch(variant: str, batch_size: int = 4, crop: int = 64, device=None, paths=None):
    """One batch of a variant as the model sees it (in the main process): ``(x, y)`` on ``device``."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    check_config(variant, 0, batch_size, dev)
    loader = make_loader(variant, 0, batch_size, crop=crop, length=batch_size, paths=paths, device=dev)
    return to_device(next(iter(loader)), variant, dev, crop)


def per_sample_ms(fn: Callable[[], Any], repeats: int = 20) -> float:
    """Median wall time of ``fn()`` in ms over ``repeats`` calls (after one warm-up call)."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1000.0)
    return float(np.median(ts))


def profile_loop(variant: str, num_workers: int, batch_size: int, *, crop: int, trace_dir, device=None,
                 warmup: int = 1, active: int = 2, cycles: int = 2, paths=None, seed: int = 0,
                 stand_in_ms: float | None = None):
    """Profile training steps fed by the variant's DataLoader into ``trace_dir``.

    The first worker cycle (``num_workers`` batches that arrive as one burst after start-up) is
    skipped (``wait``), then ``warmup`` steps, then at least ``cycles`` full worker cycles are
    recorded (``active`` at least), so the trace's wait share is the steady state's, not the burst's.
    With ``num_workers=0`` the per-transform ``record_function`` labels run in this process and
    appear in the profile; with workers they run elsewhere and only the wait in ``__next__`` shows.
    """
    from .profiling import profile_steps

    dev = torch.device(device) if device is not None else torch.device("cpu")
    check_config(variant, num_workers, batch_size, dev)
    if num_workers > 0:   # as run_variant: refuse before a worker starts (a full /dev/shm kills them with SIGBUS)
        check_shm(shm_needed_mb(num_workers, batch_size, crop, bytes_per_value=_shm_bytes(variant),
                                pinned=dev.type == "cuda"))
    wait = num_workers
    active = max(active, cycle_steps(num_workers, cycles) if num_workers else active)
    loader = make_loader(variant, num_workers, batch_size, crop=crop,
                         length=(wait + warmup + active + 1) * batch_size, paths=paths, device=dev, seed=seed)
    train = make_step(crop, dev, seed, stand_in_ms)
    it = iter(loader)

    def step():
        x, y = to_device(next(it), variant, dev, crop)
        train(x, y)

    try:
        with torch_threads(_main_threads(dev, num_workers)):
            prof = profile_steps(step, wait=wait, warmup=warmup, active=active, device=dev, trace_dir=trace_dir)
    except Exception as exc:  # noqa: BLE001
        raise _clean_worker_error(exc) from None
    finally:
        del it
    prof.steps_recorded = active
    return prof


def gpu_idle_share(trace_dir) -> float | None:
    """Holistic Trace Analysis' idle share (0..1) of the GPU in the profiled window of ``trace_dir`` (a
    ``tensorboard_trace_handler`` folder or a trace file), read through ``helpers.trace`` so that HTA's parse
    chatter and its "no rank in the trace" warning stay out of the notebook. None for a CPU-only trace."""
    from . import trace as tr

    b = tr.open_trace(trace_dir, max_steps=None).gpu_breakdown()
    return None if b is None else b["idle_pct"] / 100.0


# -- reading the pipeline's profile ----------------------------------------------------------------
PROFILE_SORT = "cpu_time_total"   # the transform labels have no device time: sort by CPU time, on a GPU too

# record_function labels -> the stage they belong to (for the per-variant stacked bar)
STAGES = {"load_image": "decode JPEG", "read_bytes": "read file", "PILToTensor": "to tensor",
          "RandomCrop": "crop", "PILRandomCrop": "crop", "RandomMask": "mask", "ConvertColor": "colour",
          "ConvertColor(batch)": "colour", "Scale": "scale", "Scale(batch)": "scale", "collate": "collate",
          "to_device": "to device"}


def profile_table(prof, row_limit: int = 12) -> str:
    """The pipeline profile's table, sorted by CPU time (``PROFILE_SORT``) whatever the device."""
    from . import profiling

    return profiling.table(prof, sort_by=PROFILE_SORT, row_limit=row_limit)


def stage_ms(label_ms: Mapping[str, float], n_samples: int) -> dict[str, float]:
    """Per-sample ms of each stage (``STAGES``) from ``{label: total CPU ms}`` of a profile."""
    out: dict[str, float] = {}
    for label, stage in STAGES.items():
        out[stage] = out.get(stage, 0.0) + float(label_ms.get(label, 0.0)) / max(n_samples, 1)
    return out
