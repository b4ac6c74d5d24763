"""The GPU's time, computed here with Holistic Trace Analysis' definitions, so the doctor has GPU figures where HTA
fails on a trace (a test holds the two within a point of each other on every real trace in ``../shared``).

HTA's ``get_temporal_breakdown`` keeps the device work (and sync records) launched before the last ``ProfilerStep``
starts (all with fewer than two steps); **idle** is their span minus their union; **compute** the union of compute
kernels (``NOT_COMPUTE`` aside); **non-compute** the rest. ``communication_pct``: only collective kernels run.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv

# Holistic Trace Analysis' pattern of the kernels that are *not* compute (hta/common/types.py, MIT licence),
# matched at the start of the name as HTA does
NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)"
)


def kept_device_events(events: list) -> list:
    """The device events HTA's breakdown keeps (see the module docstring)."""
    gpu = [
        e
        for e in events
        if ev.is_device_work(e)
        or (ev.kind(e) == "device_sync" and ev.args(e).get("stream") not in (None, -1))
    ]
    step_names = {
        str(e.get("name")) for e in events if str(e.get("name", "")).startswith(ev.STEP_PREFIX)
    }
    if len(step_names) < 2:
        return gpu
    last_start = max(
        float(e["ts"])
        for e in events
        if str(e.get("name", "")).startswith(ev.STEP_PREFIX) and not ev.is_device_work(e)
    )
    launched = {
        ev.corr(e)
        for e in events
        if not ev.is_device_work(e)
        and ev.kind(e) != "device_sync"
        and ev.corr(e) is not None
        and float(e["ts"]) < last_start
    }
    return [e for e in gpu if ev.corr(e) in launched]


def whole_us(e: Mapping[str, Any]) -> tuple[float, float]:
    """An event's span in whole µs, rounded inwards as HTA rounds a ns-resolution trace (pytorch/pytorch#122425)."""
    a, b = ev.span(e)
    return (float(math.ceil(a)), float(math.floor(b))) if isinstance(e["ts"], float) else (a, b)


def breakdown(trace_or_events) -> dict[str, float] | None:
    """``{"idle_pct", "compute_pct", "non_compute_pct", "communication_pct"}`` as HTA rounds; None: no device work."""
    kept = kept_device_events(ev.complete(trace_or_events))
    if not kept:
        return None
    spans = {id(e): whole_us(e) for e in kept}
    busy = iv.merge(spans.values())
    if not busy or busy[-1][1] <= busy[0][0]:
        return None
    total = busy[-1][1] - busy[0][0]
    compute = iv.merge(
        spans[id(e)]
        for e in kept
        if ev.kind(e) == "kernel" and not NOT_COMPUTE.match(str(e.get("name", "")))
    )
    comm = iv.subtract(
        iv.merge(spans[id(e)] for e in kept if ev.is_collective(e)),
        iv.merge(spans[id(e)] for e in kept if not ev.is_collective(e)),
    )
    idle = total - iv.length(busy)
    comp = iv.length(compute)
    pct = lambda us: round(100.0 * max(us, 0.0) / total, 2)  # noqa: E731
    return {
        "idle_pct": pct(idle),
        "compute_pct": pct(comp),
        "non_compute_pct": pct(total - idle - comp),
        "communication_pct": pct(iv.length(comm)),
    }
