"""Why was the GPU idle? Each idle gap inside the profiled steps, attributed to what the host was doing then.

The GPU is idle where no kernel, copy or memset runs (any stream) inside a step window. That idle time is the
diagnosis' input + host sync + memory + launch/overhead (``split.split_gpu``'s intervals, unchanged), split finer,
each microsecond to one cause (as HTA's idle breakdown and TraceLens' ``sync_drain`` do, by host activity):

1. **waiting for data** — the host is in the DataLoader's ``__next__``;
2. **host sync** — after a synchronisation, until the next GPU work, at most as long as the host was blocked (the
   diagnosis' rule); ``sync_by`` names the operators that issued them (``aten::item > aten::_local_scalar_dense``);
3. **allocator** — the host is in ``cudaMalloc`` / ``cudaFree``;
4. **communication wait** — the host is in a collective (``nccl:``/``gloo:`` labels, ``c10d::`` operators);
5. **launch queue** — from a launch call to the start of the next launch's device work, where the launches are at
   most ``split.TINY_OP_US`` apart and the first kernel ran for less (the GPU drains faster than the host queues);
6. **Python/operator overhead** — host operators or Python frames run, but no launch reaches the GPU;
7. **nothing recorded** — the host trace shows nothing (un-profiled Python, another process, the OS).
"""

from __future__ import annotations

import bisect
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv
from .load import load_trace
from .split import MALLOC_APIS, TINY_OP_US, split_gpu
from .syncs import sync_events

IDLE_CAUSES = (
    "waiting for data",
    "host sync",
    "allocator",
    "communication wait",
    "launch queue",
    "Python/operator overhead",
    "nothing recorded",
)


def _issuer(e: Mapping[str, Any], ops: dict) -> str:
    """The operators around a host event: "outermost > innermost", one name if the same, or "no operator"."""
    found = ev.around(ops, e, *ev.span(e))
    if not found:
        return "no operator"
    outer, inner = found[0][2], found[-1][2]
    return outer if outer == inner else f"{outer} > {inner}"


def _launch_queue(events: list) -> list[tuple[float, float]]:
    """Where the host launches tiny kernels back to back (rule 5 of the module docstring)."""
    launch = ev.launches(events)
    work: dict = {}
    for e in events:
        if ev.is_device_work(e) and ev.corr(e) in launch:
            work.setdefault(ev.corr(e), []).append(ev.span(e))
    calls: dict = {}
    for c, call in launch.items():
        if c in work and ev.api_name(str(call.get("name", ""))) not in MALLOC_APIS:
            calls.setdefault((call.get("pid"), call.get("tid")), []).append((float(call["ts"]), c))
    out = []
    for seq in calls.values():
        seq.sort()
        for (t0, c0), (t1, c1) in zip(seq, seq[1:]):
            gap = t1 - t0
            ran = sum(b - a for a, b in work[c0])
            if 0 < gap <= TINY_OP_US and ran < gap:
                out.append((t0, max(t1, min(a for a, _ in work[c1]))))
    return iv.merge(out)


@ev.memoizing
def idle_causes(
    trace: Mapping[str, Any] | str, *, loop_syncs: bool | None = None, split: tuple | None = None
) -> dict[str, Any] | None:
    """The GPU's idle time in the steps by cause, ms per step (the module docstring's rules), or None (CPU-only):
    ``{"idle_ms", "step_ms", "steps", "causes": [{"cause", "ms", "share"}] (all ``IDLE_CAUSES``), "sync_by": [{"op",
    "ms", "calls"}]}``. ``split``: ``Diagnosis.split``, refined here, not split again (seconds on a large trace)."""
    if not isinstance(trace, Mapping):
        trace = load_trace(trace)
    loop_syncs = ev.loop_synced(trace) if loop_syncs is None else loop_syncs
    events = ev.complete(trace)
    if not any(ev.is_device_work(e) for e in events):
        return None
    if split is not None:
        steps, parts = split
    elif ev.step_events(events):
        steps = [(a, b) for _, a, b in ev.step_windows(trace, events)]
    else:
        spans = [ev.span(e) for e in events]
        steps = [(min(a for a, _ in spans), max(b for _, b in spans))] if spans else []
    steps = [(a, b) for a, b in steps if b > a]
    if not steps:
        return None
    n = len(steps)
    per = lambda us: us / n / 1000.0  # noqa: E731
    if split is None:
        parts = {
            p.cause: p.ivs
            for p in split_gpu(
                trace,
                events,
                steps,
                per,
                loop_syncs=loop_syncs,
                peak=None,
                cap=None,
                alloc_retries=None,
                near_capacity=1.0,
                min_share=1.0,
            )
        }
    rest = parts["launch/overhead"]
    comm = iv.merge(ev.span(e) for e in events if ev.is_host(e) and ev.is_collective(e))
    comm_iv = iv.intersect(rest, comm)
    rest = iv.subtract(rest, comm)
    queue_iv = iv.intersect(rest, _launch_queue(events))
    rest = iv.subtract(rest, queue_iv)
    host = iv.merge(ev.span(e) for e in events if ev.kind(e) in ("op", "python", "launch"))
    over_iv = iv.intersect(rest, host)
    none_iv = iv.subtract(rest, host)
    got = {
        "waiting for data": parts["input"],
        "host sync": parts["host sync"],
        "allocator": parts["memory"],
        "communication wait": comm_iv,
        "launch queue": queue_iv,
        "Python/operator overhead": over_iv,
        "nothing recorded": none_iv,
    }
    idle_us = sum(iv.length(v) for v in got.values())
    causes = [
        {
            "cause": c,
            "ms": round(per(iv.length(got[c])), 3),
            "share": round(iv.length(got[c]) / idle_us, 4) if idle_us else 0.0,
        }
        for c in IDLE_CAUSES
    ]

    # which operators issued the syncs: each piece of sync idle goes to the last sync that started before it
    ops = ev.ops_by_thread(events)
    pairs: dict = {}
    syncs = (
        sorted(
            (
                (
                    min(float(e["ts"]), float(pairs[id(e)]["ts"]))
                    if id(e) in pairs
                    else float(e["ts"]),
                    e,
                )
                for e, _ in sync_events(trace, pairs)
            ),
            key=lambda p: p[0],
        )
        if got["host sync"]
        else []
    )
    starts = [t for t, _ in syncs]
    by: dict[str, list] = {}
    issuers: dict[int, str] = {}
    for a, b in got["host sync"]:
        i = bisect.bisect_right(starts, a) - 1
        if i < 0:
            continue
        name = issuers.get(i) or issuers.setdefault(i, _issuer(syncs[i][1], ops))
        slot = by.setdefault(name, [0.0, set()])
        slot[0] += b - a
        slot[1].add(i)
    sync_by = sorted(
        ({"op": k, "ms": round(per(v[0]), 3), "calls": len(v[1])} for k, v in by.items()),
        key=lambda r: -r["ms"],
    )
    return {
        "idle_ms": round(per(idle_us), 3),
        "step_ms": round(per(sum(b - a for a, b in steps)), 3),
        "steps": n,
        "causes": causes,
        "sync_by": sync_by,
    }


def idle_lines(res: dict[str, Any] | None) -> list[str]:
    """The report's table: one line per cause with ms per step and share of the idle time."""
    if not res:
        return []
    out = [
        f"GPU idle by cause ({res['idle_ms']:.2f} ms per step idle of {res['step_ms']:.2f}; what the host was "
        f"doing in each gap):"
    ]
    for c in res["causes"]:
        if c["ms"] > 0:
            out.append(f"  {c['cause']:<26} {c['ms']:9.3f} ms  {c['share']:6.1%}")
    for s in res["sync_by"][:3]:
        out.append(f"    sync issued by {s['op'][:70]}: {s['ms']:.3f} ms ({s['calls']} call(s))")
    return out + [""]
