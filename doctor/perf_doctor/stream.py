"""The doctor's lean reader: the first steps of a trace, streamed (``read_trimmed``), with its progress on a stream
(``progress_to``). Split from ``load``, whose whole-trace reader and ``trim`` it reproduces in bounded memory."""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import math
import re
from array import array
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from . import events as ev
from .files import TraceError, find_trace
from .load import (
    CHUNK,
    MAX_EVENTS,
    MAX_STEPS,
    QUOTE_BUG,
    byte_chunks,
    gc_paused,
    load_trace,
    max_trace_bytes,
    not_json,
    not_trace,
    nothing_profiled,
    repair_quotes,
    steps_kept,
    trim,
)

# ``read_trimmed`` streams the ``traceEvents`` array in chunks of complete events and keeps what ``trim`` would keep,
# so its memory follows the steps kept, not the file; its limit (``load.STREAM_MAX_MB``) bounds time (about a minute a
# GB on a 2-core machine).
KEEP_MB = (
    64  # a trace that decompresses to no more than this is read in one pass and trimmed in memory
)
PROGRESS_AFTER_S = (
    2.0  # a progress bar on the progress stream, when it is a terminal, for reads longer than this
)
_progress: Any = (
    None  # the stream for the progress bar (``progress_to``): the command line's stderr, else None
)
# One JSON value holding more text than this (a trace padded with a 1 GiB string: 4.2 GB read, 3 min 19 s) makes the
# reader cut its strings to MAX_STRING_CHARS, so memory stays bounded whatever one value holds (issue 44 item 7).
BIG_CHARS = 4 * (1 << 24)
MAX_STRING_CHARS = 1 << 20  # no name, stack or argument of a profiler event needs more
CUT_NOTE = "string(s) were cut to"  # the note's words: the document read is then not the file's (views.Trace)
_CUT = re.compile(r"\}\s*,\s*\Z")  # what precedes an event that starts a new object: "}," + spaces
_WS = re.compile(r"[ \t\r\n]*")


@contextlib.contextmanager
def progress_to(stream) -> Iterator[None]:
    """Inside the block, reads longer than ``PROGRESS_AFTER_S`` show a progress bar (tqdm's) on ``stream``
    (``sys.stderr``, so ``--json`` stays clean) when it is a terminal; a log or a pipe gets nothing."""
    global _progress
    outer, _progress = _progress, stream
    try:
        yield
    finally:
        _progress = outer


class _Progress:
    """One read's progress (the bytes of the file read, of its size): a tqdm bar once the read passes
    ``PROGRESS_AFTER_S``, removed at its end; nothing when ``progress_to`` named no terminal."""

    def __init__(self, p: Path, what: str):
        self.desc, self.bar = f"reading {p.name}{what}", None
        self.tty = _progress is not None and bool(getattr(_progress, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        if not self.tty:
            return
        if self.bar is None:
            self.bar = tqdm(
                total=total,
                desc=self.desc,
                file=_progress,
                unit="B",
                unit_scale=True,
                delay=PROGRESS_AFTER_S,
                mininterval=0.5,
                leave=False,
                dynamic_ncols=True,
            )
        self.bar.update(done - self.bar.n)

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Cutter:
    """Cuts every JSON string longer than ``MAX_STRING_CHARS`` in a stream of text, holding only the part it keeps:
    started on text that begins outside a string, it follows the strings (``str.find`` jumps between quotes and
    escapes at memchr's speed, where a regular expression is 20x slower) until a cut string has closed, then stands
    down."""

    def __init__(self):
        self.active = self.in_str = self.dropping = self.esc = self.after_esc = False
        self.len = self.more = (
            0  # the open string's length; the digits of a cut \uXXXX still to keep
        )
        self.cuts = 0  # strings cut
        self.next_at = (
            BIG_CHARS  # the buffer length that starts it (doubled where it found nothing to cut)
        )

    def start(self, buf: str) -> str:
        """``buf`` (beginning outside a string) with its long strings cut; the cutter stays on while one is open."""
        self.active, self.in_str, self.dropping, self.esc = True, False, False, False
        self.len = self.more = 0
        before = self.cuts
        out = self.feed(buf)
        if self.cuts == before:  # a large value of many small parts: look again at twice the size
            self.next_at = 2 * max(len(buf), self.next_at)
        return out

    def feed(self, text: str) -> str:
        """The next text of the stream, its long strings' rest dropped (the cutter stands down after one closes)."""
        if not self.active:
            return text
        out, keep, i, n = [], 0, 0, len(text)
        q = b = -1  # the next quote and backslash at or after i (n: none)
        if self.esc and n:  # the text starts with the character a backslash escaped
            self.esc, self.after_esc, i, self.len = False, True, 1, self.len + 1
        if self.dropping and self.more:  # the rest of the digits of a cut \uXXXX
            i = max(i, min(self.more, n))
            out.append(text[:i])
            self.more -= i
            self.len += i
        while i < n:
            if q < i:
                q = text.find('"', i) % (n + 1)
            if not self.in_str:
                if q == n:
                    break
                self.in_str, self.len, self.after_esc, i = True, 0, False, q + 1
                continue
            if b < i:
                b = text.find("\\", i) % (n + 1)
            j = min(q, b)
            if not self.dropping and self.len + (j - i) > MAX_STRING_CHARS:
                cut = i + (MAX_STRING_CHARS - self.len)
                if self.after_esc and cut < i + 4:  # never inside a \uXXXX: keep its digits
                    cut = min(i + 4, j)
                    self.more = i + 4 - cut if j == n else 0
                out.append(text[keep:cut])
                self.dropping, self.cuts = True, self.cuts + 1
            self.len += j - i
            if j == n:
                break
            if text[j] == "\\":
                self.len, self.after_esc, i = self.len + 2, True, j + 2
                self.esc = i > n
                continue
            self.in_str, self.after_esc, i = False, False, j + 1
            if self.dropping:  # the cut string closes: keep from its quote on, and stand down
                self.dropping, self.active, keep = False, False, j
                break
        if not self.dropping:
            out.append(text[keep:])
        return "".join(out)


class _Events:
    """A trace's ``traceEvents``, streamed as lists of whole events; then ``header`` (other keys) and ``repaired``.
    Hand-written, not a streaming parser such as ijson: those stop at Kineto's unescaped quotes, which this repairs."""

    def __init__(self, p: Path, limit: int, what: str = "", plan: dict | None = None, skip=None):
        """``plan`` (a first pass's ``cuts``: chunk -> (batch, characters it took)) and ``skip`` (batch -> True: pass
        it undecoded) let a second pass decode only the batches it needs."""
        self.p, self.limit, self.what, self.plan, self.skip = p, limit, what, plan, skip
        self.cuts: dict = {}
        self.header: dict = {}
        self.repaired = 0
        self.chars = 0  # characters read so far
        self.dec = json.JSONDecoder(strict=False)
        self.cutter = _Cutter()

    def _value(self, buf: str, i: int, more) -> tuple[Any, int, str]:
        """One JSON value at ``buf[i:]``, reading more text while it is incomplete: (value, end, buf)."""
        while True:
            try:
                v, j = self.dec.raw_decode(buf, i)
                if j < len(buf) or more is None:
                    return v, j, buf
            except json.JSONDecodeError as exc:
                if more is None:
                    raise not_json(self.p, exc) from None
            buf, more = self._grow(buf, more)

    def _grow(self, buf: str, more):
        nxt = next(more, None)
        return (buf, None) if nxt is None else (self._add(buf, nxt), more)

    def _add(self, buf: str, nxt: str) -> str:
        """``buf + nxt``, the strings of a value too large to hold cut (``_Cutter``; ``buf`` starts outside one)."""
        buf += self.cutter.feed(nxt)
        if len(buf) > self.cutter.next_at and not self.cutter.active:
            buf = self.cutter.start(buf)
        return buf

    def _skip(self, buf: str, i: int, more) -> tuple[int, str, Any]:
        """Past white space, reading more text where the buffer ends: (index of the next character, buf, more)."""
        while True:
            i = _WS.match(buf, i).end()
            if i < len(buf) or more is None:
                return i, buf, more
            i = 0
            buf, more = self._grow("", more)

    def _chunks(self) -> Iterator[str]:
        """The file's text, chunk by chunk (``load.byte_chunks``), its progress shown and counted in ``chars``."""
        text, shown = codecs.getincrementaldecoder("utf-8-sig")(), _Progress(self.p, self.what)
        try:
            for chunk in itertools.chain(
                byte_chunks(self.p, self.limit, True, shown, CHUNK), [b""]
            ):
                out = text.decode(chunk, final=not chunk)
                self.chars += len(out)
                yield out
        except UnicodeDecodeError as exc:
            raise not_json(self.p, exc) from None
        finally:  # the bar leaves the terminal before the report, or the error line, is printed
            shown.end()

    def __iter__(self) -> Iterator[list]:
        more = self._chunks()
        buf, i = "", 0
        i, buf, more = self._skip(buf, i, more)
        if buf[i : i + 1] not in ("[", "{"):
            raise not_json(self.p, "no JSON document")
        bare = buf[i : i + 1] == "["
        if not bare:
            i, buf, more = self._skip(buf, i + 1, more)
            while True:  # the keys before traceEvents
                if buf[i : i + 1] == "}":
                    raise not_trace(self.p)
                key, i, buf = self._value(buf, i, more)
                i, buf, more = self._skip(buf, i, more)
                if buf[i : i + 1] != ":":
                    raise not_json(self.p, f"expected ':' at character {i}")
                i, buf, more = self._skip(buf, i + 1, more)
                if key == "traceEvents" and buf[i : i + 1] == "[":
                    break
                self.header[key], i, buf = self._value(buf, i, more)
                i, buf, more = self._skip(buf, i, more)
                if buf[i : i + 1] == ",":
                    i, buf, more = self._skip(buf, i + 1, more)
                elif buf[i : i + 1] == "}":
                    raise not_trace(self.p)
                else:
                    raise not_json(self.p, f"expected ',' or '}}' at character {i}")
        # the array: whole events up to the last "}, {" of the buffer are decoded at once (json's C scanner);
        # what is left waits for the next chunk
        i, buf, more = self._skip(buf, i + 1, more)
        buf = buf[i:]
        for c, nxt in enumerate(more or (), 1):
            buf = self._add(buf, nxt)
            if (
                self.plan is not None
            ):  # a second pass: the first pass's batches, decoded where they are needed
                if (step := self.plan.get(c)) is None:
                    continue
                if self.skip(step[0]):
                    buf = buf[step[1] :]
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
            if buf[i : i + 1] == "]":
                i += 1
                break
            v, i, buf = self._decode_one(buf, i)
            out.append(v)
            i, buf, _ = self._skip(buf, i, None)
            if buf[i : i + 1] == ",":
                i += 1
            elif buf[i : i + 1] != "]":
                raise not_json(self.p, "expected ',' or ']' near the end of the events")
        if out:
            yield out
        rest = buf[i:].strip()
        if bare:
            if rest:
                raise not_json(self.p, "extra data after the events")
            return
        try:
            tail = self.dec.decode("{" + rest.lstrip(",")) if rest != "}" else {}
        except json.JSONDecodeError as exc:
            raise not_json(self.p, exc) from None
        self.header.update({k: v for k, v in tail.items() if k != "traceEvents"})

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
            raise not_json(self.p, exc) from None

    def _batch(self, buf: str) -> tuple[list, str]:
        """The whole events at the start of ``buf`` and the text after them."""
        end = len(buf)
        for _ in range(4):  # the last "}, {" is almost always between two events; a few tries else
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
        if (
            len(buf) > 4 * CHUNK
        ):  # no break between events found: one at a time, which finds the fault
            v, i, buf = self._decode_one(buf, 0)
            i = _WS.match(buf, i).end()
            return [v], buf[i + 1 :] if buf[i : i + 1] == "," else buf[i:]
        return [], buf


def read_trimmed(
    path: Path | str,
    max_steps: int | None = MAX_STEPS,
    max_events: int | None = MAX_EVENTS,
    keep_mb: float = KEEP_MB,
) -> tuple[dict, str | None, list[str]]:
    """``trim(load_trace(path), max_steps, max_events)`` in memory that follows the steps kept, not the file:
    ``(doc, note, notes)``. Up to ``keep_mb`` MiB in one pass; larger in two (steps first, then what ``trim`` keeps)."""
    p, _ = find_trace(path)
    limit = max_trace_bytes(streamed=True)
    keep_bytes = keep_mb * 2**20
    meta, named, stamps, launch_ts, launch_corr = [], [], array("d"), array("d"), []
    whole: list | None = []
    total = 0
    batches = []  # per batch: (earliest, latest time, smallest, largest device correlation id, must be read)
    profiled = False
    reader = _Events(p, limit)
    try:
        with gc_paused(collect=False):
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
                    if reader.chars > keep_bytes:  # past the one-pass budget: two passes
                        whole = None
    except _Fallback:
        doc = load_trace(p)
        return (*trim(doc, max_steps, max_events), [])
    except MemoryError:
        raise TraceError(
            f"{p}: this machine has not the memory to read it; give a shorter trace"
        ) from None
    notes = (
        [
            f"{p}: {reader.repaired} event name(s) with unescaped quotes (Kineto's with_stack bug before its July "
            f"2026 fix) were repaired"
        ]
        if reader.repaired
        else []
    )
    if reader.cutter.cuts:
        notes.append(
            f"{p}: {reader.cutter.cuts} {CUT_NOTE} {MAX_STRING_CHARS >> 20} MiB (a value that large is no profiler "
            f"event's; memory stays bounded)"
        )
    if not profiled:
        raise nothing_profiled(p)
    if whole is not None:  # one pass: the events are in memory
        return (*trim({**reader.header, "traceEvents": whole}, max_steps, max_events), notes)
    steps = ev.step_ranges(named)
    del named
    k = (
        steps_kept([a for _, a, _ in steps], stamps, max_steps, max_events) if steps else 0
    )  # as trim keeps
    del stamps
    cut = steps and k < len(steps)
    lo, hi = (steps[0][1], steps[k][1]) if cut else (-math.inf, math.inf)
    corrs = set(ev.launches(meta)) | {c for t, c in zip(launch_ts, launch_corr) if lo <= t < hi}
    del launch_ts, launch_corr, meta
    ints = [c for c in corrs if type(c) is int]
    w_lo, w_hi = (min(ints), max(ints)) if ints else (math.inf, -math.inf)
    any_corr = len(ints) < len(
        corrs
    )  # a correlation id that is not an int: any device work may be late work

    def skip(n: int) -> bool:
        """Batch ``n`` holds nothing ``trim`` keeps (no event in the window, metadata, or kept launch's device work)."""
        t_lo, t_hi, c_lo, c_hi, odd = batches[n]
        return not (
            odd
            or (t_lo < hi and t_hi >= lo)
            or (c_lo <= w_hi and c_hi >= w_lo)
            or (any_corr and c_lo <= c_hi)
        )

    kept, late, names = [], [], {}
    plan = reader.cuts if cut and not reader.repaired else None
    reader = _Events(p, limit, " (second pass)", plan=plan, skip=skip)
    with gc_paused(collect=False):
        for batch in reader:
            for e in batch:
                ts = e.get("ts")
                if cut and isinstance(ts, (int, float)) and not lo <= ts < hi:
                    if ts >= hi and not ev.is_host(e) and ev.corr(e) in corrs:
                        late.append(e)
                    continue
                kept.append(_intern(e, names))
    kept += [_intern(e, names) for e in late]
    note = (
        (
            f"the trace holds {len(steps)} ProfilerSteps ({total:,} events); the first {k} ({len(kept):,} events) "
            f"are analysed; open_trace(path, max_steps=None) for all of them"
        )
        if cut
        else None
    )
    return {**reader.header, "traceEvents": kept}, note, notes


def _intern(e: dict, names: dict) -> dict:
    """``e`` with one string object for each repeated name, category and phase (``names``: those seen)."""
    for key in ("name", "cat", "ph"):
        v = e.get(key)
        if type(v) is str:
            e[key] = names.setdefault(v, v)
    return e


class _Fallback(Exception):
    """The trace's events are not all objects: read it whole, as ``load_trace`` does, for the same messages."""
