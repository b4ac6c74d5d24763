"""The one fake-trace builder the tests share: Chrome-trace ("X") events and documents made of them.

``ev(name, ts, dur=1.0, cat="cuda_runtime", corr=None, tid=1, pid=1, **args)``: one complete event (``dur=None``
leaves ``dur`` out, for damaged traces; ``corr`` becomes ``args["correlation"]``, any other keyword an arg).
``doc(*events, **top)``: ``{"traceEvents": [...], **top}``. The shorthands name the categories a profiler writes.
"""
from __future__ import annotations

from typing import Any


def ev(name: str, ts: float, dur: float | None = 1.0, cat: str = "cuda_runtime", corr: int | None = None,
       tid: int = 1, pid: int = 1, **args: Any) -> dict[str, Any]:
    e = {"ph": "X", "name": name, "cat": cat, "ts": ts, "pid": pid, "tid": tid, "args": dict(args)}
    if dur is not None:
        e["dur"] = dur
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def step(k: int, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
    """``ProfilerStep#k``, a user annotation."""
    return ev(f"ProfilerStep#{k}", ts, dur, "user_annotation", **kw)


def label(name: str, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
    """A ``record_function`` label on the host."""
    return ev(name, ts, dur, "user_annotation", **kw)


def op(name: str, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
    """An operator on the host (``cpu_op``)."""
    return ev(name, ts, dur, "cpu_op", **kw)


def kernel(name: str, ts: float, dur: float, corr: int | None = None, tid: int = 7, **kw: Any) -> dict[str, Any]:
    """A device kernel on stream ``tid`` (7 by default)."""
    return ev(name, ts, dur, "kernel", corr=corr, tid=tid, **kw)


def runtime(name: str, ts: float, dur: float = 1.0, corr: int | None = None, **kw: Any) -> dict[str, Any]:
    """A CUDA runtime call on the host (``cudaLaunchKernel``, ``cudaStreamSynchronize``, ...)."""
    return ev(name, ts, dur, "cuda_runtime", corr=corr, **kw)


def doc(*events: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"traceEvents": list(events), **top}
