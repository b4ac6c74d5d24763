"""A Perfetto-like timeline picture of a few profiler steps, drawn with matplotlib (``Trace.timeline``).

Lanes from top to bottom: each host thread (ops nested by depth, as Perfetto stacks them, in greys darker with
depth, so that no host operator reads as a device category; DataLoader waits orange, ProfilerSteps lightest grey),
the syncs (red: the step's own; slate grey: the profiling loop's, ``sync_split``), then each GPU stream (kernels
blue, copies green, memsets purple, communication brown). The legend lists only what is drawn; a bar's name is
drawn where it fits at ``LABEL_PT`` (cut with '…'). Times in ms from the first step's start.
"""

from __future__ import annotations

from . import events as ev
from .load import TraceError
from .syncs import sync_events

MAX_DEPTH = 4  # host op nesting levels drawn per thread
LABEL_PT = 8  # bar labels: 8 pt = 11 px at 100 dpi
WIDTH_IN = (
    9.5  # the figure's width: 950 px at 100 dpi, inside a 1000 px output area, so never scaled down
)
_CHAR_PX = (
    0.62 * LABEL_PT * 100 / 72
)  # a label character's width in pixels (DejaVu Sans, on average)
_GPU_COLOURS = {"kernel": "#1f77b4", "memcpy": "#2ca02c", "memset": "#9467bd"}  # by events.kind
_COMMUNICATION = "#8c564b"
_SYNC = "#d62728"
_LOOP_SYNC = "#8a9bb0"  # the profiling loop's own sync: neutral, so it does not read as the model's
_STEP, _DATALOADER = "#e6e6e6", "#ff7f0e"
_HOST_GREYS = ("#c8c8c8", "#b0b0b0", "#999999", "#858585")  # host operators by nesting depth
_LEGEND = {
    _STEP: "ProfilerStep",
    "host": "host operator (grey, darker when nested)",
    _DATALOADER: "DataLoader wait",
    _SYNC: "sync in the step",
    _LOOP_SYNC: "profiling loop's own sync",
    **{colour: kind for kind, colour in _GPU_COLOURS.items()},
    _COMMUNICATION: "communication",
}


def _host_colour(name: str, depth: int = 0) -> str:
    if name.startswith("ProfilerStep#"):
        return _STEP
    if name.startswith("enumerate(DataLoader)#"):
        return _DATALOADER
    return _HOST_GREYS[min(depth, len(_HOST_GREYS) - 1)]


def fitted_label(name: str, width_px: float, min_chars: int = 4) -> str:
    """``name`` fitted to a bar ``width_px`` wide: whole, cut with '…', or '' under ``min_chars`` characters."""
    fits = int(width_px / _CHAR_PX) - 1
    if fits < min_chars:
        return ""
    return name if len(name) <= fits else name[: fits - 1] + "…"


def sync_split(doc) -> tuple[list, list]:
    """The syncs as ``(the step's own, the profiling loop's)``: on a ``loop_synced`` trace, the last device sync of each
    step and one after the last, as the diagnosis leaves them out; elsewhere none is the loop's."""
    found = sync_events(doc)
    if not ev.loop_synced(doc):
        return [e for e, _ in found], []
    ranges = ev.step_ranges(doc)
    loop = set()
    for _, a, b in ranges:
        inside = [
            i for i, (e, k) in enumerate(found) if k == "device_sync" and a <= float(e["ts"]) <= b
        ]
        if inside:
            loop.add(max(inside, key=lambda i: float(found[i][0]["ts"])))
    if ranges:
        after = [
            i
            for i, (e, k) in enumerate(found)
            if k == "device_sync" and float(e["ts"]) > ranges[-1][2]
        ]
        loop.update(after[:1])
    return (
        [e for i, (e, _) in enumerate(found) if i not in loop],
        [e for i, (e, _) in enumerate(found) if i in loop],
    )


def _window(doc, steps: int) -> tuple[float, float]:
    ranges = ev.step_ranges(doc)
    if ranges:
        sel = ranges[: max(1, int(steps))]
        return sel[0][1], sel[-1][2]
    spans = [ev.span(e) for e in ev.complete(doc)]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0.0, 1.0)


def draw_timeline(doc, steps: int = 3, title: str | None = None):
    """The figure, titled "``title``: timeline of N step(s)"; ``TraceError`` when the window holds no events."""
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
            gpu.setdefault(
                (e.get("pid"), (e.get("args") or {}).get("stream", e.get("tid"))), []
            ).append(e)
        elif k in ev.HOST_RANGES:
            host.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    if not host and not gpu:
        raise TraceError("no events in the first steps of the trace to draw")
    own, loop = sync_split(doc)
    loop_ids = {id(e) for e in loop}
    syncs = sorted(
        (e for e in own + loop if a <= float(e["ts"]) <= b), key=lambda e: float(e["ts"])
    )
    names = ev.names(doc)

    lanes = []  # (label, [(start_ms, dur_ms, colour)], rows)

    def main_first(kv):  # the thread that runs the steps first, then the busiest
        return (
            not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in kv[1]),
            -len(kv[1]),
        )

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
                bars.append(
                    (
                        depth,
                        (s - t0) / 1e3,
                        d / 1e3,
                        _host_colour(str(e.get("name", "")), depth),
                        str(e.get("name", "")),
                    )
                )
        label = names.get(("thread_name", pid, tid)) or f"thread {tid}"
        lanes.append((f"host {label}", bars, MAX_DEPTH))
    if syncs or gpu:
        lanes.append(
            (
                "syncs",
                [
                    (
                        0,
                        (float(e["ts"]) - t0) / 1e3,
                        float(e.get("dur", 0.0)) / 1e3,
                        _LOOP_SYNC if id(e) in loop_ids else _SYNC,
                        "",
                    )
                    for e in syncs
                ],
                1,
            )
        )
    for (pid, stream), evs in sorted(gpu.items(), key=lambda kv: str(kv[0])):
        bars = [
            (
                0,
                (float(e["ts"]) - t0) / 1e3,
                float(e.get("dur", 0.0)) / 1e3,
                _COMMUNICATION
                if ev.kind(e) == "kernel" and "nccl" in str(e.get("name", "")).lower()
                else _GPU_COLOURS[ev.kind(e)],
                "",
            )
            for e in evs
        ]
        lanes.append((f"GPU {pid} stream {stream}", bars, 1))

    heights = [rows for _, _, rows in lanes]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.35 * sum(heights) + 1.5))
    span = (b - a) / 1e3
    px_per_ms = 0.8 * WIDTH_IN * 100 / span  # the axes take about 80% of the figure's width
    y = 0.0
    ticks, labels, drawn = [], [], set()
    for label, bars, rows in lanes:
        by_colour = {}
        for depth, s, d, col, name in bars:
            by_colour.setdefault((depth, col), []).append((s, max(d, span * 5e-4)))
            drawn.add("host" if col in _HOST_GREYS else col)
            lo, hi = (
                max(s, (a - t0) / 1e3),
                min(s + d, (b - t0) / 1e3),
            )  # the part of the bar inside the window
            text = fitted_label(name, (hi - lo) * px_per_ms) if name and depth < 3 else ""
            if text:  # name the ranges wide enough to read, as Perfetto does
                ax.text(
                    (lo + hi) / 2,
                    y + depth * 0.9 + 0.4,
                    text,
                    fontsize=LABEL_PT,
                    ha="center",
                    va="center",
                    clip_on=True,
                    color="#111111",
                )
        for (depth, col), xr in by_colour.items():
            ax.broken_barh(
                xr, (y + depth * 0.9, 0.8), facecolors=col, edgecolor="white", linewidth=0.5
            )
        if label == "syncs":
            for _, s, d, col, _ in bars:
                ax.plot([s], [y + 0.4], marker="v", color=col, markersize=5)
        ticks.append(y + rows * 0.45)
        labels.append(label)
        y += rows * 0.9 + 0.5
    ax.set_yticks(ticks, labels, fontsize=LABEL_PT)
    ax.invert_yaxis()
    ax.set_xlim((a - t0) / 1e3, (b - t0) / 1e3)
    ax.set_xlabel("time from the first step's start (ms)")
    n = len(ev.step_ranges(doc)[:steps])
    name = title or "Profiled steps"
    ax.set_title(
        f"{name}: timeline of {n} step(s)"
        if n
        else f"{name}: timeline (no ProfilerStep in the trace)"
    )
    n_sync = {
        _SYNC: sum(id(e) not in loop_ids for e in syncs),
        _LOOP_SYNC: sum(id(e) in loop_ids for e in syncs),
    }
    handles = [
        Patch(
            color=(_HOST_GREYS[1] if key == "host" else key),
            label=text + (f": {n_sync[key]}" if key in n_sync else ""),
        )
        for key, text in _LEGEND.items()
        if key in drawn
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 if sum(heights) > 8 else -0.25),
        ncol=min(len(handles), 4),
        fontsize=LABEL_PT,
        frameon=False,
    )
    fig.tight_layout()
    plt.close(fig)  # returned, not shown twice in a notebook
    return fig
