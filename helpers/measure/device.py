"""The device a measurement runs on: is it CUDA, wait for it, read and reset its peak memory."""

from __future__ import annotations


def is_cuda(device) -> bool:
    """Is ``device`` (a ``torch.device``, a string such as ``"cuda:0"``, or None) a CUDA device?"""
    return device is not None and getattr(device, "type", str(device)).startswith("cuda")


def synchronize(device=None) -> None:
    """Wait for all queued work on ``device`` (a no-op on the CPU)."""
    import torch

    if is_cuda(device):
        torch.cuda.synchronize(device)


def peak_memory_mb(device=None) -> float | None:
    """Peak allocated device memory since the last reset, in MiB (None on the CPU)."""
    import torch

    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if is_cuda(device) else None


def peak_reserved_mb(device=None) -> float | None:
    """Peak memory the caching allocator reserved since the last reset, in MiB (None on the CPU)."""
    import torch

    return round(torch.cuda.max_memory_reserved(device) / 2**20, 1) if is_cuda(device) else None


def reset_peak_memory(device=None) -> None:
    import torch

    if is_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
