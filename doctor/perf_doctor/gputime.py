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


# --- the doctor's own GPU time: full precision, each step's own work (issue 44 item 1) -------------------------
WINDOW_STEPS = (
    "steps"  # each ProfilerStep, to the end of the device work it launched (the diagnosis' steps)
)
WINDOW_SPAN = (
    "device span"  # no ProfilerStep: the first to the last device event the trace launched
)
WINDOWS = {
    WINDOW_STEPS: "each step's window (its ProfilerStep to the end of the device work it launched)",
    WINDOW_SPAN: "the span of the device work the trace launched (its first to its last kernel, copy or memset, "
    "as TraceLens counts it)",
}


def _figures(work: list, windows: list[tuple[float, float]]) -> dict[str, float]:
    """Busy, idle, compute, copies and exposed communication of ``work`` inside ``windows``, at full precision."""
    W = iv.merge(windows)
    total = iv.length(W)
    busy = iv.intersect(W, iv.merge(ev.span(e) for e in work))
    comm = iv.merge(ev.span(e) for e in work if ev.is_collective(e))
    rest = [e for e in work if not ev.is_collective(e)]
    compute = iv.intersect(W, iv.merge(ev.span(e) for e in rest if ev.kind(e) == "kernel"))
    exposed = iv.intersect(W, iv.subtract(comm, iv.merge(ev.span(e) for e in rest)))
    pct = lambda us: round(100.0 * us / total, 2) if total > 0 else None  # noqa: E731
    b = iv.length(busy)
    return {
        "window_ms": round(total / 1000.0, 4),
        "busy_ms": round(b / 1000.0, 4),
        "idle_ms": round((total - b) / 1000.0, 4),
        "busy_pct": pct(b),
        "idle_pct": pct(total - b),
        "compute_pct": pct(iv.length(compute)),
        "exposed_comm_pct": pct(iv.length(exposed)),
    }


# Compiled code (issue 44 item 3): Inductor's host ranges (torch.compile's region, the compiled autograd function,
# the call of a compiled FX graph) and Triton's kernels (Inductor names them triton_poi_/_red_/_per_/_tem_...).
COMPILED_RANGE = re.compile(r"^(Torch-Compiled Region|CompiledFunction|## Call CompiledFxGraph)")
TRITON_KERNEL = re.compile(r"^triton_|^triton$", re.IGNORECASE)


def compiled(evs: list, own: list, steps: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Compiled code in ``steps`` (None: none): ``{"steps", "ranges"`` (the compiled host ranges in all the steps),
    ``"host_ms", "host_share"`` (their time per step, their share of the step), ``"triton_kernels", "device_ms", "share"}`` (the device work launched from
    inside them or a Triton kernel, per step, its share of the GPU's busy time in the steps)."""
    S = iv.merge(steps)
    ranges = [
        e
        for e in evs
        if ev.kind(e) in ("op", "annotation") and COMPILED_RANGE.match(str(e.get("name", "")))
    ]
    host = iv.merge(ev.span(e) for e in ranges)
    triton = {
        id(e) for e in own if ev.kind(e) == "kernel" and TRITON_KERNEL.match(str(e.get("name", "")))
    }
    if not ranges and not triton:
        return None
    calls = ev.launches(evs)
    work = [
        e
        for e in own
        if id(e) in triton
        or ((c := calls.get(ev.corr(e))) is not None and iv.contains(host, float(c["ts"])))
    ]
    n, step_us = max(len(steps), 1), iv.length(S)
    busy = iv.length(iv.intersect(S, iv.merge(ev.span(e) for e in own)))
    dev = iv.length(iv.intersect(S, iv.merge(ev.span(e) for e in work)))
    host_in = iv.length(iv.intersect(S, host))
    return {
        "steps": len(steps),
        "ranges": sum(
            1 for a, b in host if iv.clip(S, a, b)
        ),  # outermost: a region holds its graph's call
        "host_ms": round(host_in / n / 1000.0, 4),
        "host_share": round(host_in / step_us, 4) if step_us else None,
        "triton_kernels": sum(1 for e in own if id(e) in triton and iv.clip(S, *ev.span(e))),
        "device_ms": round(dev / n / 1000.0, 4),
        "share": round(dev / busy, 4) if busy else None,
    }


def gpu_time(
    trace_or_events, windows: list[tuple[float, float]] | None = None
) -> dict[str, Any] | None:
    """The doctor's GPU figures (None: no device work), at full timestamp precision, over the work the profiled steps
    launched (``events.own_work``) inside ``windows`` (the diagnosis' steps; None: the device span, ``WINDOW_SPAN``):

    ``{"window", "window_text", "steps", "window_ms", "busy_ms", "idle_ms", "busy_pct", "idle_pct", "compute_pct",
    "exposed_comm_pct"`` (ms per step; pct of the window), ``"span": {the same over the span of all the device work
    launched in the trace: TraceLens' window}``, ``"backlog": {"events", "ms"}`` (work whose launch is not in the
    trace, left out), ``"outside": {"events", "ms"}`` (launched outside the steps, left out), ``"graphs": {"replays",
    "events", "ms", "share"}`` (the device time under graph replays, its share of the busy time) or null,
    ``"compiled"``: ``compiled`` over ``windows`` or null}``."""
    evs = ev.complete(trace_or_events)
    own, backlog, outside = ev.own_work(evs)
    if not own:
        return None
    launched = own + outside  # every device event the trace launched: TraceLens' window
    span_w = [(min(ev.span(e)[0] for e in launched), max(ev.span(e)[1] for e in launched))]
    steps = list(windows) if windows else span_w
    by_steps = bool(windows) and bool(ev.step_events(evs))
    wins = list(windows) if by_steps else span_w
    n = len(wins)
    fig = _figures(own, wins)
    for k in ("window_ms", "busy_ms", "idle_ms"):
        fig[k] = round(fig[k] / n, 4)
    graphs = ev.graph_replays(evs)
    g_work = [e for e in own if ev.corr(e) in graphs]
    g_ms = iv.length(iv.intersect(iv.merge(wins), iv.merge(ev.span(e) for e in g_work))) / 1000.0
    left = lambda es: (  # noqa: E731
        {"events": len(es), "ms": round(iv.length(iv.merge(ev.span(e) for e in es)) / 1000.0, 4)}
        if es
        else None
    )
    window = WINDOW_STEPS if by_steps else WINDOW_SPAN
    return {
        "window": window,
        "window_text": WINDOWS[window],
        "steps": n,
        **fig,
        "span": _figures(launched, span_w),
        "backlog": left(backlog),
        "outside": left(outside),
        "graphs": {
            "replays": len({ev.corr(e) for e in g_work}),
            "events": len(g_work),
            "ms": round(g_ms / n, 4),
            "share": round(g_ms * n / fig["busy_ms"] / n, 4) if fig["busy_ms"] else None,
        }
        if g_work
        else None,
        "compiled": compiled(evs, own, steps),
    }


def gpu_time_lines(g: dict[str, Any] | None) -> list[str]:
    """The report's lines for ``gpu_time`` (the doctor's own figures, then what was left out and why)."""
    if not g:
        return []
    per = " per step" if g["window"] == WINDOW_STEPS else ""
    whose = "the steps' own work" if per else "the work the trace launched"
    out = [
        f"GPU (doctor, full precision, {whose}): busy {g['busy_pct']:.1f}%, idle {g['idle_pct']:.1f}% "
        f"of {g['window_ms']:.2f} ms{per} (compute {g['compute_pct']:.1f}%"
        + (f", exposed communication {g['exposed_comm_pct']:.1f}%" if g["exposed_comm_pct"] else "")
        + f"); window: {g['window_text']}"
    ]
    s = g["span"]
    if g["window"] == WINDOW_STEPS:
        out.append(
            f"  over the span of the device work the trace launched ({s['window_ms']:.2f} ms, TraceLens' window): "
            f"busy {s['busy_pct']:.1f}%, idle {s['idle_pct']:.1f}%"
        )
    if b := g["backlog"]:
        out.append(
            f"  backlog from before the trace: {b['events']} device events, {b['ms']:.2f} ms (their launch is not "
            f"in the trace: left out)"
        )
    if o := g["outside"]:
        out.append(
            f"  launched outside the profiled steps: {o['events']} device events, {o['ms']:.2f} ms (left out)"
        )
    if gr := g["graphs"]:
        out.append(
            f"  graph replays: {gr['replays']} replay(s), {gr['events']} device events, {gr['ms']:.2f} ms{per} "
            f"({gr['share']:.0%} of the busy time)"
        )
    if c := g["compiled"]:
        out.append(compiled_line(c, per))
    return out


def compiled_line(c: dict[str, Any], per: str = "") -> str:
    """The report's line for ``compiled`` (``per``: " per step" where the figures are per step)."""
    host = (
        f"{c['ranges']} compiled region(s) in {c['steps']} step(s), {c['host_ms']:.2f} ms{per} on the host "
        f"({c['host_share']:.0%} of the step); "
        if c["ranges"]
        else ""
    )
    dev = (
        f"{c['triton_kernels']} Triton kernel(s); {c['device_ms']:.2f} ms{per} of device work"
        + (f" ({c['share']:.0%} of the busy time)" if c["share"] is not None else "")
        if c["triton_kernels"] or c["device_ms"]
        else "no device work"
    )
    return f"  compiled code (torch.compile: Inductor, Triton): {host}{dev}"


def gpu_time_quality(g: dict[str, Any] | None, d) -> list[dict[str, str]]:
    """Quality entries for what the doctor's GPU figures leave out or cannot judge (``d``: the ``Diagnosis``)."""
    if not g:
        return []
    out = []
    if b := g["backlog"]:
        out.append(
            {
                "check": "backlog",
                "message": f"backlog from before the trace: {b['events']} device events, {b['ms']:.2f} ms, "
                "whose launch is not in the trace (the previous step's queue): left out of the step's GPU figures",
            }
        )
    comp = next((c for c in d.causes if c["cause"] == "compute"), {})
    if gr := g["graphs"]:
        un = comp.get("unattributed_idle_ms")
        out.append(
            {
                "check": "graph_replay",
                "message": f"{gr['replays']} graph replay(s) ({gr['events']} device events, {gr['share']:.0%} of "
                "the busy time): a replay records no host work per kernel, so its device time is reported but "
                "no idle time or cause is inferred from inside it"
                + (f" ({un:.2f} ms per step of idle not attributed)" if un else ""),
            }
        )
    elif un := comp.get("unattributed_idle_ms"):
        out.append(
            {
                "check": "queued_idle",
                "message": f"the GPU sat idle {un:.2f} ms per step with work already queued (launched over a "
                "millisecond before it started): it waited on something the trace does not record, so that idle "
                "is not attributed to a cause",
            }
        )
    return out


def communication_lines(overview: dict[str, Any] | None, causes: list[dict[str, Any]]) -> list[str]:
    """One line reconciling the Overview's ``communication`` (torch-tb-profiler's) with the diagnosis' (the exposed
    part, with the overlapped beside it), where both are in the report: two figures with one name."""
    c = next((x for x in causes if x["cause"] == "communication" and x.get("ms") is not None), None)
    if not overview or c is None:
        return []
    return [
        f"  (communication: {overview.get('communication') or 0:.3f} ms per step as torch-tb-profiler's Overview "
        f"splits the step, one category per microsecond by its own precedence; the diagnosis' communication is the "
        f"doctor's: {c.get('exposed_ms', c['ms']):.3f} ms exposed per step (only collectives run on the GPU), "
        f"{c.get('overlapped_ms') or 0:.3f} ms overlapped with other work)"
    ]


def unjudged_lines(causes: list[dict[str, Any]], step_ms: float, top_ms: float) -> list[str]:
    """A headline line where the GPU idle no cause can be given (inside graph replays, behind queued work) is larger
    than the top cause: the top cause is then only the largest of what could be judged."""
    un = next((c.get("unattributed_idle_ms") for c in causes if c["cause"] == "compute"), None)
    if not un or un <= top_ms or not step_ms:
        return []
    return [
        f"Not judged: {un:.2f} ms per step ({un / step_ms:.0%}) of GPU idle inside graph replays or behind queued "
        f"work, where the trace records nothing the GPU waited for: the top cause above is the largest of the rest"
    ]
