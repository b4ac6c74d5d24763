"""A Perfetto-like timeline picture of a few profiler steps, drawn with matplotlib (``Trace.timeline``).

Lanes from top to bottom: each host thread (its ops nested by depth, as Perfetto stacks them; DataLoader waits
in orange, ProfilerStep ranges grey), the synchronisations (red), then each GPU stream (kernels blue, copies
green, memsets purple, communication kernels brown). Times in ms from the first step's start.
"""
from __future__ import annotations

import zlib

from . import events as ev
from .load import TraceError
from .syncs import sync_events

MAX_DEPTH = 4          # host op nesting levels drawn per thread
_GPU_COLOURS = {"kernel": "#1f77b4", "memcpy": "#2ca02c", "memset": "#9467bd"}   # by events.kind


def _host_colour(name: str) -> str:
    if name.startswith("ProfilerStep#"):
        return "#c7c7c7"
    if name.startswith("enumerate(DataLoader)#"):
        return "#ff7f0e"
    palette = ("#aec7e8", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#d9d9d9", "#bcbddc")
    return palette[zlib.crc32(name.encode()) % len(palette)]


def _window(doc, steps: int) -> tuple[float, float]:
    ranges = ev.step_ranges(doc)
    if ranges:
        sel = ranges[:max(1, int(steps))]
        return sel[0][1], sel[-1][2]
    spans = [ev.span(e) for e in ev.complete(doc)]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0.0, 1.0)


def draw_timeline(doc, steps: int = 3, title: str = "trace"):
    """The figure (see the module docstring). Raises ``TraceError`` when the window holds no events."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0, t1 = _window(doc, steps)
    pad = 0.01 * (t1 - t0)
    a, b = t0 - pad, t1 + pad
    host, gpu = {}, {}
    for e in ev.complete(doc):
        s, end = ev.span(e)
        if s > b or end < a:  # outside the window
            continue
        k = ev.kind(e)
        if k in _GPU_COLOURS:
            gpu.setdefault((e.get("pid"), (e.get("args") or {}).get("stream", e.get("tid"))), []).append(e)
        elif k in ev.HOST_RANGES:
            host.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    if not host and not gpu:
        raise TraceError("no events in the first steps of the trace to draw")
    syncs = [e for e, _k in sync_events(doc) if a <= float(e["ts"]) <= b]
    names = ev.names(doc)

    lanes = []  # (label, [(start_ms, dur_ms, colour)], rows)
    def main_first(kv):  # the thread that runs the steps first, then the busiest
        return (not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in kv[1]), -len(kv[1]))

    for (pid, tid), evs in sorted(host.items(), key=main_first):
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        stack, bars = [], []
        for e in evs:
            s, d = float(e["ts"]), float(e.get("dur", 0.0))
            while stack and stack[-1] <= s:
                stack.pop()
            depth = len(stack)
            stack.append(s + d)
            if depth < MAX_DEPTH:
                bars.append((depth, (s - t0) / 1e3, d / 1e3, _host_colour(str(e.get("name", ""))),
                             str(e.get("name", ""))))
        label = names.get(("thread_name", pid, tid)) or f"thread {tid}"
        lanes.append((f"host {label}", bars, MAX_DEPTH))
    if syncs or gpu:
        lanes.append(("syncs", [(0, (float(e["ts"]) - t0) / 1e3, float(e.get("dur", 0.0)) / 1e3, "#d62728", "")
                                for e in syncs], 1))
    for (pid, stream), evs in sorted(gpu.items(), key=lambda kv: str(kv[0])):
        bars = []
        for e in evs:
            col = _GPU_COLOURS[ev.kind(e)]
            if ev.kind(e) == "kernel" and "nccl" in str(e.get("name", "")).lower():
                col = "#8c564b"
            bars.append((0, (float(e["ts"]) - t0) / 1e3, float(e.get("dur", 0.0)) / 1e3, col, ""))
        lanes.append((f"GPU {pid} stream {stream}", bars, 1))

    heights = [rows for _, _, rows in lanes]
    fig, ax = plt.subplots(figsize=(12, 0.35 * sum(heights) + 1.5))
    y = 0.0
    ticks, labels = [], []
    for label, bars, rows in lanes:
        by_colour = {}
        span = (b - a) / 1e3
        for depth, s, d, col, name in bars:
            by_colour.setdefault((depth, col), []).append((s, max(d, span * 5e-4)))
            if name and d > 0.06 * span and depth < 3:  # name the wide ranges, as Perfetto does
                ax.text(max(s, (a - t0) / 1e3) + min(d, span) / 2, y + depth * 0.9 + 0.4, name[:40], fontsize=6,
                        ha="center", va="center", clip_on=True)
        for (depth, col), xr in by_colour.items():
            ax.broken_barh(xr, (y + depth * 0.9, 0.8), facecolors=col, edgecolor="none")
        if label == "syncs":
            for _, s, d, _, _ in bars:
                ax.plot([s], [y + 0.4], marker="v", color="#d62728", markersize=5)
        ticks.append(y + rows * 0.45)
        labels.append(label)
        y += rows * 0.9 + 0.5
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim((a - t0) / 1e3, (b - t0) / 1e3)
    ax.set_xlabel("time from the first step's start (ms)")
    n = len(ev.step_ranges(doc)[:steps]) or "whole trace"
    ax.set_title(f"{title}: timeline of {n} step(s)" if n != "whole trace" else f"{title}: timeline (no ProfilerStep)")
    ax.legend(handles=[Patch(color="#c7c7c7", label="ProfilerStep"), Patch(color="#ff7f0e", label="DataLoader wait"),
                       Patch(color="#d62728", label="sync"), Patch(color="#1f77b4", label="kernel"),
                       Patch(color="#2ca02c", label="memcpy"), Patch(color="#9467bd", label="memset"),
                       Patch(color="#8c564b", label="communication")],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 if sum(heights) > 8 else -0.25), ncol=7, fontsize=8,
              frameon=False)
    fig.tight_layout()
    plt.close(fig)  # returned, not shown twice in a notebook
    return fig
