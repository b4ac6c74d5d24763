"""Read profiler traces: one module that the notebooks, the tests and ``python -m helpers.doctor`` use.

Works on the Chrome-trace dict that ``prof.export_chrome_trace`` / ``tensorboard_trace_handler`` write.

- ``load_trace``: read a ``.json`` / ``.json.gz`` trace or a ``tensorboard_trace_handler`` folder; bad input
  raises ``TraceError`` with a one-line message naming the file and what to do.
- ``count_syncs`` / ``sync_costs``: host-device synchronisations, each counted once, and what each cost
  (host wait, GPU idle after it) (taught in ``03_backward_hooks``). A CPU-only trace has none.
- ``dataloader_wait_share``: the share of the profiled steps spent in the DataLoader's ``__next__``
  (taught in ``02_data_pipeline``).
- ``show(path_or_dir, steps=3)``: the offline views in a notebook (beside ``%tensorboard`` in 01-04, and in
  ``05_diagnose``); ``open_trace`` gives the same views as DataFrames and figures (``Trace.overview``,
  ``operators``, ``kernels``, ``memory``, ``timeline``, ``gpu_breakdown`` ...), computed by torch-tb-profiler's
  parser and Holistic Trace Analysis (in ``trace_views.py``). A long trace is cut to its first steps (``trim``).
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Mapping


@contextlib.contextmanager
def no_gc():
    """Run without Python's cyclic garbage collector (reference counting still frees memory): building the
    million small dicts of a large trace otherwise triggers collection after collection (a 200 MB trace loads 4x
    faster without them). Trace events hold no reference cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class TraceError(ValueError):
    """A file or folder that cannot be read as a profiler trace, or a view this trace cannot give; the message is
    one line naming the file and what to do."""


def find_trace(path_or_dir: Path | str) -> tuple[Path, list[str]]:
    """The trace file to read, and notes for the reader: a file is itself; in a folder (what
    ``tensorboard_trace_handler`` writes, one ``*.pt.trace.json[.gz]`` per profiled run and worker) the newest."""
    p = Path(path_or_dir)
    if not p.exists():
        raise TraceError(f"{p}: no such file or folder; give a .json / .json.gz trace or the folder that "
                         "tensorboard_trace_handler wrote")
    if not p.is_dir():
        return p, []
    files = [f for pat in ("*.pt.trace.json", "*.pt.trace.json.gz") for f in p.rglob(pat)]
    files = files or [f for pat in ("*.json", "*.json.gz") for f in p.glob(pat)]
    if not files:
        raise TraceError(f"{p}: the folder holds no trace file (*.pt.trace.json[.gz]); give the folder passed to "
                         "tensorboard_trace_handler after the profiler has run, or a trace file")
    files.sort(key=lambda f: (f.stat().st_mtime, f.name))
    notes = [] if len(files) == 1 else [f"{p}: {len(files)} trace files; showing the newest, {files[-1].name}"]
    return files[-1], notes


def load_trace(path: Path | str) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``, or the newest trace in a ``tensorboard_trace_handler``
    folder) into a dict with a ``traceEvents`` list. Raises ``TraceError`` (one line naming the file) for a missing
    file, an empty folder, a damaged or truncated ``.gz``, or a file that is not a Chrome trace."""
    p, _ = find_trace(path)
    try:
        with open(p, "rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"  # gzip's magic bytes, whatever the file is called
        with (gzip.open(p, "rb") if zipped else open(p, "rb")) as f:
            raw = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{p}: the .gz file is truncated or damaged ({exc}); copy or export the trace again") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    try:
        with no_gc():
            doc = json.loads(raw, strict=False)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: not a complete JSON profiler trace ({str(exc).splitlines()[0][:80]}); give the file "
                         "that prof.export_chrome_trace or tensorboard_trace_handler wrote") from None
    del raw
    if isinstance(doc, list):  # the Chrome trace format also allows a bare array of events
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p}: JSON, but not a Chrome trace (no traceEvents list); give the file that "
                         "prof.export_chrome_trace or tensorboard_trace_handler wrote")
    if not any(isinstance(e, dict) and e.get("ph") == "X" for e in doc["traceEvents"]):
        raise TraceError(f"{p}: the trace holds no profiled events; run the code to profile inside the profiler "
                         "(and past its schedule's wait and warm-up steps) before the trace is written")
    return doc


MAX_STEPS = 10          # open_trace keeps at most this many ProfilerSteps of a long trace ...
MAX_EVENTS = 400_000    # ... and fewer when they hold more events than this (at least one step is kept)


def trim(trace: Mapping[str, Any], max_steps: int | None = MAX_STEPS,
         max_events: int | None = MAX_EVENTS) -> tuple[dict, str | None]:
    """Keep the first steps of a long trace: ``(trimmed dict, note)``; the note (None when nothing was cut) says
    what was kept. Users' traces reach hundreds of MB, mostly many repeated steps; the views and the diagnosis
    average over steps, so a bounded window gives the same picture in bounded time and memory.

    Kept: metadata events, every event that starts between the first kept step's start and the next step's
    start, and the GPU work launched in that window (it runs a little later). The ``traceEvents`` list is new; the
    events themselves are shared with ``trace``."""
    steps = step_ranges(trace)
    events = _events(trace)
    if not steps or (max_steps is None and max_events is None):
        return dict(trace), None
    starts = [a for _, a, _ in steps]
    k = len(steps) if max_steps is None else max(1, min(int(max_steps), len(steps)))
    if max_events is not None:  # fewer steps when they are heavy
        per_step = [0] * len(steps)
        for e in events:
            ts = e.get("ts")
            if isinstance(ts, (int, float)) and ts >= starts[0]:
                per_step[min(len(steps), bisect.bisect_right(starts, ts)) - 1] += 1
        total = 0
        for i in range(k):
            total += per_step[i]
            if total > max_events and i > 0:
                k = i
                break
    if k == len(steps):
        return dict(trace), None
    lo, hi = starts[0], starts[k]
    kept, corrs = [], set()
    for e in events:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            kept.append(e)  # metadata
        elif lo <= ts < hi:
            kept.append(e)
            if e.get("cat") in _HOST_API:
                corrs.add(_corr(e))
    corrs.discard(None)
    kept += [e for e in events if isinstance(e.get("ts"), (int, float)) and e["ts"] >= hi
             and str(e.get("cat", "")).startswith(("kernel", "gpu_", "cuda_sync")) and _corr(e) in corrs]
    note = (f"the trace holds {len(steps)} ProfilerSteps ({len(events):,} events); the first {k} "
            f"({len(kept):,} events) are analysed; open_trace(path, max_steps=None) for all of them")
    return {**{key: v for key, v in trace.items() if key != "traceEvents"}, "traceEvents": kept}, note


def step_ranges(trace: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of each ``ProfilerStep#N`` (host ranges, in time order); [] when the trace
    has none (then the views analyse the whole trace as one step and say so)."""
    return sorted(((str(e["name"]), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
                   for e in _events(trace) if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                   and _is_host(e)), key=lambda r: r[1])


def has_gpu(trace: Mapping[str, Any]) -> bool:
    """True when the trace holds GPU activity (kernels, copies, memsets)."""
    return any(e.get("cat") in GPU_CATS for e in _events(trace))


# ---------------------------------------------------------------------------------------------------------
# Synchronisations (taught in 03_backward_hooks)
# ---------------------------------------------------------------------------------------------------------
# host calls that wait for the device, by kind (runtime and driver API, base names without CUPTI's suffixes)
SYNC_KINDS = {
    "cudaStreamSynchronize": "stream_sync", "cuStreamSynchronize": "stream_sync",
    "cudaDeviceSynchronize": "device_sync", "cudaThreadSynchronize": "device_sync", "cuCtxSynchronize": "device_sync",
    "cudaEventSynchronize": "event_sync", "cuEventSynchronize": "event_sync",
}
# copies whose API call itself blocks the host until the copy is done (the synchronous copy API);
# a device-to-device copy does not make the host wait, so it is left out (by its GPU record, when there is one)
BLOCKING_COPIES = {"cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
                   "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D", "cuMemcpy3D"}
# asynchronous copies: they block only when the destination is pageable host memory (a DtoH copy into memory
# that is not pinned is staged and waited for by the driver); into pinned memory they do not wait
ASYNC_COPIES = {"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyFromSymbolAsync",
                "cuMemcpyAsync", "cuMemcpyDtoHAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync"}
SYNC_CALLS = tuple(k for k in SYNC_KINDS if k.startswith("cuda"))  # kept for readers of the old constant
KINDS = ("stream_sync", "device_sync", "event_sync", "blocking_copy")
KEYS = KINDS  # the old name
# Kineto's own records of a sync on the GPU timeline (category ``cuda_sync``, with ``enable_cuda_sync_events``):
# the same wait as the host call with the same correlation id; "Stream Wait Event" is a GPU-side wait, no host sync
_CUDA_SYNC_KINDS = {"Stream Sync": "stream_sync", "Context Sync": "device_sync", "Event Sync": "event_sync"}
_HOST_API = ("cuda_runtime", "cuda_driver")
# calls that may sit between a copy and its sync without ending the pair (error checks, capture queries)
_QUIET_CALLS = {"cudaGetLastError", "cudaPeekAtLastError", "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo",
                "cudaGetDevice", "cuCtxGetCurrent", "cuStreamIsCapturing", "cuStreamGetCaptureInfo"}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

_API_SUFFIX = re.compile(r"(_pt(sz|ds))?(_v\d+)?$")


def api_name(name: str) -> str:
    """A CUDA runtime call's base name: CUPTI's own names carry a version and/or per-thread-stream suffix
    (``cudaStreamSynchronize_v3020``, ``cudaStreamSynchronize_ptsz``); Kineto's table drops the version."""
    return _API_SUFFIX.sub("", name)


def _is_host(e) -> bool:
    return not str(e.get("cat", "")).startswith("gpu_")


def phase_ranges(trace: Mapping[str, Any], phase: str = "backward") -> list[tuple[float, float]]:
    """(start, end) in microseconds of every complete event named ``phase`` (a ``record_function`` label).

    ``phase="ProfilerStep"`` (or any name followed by ``#``) also matches the numbered labels
    ``ProfilerStep#12``. Only the host-side range counts: on CUDA the profiler also draws the label on the GPU
    timeline (category ``gpu_user_annotation``), later than the host range; that copy is skipped.
    """
    pre = phase + "#"
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
                  for e in _events(trace)
                  if e.get("ph") == "X" and (e.get("name") == phase or str(e.get("name", "")).startswith(pre))
                  and _is_host(e))


def _events(trace) -> list:
    return trace.get("traceEvents", []) if isinstance(trace, Mapping) else []


def _corr(e):
    return (e.get("args") or {}).get("correlation")


def _sync_events(trace: Mapping[str, Any], pairs: dict | None = None) -> list[tuple[dict, str]]:
    """Every host-device synchronisation in the trace, once each, in time order: ``(host event, kind)``.

    - an explicit sync call (runtime or driver API: stream, device/context, event) is one sync;
    - a synchronous copy call (``cudaMemcpy``, ``cuMemcpyDtoH`` ...) is one sync, unless its GPU record shows a
      device-to-device copy (the host does not wait for those);
    - an asynchronous device-to-host copy into pageable memory blocks like a sync; when the same thread's next
      API call is an explicit sync (PyTorch's ``.item()`` / ``.cpu()``: ``cudaMemcpyAsync`` then
      ``cudaStreamSynchronize``), the pair is one sync, counted as that call; a copy into pinned memory
      (``non_blocking=True``) is no sync;
    - a ``cuda_sync`` GPU record (Kineto's sync events) duplicates its host call; it counts only when the trace
      holds no host call with its correlation id.

    ``pairs``, when given, is filled with ``{id(sync call): copy call}`` for each copy-and-sync pair: the host
    waits inside the copy call (a copy to pageable memory returns only when it is done), so the pair's wait
    starts there.
    """
    evs = _events(trace)
    gpu_copy = {}
    host_api, cuda_sync = [], []
    for e in evs:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "gpu_memcpy":
            c = _corr(e)
            if c is not None:
                gpu_copy[c] = str(e.get("name", ""))
        elif cat in _HOST_API:
            host_api.append(e)
        elif cat == "cuda_sync":
            cuda_sync.append(e)
    out: list[tuple[dict, str]] = []
    by_tid: dict = {}
    for e in host_api:
        by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for calls in by_tid.values():
        calls.sort(key=lambda e: float(e.get("ts", 0.0)))
        pending = None  # an async DtoH copy into pageable memory, not yet followed by a sync call
        for e in calls:
            name = api_name(str(e.get("name", "")))
            kind = SYNC_KINDS.get(name)
            if kind:
                out.append((e, kind))
                if pending is not None and pairs is not None:
                    pairs[id(e)] = pending
                pending = None  # the copy's wait is this sync
                continue
            if name in _QUIET_CALLS:
                continue
            if pending is not None:  # the copy was not followed by a sync call: it was the wait itself
                out.append((pending, "blocking_copy"))
                pending = None
            copy = gpu_copy.get(_corr(e), "")
            if name in BLOCKING_COPIES and "DtoD" not in copy:
                out.append((e, "blocking_copy"))
            elif name in ASYNC_COPIES and "DtoH" in copy and "Pinned" not in copy:
                pending = e
        if pending is not None:
            out.append((pending, "blocking_copy"))
    seen = {_corr(e) for e in host_api}
    for e in cuda_sync:
        kind = _CUDA_SYNC_KINDS.get(str((e.get("args") or {}).get("cuda_sync_kind", e.get("name"))))
        if kind and (_corr(e) is None or _corr(e) not in seen):
            out.append((e, kind))
    out.sort(key=lambda p: float(p[0].get("ts", 0.0)))
    return out


def _in_ranges(ts: float, ranges) -> bool:
    i = bisect.bisect_right(ranges, (ts, float("inf"))) - 1
    return any(a <= ts <= b for a, b in ranges[max(0, i - 8): i + 1])  # nested/overlapping ranges are rare


def count_syncs(trace: Mapping[str, Any], phase: str | None = "backward") -> dict[str, Any]:
    """Host-device synchronisations inside ``phase`` (or the whole trace with ``phase=None``), each counted once.

    What counts as one synchronisation is explained in ``_sync_events``: ``.item()`` (a device-to-host copy and
    its stream sync) is one, a non-blocking copy into pinned memory is none, driver-API syncs
    (``cuStreamSynchronize``, ``cuCtxSynchronize``, ``cuEventSynchronize``) and the blocking ``cudaMemcpy`` count.
    A sync belongs to the phase its host call starts in.

    Returns a dict: ``total``; ``phases`` (how many ``phase`` ranges were found, 1 for the whole trace);
    ``per_step`` (total / phases); ``by_kind`` ({kind: count} over ``KINDS``), the same counts as top-level keys;
    and ``dtoh_copies``, the device-to-host copies launched in the phase (informative: most belong to a sync).
    A CPU-only trace has none of these events: every count is 0.
    """
    ranges = phase_ranges(trace, phase) if phase else None
    inside = (lambda ts: True) if ranges is None else (lambda ts: _in_ranges(ts, ranges))
    by_kind = dict.fromkeys(KINDS, 0)
    for e, kind in _sync_events(trace):
        if inside(float(e.get("ts", 0.0))):
            by_kind[kind] += 1
    launched = {_corr(e) for e in _events(trace)
                if e.get("ph") == "X" and e.get("cat") in _HOST_API and inside(float(e.get("ts", 0.0)))}
    dtoh = sum(1 for e in _events(trace) if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"
               and "DtoH" in str(e.get("name", "")) and _corr(e) in launched)
    total = sum(by_kind.values())
    n = 1 if ranges is None else len(ranges)
    return {**by_kind, "by_kind": by_kind, "dtoh_copies": dtoh, "total": total, "phases": n,
            "per_step": total / n if n else 0.0}


def _gpu_busy(trace) -> tuple[list[float], list, list[tuple[float, float]]]:
    """The GPU timeline: start times of every GPU activity (sorted), their correlation ids (to find the call
    that launched each), and the merged busy intervals."""
    acts = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), _corr(e))
                  for e in _events(trace) if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    merged: list[list[float]] = []
    for a, b, _ in acts:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [a for a, _, _ in acts], [c for _, _, c in acts], [tuple(m) for m in merged]


def _busy_within(merged, starts_m, a: float, b: float) -> float:
    """Busy time of the merged intervals within [a, b]."""
    if b <= a:
        return 0.0
    i = max(0, bisect.bisect_right(starts_m, a) - 1)
    busy = 0.0
    while i < len(merged) and merged[i][0] < b:
        busy += max(0.0, min(b, merged[i][1]) - max(a, merged[i][0]))
        i += 1
    return busy


def launch_latency_us(trace: Mapping[str, Any]) -> float:
    """The trace's own launch latency: the median time from a launch call's start to its GPU activity's start,
    over the activities launched while the GPU was idle (so no queue delay is included); 0 if there are none."""
    import statistics

    launch_ts = {_corr(e): float(e["ts"]) for e in _events(trace)
                 if e.get("ph") == "X" and e.get("cat") in _HOST_API and _corr(e) is not None}
    acts = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), _corr(e))
                  for e in _events(trace) if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    lat, busy_until = [], float("-inf")
    for a, b, c in acts:
        lt = launch_ts.get(c)
        if lt is not None and busy_until <= lt <= a:
            lat.append(a - lt)
        busy_until = max(busy_until, b)
    return float(statistics.median(lat)) if lat else 0.0


SYNC_COST_COLUMNS = ["ts_us", "name", "kind", "host_us", "gpu_idle_us"]


def sync_costs(trace: Mapping[str, Any], phase: str | None = None):
    """One row per synchronisation (counted once, as in ``count_syncs``) with what it cost.

    A sync costs waiting, not device time: ``host_us`` is the host call's duration (the CPU waits), and
    ``gpu_idle_us`` is the GPU idle time it caused, measured on the trace's own GPU timeline (all GPU
    activity, every stream): the idle time from the sync call's start until the next GPU activity starts, but
    at most until the end of the host call plus the trace's launch latency (``launch_latency_us``) -- idle after
    that is the CPU's doing (it launched nothing), not the sync's. For a device-to-host copy followed by its
    sync (``.item()``: ``cudaMemcpyAsync`` into pageable memory, then ``cudaStreamSynchronize``) the host waits
    mostly inside the copy call, so "the host call" is the pair: from the copy call's start to the sync's end
    (``ts_us`` stays the sync call's).
    Columns ``ts_us, name, kind, host_us, gpu_idle_us``; empty (same columns) for a CPU-only trace.
    """
    import pandas as pd

    ranges = phase_ranges(trace, phase) if phase else None
    pairs: dict = {}
    syncs = [(e, k) for e, k in _sync_events(trace, pairs)
             if ranges is None or _in_ranges(float(e.get("ts", 0.0)), ranges)]
    starts, corrs, merged = _gpu_busy(trace)
    if not starts or not syncs:
        return pd.DataFrame(columns=SYNC_COST_COLUMNS)
    launch = launch_latency_us(trace)
    starts_m = [m[0] for m in merged]
    rows = []
    for e, kind in syncs:
        ts = float(e["ts"])
        t1 = ts + float(e.get("dur", 0.0))
        t0 = min(ts, float(pairs[id(e)]["ts"])) if id(e) in pairs else ts   # the pair's wait starts in the copy
        dur = t1 - t0
        j = bisect.bisect_left(starts, t1)  # the first GPU activity that starts after the host call ends
        end = min(starts[j], t1 + launch) if j < len(starts) else t1 + launch
        rows.append({"ts_us": ts, "name": str(e.get("name", "")), "kind": kind, "host_us": dur,
                     "gpu_idle_us": max(0.0, (end - t0) - _busy_within(merged, starts_m, t0, end))})
    return pd.DataFrame(rows, columns=SYNC_COST_COLUMNS)


def dataloader_wait_share(trace: dict) -> dict[str, float]:
    """From a Chrome trace of the training loop: time in the DataLoader's ``__next__`` vs the profiled steps.

    Returns ``{"next_ms", "step_ms", "share"}`` summed over the ``ProfilerStep*`` events.
    """
    # host ranges only: on CUDA a label is also drawn on the GPU timeline (category gpu_user_annotation)
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and not str(e.get("cat", "")).startswith("gpu_")]
    steps = [e for e in evs if str(e.get("name", "")).startswith("ProfilerStep")]
    nexts = [e for e in evs if str(e.get("name", "")).startswith("enumerate(DataLoader)#")
             and str(e.get("name", "")).endswith("__next__")]
    step_us = sum(float(e["dur"]) for e in steps)
    next_us = 0.0
    for n in nexts:  # count only the parts inside a profiled step
        s0, s1 = float(n["ts"]), float(n["ts"]) + float(n["dur"])
        for s in steps:
            a, b = float(s["ts"]), float(s["ts"]) + float(s["dur"])
            next_us += max(0.0, min(s1, b) - max(s0, a))
    return {"next_ms": next_us / 1000.0, "step_ms": step_us / 1000.0,
            "share": next_us / step_us if step_us else float("nan")}


# ---------------------------------------------------------------------------------------------------------
# The offline views (helpers/trace_views.py) and ``show``
# ---------------------------------------------------------------------------------------------------------
_VIEW_NAMES = ("Trace", "CATEGORIES", "OVERVIEW_COLUMNS", "OPERATOR_COLUMNS", "KERNEL_COLUMNS",
               "MEMORY_COLUMNS")


def __getattr__(name: str):
    """``trace.Trace``, ``trace.open_trace`` and the views' column names live in ``helpers.trace_views``, which
    builds on this module; they are looked up on first use, so either module can be imported first."""
    if name in _VIEW_NAMES:
        from . import trace_views

        return getattr(trace_views, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_trace(src, max_steps: int | None = MAX_STEPS):
    """A ``Trace`` (its methods are the views) from a path, a folder, a trace dict or a ``Trace``; a long trace is
    cut to its first ``max_steps`` steps and a note says so (see ``trace_views.open_trace``)."""
    from .trace_views import open_trace as _open

    return _open(src, max_steps=max_steps)


def gpu_breakdown(src) -> dict[str, float] | None:
    """Holistic Trace Analysis' temporal breakdown of the GPU's time: ``{"idle_pct", "compute_pct",
    "non_compute_pct"}`` (percent of the profiled time); None on a CPU-only trace. ``src``: a path, a folder,
    a trace dict or a ``Trace``."""
    return open_trace(src).gpu_breakdown()


def overview(src):
    """The step-time breakdown by category, per step and ``average`` (see ``Trace.overview``)."""
    return open_trace(src).overview()


def operators(src):
    """Host and device self/total time and calls per operator (see ``Trace.operators``)."""
    return open_trace(src).operators()


def kernels(src):
    """Calls, total and mean time, occupancy and tensor-core use per GPU kernel (see ``Trace.kernels``)."""
    return open_trace(src).kernels()


def memory(src):
    """Peak allocated / reserved memory per device, where the trace recorded it (see ``Trace.memory``)."""
    return open_trace(src).memory()


def timeline(src, steps: int = 3):
    """A timeline picture of the first ``steps`` steps (see ``Trace.timeline``)."""
    return open_trace(src).timeline(steps)


def show(path_or_dir, steps: int = 3, top: int = 10) -> None:
    """Show the offline views of a trace in a notebook, no server and no network: a summary line, the Overview
    (step-time breakdown per step and on average), the GPU's time (HTA), Operators, Kernels, Memory and a timeline
    of the first ``steps`` steps; tables hold the ``top`` rows. A view that cannot be computed on this trace says
    so in one line and the others are still shown. Bad input (not a trace, damaged file, empty folder) is one
    line too, never a traceback."""
    from IPython.display import display

    from .results import readable

    try:
        t = open_trace(path_or_dir)
    except TraceError as exc:
        print(f"trace: {exc}")
        return
    ranges = step_ranges(t.doc)
    mean_ms = sum(b - a for _, a, b in ranges) / len(ranges) / 1000.0 if ranges else None
    print(f"{t.label}: {len(ranges)} ProfilerStep(s)" + (f", {mean_ms:.2f} ms per step on average" if ranges else "")
          + ("; GPU activity recorded" if t.has_gpu else "; CPU only (no GPU views)"))
    for note in t.notes:
        print(f"note: {note}")

    def view(title, fn):
        print(f"\n{title}")
        try:
            out = fn()
        except TraceError as exc:
            print(f"  {exc}")
        except Exception as exc:  # noqa: BLE001 - one view failing must not hide the others
            why = (str(exc).strip().splitlines() or [""])[0][:120]
            print(f"  {title} could not be computed on {t.label}: {type(exc).__name__}: {why}")
        else:
            if out is not None:
                display(out)

    def overview_view():
        try:
            return readable(t.overview().round(3))
        except TraceError as exc:
            print(f"  {exc}; the step times from the trace:")
            return readable(t.step_times())

    view("Overview: step time by category (ms; torch-tb-profiler)", overview_view)
    if t.has_gpu:
        import pandas as pd

        view("GPU time (%; Holistic Trace Analysis' temporal breakdown)", lambda: pd.DataFrame([t.gpu_breakdown()]))
        view("GPU idle time by cause (Holistic Trace Analysis)", lambda: readable(t.idle_breakdown().round(3)))
        view("Kernel launches (Holistic Trace Analysis; medians)",
             lambda: readable(pd.DataFrame([t.launch_summary()]).round(3)))

    def operators_view():
        note = t.operators_note()
        if note:
            print(f"  {note}")
        return readable(t.operators().head(top).round(3))

    view("Operators (by device self time on a GPU, else host self time)", operators_view)

    def kernels_view():
        k = t.kernels()
        tc = t.tensor_core_share()
        print(f"  {len(k)} kernels, {k['total_ms'].sum():.2f} ms in all"
              + (f"; {tc:.0%} of kernel time in kernels using tensor cores" if tc is not None else ""))
        return readable(k.head(top).round(3))

    view("Kernels", kernels_view)
    view("Memory", lambda: readable(t.memory().round(1)))
    view(f"Timeline of the first {steps} step(s)", lambda: t.timeline(steps))
