"""Reading a trace: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, and cutting
a long one to its first steps. Bad input raises ``TraceError`` with a one-line message naming the file."""
from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Mapping

from . import events as ev


@contextlib.contextmanager
def no_gc():
    """Run without Python's cyclic garbage collector (reference counting still frees memory): building the
    million small dicts of a large trace otherwise triggers collection after collection (a 200 MB trace loads 4x
    faster without them). Trace events hold no reference cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class TraceError(ValueError):
    """A file or folder that cannot be read as a profiler trace, or a view this trace cannot give; the message is
    one line naming the file and what to do."""


def find_trace(path_or_dir: Path | str) -> tuple[Path, list[str]]:
    """The trace file to read, and notes for the reader: a file is itself; in a folder (what
    ``tensorboard_trace_handler`` writes, one ``*.pt.trace.json[.gz]`` per profiled run and worker) the newest."""
    p = Path(path_or_dir)
    if not p.exists():
        raise TraceError(f"{p}: no such file or folder; give a .json / .json.gz trace or the folder that "
                         "tensorboard_trace_handler wrote")
    if not p.is_dir():
        return p, []
    files = [f for pat in ("*.pt.trace.json", "*.pt.trace.json.gz") for f in p.rglob(pat)]
    files = files or [f for pat in ("*.json", "*.json.gz") for f in p.glob(pat)]
    if not files:
        raise TraceError(f"{p}: the folder holds no trace file (*.pt.trace.json[.gz]); give the folder passed to "
                         "tensorboard_trace_handler after the profiler has run, or a trace file")
    files.sort(key=lambda f: (f.stat().st_mtime, f.name))
    notes = [] if len(files) == 1 else [f"{p}: {len(files)} trace files; showing the newest, {files[-1].name}"]
    return files[-1], notes


def load_trace(path: Path | str) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``, or the newest trace in a ``tensorboard_trace_handler``
    folder) into a dict with a ``traceEvents`` list. Raises ``TraceError`` (one line naming the file) for a missing
    file, an empty folder, a damaged or truncated ``.gz``, or a file that is not a Chrome trace."""
    p, _ = find_trace(path)
    try:
        with open(p, "rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"  # gzip's magic bytes, whatever the file is called
        with (gzip.open(p, "rb") if zipped else open(p, "rb")) as f:
            raw = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{p}: the .gz file is truncated or damaged ({exc}); copy or export the trace again") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    try:
        with no_gc():
            doc = json.loads(raw, strict=False)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: not a complete JSON profiler trace ({str(exc).splitlines()[0][:80]}); give the file "
                         "that prof.export_chrome_trace or tensorboard_trace_handler wrote") from None
    del raw
    if isinstance(doc, list):  # the Chrome trace format also allows a bare array of events
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p}: JSON, but not a Chrome trace (no traceEvents list); give the file that "
                         "prof.export_chrome_trace or tensorboard_trace_handler wrote")
    if not any(isinstance(e, dict) and e.get("ph") == "X" for e in doc["traceEvents"]):
        raise TraceError(f"{p}: the trace holds no profiled events; run the code to profile inside the profiler "
                         "(and past its schedule's wait and warm-up steps) before the trace is written")
    return doc


MAX_STEPS = 10          # open_trace keeps at most this many ProfilerSteps of a long trace ...
MAX_EVENTS = 400_000    # ... and fewer when they hold more events than this (at least one step is kept)


def trim(trace: Mapping[str, Any], max_steps: int | None = MAX_STEPS,
         max_events: int | None = MAX_EVENTS) -> tuple[dict, str | None]:
    """Keep the first steps of a long trace: ``(trimmed dict, note)``; the note (None when nothing was cut) says
    what was kept. Users' traces reach hundreds of MB, mostly many repeated steps; the views and the diagnosis
    average over steps, so a bounded window gives the same picture in bounded time and memory.

    Kept: metadata events, every event that starts between the first kept step's start and the next step's
    start, and the device work launched in that window (it runs a little later). The ``traceEvents`` list is new;
    the events themselves are shared with ``trace``."""
    steps = ev.step_ranges(trace)
    events = ev.events(trace)
    if not steps or (max_steps is None and max_events is None):
        return dict(trace), None
    starts = [a for _, a, _ in steps]
    k = len(steps) if max_steps is None else max(1, min(int(max_steps), len(steps)))
    if max_events is not None:  # fewer steps when they are heavy
        per_step = [0] * len(steps)
        for e in events:
            ts = e.get("ts")
            if isinstance(ts, (int, float)) and ts >= starts[0]:
                per_step[min(len(steps), bisect.bisect_right(starts, ts)) - 1] += 1
        total = 0
        for i in range(k):
            total += per_step[i]
            if total > max_events and i > 0:
                k = i
                break
    if k == len(steps):
        return dict(trace), None
    lo, hi = starts[0], starts[k]
    kept = []
    for e in events:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            kept.append(e)  # metadata
        elif lo <= ts < hi:
            kept.append(e)
    corrs = set(ev.launches(kept))
    kept += [e for e in events if isinstance(e.get("ts"), (int, float)) and e["ts"] >= hi
             and not ev.is_host(e) and ev.corr(e) in corrs]
    note = (f"the trace holds {len(steps)} ProfilerSteps ({len(events):,} events); the first {k} "
            f"({len(kept):,} events) are analysed; open_trace(path, max_steps=None) for all of them")
    return {**{key: v for key, v in trace.items() if key != "traceEvents"}, "traceEvents": kept}, note
