"""Reading a trace: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, and cutting
a long one to its first steps. Bad input raises ``TraceError`` with a one-line message naming the file."""
from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from . import events as ev
from .files import TraceError, find_trace


@contextlib.contextmanager
def gc_paused(collect: bool = True) -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (reference counting still frees memory), as ``timeit``
    times: a collection of a notebook's heap (its profiles hold hundreds of thousands of objects) would land in
    whichever step runs then. ``collect``: one collection first (for timing; ``measure.timing`` re-exports it);
    ``False`` where the block builds many objects with no cycles and a collection first would only cost (``no_gc``)."""
    was = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def no_gc():
    """``gc_paused`` without a collection first: building the million small dicts of a large trace otherwise
    triggers collection after collection (a 200 MB trace loads 4x faster without them). Trace events hold no
    reference cycles."""
    return gc_paused(collect=False)


# Reading is bounded: a trace that decompresses to more than this is refused with one line (a gzip bomb, or a
# trace too large to hold whole in memory: ~5 bytes of Python objects per byte of JSON). The doctor's reader
# (``read_trimmed``) streams and keeps only the first steps, so its own limit, ``STREAM_MAX_MB``, is higher and
# bounds time, not memory. PERF_TRACE_MAX_MB sets both.
MAX_TRACE_MB = 512
CHUNK = 1 << 24


def max_trace_bytes(streamed: bool = False) -> int:
    """The reading limit in bytes: ``$PERF_TRACE_MAX_MB`` (MiB), else ``MAX_TRACE_MB`` for a whole read
    (``load_trace``) and ``STREAM_MAX_MB`` for the streamed one (``read_trimmed``)."""
    default = STREAM_MAX_MB if streamed else MAX_TRACE_MB
    try:
        mb = float(os.environ.get("PERF_TRACE_MAX_MB", default))
    except ValueError:
        mb = default
    return int(max(mb, 1) * 2**20)


def too_big(p: Path, limit: int, zipped: bool, streamed: bool = False) -> TraceError:
    guards = ("bounds the time to read it; memory stays bounded, as only the first steps are kept" if streamed
              else "guards this machine's memory: a whole read holds ~5 bytes of objects per byte")
    return TraceError(f"{p}: {'decompresses to' if zipped else 'is'} more than {limit / 2**20:.0f} MiB, the "
                      f"doctor's reading limit, which {guards} (PERF_TRACE_MAX_MB raises it); profile fewer steps "
                      f"(schedule(active=...)) or give a shorter trace")


def read_bytes(p: Path, limit: int | None = None) -> bytearray:
    """The file's bytes (gunzipped when it starts with gzip's magic bytes, whatever its name), never more than
    ``limit`` (``max_trace_bytes()``): decompression goes chunk by chunk and stops at the limit, and data that
    cannot start a JSON document is refused at its first chunk (a bomb of zeros costs one chunk, not gigabytes)."""
    limit = max_trace_bytes() if limit is None else limit
    try:
        with open(p, "rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"
        if not zipped and p.stat().st_size > limit:
            raise too_big(p, limit, False)
        out = bytearray()
        with (gzip.open(p, "rb") if zipped else open(p, "rb")) as f:
            while chunk := f.read(CHUNK):
                if not out:
                    head = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
                    if head and head not in b"{[":
                        raise TraceError(f"{p}: not a complete JSON profiler trace (it starts with {chunk[:12]!r}); "
                                         "give the file that prof.export_chrome_trace or tensorboard_trace_handler "
                                         "wrote")
                out += chunk
                if len(out) > limit:
                    raise too_big(p, limit, zipped)
        return out
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{p}: the .gz file is truncated or damaged ({exc}); copy or export the trace again") from None
    except MemoryError:
        raise TraceError(f"{p}: this machine has not the memory to read it; give a shorter trace") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot read it ({exc.strerror or exc}); check its permissions") from None


def load_trace(path: Path | str) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``, or the newest trace in a ``tensorboard_trace_handler``
    folder) into a dict with a ``traceEvents`` list. Raises ``TraceError`` (one line naming the file) for a missing
    or unreadable file, an empty folder, a damaged or truncated ``.gz``, a file over the reading limit
    (``max_trace_bytes``), or a file that is not a Chrome trace. NaN and Infinity are read as floats (Python's
    JSON allows them) and left to ``events.valid_time`` and ``quality`` to judge."""
    p, _ = find_trace(path)
    raw = read_bytes(p)
    try:
        with no_gc():
            try:
                doc = json.loads(raw, strict=False)
            except json.JSONDecodeError:   # Kineto's unescaped quotes in event names: repaired where they can be
                text, n = repair_quotes(raw.decode("utf-8-sig"))
                if not n:
                    raise
                try:
                    doc = json.loads(text, strict=False)
                except json.JSONDecodeError:
                    raise TraceError(f"{p}: {QUOTE_BUG}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceError(f"{p}: not a complete JSON profiler trace ({str(exc).splitlines()[0][:80]}); give the file "
                         "that prof.export_chrome_trace or tensorboard_trace_handler wrote") from None
    except MemoryError:
        raise TraceError(f"{p}: this machine has not the memory to read it; give a shorter trace") from None
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


def steps_kept(starts: list[float], stamps: Iterable, max_steps: int | None, max_events: int | None) -> int:
    """How many of the steps starting at ``starts`` a trim keeps: at most ``max_steps``, and fewer when the first
    ones hold more than ``max_events`` of the events at ``stamps`` (their times; at least one step is kept)."""
    k = len(starts) if max_steps is None else max(1, min(int(max_steps), len(starts)))
    if max_events is None:
        return k
    per_step = [0] * len(starts)
    for ts in stamps:
        if isinstance(ts, (int, float)) and ts >= starts[0]:
            per_step[bisect.bisect_right(starts, ts) - 1] += 1
    run = 0
    for i in range(k):
        run += per_step[i]
        if run > max_events and i > 0:
            return i
    return k


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
    k = steps_kept(starts, (e.get("ts") for e in events), max_steps, max_events)
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


# The streamed reader (``stream.read_trimmed``) keeps only the first steps: its limit bounds time, not memory.
STREAM_MAX_MB = 4096
# Kineto before its July 2026 fix wrote event names with unescaped quotes (with_stack=True under torch.compile):
# "name": "foo "bar" baz", "ph": ... The name ends at the last quote followed by the next key or the object's end.
_BAD_NAME = re.compile(r'("name"\s*:\s*")(.*?)("(?=\s*(?:,\s*"[^"\\\n]{1,40}"\s*:|\})))', re.DOTALL)
_BARE_QUOTE = re.compile(r'(?<!\\)((?:\\\\)*)"')
QUOTE_BUG = ("an event name holds unescaped quotes (a Kineto bug before its July 2026 fix, with_stack=True under "
             "torch.compile) that could not be repaired; profile again with a newer PyTorch or without with_stack")


def repair_quotes(text: str) -> tuple[str, int]:
    """``text`` with the unescaped quotes inside event names escaped (``QUOTE_BUG``), and how many names changed."""
    n = 0

    def fix(m: re.Match) -> str:
        nonlocal n
        inner = _BARE_QUOTE.sub(lambda q: q.group(1) + '\\"', m.group(2))
        if inner == m.group(2):
            return m.group(0)
        n += 1
        return m.group(1) + inner + m.group(3)
    return _BAD_NAME.sub(fix, text), n
