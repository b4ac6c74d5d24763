"""Read a backward pass from a profiler trace (a ``load_trace`` dict; taught in ``03_backward_hooks``):
- ``backward_ops``: per autograd node, its host time, the device time of the kernels it launched, and the syncs
  inside it with the GPU idle time each caused (``syncs.sync_costs``). On a GPU a host-device sync costs waiting,
  not device time: ranked by device time, a node that stalls the pipeline can sit at the bottom.
- ``forward_origin``: the forward op that created a backward node (the profiler's sequence number) and the Python
  lines that called it (``with_stack=True``).
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Mapping

from . import events as ev
from .syncs import sync_costs

BWD_PREFIX = "autograd::engine::evaluate_function: "
OPS_COLUMNS = [
    "op",
    "calls",
    "host_ms",
    "device_ms",
    "syncs",
    "gpu_idle_ms",
    "rank_by_host",
    "rank_by_device",
]


def _host_ops(doc) -> list:
    """Host-side complete events (ops, labels, Python frames), not their GPU-timeline copies."""
    return [e for e in ev.complete(doc) if ev.is_host(e)]


class _Intervals:
    """Innermost enclosing interval lookup over (start, end, payload), per thread."""

    def __init__(self, items):
        self.by_tid: dict = {}
        for tid, start, end, payload in items:
            self.by_tid.setdefault(tid, []).append((start, end, payload))
        for v in self.by_tid.values():
            v.sort(key=lambda t: t[0])
        self.starts = {tid: [t[0] for t in v] for tid, v in self.by_tid.items()}

    def find(self, ts: float, tid=None):
        best = None
        for t in [tid] if tid is not None else self.by_tid:
            items = self.by_tid.get(t, [])
            i = bisect.bisect_right(self.starts.get(t, []), ts) - 1
            for j in range(i, max(-1, i - 64), -1):  # latest start first = innermost
                s, e, payload = items[j]
                if s <= ts <= e:
                    if best is None or s > best[0]:
                        best = (s, payload)
                    break
        return None if best is None else best[1]


def backward_ops(doc: Mapping[str, Any], costs=None, steps: int | None = None):
    """Two clocks per backward node and profiled step (``OPS_COLUMNS``, by host time): ``host_ms`` (launching plus
    any wait), ``device_ms`` (work it launched), ``syncs`` (rows of ``costs``: ``sync_costs(doc)``), ``gpu_idle_ms``."""
    import pandas as pd

    nodes = [
        e
        for e in _host_ops(doc)
        if ev.kind(e) == "op" and str(e.get("name", "")).startswith(BWD_PREFIX)
    ]
    steps = steps or max(len(ev.step_events(doc)), 1)  # the profiled steps
    rows: dict[str, dict] = {}
    items = []
    for e in nodes:
        op = e["name"][len(BWD_PREFIX) :]
        r = rows.setdefault(
            op, {"op": op, "calls": 0, "host_us": 0.0, "device_us": 0.0, "syncs": 0, "idle_us": 0.0}
        )
        r["calls"] += 1
        r["host_us"] += float(e.get("dur", 0.0))
        items.append((e.get("tid"), *ev.span(e), op))
    where = _Intervals(items)
    launches = ev.launches(doc)
    for e in ev.device_work(doc):
        if (launch := launches.get(ev.corr(e))) is None:
            continue
        tid = launch.get("tid")
        # a launch recorded under a thread id with no backward nodes (Kineto writes a thread it could not map to its
        # system id as a truncated pthread id, e.g. a negative number): find its node by time on any thread
        op = where.find(float(launch["ts"]), tid if tid in where.by_tid else None)
        if op is not None:
            rows[op]["device_us"] += float(e.get("dur", 0.0))
    if costs is None:
        costs = sync_costs(doc)
    for rec in costs.to_dict("records") if len(costs) else []:
        if (op := where.find(float(rec["ts_us"]), rec.get("tid"))) is not None:
            rows[op]["syncs"] += 1
            idle = rec.get("gpu_idle_us")
            rows[op]["idle_us"] += float(idle) if idle == idle and idle is not None else 0.0
    df = pd.DataFrame(
        [
            {
                "op": r["op"],
                "calls": r["calls"] / steps,
                "host_ms": r["host_us"] / 1000.0 / steps,
                "device_ms": r["device_us"] / 1000.0 / steps,
                "syncs": r["syncs"] / steps,
                "gpu_idle_ms": r["idle_us"] / 1000.0 / steps,
            }
            for r in rows.values()
        ],
        columns=OPS_COLUMNS[:6],
    )
    df["rank_by_host"] = df["host_ms"].rank(ascending=False, method="min").astype("Int64")
    df["rank_by_device"] = df["device_ms"].rank(ascending=False, method="min").astype("Int64")
    return df.sort_values(["host_ms", "op"], ascending=[False, True]).reset_index(drop=True)[
        OPS_COLUMNS
    ]


_FRAME = re.compile(r"^(.+\.py)\((\d+)\): ")


def forward_origin(doc: Mapping[str, Any], node: str = "GatherBackward0") -> dict | None:
    """The forward op behind the first backward ``node`` (the same ``Sequence number``) and the Python lines that
    called it (``with_stack=True``: the innermost frame's ``CallFrom``, else its function's start, so marked):
    ``{"node", "sequence_nr", "forward_op", "forward_ts", "call_from", "stack"}`` (frames innermost first), or None."""
    all_events = ev.events(doc)
    events = _host_ops(doc)
    want = {node, BWD_PREFIX + node}
    bwd = sorted(
        (e for e in events if e.get("name") in want and "Sequence number" in (e.get("args") or {})),
        key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))),
    )
    if not bwd:
        return None
    b = next((e for e in bwd if e["name"] == node), bwd[0])
    seq = b["args"]["Sequence number"]
    cands = [
        e
        for e in events
        if ev.kind(e) == "op"
        and (e.get("args") or {}).get("Sequence number") == seq
        and e.get("name") not in want
        and not str(e.get("name", "")).startswith(BWD_PREFIX)
        and float(e["ts"]) < float(b["ts"])
    ]
    if not cands:
        return None
    f = None
    # 1. the profiler's forward->backward flow ("fwdbwd"): it ends on the node and starts on the forward op
    ends = [
        e
        for e in all_events
        if e.get("cat") == "fwdbwd"
        and e.get("ph") == "f"
        and e.get("tid") == b.get("tid")
        and abs(float(e["ts"]) - float(b["ts"])) < 0.01
    ]
    if ends:
        starts = [
            e
            for e in all_events
            if e.get("cat") == "fwdbwd" and e.get("ph") == "s" and e.get("id") == ends[0]["id"]
        ]
        if starts:
            at = [
                e
                for e in cands
                if e.get("tid") == starts[0].get("tid")
                and abs(float(e["ts"]) - float(starts[0]["ts"])) < 0.01
            ]
            f = at[0] if at else None
    # 2. otherwise: ops before the one that creates the node share its number, so the latest such op made it
    if f is None:
        f = max(cands, key=lambda e: float(e["ts"]))
    # an op can call others with the same number: report the outermost one around it
    outer = [
        e
        for e in cands
        if e.get("tid") == f.get("tid")
        and float(e["ts"]) <= float(f["ts"])
        and float(f["ts"]) + float(f.get("dur", 0.0)) <= float(e["ts"]) + float(e.get("dur", 0.0))
    ]
    f = min(outer, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0)))) if outer else f
    t0, t1 = float(f["ts"]), float(f["ts"]) + float(f.get("dur", 0.0))
    frames = [
        e
        for e in events
        if ev.kind(e) == "python"
        and e.get("tid") == f.get("tid")
        and float(e["ts"]) <= t0
        and t1 <= float(e["ts"]) + float(e.get("dur", 0.0))
    ]
    frames.sort(
        key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))), reverse=True
    )  # innermost first
    call_from = next((ev.args(e)["CallFrom"] for e in frames if ev.args(e).get("CallFrom")), None)
    if call_from is None:
        # traces without the ``CallFrom`` argument (older releases): the innermost Python function's own frame,
        # "timm/layers/patch_dropout.py(7): patch_dropout_forward" -> its file and first line
        m = next((m for m in (_FRAME.match(str(e.get("name", ""))) for e in frames) if m), None)
        call_from = f"{m.group(1)}:{m.group(2)} (function start)" if m else None
    return {
        "node": node,
        "sequence_nr": seq,
        "forward_op": f["name"],
        "forward_ts": t0,
        "call_from": call_from,
        "stack": [e["name"] for e in frames],
    }
