"""One training step, with its phases labelled for the profiler (taught in ``01_profiler_basics``, reused later), and
``training_step``: such a step from your own model, optimizer and data loader (05, for ``profiling.diagnose_step``)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch.profiler import record_function

PHASES = ("forward", "backward", "optimizer_step")
_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``bf16``/``fp16``; a no-op for ``fp32``."""
    if precision not in _DTYPES:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(_DTYPES)}")
    if _DTYPES[precision] is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=_DTYPES[precision])


def labelled_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    *,
    precision: str = "fp32",
    label: bool = True,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``step(x, y)``: forward, backward and optimizer step (which zeroes the gradients), each in ``record_function``
    with ``label``; returns the loss tensor (no sync)."""
    maybe = record_function if label else (lambda name: contextlib.nullcontext())

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with maybe("forward"):
            with autocast(precision, x.device):
                loss = loss_fn(model(x), y)
        with maybe("backward"):
            loss.backward()
        with maybe("optimizer_step"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def make_train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    precision: str = "fp32",
) -> Callable[[], torch.Tensor]:
    """The labelled step of :func:`labelled_step` bound to one fixed batch (``step()``)."""
    step = labelled_step(model, optimizer, loss_fn, precision=precision)
    return lambda: step(inputs, targets)


def training_step(model, optimizer, loader, loss_fn=None, *, device=None) -> Callable[[], Any]:
    """A step for ``diagnose_step`` from your parts: the next ``(inputs, targets)`` of ``loader`` (cycling), moved to
    ``device``, forward, backward, optimizer step (``loss_fn``: cross-entropy)."""
    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    step = labelled_step(model, optimizer, loss_fn)
    batches = iter(loader)

    def run():
        nonlocal batches
        batch = next(batches, None)
        if batch is None:  # the loader is exhausted: start its next epoch
            batches = iter(loader)
            batch = next(batches)
        x, y = batch
        if device is not None:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return step(x, y)

    return run
