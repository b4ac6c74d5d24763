"""Read profiler traces: one module that the notebooks, the tests and ``python -m helpers.doctor`` use.

Works on the Chrome-trace dict that ``prof.export_chrome_trace`` / ``tensorboard_trace_handler`` write.

- ``count_syncs``: host-device synchronisations inside a phase (taught in ``03_backward_hooks``):
  ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` / ``cudaEventSynchronize`` runtime calls, and
  device-to-host copies (``gpu_memcpy`` events named ``Memcpy DtoH ...``), attributed to the phase by their
  launching runtime call (``correlation`` id), since the copy itself runs later on the GPU timeline.
  A CPU-only trace has none of these events: every count is 0.
- ``dataloader_wait_share``: the share of the profiled steps spent in the DataLoader's ``__next__``
  (taught in ``02_data_pipeline``).
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Mapping


def load_trace(path: Path | str) -> dict:
    """Read a Chrome-trace JSON file (plain or gzipped)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        return json.load(f)

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
KEYS = ("stream_sync", "device_sync", "event_sync", "dtoh_copies")


_API_SUFFIX = re.compile(r"(_pt(sz|ds))?(_v\d+)?$")


def api_name(name: str) -> str:
    """A CUDA runtime call's base name: CUPTI's own names carry a version and/or per-thread-stream suffix
    (``cudaStreamSynchronize_v3020``, ``cudaStreamSynchronize_ptsz``); Kineto's table drops the version."""
    return _API_SUFFIX.sub("", name)


def phase_ranges(trace: Mapping[str, Any], phase: str = "backward") -> list[tuple[float, float]]:
    """(start, end) in microseconds of every complete event named ``phase`` (a ``record_function`` label).

    Only the host-side range counts: on CUDA the profiler also draws the label on the GPU timeline
    (category ``gpu_user_annotation``), later than the host range; that copy is skipped.
    """
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
                  for e in trace.get("traceEvents", [])
                  if e.get("name") == phase and e.get("ph") == "X" and not str(e.get("cat", "")).startswith("gpu_"))


def count_syncs(trace: Mapping[str, Any], phase: str | None = "backward") -> dict[str, float]:
    """Synchronisations inside ``phase`` (or the whole trace with ``phase=None``).

    Returns the counts per kind (``KEYS``), ``total`` (sync calls + DtoH copies), ``phases``
    (how many ``phase`` ranges were found) and ``per_step`` (total / phases).
    """
    events = trace.get("traceEvents", [])
    ranges = phase_ranges(trace, phase) if phase else [(float("-inf"), float("inf"))]

    def inside(e) -> bool:
        ts = float(e.get("ts", 0.0))
        return any(a <= ts <= b for a, b in ranges)

    counts = dict.fromkeys(KEYS, 0)
    launched_inside = set()
    for e in events:
        name = api_name(str(e.get("name", "")))
        if e.get("ph") != "X":
            continue
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and inside(e):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launched_inside.add(corr)
            if name == "cudaStreamSynchronize":
                counts["stream_sync"] += 1
            elif name == "cudaDeviceSynchronize":
                counts["device_sync"] += 1
            elif name == "cudaEventSynchronize":
                counts["event_sync"] += 1
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", ""):
            corr = (e.get("args") or {}).get("correlation")
            if (corr is not None and corr in launched_inside) or (corr is None and inside(e)):
                counts["dtoh_copies"] += 1
    total = sum(counts.values())
    n = len(ranges) if phase else 1
    return {**counts, "total": total, "phases": n if ranges else 0, "per_step": total / n if n and ranges else 0.0}


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
