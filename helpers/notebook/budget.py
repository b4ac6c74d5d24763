"""A notebook's time budget: what is left becomes skipped rows once it is spent, and the experiment already
running is stopped (``SIGALRM``) when it runs past it; how a notebook uses it: docs/gpu.md."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
import traceback
from typing import Any, Callable, Iterator, Mapping

BUDGET_ENV = "PERF_TIME_BUDGET_S"
START_ENV = "PERF_NOTEBOOK_START"


class OverBudget(BaseException):
    """An experiment skipped, or stopped while running, because the notebook's time budget was spent."""


def _seconds(raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{what}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what}={raw!r}: a time budget must be a positive number of seconds")
    return value


class Budget:
    """``seconds`` for the whole notebook (None: unlimited), of which ``reserve_s`` is kept for what follows the
    experiments (results table, checks, figures). Time counts from ``start`` (``time.monotonic()`` when omitted)."""

    def __init__(
        self,
        seconds: float | None,
        *,
        reserve_s: float = 0.0,
        start: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
            raise ValueError(f"a time budget must be a positive number of seconds, not {seconds!r}")
        if reserve_s < 0:
            raise ValueError("reserve_s cannot be negative")
        self.seconds = seconds
        self.reserve_s = float(reserve_s)
        self.clock = clock
        self.start = clock() if start is None else start

    @classmethod
    def from_env(
        cls,
        default_s: float | None,
        *,
        reserve_s: float = 0.0,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> "Budget":
        """``$PERF_TIME_BUDGET_S`` when set (the runner's ``--budget``), else ``default_s`` (the notebook's), counted
        from ``$PERF_NOTEBOOK_START`` when set, else from now; a bad value is a one-line ``ValueError``."""
        environ = os.environ if environ is None else environ
        raw = environ.get(BUDGET_ENV, "").strip()
        seconds = _seconds(raw, BUDGET_ENV) if raw else default_s
        start = now = clock()
        raw_start = environ.get(START_ENV, "").strip()
        if raw_start:
            try:
                start = now - max(0.0, time.time() - float(raw_start))
            except ValueError:
                raise ValueError(f"{START_ENV}={raw_start!r} is not a Unix time") from None
        return cls(seconds, reserve_s=reserve_s, start=start, clock=clock)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds left for experiments (the reserve excluded); ``inf`` without a budget."""
        return math.inf if self.seconds is None else self.seconds - self.reserve_s - self.elapsed()

    def spent(self) -> bool:
        return self.left() <= 0

    def describe(self) -> str:
        if self.seconds is None:
            return f"no time budget ({self.elapsed():.0f} s so far)"
        return (
            f"time budget {self.seconds:g} s: {self.elapsed():.0f} s used, {max(0.0, self.left()):.0f} s left "
            f"for experiments ({self.reserve_s:g} s kept for the results)"
        )

    @contextlib.contextmanager
    def limit(self, limit_s: float | None = None) -> Iterator[None]:
        """Raise ``OverBudget("stopped: ...")`` in the block when it runs past what is left of the budget (or past
        ``limit_s``, when that is sooner). Raises ``OverBudget("skipped: ...")`` at once when nothing is left."""
        if self.spent():
            raise OverBudget(
                f"skipped: the notebook's time budget ({self.seconds:g} s, {self.reserve_s:g} s of it kept "
                "for the results) was spent before it started"
            )
        seconds = min(self.left(), math.inf if limit_s is None else float(limit_s))
        if math.isinf(seconds):
            yield
            return
        message = (
            f"stopped: over its limit of {seconds:.0f} s"
            if self.seconds is None
            else f"stopped: over the time budget, after {seconds:.0f} s of this experiment (the notebook has "
            f"{self.seconds:g} s)"
        )
        with alarm(seconds, message):
            yield

    def wrap(self, fn: Callable[[], Any], limit_s: float | None = None) -> Callable[[], Any]:
        """``fn`` run under ``limit(limit_s)``: what ``Results.record(..., budget=BUDGET)`` runs (by hand: a guarded
        call that is no row)."""

        def bounded():
            with self.limit(limit_s):
                return fn()

        return bounded


def can_alarm() -> bool:
    """Whether ``alarm`` can stop a running block here (the main thread of a process with ``SIGALRM``)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def alarm(seconds: float, message: str) -> Iterator[None]:
    """Raise ``OverBudget(message)`` in the block after ``seconds`` (``SIGALRM``, main thread only; elsewhere the
    block runs unbounded). An outer alarm is kept (the sooner fires) and set again when the block ends. One that falls
    in a finaliser waits until it returns (raised there, Python would print and drop it)."""
    if not can_alarm():
        yield
        return
    armed = {"on": True, "due": False}

    def fire(signum, frame):
        if not armed["on"]:
            return
        if _finalizing(frame):
            armed["due"] = True
            signal.setitimer(signal.ITIMER_REAL, DEFER_S)
            return
        armed["on"] = False
        raise OverBudget(message)

    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    own = max(seconds, 1e-3)
    if outer_left and outer_left <= own:  # an outer alarm fires first: leave it as it is
        yield
        return
    t0 = time.monotonic()
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, own)
    try:
        yield
    finally:
        due, armed["on"] = armed["on"] and armed["due"], False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer_left - (time.monotonic() - t0)))
    if due:  # the alarm fell in a finaliser and the block ended before it could be raised
        raise OverBudget(message)


# a DataLoader's iterator shuts its workers down in a finaliser, joining each one for up to 5 s
FINALIZERS = frozenset({"__del__", "_shutdown_workers"})
DEFER_S = 0.05  # the alarm tries again this often until the finaliser has returned


def _finalizing(frame) -> bool:
    return frame is not None and any(
        f.f_code.co_name in FINALIZERS for f, _ in traceback.walk_stack(frame)
    )
