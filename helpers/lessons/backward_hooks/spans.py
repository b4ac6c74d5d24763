"""From markers to spans: pair the "before"/"after" markers in ``prof.events()`` into per-module backward spans,
their order, and a per-module backward-time table (taught in ``03_backward_hooks``)."""
from __future__ import annotations

import re
from typing import Iterable

import torch
from torch import nn

from ...traces.events import is_host
from .markers import AFTER, BEFORE, ROOT_NAME, remove

_CALL = re.compile(r"^(?P<name>.*) \(call (?P<call>\d+)\)$")


def _split(name: str) -> tuple[str, str, str] | None:
    """``"before backward of Attention: blocks.3.attn"`` -> ("before", "Attention", "blocks.3.attn")."""
    for kind, prefix in (("before", BEFORE), ("after", AFTER)):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            cls, _, details = rest.partition(": ")
            return kind, cls, details
    return None


def _module_and_call(details: str) -> tuple[str, int]:
    """``"blocks.0 (call 2)"`` -> ("blocks.0", 2); ``"blocks.0"`` -> ("blocks.0", 1)."""
    m = _CALL.match(details)
    return (m.group("name"), int(m.group("call"))) if m else (details, 1)


def _host(events) -> list:
    """Host-side (CPU) events only: on CUDA a label can also be drawn on the GPU timeline."""
    return [e for e in events if is_host(e)]


def label_pairs(events) -> list[dict]:
    """Match "before"/"after" markers (per label) into spans, in the order they closed.

    A span ends at the last "after" marker before the label's next "before". Markers are paired
    by name, not by thread: on CUDA the autograd engine runs the hooks on its device thread, and
    a span may end on another thread than it started (``GraphLabels`` pairs them itself and gives
    the second call of a module in one step its own name, ``"<name> (call 2)"``).

    ``events`` is ``prof.events()`` (``FunctionEvent`` objects, times in microseconds).
    Each span: module (details or class, without the call suffix), call, cls, start_us, end_us,
    thread (where it started), end_thread.
    """
    marks = []
    for e in _host(events):
        parts = _split(e.name)
        if parts is not None:
            marks.append((e.time_range.start, e.time_range.end, parts, getattr(e, "thread", 0)))
    marks.sort(key=lambda m: m[0])
    open_: dict[tuple, list] = {}
    last: dict[tuple, dict] = {}
    spans = []
    for start, end, (kind, cls, details), thread in marks:
        key = (cls, details)
        if kind == "before":
            open_.setdefault(key, []).append((end, thread))
            last.pop(key, None)
        elif open_.get(key):
            begun, th = open_[key].pop()
            module, call = _module_and_call(details)
            last[key] = {"module": module or cls, "call": call, "cls": cls, "start_us": begun, "end_us": start,
                         "thread": th, "end_thread": thread}
            spans.append(last[key])
        elif key in last:  # a later "after" of the same span (end_after_param_grads): the span ends there
            last[key]["end_us"] = start
            last[key]["end_thread"] = thread
    return spans


def label_order(events, kind: str = "before") -> list[str]:
    """The modules in the order their "before"/"after" markers fired (first backward only is up to the caller)."""
    out = []
    for e in sorted(_host(events), key=lambda e: e.time_range.start):
        parts = _split(e.name)
        if parts is not None and parts[0] == kind:
            out.append(_module_and_call(parts[2])[0] or parts[1])
    return out


def backward_table(prof, steps: int | None = None):
    """Per-module backward time from the label pairs in ``prof.events()``, as a DataFrame.

    Columns: module, cls, depth (dots in the qualified name), calls, backward_ms (CPU span
    between the markers, per step), device_ms (self device time of the ops launched inside
    the span, per step; 0 on the CPU), share (of the whole backward: the ``backward``
    ``record_function`` label when present, else the widest span). Sorted by backward_ms.
    """
    import pandas as pd

    events = _host(prof.events())
    spans = label_pairs(events)
    n_steps = steps or max(1, sum(1 for e in events if e.name.startswith("ProfilerStep")))
    ops_by_thread: dict = {}
    for e in events:
        if _split(e.name) is None and not e.name.startswith("ProfilerStep"):
            ops_by_thread.setdefault(getattr(e, "thread", 0), []).append(e)
    rows: dict[str, dict] = {}
    for s in spans:
        dev = 0.0
        for e in ops_by_thread.get(s["thread"], []):
            if s["start_us"] <= e.time_range.start and e.time_range.end <= s["end_us"]:
                dev += getattr(e, "self_device_time_total", 0.0) or 0.0
        r = rows.setdefault(s["module"], {"module": s["module"], "cls": s["cls"], "calls": 0, "cpu_us": 0.0, "dev_us": 0.0})
        r["calls"] += 1
        r["cpu_us"] += max(0.0, s["end_us"] - s["start_us"])
        r["dev_us"] += dev
    df = pd.DataFrame(list(rows.values()), columns=["module", "cls", "calls", "cpu_us", "dev_us"])
    df["depth"] = [0 if m == ROOT_NAME else m.count(".") + 1 for m in df["module"]]
    df["backward_ms"] = df.pop("cpu_us") / 1000.0 / n_steps
    df["device_ms"] = df.pop("dev_us") / 1000.0 / n_steps
    bwd = [e for e in events if e.name == "backward"]
    total = sum(e.time_range.end - e.time_range.start for e in bwd) / 1000.0 / n_steps if bwd else 0.0
    if total <= 0 and len(df):
        total = float(df["backward_ms"].max())
    df["share"] = df["backward_ms"] / total if total > 0 else 0.0
    df = df.sort_values("backward_ms", ascending=False).reset_index(drop=True)
    return df[["module", "cls", "depth", "calls", "backward_ms", "device_ms", "share"]]


def forward_completion_order(model: nn.Module, *inputs, names: Iterable[str] | None = None) -> list[str]:
    """Qualified names in the order their forward *finished* (children before their parent).

    Its reverse is the order in which the backward reaches the modules of a chain, i.e. the
    order the "before backward" markers should fire. Runs one forward without gradients.
    """
    wanted = set(names) if names is not None else None
    order: list[str] = []
    handles = []
    for n, m in model.named_modules():
        if wanted is None or n in wanted:
            handles.append(m.register_forward_hook(lambda mod, i, o, n=n: order.append(n or ROOT_NAME)))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        remove(handles)
    return order
