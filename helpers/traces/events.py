"""What a trace's events are: one category table, the host/device test, steps, phases, launches.

A Chrome trace from ``torch.profiler`` (Kineto) is a list of events; each complete event (``ph == "X"``) has a
category (``cat``). This module is the one place that says what a category means, for the old schema (torch <= 1.9:
``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) and the new one (``cpu_op``, ``cuda_runtime``,
``kernel``, ``gpu_memcpy`` ...), on CUDA, ROCm (HIP), MTIA and XPU alike. Every reader of traces in this package
(views, syncs, diagnosis, backward attribution, timeline) classifies events through it.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from . import intervals as iv

# --- the category table --------------------------------------------------------------------------------------
# kind of each category (lower-cased): "kernel", "memcpy", "memset" (device work), "launch" (a host runtime/driver
# call that queues device work), "device_annotation" (a record_function label copied onto the device timeline),
# "device_sync" (Kineto's device-side record of a synchronisation); on the host "op" (an ATen operator),
# "annotation" (a record_function label), "python" (a Python frame of a with_stack trace). Anything else is "host".
CATEGORY_KIND = {
    "cpu_op": "op", "operator": "op", "user_annotation": "annotation", "python_function": "python",
    "kernel": "kernel", "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "launch", "cuda_driver": "launch", "runtime": "launch", "driver": "launch",
    "hip_runtime": "launch", "hip_driver": "launch", "mtia_runtime": "launch", "xpu_runtime": "launch",
    "xpu_driver": "launch", "privateuse1_runtime": "launch", "privateuse1_driver": "launch",
    "gpu_user_annotation": "device_annotation",
    "cuda_sync": "device_sync",
}
DEVICE_WORK = ("kernel", "memcpy", "memset")     # kinds that occupy the device
DEVICE_SIDE = DEVICE_WORK + ("device_annotation", "device_sync")
HOST_RANGES = ("op", "annotation", "python")    # what a host thread's lane of a timeline shows
STEP_PREFIX = "ProfilerStep#"
DATALOADER_PREFIX = "enumerate(DataLoader)#"
# Top-level key of a trace written by ``measure.profiling.profile_steps`` when its loop synchronised a CUDA device
# after each step: readers of the trace alone (``python -m helpers.doctor``) then know those syncs are the loop's.
LOOP_SYNC_METADATA = "perf_lab_loop_sync"

_API_SUFFIX = re.compile(r"(_pt(sz|ds))?(_v\d+)?$")


def kind(e: Mapping[str, Any]) -> str:
    """The kind of a trace event (see ``CATEGORY_KIND``); ``"host"`` for everything else."""
    return CATEGORY_KIND.get(str(e.get("cat", "")).lower(), "host")


def is_host(e) -> bool:
    """A host-side event: for a trace dict, by its category (not device work, not a device-timeline copy of a
    label, not a device-side sync record); for a profiler ``FunctionEvent`` (``prof.events()``), by its device type."""
    if isinstance(e, Mapping):
        return kind(e) not in DEVICE_SIDE
    return str(getattr(e, "device_type", "CPU")).endswith("CPU")


def is_device_work(e: Mapping[str, Any]) -> bool:
    """A kernel, copy or memset on the device."""
    return kind(e) in DEVICE_WORK


def is_launch(e: Mapping[str, Any]) -> bool:
    """A host runtime or driver call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``hipLaunchKernel`` ...)."""
    return kind(e) == "launch"


def events(trace) -> list:
    """The trace's event list ([] for anything that is not a trace dict)."""
    return trace.get("traceEvents", []) if isinstance(trace, Mapping) else []


def complete(trace) -> list:
    """Its complete events (``ph == "X"``) with a start time: the ones that take time."""
    return [e for e in events(trace) if isinstance(e, Mapping) and e.get("ph") == "X" and "ts" in e]


def span(e: Mapping[str, Any]) -> tuple[float, float]:
    """``(start_us, end_us)`` of a complete event."""
    t = float(e["ts"])
    return t, t + float(e.get("dur", 0.0) or 0.0)


def corr(e: Mapping[str, Any]):
    """The correlation id that links a launch call to its device work (None when absent)."""
    return (e.get("args") or {}).get("correlation")


def api_name(name: str) -> str:
    """A CUDA runtime call's base name: CUPTI's own names carry a version and/or per-thread-stream suffix
    (``cudaStreamSynchronize_v3020``, ``cudaStreamSynchronize_ptsz``); Kineto's table drops the version."""
    return _API_SUFFIX.sub("", name)


def has_gpu(trace) -> bool:
    """True when the trace holds device activity (kernels, copies, memsets), whatever the accelerator."""
    return any(isinstance(e, Mapping) and is_device_work(e) for e in events(trace))


# --- steps and phases ------------------------------------------------------------------------------------------
def step_events(trace) -> list:
    """The host ``ProfilerStep#N`` events, in time order ([] when the trace has none). On CUDA the profiler also
    draws each step on the GPU timeline (``gpu_user_annotation``); those copies are not steps."""
    return sorted((e for e in complete(trace) if str(e.get("name", "")).startswith(STEP_PREFIX) and is_host(e)),
                  key=lambda e: float(e["ts"]))


def step_ranges(trace) -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of each ``ProfilerStep#N`` (host ranges, in time order); [] when the trace has
    none (then the views analyse the whole trace as one step and say so)."""
    return [(str(e["name"]), *span(e)) for e in step_events(trace)]


def phase_ranges(trace, phase: str = "backward") -> list[tuple[float, float]]:
    """(start, end) in microseconds of every host event named ``phase`` (a ``record_function`` label).

    ``phase="ProfilerStep"`` (or any name followed by ``#``) also matches the numbered labels ``ProfilerStep#12``.
    Only the host-side range counts: the label's copy on the GPU timeline (later than the host range) is skipped.
    """
    pre = phase + "#"
    return sorted(span(e) for e in complete(trace)
                  if (e.get("name") == phase or str(e.get("name", "")).startswith(pre)) and is_host(e))


def dataloader_ranges(trace) -> list[tuple[float, float]]:
    """Host ranges of the DataLoader's ``enumerate(DataLoader)#...__next__`` (the wait for the next batch)."""
    return sorted(span(e) for e in complete(trace) if is_host(e)
                  and str(e.get("name", "")).startswith(DATALOADER_PREFIX) and str(e.get("name", "")).endswith("__next__"))


# --- launches and the device work they queued --------------------------------------------------------------------
def launches(trace_or_events) -> dict:
    """``{correlation id: launch call}``: every host runtime/driver call that carries a correlation id. A device
    event's launch is ``launches(trace).get(corr(event))``: the one pairing of device work to the call that queued
    it (launch latency, syncs, trimming, backward attribution and the profiler's phase times all use it)."""
    evs = trace_or_events if isinstance(trace_or_events, list) else complete(trace_or_events)
    out = {}
    for e in evs:
        if e.get("ph") == "X" and is_launch(e):
            c = corr(e)
            if c is not None:
                out.setdefault(c, e)
    return out


def device_work(trace_or_events) -> list:
    """The device's kernels, copies and memsets (complete events), in time order."""
    evs = trace_or_events if isinstance(trace_or_events, list) else complete(trace_or_events)
    return sorted((e for e in evs if e.get("ph") == "X" and "ts" in e and is_device_work(e)),
                  key=lambda e: float(e["ts"]))


def names(trace, kinds: Iterable[str] = ("thread_name", "process_name")) -> dict:
    """Thread and process names from the metadata events: ``{(kind, pid, tid or None): name}``."""
    kinds = set(kinds)
    out = {}
    for e in events(trace):
        if isinstance(e, Mapping) and e.get("ph") == "M" and e.get("name") in kinds:
            out[(e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None)] = str(
                (e.get("args") or {}).get("name", ""))
    return out


def dataloader_wait_share(trace) -> dict[str, float]:
    """Time in the DataLoader's ``__next__`` against the profiled steps (taught in ``02_data_pipeline``):
    ``{"next_ms", "step_ms", "share"}`` summed over the ``ProfilerStep#N`` ranges (only the parts of ``__next__``
    inside a step count)."""
    steps = [(a, b) for _, a, b in step_ranges(trace)]
    step_us = sum(b - a for a, b in steps)
    next_us = iv.length(iv.intersect(iv.merge(steps), iv.merge(dataloader_ranges(trace))))
    return {"next_ms": next_us / 1000.0, "step_ms": step_us / 1000.0,
            "share": next_us / step_us if step_us else float("nan")}
