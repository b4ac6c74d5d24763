"""The GPU's time, computed here: Holistic Trace Analysis' temporal breakdown with the same definitions, so the
doctor has GPU figures where HTA cannot load or fails on a trace (and a check on HTA where it works: a test holds
them within a point of each other on every real trace in ``../shared``).

HTA's definitions (``hta/analyzers/breakdown_analysis.py``, ``get_temporal_breakdown``): the device events it
keeps are the kernels, copies and memsets (and the device's own sync records) launched before the last
``ProfilerStep`` starts (it leaves out the last step, whose work may run past the trace; with fewer than two
steps it keeps all); their span is from the first one's start to the last one's end; **idle** is the span minus
their union; **compute** is the union of compute kernels (every kernel but communication, memory, syncs: HTA's
``ComputeKernelGroupingPattern``, below); **non-compute** is the rest. ``communication_pct`` adds the share of the
span in which only collective kernels run (exposed communication).
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv

# Holistic Trace Analysis' pattern of the kernels that are *not* compute (hta/common/types.py, MIT licence),
# matched at the start of the name as HTA does
NOT_COMPUTE = re.compile(r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
                         r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
                         r"|(^collective_subgraph_execution)")
BREAKDOWN_KEYS = ("idle_pct", "compute_pct", "non_compute_pct", "communication_pct")


def _stream(e: Mapping[str, Any]) -> Any:
    s = ev.args(e).get("stream")
    return -1 if s is None else s


def kept_device_events(events: list) -> list:
    """The device events HTA's breakdown keeps (see the module docstring)."""
    gpu = [e for e in events if ev.is_device_work(e) or (ev.kind(e) == "device_sync" and _stream(e) != -1)]
    step_names = {str(e.get("name")) for e in events if str(e.get("name", "")).startswith(ev.STEP_PREFIX)}
    if len(step_names) < 2:
        return gpu
    last_start = max(float(e["ts"]) for e in events if str(e.get("name", "")).startswith(ev.STEP_PREFIX)
                     and not ev.is_device_work(e))
    launched = {ev.corr(e) for e in events if not ev.is_device_work(e) and ev.kind(e) != "device_sync"
                and ev.corr(e) is not None and float(e["ts"]) < last_start}
    return [e for e in gpu if ev.corr(e) in launched]


def whole_us(e: Mapping[str, Any]) -> tuple[float, float]:
    """An event's span in whole microseconds, rounded inwards (start up, end down) as HTA rounds the times of a
    nanosecond-resolution trace (pytorch/pytorch#122425: their rounding made neighbouring events overlap)."""
    a, b = ev.span(e)
    return (float(math.ceil(a)), float(math.floor(b))) if isinstance(e["ts"], float) else (a, b)


def breakdown(trace_or_events) -> dict[str, float] | None:
    """``{"idle_pct", "compute_pct", "non_compute_pct", "communication_pct"}`` of the GPU's span (percent, two
    decimals as HTA rounds), or None when the trace holds no device work."""
    kept = kept_device_events(ev.complete(trace_or_events))
    if not kept:
        return None
    spans = {id(e): whole_us(e) for e in kept}
    busy = iv.merge(spans.values())
    if not busy or busy[-1][1] <= busy[0][0]:
        return None
    total = busy[-1][1] - busy[0][0]
    compute = iv.merge(spans[id(e)] for e in kept if ev.kind(e) == "kernel"
                       and not NOT_COMPUTE.match(str(e.get("name", ""))))
    comm = iv.subtract(iv.merge(spans[id(e)] for e in kept if ev.is_collective(e)),
                       iv.merge(spans[id(e)] for e in kept if not ev.is_collective(e)))
    idle = total - iv.length(busy)
    comp = iv.length(compute)
    pct = lambda us: round(100.0 * max(us, 0.0) / total, 2)  # noqa: E731
    return {"idle_pct": pct(idle), "compute_pct": pct(comp), "non_compute_pct": pct(total - idle - comp),
            "communication_pct": pct(iv.length(comm))}
