"""The doctor's lean reader: the first steps of a trace, streamed (``read_trimmed``), with its progress on a stream
(``progress_to``). Split from ``load``, whose whole-trace reader and ``trim`` it reproduces in bounded memory."""
from __future__ import annotations

import codecs
import contextlib
import gzip
import json
import math
import os
import re
import time
import zlib
from array import array
from pathlib import Path
from typing import Any, Iterator

from . import events as ev
from .files import TraceError, find_trace
from .load import (CHUNK, MAX_EVENTS, MAX_STEPS, QUOTE_BUG, too_big, load_trace, max_trace_bytes, no_gc,
                   repair_quotes, steps_kept, trim)

# --- the lean reader: the first steps of a trace, streamed -----------------------------------------------------
# A whole-trace read holds the file's bytes and ~5 bytes of Python objects per byte of JSON; the doctor keeps only the
# first steps (``trim``). ``read_trimmed`` streams the ``traceEvents`` array in chunks of complete events and keeps what
# ``trim`` would keep, so its memory follows the steps kept, not the file. Its limit therefore protects time (about a
# minute a GB on a 2-core machine), not memory: ``STREAM_MAX_MB`` unless PERF_TRACE_MAX_MB sets both.
KEEP_MB = 64            # a trace that decompresses to no more than this is read in one pass and trimmed in memory
PROGRESS_AFTER_S = 2.0  # progress lines on the progress stream for reads longer than this
_progress: Any = None   # the stream for progress lines (``progress_to``): the command line's stderr, else None
_CUT = re.compile(r"\}\s*,\s*\Z")                  # what precedes an event that starts a new object: "}," + spaces
_WS = re.compile(r"[ \t\r\n]*")
@contextlib.contextmanager
def progress_to(stream) -> Iterator[None]:
    """Inside the block, reads longer than ``PROGRESS_AFTER_S`` report their progress on ``stream`` (the command
    line passes ``sys.stderr``: never stdout, so ``--json`` stays clean): one line refreshed in place on a terminal,
    else a line at most every ``PROGRESS_AFTER_S`` seconds."""
    global _progress
    outer, _progress = _progress, stream
    try:
        yield
    finally:
        _progress = outer


class _Progress:
    def __init__(self, p: Path, total: int, what: str):
        self.p, self.total, self.what, self.t0, self.last, self.shown = p, total, what, time.monotonic(), 0.0, False
        self.tty = bool(getattr(_progress, "isatty", lambda: False)())

    def __call__(self, done: int) -> None:
        if _progress is None:
            return
        now = time.monotonic()
        if now - self.t0 < PROGRESS_AFTER_S or now - self.last < (0.5 if self.tty else PROGRESS_AFTER_S):
            return
        self.last, self.shown = now, True
        line = f"reading {self.p.name}{self.what}: {done / 1e6:,.0f} / {self.total / 1e6:,.0f} MB"
        try:
            _progress.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
            _progress.flush()
        except (OSError, ValueError):
            pass

    def end(self) -> None:
        if self.shown and self.tty:
            with contextlib.suppress(OSError, ValueError):
                _progress.write("\r\x1b[K")
                _progress.flush()


def _text_chunks(p: Path, limit: int, what: str = "") -> Iterator[str]:
    """The file's text (gunzipped when it starts with gzip's magic bytes), chunk by chunk, under the same rules as
    ``read_bytes``: never more than ``limit`` bytes decompressed, data that cannot start a JSON document refused at
    its first chunk, one-line ``TraceError`` for a damaged file."""
    try:
        raw = open(p, "rb")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read it ({exc.strerror or exc}); check its permissions") from None
    with raw:
        try:
            zipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            size = os.fstat(raw.fileno()).st_size
            if not zipped and size > limit:
                raise too_big(p, limit, False, True)
            f = gzip.GzipFile(fileobj=raw, mode="rb") if zipped else raw
            text = codecs.getincrementaldecoder("utf-8-sig")()
            shown, n, first = _Progress(p, size, what), 0, True
            while chunk := f.read(CHUNK):
                if first:
                    head = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
                    if head and head not in b"{[":
                        raise TraceError(f"{p}: not a complete JSON profiler trace (it starts with {chunk[:12]!r}); "
                                         "give the file that prof.export_chrome_trace or tensorboard_trace_handler "
                                         "wrote")
                    first = False
                n += len(chunk)
                if n > limit:
                    raise too_big(p, limit, zipped, True)
                shown(raw.tell())
                yield text.decode(chunk)
            yield text.decode(b"", final=True)
            shown.end()
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise TraceError(f"{p}: the .gz file is truncated or damaged ({exc}); copy or export the trace "
                             "again") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"{p}: not a complete JSON profiler trace ({str(exc)[:80]}); give the file that "
                             "prof.export_chrome_trace or tensorboard_trace_handler wrote") from None
        except OSError as exc:
            raise TraceError(f"{p}: cannot read it ({exc.strerror or exc}); check its permissions") from None


def _not_json(p: Path, exc: Exception) -> TraceError:
    return TraceError(f"{p}: not a complete JSON profiler trace ({str(exc).splitlines()[0][:80]}); give the file "
                      "that prof.export_chrome_trace or tensorboard_trace_handler wrote")


class _Events:
    """The elements of a trace's ``traceEvents`` array, streamed: iterate for them (lists of whole events, one list
    per chunk); ``header`` then holds the document's other keys, ``repaired`` the names ``repair_quotes`` fixed."""

    def __init__(self, p: Path, limit: int, what: str = "", plan: dict | None = None, skip=None):
        """``plan`` (a first pass's ``cuts``: chunk number -> (batch number, characters it took)) and ``skip``
        (batch number -> True to pass it undecoded) let a second pass decode only the batches it needs."""
        self.p, self.limit, self.what, self.plan, self.skip = p, limit, what, plan, skip
        self.cuts: dict = {}
        self.header: dict = {}
        self.repaired = 0
        self.chars = 0    # characters read so far
        self.dec = json.JSONDecoder(strict=False)

    def _value(self, buf: str, i: int, more) -> tuple[Any, int, str]:
        """One JSON value at ``buf[i:]``, reading more text while it is incomplete: (value, end, buf)."""
        while True:
            try:
                v, j = self.dec.raw_decode(buf, i)
                if j < len(buf) or more is None:
                    return v, j, buf
            except json.JSONDecodeError as exc:
                if more is None:
                    raise _not_json(self.p, exc) from None
            buf, more = self._grow(buf, more)

    @staticmethod
    def _grow(buf: str, more):
        nxt = next(more, None)
        if nxt is None:
            return buf, None
        return buf + nxt, more

    def _skip(self, buf: str, i: int, more) -> tuple[int, str, Any]:
        """Past white space, reading more text where the buffer ends: (index of the next character, buf, more)."""
        while True:
            i = _WS.match(buf, i).end()
            if i < len(buf) or more is None:
                return i, buf, more
            buf, i = "", 0
            buf, more = self._grow(buf, more)

    def _chunks(self) -> Iterator[str]:
        for text in _text_chunks(self.p, self.limit, self.what):
            self.chars += len(text)
            yield text

    def __iter__(self) -> Iterator[list]:
        more = self._chunks()
        buf, i = "", 0
        i, buf, more = self._skip(buf, i, more)
        if buf[i:i + 1] == "[":
            bare = True
        elif buf[i:i + 1] == "{":
            bare = False
            i, buf, more = self._skip(buf, i + 1, more)
            while True:   # the keys before traceEvents
                if buf[i:i + 1] == "}":
                    raise self._not_trace()
                key, i, buf = self._value(buf, i, more)
                i, buf, more = self._skip(buf, i, more)
                if buf[i:i + 1] != ":":
                    raise _not_json(self.p, ValueError(f"expected ':' at character {i}"))
                i, buf, more = self._skip(buf, i + 1, more)
                if key == "traceEvents" and buf[i:i + 1] == "[":
                    break
                self.header[key], i, buf = self._value(buf, i, more)
                i, buf, more = self._skip(buf, i, more)
                if buf[i:i + 1] == ",":
                    i, buf, more = self._skip(buf, i + 1, more)
                elif buf[i:i + 1] == "}":
                    raise self._not_trace()
                else:
                    raise _not_json(self.p, ValueError(f"expected ',' or '}}' at character {i}"))
        else:
            raise _not_json(self.p, ValueError("no JSON document"))
        # the array: whole events up to the last "}, {" of the buffer are decoded at once (json's C scanner);
        # what is left waits for the next chunk
        i, buf, more = self._skip(buf, i + 1, more)
        buf = buf[i:]
        c = 0
        while more is not None:
            nxt = next(more, None)
            if nxt is None:
                more = None
                break
            buf += nxt
            c += 1
            if self.plan is not None:   # a second pass: the first pass's batches, decoded where they are needed
                step = self.plan.get(c)
                if step is None:
                    continue
                if self.skip(step[0]):
                    buf = buf[step[1]:]
                    continue
            before = len(buf)
            batch, buf = self._batch(buf)
            if batch:
                self.cuts[c] = (len(self.cuts), before - len(buf))
                yield batch
        # the end: the last events one by one, the closing "]" and the document's other keys
        out, i = [], 0
        while True:
            i, buf, _ = self._skip(buf, i, None)
            if buf[i:i + 1] == "]":
                i += 1
                break
            v, i, buf = self._decode_one(buf, i)
            out.append(v)
            i, buf, _ = self._skip(buf, i, None)
            if buf[i:i + 1] == ",":
                i += 1
            elif buf[i:i + 1] != "]":
                raise _not_json(self.p, ValueError("expected ',' or ']' near the end of the events"))
        if out:
            yield out
        rest = buf[i:].strip()
        if bare:
            if rest:
                raise _not_json(self.p, ValueError("extra data after the events"))
            return
        try:
            tail = self.dec.decode("{" + rest.lstrip(",")) if rest != "}" else {}
        except json.JSONDecodeError as exc:
            raise _not_json(self.p, exc) from None
        self.header.update({k: v for k, v in tail.items() if k != "traceEvents"})

    def _not_trace(self) -> TraceError:
        return TraceError(f"{self.p}: JSON, but not a Chrome trace (no traceEvents list); give the file that "
                          "prof.export_chrome_trace or tensorboard_trace_handler wrote")

    def _decode_one(self, buf: str, i: int) -> tuple[Any, int, str]:
        """One event at ``buf[i:]``: (event, its end, the buffer, repaired from ``i`` on where it had to be)."""
        try:
            return (*self.dec.raw_decode(buf, i), buf)
        except json.JSONDecodeError as exc:
            fixed, n = repair_quotes(buf[i:])
            if n:
                try:
                    v, j = self.dec.raw_decode(fixed, 0)
                except json.JSONDecodeError:
                    raise TraceError(f"{self.p}: {QUOTE_BUG}") from None
                self.repaired += n
                return v, j, fixed
            raise _not_json(self.p, exc) from None

    def _batch(self, buf: str) -> tuple[list, str]:
        """The whole events at the start of ``buf`` and the text after them."""
        end = len(buf)
        for _ in range(4):   # the last "}, {" is almost always between two events; a few tries else
            k = buf.rfind("{", 0, end)
            while k > 0 and not _CUT.search(buf, max(0, k - 64), k):
                k = buf.rfind("{", 0, k)
            if k <= 0:
                return [], buf
            cut = buf.rfind("}", 0, k) + 1
            text = "[" + buf[:cut] + "]"
            try:
                return self.dec.decode(text), buf[k:]
            except json.JSONDecodeError:
                fixed, n = repair_quotes(text)
                if n:
                    with contextlib.suppress(json.JSONDecodeError):
                        out = self.dec.decode(fixed)
                        self.repaired += n
                        return out, buf[k:]
            end = k
        if len(buf) > 4 * CHUNK:   # no break between events found: one at a time, which finds the fault
            v, i, buf = self._decode_one(buf, 0)
            i = _WS.match(buf, i).end()
            return [v], buf[i + 1:] if buf[i:i + 1] == "," else buf[i:]
        return [], buf


def read_trimmed(path: Path | str, max_steps: int | None = MAX_STEPS, max_events: int | None = MAX_EVENTS,
                 keep_mb: float = KEEP_MB) -> tuple[dict, str | None, list[str]]:
    """``trim(load_trace(path), max_steps, max_events)`` in memory that follows the steps kept, not the file:
    ``(trimmed dict, trim's note, notes)``. A trace that decompresses to at most ``keep_mb`` MiB is read in one
    pass and trimmed as ``trim`` does; a larger one in two passes over the file (the first finds the steps, the
    launches and how many events each step holds; the second keeps the events ``trim`` keeps). The limit is
    ``max_trace_bytes(streamed=True)``. The notes say when event names with unescaped quotes were repaired."""
    p, _ = find_trace(path)
    limit = max_trace_bytes(streamed=True)
    keep_bytes = keep_mb * 2**20
    meta, named, stamps, launch_ts, launch_corr = [], [], array("d"), array("d"), []
    whole: list | None = []
    total = 0
    batches = []   # per batch: (earliest, latest time, smallest, largest device correlation id, must be read)
    profiled = False
    reader = _Events(p, limit)
    try:
        with no_gc():
            for batch in reader:
                t_lo = c_lo = math.inf
                t_hi = c_hi = -math.inf
                odd = False
                for e in batch:
                    if type(e) is not dict:
                        whole = None
                        raise _Fallback
                    total += 1
                    ts = e.get("ts")
                    ph = e.get("ph")
                    profiled = profiled or ph == "X"
                    if not isinstance(ts, (int, float)):
                        meta.append(e)
                        odd = True
                    else:
                        stamps.append(ts)
                        if ts < t_lo:
                            t_lo = ts
                        if ts > t_hi:
                            t_hi = ts
                        k = ev.kind(e)
                        if k == "launch":
                            if ph == "X" and (c := ev.corr(e)) is not None:
                                launch_ts.append(ts)
                                launch_corr.append(c)
                        elif k in ev.DEVICE_SIDE and (c := ev.corr(e)) is not None:
                            if type(c) is int:
                                c_lo, c_hi = min(c_lo, c), max(c_hi, c)
                            else:
                                odd = True
                    if str(e.get("name", "")).startswith(ev.STEP_PREFIX):
                        named.append(e)
                batches.append((t_lo, t_hi, c_lo, c_hi, odd))
                if whole is not None:
                    whole += batch
                    if reader.chars > keep_bytes:   # past the one-pass budget: two passes
                        whole = None
    except _Fallback:
        doc = load_trace(p)
        return (*trim(doc, max_steps, max_events), [])
    except MemoryError:
        raise TraceError(f"{p}: this machine has not the memory to read it; give a shorter trace") from None
    notes = [f"{p}: {reader.repaired} event name(s) with unescaped quotes (Kineto's with_stack bug before its July "
             f"2026 fix) were repaired"] if reader.repaired else []
    if not profiled:
        raise TraceError(f"{p}: the trace holds no profiled events; run the code to profile inside the profiler "
                         "(and past its schedule's wait and warm-up steps) before the trace is written")
    if whole is not None:   # one pass: the events are in memory
        return (*trim({**reader.header, "traceEvents": whole}, max_steps, max_events), notes)
    steps = ev.step_ranges(named)
    del named
    k = len(steps)
    if steps and (max_steps is not None or max_events is not None):
        k = steps_kept([a for _, a, _ in steps], stamps, max_steps, max_events)   # as trim keeps
    del stamps
    cut = steps and k < len(steps)
    lo, hi = (steps[0][1], steps[k][1]) if cut else (-math.inf, math.inf)
    corrs = set(ev.launches(meta)) | {c for t, c in zip(launch_ts, launch_corr) if lo <= t < hi}
    del launch_ts, launch_corr, meta
    ints = [c for c in corrs if type(c) is int]
    w_lo, w_hi = (min(ints), max(ints)) if ints else (math.inf, -math.inf)
    any_corr = len(ints) < len(corrs)   # a correlation id that is not an int: any device work may be late work

    def skip(n: int) -> bool:
        """Batch ``n`` holds nothing ``trim`` keeps: no event in the window, no metadata, no device work whose
        correlation id could be a kept launch's."""
        t_lo, t_hi, c_lo, c_hi, odd = batches[n]
        return not (odd or (t_lo < hi and t_hi >= lo) or (c_lo <= w_hi and c_hi >= w_lo)
                    or (any_corr and c_lo <= c_hi))

    kept, late, names = [], [], {}
    plan = reader.cuts if cut and not reader.repaired else None
    reader = _Events(p, limit, " (second pass)", plan=plan, skip=skip)
    with no_gc():
        for batch in reader:
            for e in batch:
                ts = e.get("ts")
                timed = isinstance(ts, (int, float))
                if not cut or not timed or lo <= ts < hi:
                    pass
                elif ts >= hi and not ev.is_host(e) and ev.corr(e) in corrs:
                    late.append(e)
                    continue
                else:
                    continue
                for key in ("name", "cat", "ph"):   # one string object for each repeated name
                    v = e.get(key)
                    if type(v) is str:
                        e[key] = names.setdefault(v, v)
                kept.append(e)
    for e in late:
        for key in ("name", "cat", "ph"):
            v = e.get(key)
            if type(v) is str:
                e[key] = names.setdefault(v, v)
    kept += late
    doc = {**reader.header, "traceEvents": kept}
    if not cut:
        return doc, None, notes
    note = (f"the trace holds {len(steps)} ProfilerSteps ({total:,} events); the first {k} "
            f"({len(kept):,} events) are analysed; open_trace(path, max_steps=None) for all of them")
    return doc, note, notes


class _Fallback(Exception):
    """The trace's events are not all objects: read it whole, as ``load_trace`` does, for the same messages."""
