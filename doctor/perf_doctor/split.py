"""The interval work behind ``diagnosis.diagnose``: a trace's steps split into the time ranges of each cause.

``split_gpu`` and ``split_cpu`` take the trace's complete events and its step windows and return ``Part``s: a
cause, its time ranges (merged, inside the steps, disjoint from every other part's, so the parts add up to the
steps), its evidence and extra figures. The order of precedence is in ``diagnosis``'s docstring.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from . import events as ev
from . import intervals as iv
from .syncs import sync_costs

# A CPU operator shorter than this is "tiny": eager PyTorch spends roughly 5-10 us per op in Python, the
# dispatcher and the profiler's own bookkeeping (Horace He, "Making Deep Learning Go Brrrr": overhead), so an op
# under ~50 us spends a large part of its time on overhead rather than arithmetic.
TINY_OP_US = 50.0
# A CUDA kernel shorter than this is short: comparable to the ~5-10 us it takes to launch one, so a stream of
# them leaves the GPU waiting for the host (the launch-bound regime).
SHORT_KERNEL_US = 10.0
# Work launched this long before it starts on an idle device did not wait for the host: a launch takes 5-20 µs,
# a few hundred with a busy driver (TraceLens' vLLM decode: copies launched 7.8 ms before an idle GPU ran them).
QUEUED_US = 1000.0
# host calls that hand memory back and forth with the driver (CUDA and ROCm)
MALLOC_APIS = (
    "cudaMalloc",
    "cudaFree",
    "cudaMallocAsync",
    "cudaFreeAsync",
    "hipMalloc",
    "hipFree",
    "hipMallocAsync",
    "hipFreeAsync",
)

Ivs = list[tuple[float, float]]


@dataclass
class Part:
    """One cause's share of the steps: its time ranges, its evidence, and figures beside its milliseconds."""

    cause: str
    ivs: Ivs
    evidence: str
    finding: bool | None = None  # None: decided by its share of the step
    extra: dict[str, Any] = field(default_factory=dict)


def step_periods(events: list, windows: Ivs) -> tuple[Ivs, list[float], list[float | None]]:
    """``(windows, host_us, device_us)``: ``events.step_windows`` with the first made its period (device-bound: it
    starts with its device work; host-bound: keeps its CPU span), and each step's CPU and device spans (None: none)."""
    steps = ev.step_events(events)
    if not steps or not windows:
        return windows, [b - a for a, b in windows], [None] * len(windows)
    calls = ev.launches(events)
    starts = [float(s["ts"]) for s in steps]
    lo, hi = (
        [math.inf] * len(steps),
        [-math.inf] * len(steps),
    )  # each step's device work: first start, last end
    call_step = {}
    for c, call in calls.items():
        a, b = ev.span(call)
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and b <= ev.span(steps[i])[1]:
            call_step[c] = i
    for e in events:
        if ev.is_device_work(e):
            if (i := call_step.get(ev.corr(e))) is not None:
                a, b = ev.span(e)
                lo[i], hi[i] = min(lo[i], a), max(hi[i], b)
    host = [ev.span(s)[1] - ev.span(s)[0] for s in steps][: len(windows)]
    dev = [hi[i] - lo[i] if hi[i] >= lo[i] else None for i in range(len(windows))]
    out = list(windows)
    a0 = ev.span(steps[0])[0]
    s0, e0 = out[0]
    if (
        dev[0] is not None and dev[0] > host[0]
    ):  # device-bound: the step is the span of its device work
        out[0] = (max(s0, e0 - dev[0]), e0)
    else:  # host-bound: never shorter than its CPU span
        out[0] = (max(a0, min(s0, e0 - host[0])), e0)
    return out, host, dev


def _comm_part(
    comm: Ivs, other: Ivs, S: Ivs, n_calls: int, n: int, per: Callable[[float], float], where: str
) -> tuple[Part, Ivs]:
    """The communication part: collective time when nothing else runs (exposed); overlapped time beside it."""
    exposed = iv.intersect(S, iv.subtract(comm, other))
    overlapped = iv.intersect(S, iv.intersect(comm, other))
    ex_ms, ov_ms = per(iv.length(exposed)), per(iv.length(overlapped))
    text = (
        f"{n_calls / n:.1f} collective(s) per step {where}: {ex_ms:.2f} ms/step exposed (nothing else runs), "
        f"{ov_ms:.2f} ms/step overlapped with other work."
    )
    return Part(
        "communication",
        exposed,
        text,
        extra={"exposed_ms": round(ex_ms, 3), "overlapped_ms": round(ov_ms, 3)},
    ), exposed


def split_gpu(
    trace,
    events: list,
    steps: Ivs,
    per: Callable[[float], float],
    *,
    loop_syncs: bool,
    peak: float | None,
    cap: float | None,
    alloc_retries: int | None,
    near_capacity: float,
    min_share: float,
) -> list[Part]:
    """A trace with device work: compute, communication, then the GPU's idle time by what the host was doing."""
    n = len(steps)
    S = iv.merge(steps)
    step_us = iv.length(S)
    dl = iv.merge(ev.dataloader_ranges(events))
    device_evs, _, _ = ev.own_work(
        events
    )  # the steps' own work: backlog and work launched outside them left out
    comm_evs = [e for e in device_evs if ev.is_collective(e)]
    work_evs = [e for e in device_evs if not ev.is_collective(e)] if comm_evs else device_evs
    busy = iv.merge(ev.span(e) for e in device_evs)
    work = iv.merge(ev.span(e) for e in work_evs) if comm_evs else busy
    parts: list[Part] = []

    # inside a graph replay the host recorded nothing per kernel: the idle between its kernels is no host cause's
    graphs = ev.graph_replays(events)
    replay: dict = {}
    for e in device_evs:
        if (c := ev.corr(e)) in graphs:
            a, b = ev.span(e)
            lo, hi = replay.get(c, (a, b))
            replay[c] = (min(lo, a), max(hi, b))
    kern_in_steps = [e for e in work_evs if ev.kind(e) == "kernel" and iv.clip(S, *ev.span(e))]
    in_steps_work = iv.intersect(S, work)
    kdur = [float(e.get("dur", 0) or 0) for e in kern_in_steps]
    med_k = statistics.median(kdur) if kdur else 0.0
    short = sum(d < SHORT_KERNEL_US for d in kdur)
    copies = iv.length(
        iv.intersect(S, iv.merge(ev.span(e) for e in work_evs if ev.kind(e) != "kernel"))
    )
    g_ms = per(
        iv.length(iv.intersect(S, iv.merge(ev.span(e) for e in work_evs if ev.corr(e) in graphs)))
    )
    replays = sum(1 for c, (a, b) in replay.items() if iv.clip(S, a, b))
    parts.append(
        Part(
            "compute",
            in_steps_work,
            f"GPU busy {iv.length(in_steps_work) / step_us:.0%} of the step "
            f"({per(copies):.2f} ms/step of it in copies/memsets); "
            f"{len(kdur) / n:.0f} kernels per step, median {med_k:.1f} µs"
            + (
                f"; {replays / n:.1f} graph replay(s) per step: {g_ms:.2f} ms/step of device time from graphs"
                if replays
                else ""
            )
            + ".",
            extra={"graph_ms": round(g_ms, 3), "graph_replays": replays} if replays else {},
        )
    )
    if comm_evs:
        calls = sum(1 for e in comm_evs if iv.clip(S, *ev.span(e)))
        part, _ = _comm_part(
            iv.merge(ev.span(e) for e in comm_evs), work, S, calls, n, per, "(NCCL/RCCL kernels)"
        )
        parts.append(part)

    idle = iv.subtract(S, busy)
    # and the GPU idle with work already queued (launched over QUEUED_US before it starts) waits on something the
    # trace does not record (work from outside it, a dependency, an offset clock): no host cause either
    calls = ev.launches(events)
    queued = [
        (call_end + QUEUED_US, ev.span(e)[0])
        for e in device_evs
        if (call := calls.get(ev.corr(e))) is not None
        and (call_end := ev.span(call)[1]) + QUEUED_US < ev.span(e)[0]
    ]
    graph_idle = iv.intersect(idle, iv.merge(list(replay.values()) + queued))
    idle = iv.subtract(idle, graph_idle)
    input_iv = iv.intersect(idle, dl)
    rem = iv.subtract(idle, dl)
    parts.append(
        Part(
            "input",
            input_iv,
            f"GPU idle while the host waits in DataLoader __next__ "
            f"({per(iv.length(iv.intersect(S, dl))):.2f} ms/step in __next__ in all)."
            if dl
            else "no DataLoader __next__ in the profiled steps.",
        )
    )

    starts = [a for a, _ in busy]
    costs = sync_costs(trace)  # each synchronisation once
    rows = [
        (float(t), float(t) + float(h), float(g), str(k))
        for t, h, g, k in zip(costs["ts_us"], costs["host_us"], costs["gpu_idle_us"], costs["kind"])
        if iv.clip(S, t, t + h)
    ]
    loop_added = 0
    if loop_syncs:  # drop the last device_sync of each step: the profiling loop's, not the step's
        drop = set()
        for a, b in steps:
            last = [i for i, r in enumerate(rows) if r[3] == "device_sync" and a <= r[0] <= b]
            if last:
                drop.add(max(last, key=lambda i: rows[i][0]))
        loop_added = len(drop)
        rows = [r for i, r in enumerate(rows) if i not in drop]
    taken = []
    for a, b, g in (r[:3] for r in rows):
        k = bisect.bisect_left(starts, b)
        end = (
            starts[k] if k < len(starts) else math.inf
        )  # idle to the next GPU work (or the trace's end)
        # the host's blocked time (or the strict figure, which adds one launch latency): without the sync, the
        # host work after it starts that much sooner, so no more of the idle after it is the sync's doing
        budget = max(b - a, g)
        for s, e in iv.clip(rem, a, end):
            if budget <= 0:
                break
            taken.append((s, min(e, s + budget)))
            budget -= min(e, s + budget) - s
    strict_idle = sum(r[2] for r in rows)
    sync_iv = iv.intersect(rem, iv.merge(taken))
    rem = iv.subtract(rem, iv.merge(taken))
    parts.append(
        Part(
            "host sync",
            sync_iv,
            f"{len(rows)} synchronisation call(s) in {n} step(s) ({len(rows) / n:.1f} per step); GPU idle "
            f"after them until the next GPU work, at most the time the host was blocked in them "
            f"(of which {per(strict_idle):.2f} ms/step before the host could launch again: "
            f"trace.sync_costs)"
            + (
                f"; {loop_added} sync(s) added by the profiling loop left out."
                if loop_syncs
                else "."
            ),
        )
    )

    mallocs = iv.merge(
        ev.span(e)
        for e in events
        if ev.is_launch(e) and ev.api_name(str(e.get("name", ""))) in MALLOC_APIS
    )
    mem_iv = iv.intersect(rem, mallocs)
    launch_iv = iv.subtract(rem, mallocs)
    retries = f"; allocator retries: {alloc_retries}" if alloc_retries is not None else ""
    near = bool(peak and cap and peak / cap >= near_capacity)
    mem_ms = per(iv.length(mem_iv))
    mem_ev = (
        f"GPU idle during cudaMalloc/cudaFree: {mem_ms:.2f} ms/step"
        + (
            f"; peak reserved {peak / 2**30:.1f} of {cap / 2**30:.1f} GiB ({peak / cap:.0%})"
            if peak and cap
            else "; no memory events in the trace (profile_memory=True records them)"
        )
        + retries
        + "."
    )
    step_ms = per(step_us)
    parts.append(
        Part(
            "memory",
            mem_iv,
            mem_ev,
            finding=near or bool(alloc_retries) or (step_ms > 0 and mem_ms / step_ms >= min_share),
        )
    )
    parts.append(
        Part(
            "launch/overhead",
            launch_iv,
            f"GPU idle with the host busy elsewhere (launching, Python): "
            f"{short / max(len(kdur), 1):.0%} of kernels shorter than {SHORT_KERNEL_US:.0f} µs, "
            f"{len(kdur) / n:.0f} kernels per step.",
        )
    )
    if (
        graph_idle
    ):  # said beside compute and in a quality entry; the causes then add up to the step less it
        gi = per(iv.length(graph_idle))
        parts[0].evidence += (
            f" GPU idle inside graph replays or with work already queued: {gi:.2f} ms/step, not attributed to a "
            f"cause (the trace records no host work the GPU waited for)."
        )
        parts[0].extra["unattributed_idle_ms"] = round(gi, 3)
    return parts


def _top_level(ops: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Outermost ops of one thread (an op nested in another is part of its parent's time)."""
    out = []
    end = -math.inf
    for a, b, n in sorted(ops, key=lambda o: (o[0], -o[1])):
        if a >= end:
            out.append((a, b, n))
            end = b
    return out


def split_cpu(events: list, steps: Ivs, main_tid, per: Callable[[float], float]) -> list[Part]:
    """A CPU-only trace: the host's own time by what it was doing (input, communication, compute, overhead)."""
    n = len(steps)
    S = iv.merge(steps)
    step_us = iv.length(S)
    dl = iv.merge(ev.dataloader_ranges(events))
    input_iv = iv.intersect(S, dl)
    rest = iv.subtract(S, dl)
    comm_evs = [e for e in events if ev.is_host(e) and ev.is_collective(e)]
    ops = [
        (*ev.span(e), str(e.get("name")))
        for e in events
        if ev.kind(e) == "op"
        and e.get("tid") == main_tid
        and not ev.is_collective(e)
        and iv.clip(S, *ev.span(e))
    ]
    top_in = [o for o in _top_level(ops) if not iv.clip(dl, o[0], o[1])]
    parts = [
        Part(
            "input",
            input_iv,
            f"host in DataLoader __next__ {iv.length(input_iv) / step_us:.0%} of the step."
            if dl
            else "no DataLoader __next__ in the profiled steps.",
        )
    ]
    if (
        comm_evs
    ):  # a collective in flight (gloo's threads, c10d ops) while the main thread runs no operator
        calls = sum(
            1 for e in comm_evs if e.get("tid") != main_tid and iv.clip(S, *ev.span(e))
        ) or sum(1 for e in comm_evs if iv.clip(S, *ev.span(e)))
        part, exposed = _comm_part(
            iv.merge(ev.span(e) for e in comm_evs),
            iv.merge((a, b) for a, b, _ in top_in),
            rest,
            calls,
            n,
            per,
            "(gloo and c10d, host side)",
        )
        parts.append(part)
        rest = iv.subtract(rest, exposed)
    # an operator is large when its *median* call takes TINY_OP_US or more: one call stretched by the OS
    # scheduler (a busy machine) does not turn a tiny op into compute
    calls_us: dict[str, list[float]] = {}
    for a, b, nm in top_in:
        calls_us.setdefault(nm, []).append(b - a)
    large_names = {nm for nm, d in calls_us.items() if statistics.median(d) >= TINY_OP_US}
    large = iv.merge((a, b) for a, b, nm in top_in if nm in large_names)
    comp_iv = iv.intersect(rest, large)
    over_iv = iv.subtract(rest, large)
    tiny = [o for o in top_in if o[2] not in large_names]
    big = {nm: sum(d) for nm, d in calls_us.items() if nm in large_names}
    lead = (
        ", ".join(f"{k} {per(v):.2f} ms" for k, v in sorted(big.items(), key=lambda kv: -kv[1])[:3])
        or "none"
    )
    gaps = iv.length(iv.subtract(rest, iv.merge((a, b) for a, b, _ in top_in)))
    med_op = statistics.median([b - a for a, b, _ in top_in]) if top_in else 0.0
    parts.append(
        Part(
            "compute",
            comp_iv,
            f"{(len(top_in) - len(tiny)) / n:.0f} top-level op call(s) per step of ops "
            f"whose median call takes {TINY_OP_US:.0f} µs or more; largest: {lead} "
            f"per step.",
        )
    )
    parts.append(
        Part(
            "launch/overhead",
            over_iv,
            f"{len(top_in) / n:.0f} top-level ops per step, {len(tiny) / n:.0f} of them shorter than "
            f"{TINY_OP_US:.0f} µs (median op {med_op:.1f} µs); {per(gaps):.2f} ms/step of Python between "
            f"ops.",
        )
    )
    return parts
