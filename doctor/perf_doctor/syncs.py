"""Host-device synchronisations in a trace: each counted once, and what each cost (taught in ``03_backward_hooks``).
A CPU-only trace has none: every count is 0 and ``sync_costs`` is empty.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv

# host calls that wait for the device, by kind (runtime and driver API, base names without CUPTI's suffixes;
# ROCm's HIP calls, which Kineto records under the same categories, alike)
SYNC_KINDS = {
    "cudaStreamSynchronize": "stream_sync",
    "cuStreamSynchronize": "stream_sync",
    "hipStreamSynchronize": "stream_sync",
    "cudaDeviceSynchronize": "device_sync",
    "cudaThreadSynchronize": "device_sync",
    "cuCtxSynchronize": "device_sync",
    "hipDeviceSynchronize": "device_sync",
    "hipCtxSynchronize": "device_sync",
    "cudaEventSynchronize": "event_sync",
    "cuEventSynchronize": "event_sync",
    "hipEventSynchronize": "event_sync",
}
# copies whose API call itself blocks the host until the copy is done (the synchronous copy API);
# a device-to-device copy does not make the host wait, so it is left out (by its GPU record, when there is one)
BLOCKING_COPIES = {
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpy3D",
    "cudaMemcpyFromSymbol",
    "cudaMemcpyToSymbol",
    "cuMemcpy",
    "cuMemcpyDtoH",
    "cuMemcpyHtoD",
    "cuMemcpy2D",
    "cuMemcpy3D",
    "hipMemcpy",
    "hipMemcpy2D",
    "hipMemcpy3D",
    "hipMemcpyDtoH",
    "hipMemcpyHtoD",
    "hipMemcpyWithStream",
}
# asynchronous copies: they block only when the destination is pageable host memory (a DtoH copy into memory
# that is not pinned is staged and waited for by the driver); into pinned memory they do not wait
ASYNC_COPIES = {
    "cudaMemcpyAsync",
    "cudaMemcpy2DAsync",
    "cudaMemcpy3DAsync",
    "cudaMemcpyFromSymbolAsync",
    "cuMemcpyAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpy2DAsync",
    "cuMemcpy3DAsync",
    "hipMemcpyAsync",
    "hipMemcpyDtoHAsync",
    "hipMemcpy2DAsync",
    "hipMemcpy3DAsync",
}
KINDS = ("stream_sync", "device_sync", "event_sync", "blocking_copy")
# Kineto's own records of a sync on the GPU timeline (category ``cuda_sync``, with ``enable_cuda_sync_events``):
# the same wait as the host call with the same correlation id; "Stream Wait Event" is a GPU-side wait, no host sync
DEVICE_SYNC_KINDS = {
    "Stream Sync": "stream_sync",
    "Context Sync": "device_sync",
    "Event Sync": "event_sync",
}
# calls that may sit between a copy and its sync without ending the pair (error checks, capture queries)
QUIET_CALLS = {
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo",
    "cudaGetDevice",
    "cuCtxGetCurrent",
    "cuStreamIsCapturing",
    "cuStreamGetCaptureInfo",
    "hipGetLastError",
    "hipPeekAtLastError",
    "hipStreamIsCapturing",
    "hipStreamGetCaptureInfo",
    "hipGetDevice",
    "hipGetDevicePropertiesR0600",
}
SYNC_COST_COLUMNS = ["ts_us", "name", "kind", "host_us", "gpu_idle_us"]


def sync_events(trace: Mapping[str, Any], pairs: dict | None = None) -> list[tuple[dict, str]]:
    """Every host-device synchronisation in the trace, once each, in time order: ``(host event, kind)``.

    - an explicit sync call (runtime or driver API: stream, device/context, event) is one sync;
    - a synchronous copy call (``cudaMemcpy``, ``cuMemcpyDtoH`` ...) is one, unless it is device-to-device;
    - an asynchronous device-to-host copy into pageable memory blocks like a sync; followed by an explicit sync on
      its thread (``.item()``: ``cudaMemcpyAsync`` then ``cudaStreamSynchronize``), the pair is one, counted as that
      call (``pairs`` gets ``{id(sync call): copy call}``); into pinned memory (``non_blocking=True``) it is none;
    - a ``cuda_sync`` GPU record counts only when no host call has its correlation id.
    """
    done = ev.complete(trace)
    gpu_copy = {
        ev.corr(e): str(e.get("name", ""))
        for e in done
        if ev.kind(e) == "memcpy" and ev.corr(e) is not None
    }
    host_api = [e for e in done if ev.is_launch(e)]
    device_syncs = [e for e in done if ev.kind(e) == "device_sync"]
    out: list[tuple[dict, str]] = []
    by_tid: dict = {}
    for e in host_api:
        by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for calls in by_tid.values():
        calls.sort(key=lambda e: float(e.get("ts", 0.0)))
        pending = None  # an async DtoH copy into pageable memory, not yet followed by a sync call
        for e in calls:
            name = ev.api_name(str(e.get("name", "")))
            if kind := SYNC_KINDS.get(name):
                out.append((e, kind))
                if pending is not None and pairs is not None:
                    pairs[id(e)] = pending
                pending = None  # the copy's wait is this sync
                continue
            if name in QUIET_CALLS:
                continue
            if (
                pending is not None
            ):  # the copy was not followed by a sync call: it was the wait itself
                out.append((pending, "blocking_copy"))
                pending = None
            copy = gpu_copy.get(ev.corr(e), "")
            if name in BLOCKING_COPIES and "DtoD" not in copy:
                out.append((e, "blocking_copy"))
            elif name in ASYNC_COPIES and "DtoH" in copy and "Pinned" not in copy:
                pending = e
        if pending is not None:
            out.append((pending, "blocking_copy"))
    seen = {ev.corr(e) for e in host_api}
    for e in device_syncs:
        kind = DEVICE_SYNC_KINDS.get(str(ev.args(e).get("cuda_sync_kind", e.get("name"))))
        if kind and (ev.corr(e) is None or ev.corr(e) not in seen):
            out.append((e, kind))
    out.sort(key=lambda p: float(p[0].get("ts", 0.0)))
    return out


def count_syncs(trace: Mapping[str, Any], phase: str | None = "backward") -> dict[str, Any]:
    """Host-device synchronisations (``sync_events``) whose host call starts inside ``phase`` (None: the whole trace):
    ``total``, ``phases`` (ranges found), ``per_step``, ``by_kind`` ({kind: count} over ``KINDS``, also as top-level
    keys) and ``dtoh_copies`` (device-to-host copies launched there: most belong to a sync)."""
    ranges = ev.phase_ranges(trace, phase) if phase else None
    where = iv.merge(ranges) if ranges is not None else None
    inside = (lambda ts: True) if where is None else (lambda ts: iv.contains(where, ts))
    by_kind = dict.fromkeys(KINDS, 0)
    for e, kind in sync_events(trace):
        if inside(float(e.get("ts", 0.0))):
            by_kind[kind] += 1
    launched = {c for c, e in ev.launches(trace).items() if inside(float(e["ts"]))}
    dtoh = sum(
        1
        for e in ev.device_work(trace)
        if ev.kind(e) == "memcpy" and "DtoH" in str(e.get("name", "")) and ev.corr(e) in launched
    )
    total = sum(by_kind.values())
    n = 1 if ranges is None else len(ranges)
    return {
        **by_kind,
        "by_kind": by_kind,
        "dtoh_copies": dtoh,
        "total": total,
        "phases": n,
        "per_step": total / n if n else 0.0,
    }


# A launch latency is microseconds (5-20 µs on CUDA and ROCm): a longer median delay is a queue or the clocks'
# offset, and a sync's cost would borrow it (TraceLens' vLLM decode: 7.8 ms from a 2 µs hipEventSynchronize).
MAX_LAUNCH_US = 100.0


def launch_latency_us(trace: Mapping[str, Any]) -> float:
    """The median launch-to-start delay of the work launched while the device was idle (no queue delay); or 0."""
    launch = ev.launches(trace)
    graphs = ev.graph_replays(ev.complete(trace))
    lat, busy_until, seen = [], float("-inf"), set()
    for e in ev.device_work(trace):
        a, b = ev.span(e)
        c = ev.corr(e)
        call = launch.get(c)
        # one launch, one delay: a graph replay's later kernels wait on its earlier ones, not on the launch
        if (
            call is not None
            and c not in graphs
            and c not in seen
            and busy_until <= float(call["ts"]) <= a
        ):
            lat.append(a - float(call["ts"]))
        seen.add(c)
        busy_until = max(busy_until, b)
    return min(float(statistics.median(lat)), MAX_LAUNCH_US) if lat else 0.0


def sync_costs(trace: Mapping[str, Any], phase: str | None = None):
    """One row per synchronisation (as ``count_syncs``) and its cost (``SYNC_COST_COLUMNS``; empty on a CPU trace):
    ``host_us`` the call's duration (a copy-and-sync pair's from the copy), ``gpu_idle_us`` the GPU idle from the call
    until the next GPU work, at most to the call's end plus ``launch_latency_us``: later idle is the CPU's doing."""
    import pandas as pd

    where = iv.merge(ev.phase_ranges(trace, phase)) if phase else None
    pairs: dict = {}
    syncs = [
        (e, k)
        for e, k in sync_events(trace, pairs)
        if where is None or iv.contains(where, float(e.get("ts", 0.0)))
    ]
    work = ev.device_work(trace)
    if not work or not syncs:
        return pd.DataFrame(columns=SYNC_COST_COLUMNS)
    starts = [float(e["ts"]) for e in work]
    busy = iv.merge(ev.span(e) for e in work)
    launch = launch_latency_us(trace)
    rows = []
    for e, kind in syncs:
        ts = float(e["ts"])
        t1 = ts + float(e.get("dur", 0.0))
        t0 = (
            min(ts, float(pairs[id(e)]["ts"])) if id(e) in pairs else ts
        )  # the pair's wait starts in the copy
        j = bisect.bisect_left(
            starts, t1
        )  # the first device work that starts after the host call ends
        end = min(starts[j], t1 + launch) if j < len(starts) else t1 + launch
        rows.append(
            {
                "ts_us": ts,
                "name": str(e.get("name", "")),
                "kind": kind,
                "host_us": t1 - t0,
                "gpu_idle_us": max(0.0, (end - t0) - iv.covered(busy, t0, end)),
            }
        )
    return pd.DataFrame(rows, columns=SYNC_COST_COLUMNS)
