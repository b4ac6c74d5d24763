"""Which trace files a path holds: a file is itself; a ``tensorboard_trace_handler`` folder holds one
``<worker>.<time>.pt.trace.json[.gz]`` per run and worker. ``find_trace`` gives the newest file; ``find_workers``
the newest of every worker, with its rank. What cannot be read is a one-line ``TraceError``; an unreadable
subfolder is skipped and named in the notes, never silently.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import stat
import zlib
from collections import Counter
from pathlib import Path

# a worker's rank in its file's name: worker0_step_12.<time>.pt.trace.json, rank-3.<time>.json.gz, rank1.<time>...
RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:rank|worker)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
# Kineto writes the job's distributedInfo in the file's header, before the events
RANK_IN_HEADER = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
HEADER_BYTES = 1 << 16


class TraceError(ValueError):
    """A file or folder that cannot be read as a trace, or a view it cannot give: one line, what to do."""


def _stat(p: Path):
    try:
        return p.stat()
    except FileNotFoundError:
        raise TraceError(
            f"{p}: no such file or folder; give a .json / .json.gz trace or the folder that "
            "tensorboard_trace_handler wrote"
        ) from None
    except OSError as exc:
        raise TraceError(
            f"{p}: cannot read it ({exc.strerror or exc}); check its permissions and its folders'"
        ) from None


def trace_files(folder: Path | str) -> tuple[list[Path], list[str]]:
    """Every trace file under ``folder`` (``*.pt.trace.json[.gz]`` at any depth, else its ``*.json[.gz]``), oldest
    first, and notes naming unreadable subfolders; ``TraceError`` when the folder cannot be read or holds no trace."""
    p = Path(folder)
    try:
        os.listdir(p)
    except OSError as exc:
        raise TraceError(
            f"{p}: cannot read the folder ({exc.strerror or exc}); check its permissions"
        ) from None
    unreadable: list[str] = []
    files = [
        Path(root) / n
        for root, _dirs, names in os.walk(
            p, onerror=lambda exc: unreadable.append(str(exc.filename or exc))
        )
        for n in names
        if n.endswith((".pt.trace.json", ".pt.trace.json.gz"))
    ]
    if not files:
        files = [f for pat in ("*.json", "*.json.gz") for f in p.glob(pat)]
    notes = (
        [
            f"{p}: {len(unreadable)} subfolder(s) could not be read and were skipped: {', '.join(unreadable[:3])}"
        ]
        if unreadable
        else []
    )
    if not files:
        raise TraceError(
            f"{p}: the folder holds no trace file (*.pt.trace.json[.gz])"
            + (f" it can read ({len(unreadable)} subfolder(s) unreadable)" if unreadable else "")
            + "; give the folder passed to tensorboard_trace_handler after the profiler has run, "
            "or a trace file"
        )
    stamped = []
    for f in files:
        try:
            stamped.append((f.stat().st_mtime, f.name, f))
        except OSError:
            notes.append(f"{f}: cannot read it; skipped")
    if not stamped:
        raise TraceError(f"{p}: none of its trace files can be read; check their permissions")
    return [f for _, _, f in sorted(stamped)], notes


def find_trace(path_or_dir: Path | str) -> tuple[Path, list[str]]:
    """The trace file to read (a file, or a folder's newest: the notes say how many there were) and notes."""
    p = Path(path_or_dir)
    if not stat.S_ISDIR(_stat(p).st_mode):
        return p, []
    files, notes = trace_files(p)
    if len(files) > 1:
        notes.append(f"{p}: {len(files)} trace files; showing the newest, {files[-1].name}")
    return files[-1], notes


def worker_name(f: Path) -> str:
    """A trace file's worker: its name before the first dot (``<worker_name>.<time>.pt.trace.json``)."""
    return f.name.split(".", 1)[0]


def header_rank(f: Path) -> int | None:
    """The rank that the file's ``distributedInfo`` header names (read from its first 64 KiB), or None."""
    try:
        with open(f, "rb") as fh:
            head = fh.read(2)
        with gzip.open(f, "rb") if head == b"\x1f\x8b" else open(f, "rb") as fh:
            data = fh.read(HEADER_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    m = RANK_IN_HEADER.search(data)
    return int(m.group(1)) if m else None


def find_workers(path_or_dir: Path | str) -> tuple[list[tuple[int | None, str, Path]], list[str]]:
    """``([(rank, worker, file)], notes)``: the newest trace of each worker (a file: itself), by rank (from its
    ``distributedInfo``, else its name: ``worker3``, ``rank-3``, else None); a note when a worker has several runs."""
    p = Path(path_or_dir)
    first, notes = find_trace(p)
    if first == p:
        return [(header_rank(p), worker_name(p), p)], notes
    files, notes = trace_files(p)
    newest = {
        worker_name(f): f for f in files
    }  # oldest first: the last one of a worker is its newest
    runs = Counter(worker_name(f) for f in files)
    out = []
    for w, f in newest.items():
        rank = header_rank(f)
        if rank is None and (m := RANK_IN_NAME.search(w)):
            rank = int(m.group(1))
        out.append((rank, w, f))
    out.sort(key=lambda r: (r[0] is None, r[0] if r[0] is not None else 0, r[1]))
    if several := {w: k for w, k in runs.items() if k > 1}:
        notes.append(
            f"{p}: {sum(several.values())} trace files of {len(several)} worker(s) hold several runs; "
            f"the newest of each is read"
        )
    return out, notes


def shown_path(path: str, room: int = 120 - len("before: ")) -> str:
    """A path as a report's first lines show it: relative to the current folder where it lies inside it, and shortened
    in the middle ("...") to ``room`` characters, the file's own name kept, so that the answer stays on the lines
    after it whatever the folder's depth (``--json`` keeps the path whole)."""
    text = str(path)
    try:
        text = str(Path(text).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        # near the current folder (a notebook's ../runs/...): relative still, three levels up at most
        with contextlib.suppress(ValueError, OSError):
            near = os.path.relpath(Path(text).resolve(), Path.cwd().resolve())
            if Path(near).parts[:4].count("..") < 4:  # e.g. ../../../data/reference/...
                text = near
    if len(text) <= room:
        return text
    tail = max(room - room // 3 - 3, min(len(Path(text).name), room - 3))
    return text[: room - 3 - tail] + "..." + text[-tail:]
