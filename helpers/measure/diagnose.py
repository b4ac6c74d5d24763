"""Profile a step and diagnose it in one call: ``diagnose_step(step_fn)``, and ``training_step`` to build such a
step from your own model, optimizer and data loader (taught in ``05_diagnose``). The diagnosis itself is
``perf_doctor.diagnose``, which reads the trace written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from perf_doctor.diagnosis import Diagnosis, DiagnosisError, diagnose

from .device import is_cuda
from .profiling import fresh_trace_dir, profile_steps, trace_files
from .training import labelled_step


def diagnose_step(
    step_fn: Callable[[], Any],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    device=None,
    name: str = "diagnose_step",
    trace_root: Path | str | None = None,
    profile_memory: bool = False,
) -> Diagnosis:
    """Profile ``step_fn`` with ``schedule(wait, warmup, active)`` into ``fresh_trace_dir(name)`` and diagnose it (on a
    GPU the loop's syncs are left out of the diagnosis)."""
    import torch

    trace_dir = fresh_trace_dir(name, root=trace_root)
    cuda = is_cuda(device)
    if cuda:
        retries0 = torch.cuda.memory_stats(device).get("num_alloc_retries", 0)
    # on a GPU the loop synchronises after each step, so that a step's range covers its GPU work (a host that
    # runs ahead of a short profile would otherwise show steps as long as their launches); the diagnosis then
    # leaves those loop syncs out (loop_syncs)
    profile_steps(
        step_fn,
        wait=wait,
        warmup=warmup,
        active=active,
        device=device,
        trace_dir=trace_dir,
        profile_memory=profile_memory,
        sync=cuda,
    )
    files = trace_files(trace_dir)
    if not files:
        raise DiagnosisError(
            f"{trace_dir}: the profiler wrote no trace; is step_fn running (active={active})?"
        )
    kw: dict[str, Any] = {"loop_syncs": cuda}
    if cuda:
        torch.cuda.synchronize(device)
        kw |= {
            "capacity_bytes": torch.cuda.get_device_properties(device).total_memory,
            "alloc_retries": torch.cuda.memory_stats(device).get("num_alloc_retries", 0) - retries0,
        }
    result = diagnose(files[-1], **kw)
    result.trace_dir = trace_dir
    return result


def training_step(model, optimizer, loader, loss_fn=None, *, device=None) -> Callable[[], Any]:
    """A step for ``diagnose_step`` from your parts: the next ``(inputs, targets)`` of ``loader`` (cycling), moved to
    ``device``, forward, backward, optimizer step (``loss_fn``: cross-entropy)."""
    import torch

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
