"""Timing done right: warm-up, synchronisation, medians with spread, first step apart, rounds in rotation.

Taught in ``01_profiler_basics``. ``StepTimes.metrics``: the step statistics every notebook writes (docs/results.md)."""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from perf_doctor.load import gc_paused  # noqa: F401 - timing.gc_paused: the block timed without collections

from .device import is_cuda, synchronize


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty list (``numpy.percentile``)."""
    if not values:
        raise ValueError("percentile of an empty list")
    return float(np.percentile(values, q))


@dataclass
class StepTimes:
    """Per-step times in milliseconds; ``first_ms`` is the very first (warm-up) call."""

    times_ms: list[float]
    first_ms: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times_ms)

    @property
    def p25(self) -> float:
        return percentile(self.times_ms, 25)

    @property
    def p75(self) -> float:
        return percentile(self.times_ms, 75)

    def metrics(self, batch_size: int | None = None) -> dict[str, float]:
        """The results contract's timing metrics (see the module docstring)."""
        m = {
            "step_ms_mean": round(self.mean, 3),
            "step_ms_median": round(self.median, 3),
            "step_ms_p25": round(self.p25, 3),
            "step_ms_p75": round(self.p75, 3),
            "steps_timed": len(self.times_ms),
        }
        if self.first_ms is not None:
            m["first_step_ms"] = round(self.first_ms, 3)
        if batch_size:  # every sample of every timed step / their time
            m["samples_per_s"] = round(
                batch_size * len(self.times_ms) / (sum(self.times_ms) / 1000.0), 2
            )
        return m

    def __str__(self) -> str:
        s = (
            f"median {self.median:.2f} ms, mean {self.mean:.2f} ms (IQR {self.p25:.2f}-{self.p75:.2f}, "
            f"n={len(self.times_ms)})"
        )
        if self.first_ms is not None:
            s += f"; first step {self.first_ms:.2f} ms"
        return s


def time_steps(
    fn: Callable[[], Any], *, steps: int = 10, warmup: int = 3, device=None
) -> StepTimes:
    """Call ``fn`` ``warmup`` times (the first timed apart: ``first_ms``), then time ``steps`` calls one by one: CUDA
    events on CUDA, ``time.perf_counter`` on a CPU."""
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if warmup < 0:
        raise ValueError("warmup cannot be negative")
    import torch

    first_ms = None
    for i in range(warmup):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        if i == 0:
            first_ms = (time.perf_counter() - t0) * 1000.0
    if not is_cuda(device):
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000.0)
        return StepTimes(times_ms=times, first_ms=first_ms)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(steps)
    ]
    synchronize(device)
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return StepTimes(times_ms=[start.elapsed_time(end) for start, end in events], first_ms=first_ms)


def interleaved_times(
    steps: dict[Any, Callable[[], Any]],
    rounds: int,
    device=None,
    warmup: int = 0,
    cpu_time: bool = False,
) -> dict[Any, StepTimes]:
    """Time several steps in alternation, round ``r`` starting at a rotating one, so a burst of other load hits every
    step alike; each first called ``warmup`` times, untimed. Wall time; with ``cpu_time``, on a CPU with one intra-op
    thread, the process's CPU time, which another process's load does not stretch (a sleep it does not see)."""
    import torch

    order = list(rotation(steps, rounds))  # refuses rounds < 1 before any call
    cpu_clock = cpu_time and not is_cuda(device) and torch.get_num_threads() == 1
    clock = time.process_time if cpu_clock else time.perf_counter
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    out: dict[Any, list[float]] = {n: [] for n in steps}
    for _, n in order:
        synchronize(device)
        t0 = clock()
        steps[n]()
        synchronize(device)
        out[n].append((clock() - t0) * 1000.0)
    return {n: StepTimes(times_ms=v) for n, v in out.items()}


def rotation(names: Sequence, rounds: int) -> Iterator[tuple[int, Any]]:
    """``(round, name)`` in the order interleaved rounds run them: every name once per round, starting at the next
    one each round (A B C, B C A, C A B, ...), so that a burst of someone else's work hits every variant alike."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    names = list(names)
    for r in range(rounds):
        k = r % len(names) if names else 0
        for n in names[k:] + names[:k]:
            yield r, n


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` intra-op threads (restored after; ``None``: unchanged); one thread makes the main
    process's cost a worker's, with no OpenMP threads waiting on each other."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
