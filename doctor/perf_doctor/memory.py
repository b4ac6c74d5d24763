"""What a ``profile_memory=True`` trace says of memory: each device's peak allocated in the steps and the operators
that allocated the most (issue 34). ``memory_report(trace)`` -> ``{"devices": [{"device", "peak_mb", "absolute"}],
"top_ops": [{"op", "mb_per_step", "allocs_per_step"}], "steps", "events"}`` or None (no ``[memory]`` events).
Kineto writes one instant event ``[memory]`` per allocation (``Bytes`` > 0) and free (< 0) with the device's
``Total Allocated`` after it: on a GPU the caching allocator's own count (absolute), on a CPU the count since the
profile started (relative); traces of before ~2021 have no total: a running sum of ``Bytes`` stands in (relative).
An allocation is charged to the innermost operator around it on its thread (``no operator`` outside any).
"""

from __future__ import annotations

import bisect
from typing import Any, Mapping

from . import events as ev

MB = 2**20
DEVICE_TYPES = {0: "cpu", 1: "cuda"}  # c10::DeviceType values Kineto writes in "Device Type"


def _device(a: Mapping[str, Any]) -> str:
    kind = DEVICE_TYPES.get(a.get("Device Type"), f"device type {a.get('Device Type')}")
    idx = a.get("Device Id", -1)
    return kind if kind == "cpu" or idx in (None, -1) else f"{kind}:{idx}"


def memory_report(trace: Mapping[str, Any], top: int = 10) -> dict[str, Any] | None:
    """The trace's memory figures (the module docstring), inside its step windows where it has steps."""
    mem = [
        e
        for e in trace.get("traceEvents") or []
        if e.get("name") == "[memory]"
        and isinstance(e.get("args"), Mapping)
        and isinstance(e.get("ts"), (int, float))
    ]
    if not mem:
        return None
    windows = [(a, b) for _, a, b in ev.step_windows(trace)] or [(float("-inf"), float("inf"))]
    starts = [a for a, _ in windows]

    def inside(t: float) -> bool:
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t <= windows[i][1]

    peaks, running, absolute = (
        {},
        {},
        {},
    )  # device -> peak bytes, bytes now, whether its count is absolute
    for e in sorted(
        mem, key=lambda e: float(e["ts"])
    ):  # old traces have no Total Allocated: a running sum
        a, d = e["args"], _device(e["args"])
        total = a.get("Total Allocated")
        if isinstance(total, (int, float)):
            running[d], absolute[d] = float(total), not d.startswith("cpu")
        elif isinstance(a.get("Bytes"), (int, float)):
            running[d], absolute[d] = running.get(d, 0.0) + a["Bytes"], False
        if d in running and inside(float(e["ts"])):
            peaks[d] = max(peaks.get(d, running[d]), running[d])
    mem = [e for e in mem if inside(float(e["ts"]))]
    if not mem:
        return None
    ops = ev.ops_by_thread(ev.complete(trace))
    by: dict[str, list] = {}
    for e in mem:
        size = e["args"].get("Bytes")
        if not isinstance(size, (int, float)) or size <= 0:
            continue
        t = float(e["ts"])
        found = ev.around(ops, e, t, t)
        name = found[-1][2] if found else "no operator"  # the innermost
        slot = by.setdefault(name, [0.0, 0])
        slot[0] += size
        slot[1] += 1
    n = len(windows)
    top_ops = sorted(
        (
            {"op": k, "mb_per_step": round(v[0] / MB / n, 3), "allocs_per_step": round(v[1] / n, 1)}
            for k, v in by.items()
        ),
        key=lambda r: -r["mb_per_step"],
    )[:top]
    return {
        "devices": [
            {"device": d, "peak_mb": round(p / MB, 3), "absolute": absolute[d]}
            for d, p in sorted(peaks.items())
        ],
        "top_ops": top_ops,
        "steps": n,
        "events": len(mem),
    }


def memory_lines(mem: dict[str, Any] | None, top: int = 5) -> list[str]:
    """The report's lines for ``memory_report``'s dict (none without memory events)."""
    if not mem:
        return []
    out = [
        "Memory (profile_memory=True): the steps' peak allocated"
        + "; ".join(
            f" {d['device']} {d['peak_mb']:,.1f} MB"
            + ("" if d["absolute"] else " above the trace's start")
            for d in mem["devices"]
        )
    ]
    out += [
        f"  {r['op'][:60]:<60} {r['mb_per_step']:10,.2f} MB {r['allocs_per_step']:8,.1f} allocations per step"
        for r in mem["top_ops"][:top]
    ]
    return out + [""]
