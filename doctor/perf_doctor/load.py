"""Reading a trace: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, and cutting
a long one to its first steps. Bad input raises ``TraceError`` with a one-line message naming the file."""

from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import itertools
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
    """Python's cyclic garbage collector off for the block, as ``timeit`` times: a collection of a notebook's heap (its
    profiles hold 100,000s of objects) would land in whichever step runs then. ``collect``: one collection first
    (``collect=False``: a large trace's million small dicts, no cycles, load 4x faster)."""
    was = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Reading is bounded: a trace that decompresses to more than this is refused with one line (a gzip bomb, or a
# trace too large to hold whole in memory: ~5 bytes of Python objects per byte of JSON). The doctor's reader
# (``read_trimmed``) streams and keeps only the first steps, so its own limit, ``STREAM_MAX_MB``, is higher and
# bounds time, not memory. PERF_TRACE_MAX_MB sets both.
MAX_TRACE_MB = 512
STREAM_MAX_MB = 4096
CHUNK = 1 << 24


def max_trace_bytes(streamed: bool = False) -> int:
    """The reading limit in bytes: ``$PERF_TRACE_MAX_MB``, else ``MAX_TRACE_MB`` (or ``STREAM_MAX_MB`` streamed)."""
    default = STREAM_MAX_MB if streamed else MAX_TRACE_MB
    try:
        mb = float(os.environ.get("PERF_TRACE_MAX_MB", default))
    except ValueError:
        mb = default
    return int(max(mb, 1) * 2**20)


def too_big(p: Path, limit: int, zipped: bool, streamed: bool = False) -> TraceError:
    guards = (
        "bounds the time to read it; memory stays bounded, as only the first steps are kept"
        if streamed
        else "guards this machine's memory: a whole read holds ~5 bytes of objects per byte"
    )
    return TraceError(
        f"{p}: {'decompresses to' if zipped else 'is'} more than {limit / 2**20:.0f} MiB, the "
        f"doctor's reading limit, which {guards} (PERF_TRACE_MAX_MB raises it); profile fewer steps "
        f"(schedule(active=...)) or give a shorter trace"
    )


def not_json(p: Path, why) -> TraceError:
    """The one line for a file that is not a complete JSON profiler trace (``why``: an exception or a phrase)."""
    return TraceError(
        f"{p}: not a complete JSON profiler trace ({str(why).splitlines()[0][:80]}); give the file "
        "that prof.export_chrome_trace or tensorboard_trace_handler wrote"
    )


def not_trace(p: Path) -> TraceError:
    return TraceError(
        f"{p}: JSON, but not a Chrome trace (no traceEvents list); give the file that "
        "prof.export_chrome_trace or tensorboard_trace_handler wrote"
    )


def nothing_profiled(p: Path) -> TraceError:
    return TraceError(
        f"{p}: the trace holds no profiled events; run the code to profile inside the profiler "
        "(and past its schedule's wait and warm-up steps) before the trace is written"
    )


def check_start(p: Path, chunk: bytes) -> None:
    """Data that cannot start a JSON document is refused at its first chunk (a bomb of zeros costs one chunk)."""
    head = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if head and head not in b"{[":
        raise not_json(p, f"it starts with {chunk[:12]!r}")


def byte_chunks(
    p: Path, limit: int, streamed: bool = False, progress=None, size: int = 0
) -> Iterator[bytes]:
    """The file's bytes (gunzipped if it starts with gzip's magic), ``size`` (else ``CHUNK``) at a time, never more
    than ``limit``, ``check_start``ed; ``progress(bytes of the file read, its size)`` after each chunk."""
    try:
        with open(p, "rb") as raw:
            zipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            total = os.fstat(raw.fileno()).st_size
            if not zipped and total > limit:
                raise too_big(p, limit, False, streamed)
            f, n = (gzip.GzipFile(fileobj=raw, mode="rb") if zipped else raw), 0
            while chunk := f.read(size or CHUNK):
                if not n:
                    check_start(p, chunk)
                n += len(chunk)
                if n > limit:
                    raise too_big(p, limit, zipped, streamed)
                if progress:
                    progress(raw.tell(), total)
                yield chunk
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(
            f"{p}: the .gz file is truncated or damaged ({exc}); copy or export the trace again"
        ) from None
    except OSError as exc:
        raise TraceError(
            f"{p}: cannot read it ({exc.strerror or exc}); check its permissions"
        ) from None


def read_bytes(p: Path) -> bytearray:
    """The file's bytes (``byte_chunks``), within ``max_trace_bytes()``."""
    out = bytearray()
    try:
        for chunk in byte_chunks(p, max_trace_bytes()):
            out += chunk
    except MemoryError:
        raise TraceError(
            f"{p}: this machine has not the memory to read it; give a shorter trace"
        ) from None
    return out


def load_trace(path: Path | str) -> dict:
    """Read a Chrome trace (``.json`` / ``.json.gz``, or the newest in a ``tensorboard_trace_handler`` folder) into a
    dict with a ``traceEvents`` list; bad input is a one-line ``TraceError`` naming the file. NaN and Infinity are
    read as floats, left to ``events.valid_time`` and ``quality`` to judge."""
    p, _ = find_trace(path)
    raw = read_bytes(p)
    try:
        with gc_paused(collect=False):
            try:
                doc = json.loads(raw, strict=False)
            except (
                json.JSONDecodeError
            ):  # Kineto's unescaped quotes in event names: repaired where they can be
                text, n = repair_quotes(raw.decode("utf-8-sig"))
                if not n:
                    raise
                try:
                    doc = json.loads(text, strict=False)
                except json.JSONDecodeError:
                    raise TraceError(f"{p}: {QUOTE_BUG}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise not_json(p, exc) from None
    except MemoryError:
        raise TraceError(
            f"{p}: this machine has not the memory to read it; give a shorter trace"
        ) from None
    del raw
    if isinstance(doc, list):  # the Chrome trace format also allows a bare array of events
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise not_trace(p)
    if not any(isinstance(e, dict) and e.get("ph") == "X" for e in doc["traceEvents"]):
        raise nothing_profiled(p)
    return doc


MAX_STEPS = 10  # open_trace keeps at most this many ProfilerSteps of a long trace ...
MAX_EVENTS = (
    400_000  # ... and fewer when they hold more events than this (at least one step is kept)
)


def steps_kept(
    starts: list[float], stamps: Iterable, max_steps: int | None, max_events: int | None
) -> int:
    """How many of the steps at ``starts`` a trim keeps: ``max_steps`` at most, fewer past ``max_events``."""
    k = len(starts) if max_steps is None else max(1, min(int(max_steps), len(starts)))
    if max_events is None:
        return k
    per_step = [0] * len(starts)
    for ts in stamps:
        if isinstance(ts, (int, float)) and ts >= starts[0]:
            per_step[bisect.bisect_right(starts, ts) - 1] += 1
    return next(
        (
            i
            for i, run in enumerate(itertools.accumulate(per_step[:k]))
            if run > max_events and i > 0
        ),
        k,
    )


def trim(
    trace: Mapping[str, Any], max_steps: int | None = MAX_STEPS, max_events: int | None = MAX_EVENTS
) -> tuple[dict, str | None]:
    """Keep the first steps of a long trace: ``(trimmed dict, note or None)``. Users' traces reach hundreds of MB of
    repeated steps; views and diagnosis average over steps, so a window gives the same picture. Kept: metadata, events
    starting in the kept steps, and the device work launched there (it runs a little later); the events are shared."""
    steps = ev.step_ranges(trace)
    events = ev.events(trace)
    if not steps or (max_steps is None and max_events is None):
        return dict(trace), None
    starts = [a for _, a, _ in steps]
    k = steps_kept(starts, (e.get("ts") for e in events), max_steps, max_events)
    if k == len(steps):
        return dict(trace), None
    lo, hi = starts[0], starts[k]
    kept = [
        e for e in events if not isinstance(e.get("ts"), (int, float)) or lo <= e["ts"] < hi
    ]  # + metadata
    corrs = set(ev.launches(kept))
    kept += [
        e
        for e in events
        if isinstance(e.get("ts"), (int, float))
        and e["ts"] >= hi
        and not ev.is_host(e)
        and ev.corr(e) in corrs
    ]
    note = (
        f"the trace holds {len(steps)} ProfilerSteps ({len(events):,} events); the first {k} "
        f"({len(kept):,} events) are analysed; open_trace(path, max_steps=None) for all of them"
    )
    return {
        **{key: v for key, v in trace.items() if key != "traceEvents"},
        "traceEvents": kept,
    }, note


# Kineto before its July 2026 fix wrote event names with unescaped quotes (with_stack=True under torch.compile):
# "name": "foo "bar" baz", "ph": ... The name ends at the last quote followed by the next key or the object's end.
_BAD_NAME = re.compile(r'("name"\s*:\s*")(.*?)("(?=\s*(?:,\s*"[^"\\\n]{1,40}"\s*:|\})))', re.DOTALL)
_BARE_QUOTE = re.compile(r'(?<!\\)((?:\\\\)*)"')
QUOTE_BUG = (
    "an event name holds unescaped quotes (a Kineto bug before its July 2026 fix, with_stack=True under "
    "torch.compile) that could not be repaired; profile again with a newer PyTorch or without with_stack"
)


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
