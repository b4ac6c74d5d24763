"""Checks before anything runs in ``02_data_pipeline``: settings, room in ``/dev/shm`` for the workers' batches,
the GPU decode against the CPU decode, and a worker's error made readable."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ...measure.compare import compare
from ...measure.validate import validate_batch_size, validate_num_workers
from .data import VARIANTS, load_image

# -- validation ------------------------------------------------------------------------------------
def check_config(variant: str, num_workers: Any, batch_size: Any, device=None, max_workers: int | None = None):
    """Refuse bad settings with a clear message (ValueError) before any process starts."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown pipeline variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    validate_num_workers(num_workers, max_workers)  # InvalidValue is a ValueError
    validate_batch_size(batch_size, maximum=1 << 16)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if variant == "gpu_decode" and dev.type != "cuda":
        raise ValueError("gpu_decode decodes JPEGs with nvJPEG on a CUDA device; this run is on the CPU")


def clean_worker_error(exc: BaseException) -> BaseException:
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


def shm_bytes(variant: str) -> int:
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
    c = compare(ref, other)
    if c["why"]:
        raise DecodeMismatch(f"{what}: GPU decode gave shape {tuple(other.shape)}, the CPU decode {tuple(ref.shape)}")
    out = {"mean_abs": c["mean_abs_diff"], "p99_abs": c["p99_abs_diff"], "max_abs": c["max_abs_diff"]}
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


